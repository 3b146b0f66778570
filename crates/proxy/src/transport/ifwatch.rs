//! The kernel's news of the network interfaces (rtnetlink's link and address groups), for the
//! client's links: a link waiting to retry tries again as soon as an interface comes up or gets
//! an address, and a link bound to an interface (`interface = "wlan0"`) or to an address
//! (`local_addr`) leaves the session as soon as that interface goes down or away or that address
//! is withdrawn, instead of when its packets stop being answered.

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

/// A count of the kernel's link and address notifications; it moves after each batch.
/// Where they cannot be had (no netlink socket: another OS, a sandbox), it never moves and the
/// links keep to their timers.
pub(crate) fn watch() -> watch::Receiver<u64> {
    let (tx, rx) = watch::channel(0);
    match open() {
        Ok(socket) => {
            tokio::spawn(read(socket, tx));
        }
        Err(e) => tracing::debug!(error = %e, "no interface notifications (rtnetlink)"),
    }
    rx
}

/// Waits for the next change; never returns when there will be none.
pub(crate) async fn changed(rx: &mut watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn open() -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: plain arguments; the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just opened and is owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: `sockaddr_nl` is plain data; all zeros is a valid value.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups =
        (libc::RTMGRP_LINK | libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    // SAFETY: `addr` is a `sockaddr_nl` of the length given, alive across the call.
    let r = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            std::ptr::from_ref(&addr).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `socket` owns a valid descriptor that is neither replaced nor closed while the
    // `AsyncFd` holds it.
    Ok(unsafe { AsyncFd::register(socket)? })
}

/// Counts each batch of notifications until every receiver is gone.
async fn read(socket: AsyncFd<OwnedFd>, tx: watch::Sender<u64>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let mut guard = tokio::select! {
            () = tx.closed() => return,
            ready = socket.readable() => match ready {
                Ok(guard) => guard,
                Err(_) => return,
            },
        };
        let mut news = false;
        loop {
            let received = guard.try_io(|s| {
                // SAFETY: `buf` is writable for its length and alive across the call.
                let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n)
                }
            });
            match received {
                Ok(Ok(_)) => news = true,
                // The kernel dropped notifications for want of room: something changed.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => news = true,
                Ok(Err(_)) => return,
                Err(_would_block) => break,
            }
        }
        if news {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}
