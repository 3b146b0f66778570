//! A Linux TUN device, opened by name through `/dev/net/tun` with `IFF_TUN | IFF_NO_PI` (whole
//! IP packets, no packet-information header) and read and written without blocking through
//! tokio's `AsyncFd`. Creating a device needs `CAP_NET_ADMIN`; opening a persistent one made
//! beforehand for the daemon's user (`ip tuntap add mode tun user braid name braid0`) does not.
//! The device's addresses, routes and link state are set by [`netconf`] when configured, else
//! left to the system (docs/config.md).

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

use tokio::io::unix::AsyncFd;

use super::{PacketIo, netconf};

/// Longest interface name the kernel takes (`IFNAMSIZ` less the terminating NUL).
pub const MAX_NAME: usize = 15;

/// `struct ifreq`: the interface name, then the union the request reads or writes (flags for
/// `TUNSETIFF` and `SIOC[GS]IFFLAGS`, the MTU for `SIOCSIFMTU`, a `struct sockaddr` for
/// `SIOCSIFADDR` and `SIOCSIFNETMASK`) in native byte order.
#[repr(C)]
pub(super) struct IfReq {
    name: [u8; MAX_NAME + 1],
    pub(super) value: [u8; 24],
}

impl IfReq {
    /// `name` (at most [`MAX_NAME`] bytes) and the start of the union.
    pub(super) fn new(name: &str, value: &[u8]) -> IfReq {
        let mut req = IfReq {
            name: [0; MAX_NAME + 1],
            value: [0; 24],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        req.value[..value.len()].copy_from_slice(value);
        req
    }
}

/// An open TUN device.
#[derive(Debug)]
pub struct TunDevice {
    fd: AsyncFd<OwnedFd>,
    name: String,
}

/// Whether `name` can name a network interface: 1 to 15 bytes, no NUL, `/`, `:` or white space.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':')
}

impl TunDevice {
    /// Opens (creating it if needed) the TUN device `name`. Must be called inside a tokio
    /// runtime.
    pub fn open(name: &str) -> io::Result<TunDevice> {
        if !valid_name(name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not an interface name (1 to {MAX_NAME} printable bytes)"),
            ));
        }
        // SAFETY: a NUL-terminated path and plain flags; the result is checked below.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a file descriptor just opened and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        let mut req = IfReq::new(name, &flags.to_ne_bytes());
        // SAFETY: `req` is a valid `struct ifreq` layout that lives across the call.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let len = req.name.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        let name = String::from_utf8_lossy(&req.name[..len]).into_owned();
        // SAFETY: `fd` owns a valid descriptor that is neither replaced nor closed while the
        // `AsyncFd` holds it.
        let fd = unsafe { AsyncFd::register(fd)? };
        Ok(TunDevice { fd, name })
    }

    /// Sets the interface's MTU (`SIOCSIFMTU`; needs `CAP_NET_ADMIN`).
    pub fn set_mtu(&self, mtu: u16) -> io::Result<()> {
        let mut req = IfReq::new(&self.name, &libc::c_int::from(mtu).to_ne_bytes());
        let socket = netconf::control_socket(libc::AF_INET)?;
        // SAFETY: `SIOCSIFMTU` reads a `struct ifreq` with `ifr_mtu` set.
        unsafe { netconf::ioctl(&socket, libc::SIOCSIFMTU, &mut req) }
    }

    /// The interface's name as the kernel has it.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe {
            libc::read(
                self.fd.get_ref().as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

impl PacketIo for TunDevice {
    async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|_| self.read(buf)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read(buf)
    }

    fn send(&self, packet: &[u8]) -> io::Result<()> {
        // SAFETY: `packet` is readable for its length.
        let n = unsafe {
            libc::write(
                self.fd.get_ref().as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Helpers for tests that need a kernel TUN device.
#[cfg(test)]
pub(super) mod testing {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::inbound::tun::{Packet, classify};
    use std::net::SocketAddr;
    use std::time::Duration;

    /// Runs `test` on a thread of its own in a network namespace of its own (so nothing outside
    /// it is touched), inside a tokio runtime, with the TUN device `name` opened there. Needs
    /// root (or `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`); where the namespace, the device or
    /// something `test` needs (its `Err`) is missing, says why and passes.
    pub(in crate::inbound::tun) fn in_own_netns(
        name: &'static str,
        test: impl FnOnce(&tokio::runtime::Runtime, TunDevice) -> Result<(), String> + Send + 'static,
    ) {
        let run = std::thread::spawn(move || {
            // SAFETY: plain flags; this thread alone moves to the new namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(format!(
                    "no network namespace: {}",
                    io::Error::last_os_error()
                ));
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let device = {
                let _guard = rt.enter();
                TunDevice::open(name).map_err(|e| format!("no TUN device: {e}"))?
            };
            test(&rt, device)
        });
        match run.join().unwrap() {
            Ok(()) => {}
            Err(why) => eprintln!("skipped: {why}"),
        }
    }

    /// The next UDP datagram out of `device` within 5 s, as (source, destination, payload);
    /// other packets (the kernel's own, e.g. IPv6 router solicitations) are skipped.
    pub(in crate::inbound::tun) fn next_udp(
        rt: &tokio::runtime::Runtime,
        device: &TunDevice,
    ) -> (SocketAddr, SocketAddr, Vec<u8>) {
        let mut buf = vec![0u8; 2048];
        rt.block_on(async {
            loop {
                let n = tokio::time::timeout(Duration::from_secs(5), device.recv(&mut buf))
                    .await
                    .expect("no packet from the device")
                    .unwrap();
                if let Packet::Udp { src, dst, payload } = classify(&buf[..n]) {
                    break (src, dst, payload.to_vec());
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::testing::{in_own_netns, next_udp};
    use super::*;
    use crate::inbound::tun::udp::udp_packet;
    use std::net::{SocketAddr, UdpSocket};
    use std::process::Command;
    use std::time::Duration;

    /// Runs `ip ARGS` (in the calling thread's network namespace).
    fn ip(args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The kernel's device end to end, in a network namespace of this test's own: a UDP
    /// datagram an application sends to an address routed into the device is read as that IP
    /// packet, and a packet written to the device reaches the application. Needs root (or
    /// `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and `ip`; says so and passes without them.
    #[test]
    fn a_kernel_tun_device_carries_packets_both_ways() {
        in_own_netns("braidtest0", |rt, device| {
            assert_eq!(device.name(), "braidtest0");
            device.set_mtu(1400).unwrap();
            let link = Command::new("ip")
                .args(["link", "show", "braidtest0"])
                .output()
                .map_err(|e| format!("no `ip`: {e}"))?;
            let link = String::from_utf8_lossy(&link.stdout).into_owned();
            assert!(link.contains(" mtu 1400 "), "{link}");
            if !(ip(&["addr", "add", "10.7.0.1/24", "dev", "braidtest0"])
                && ip(&["link", "set", "braidtest0", "up"]))
            {
                return Err("`ip` could not set the device up".into());
            }
            let app = UdpSocket::bind("10.7.0.1:0").unwrap();
            app.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let app_addr = app.local_addr().unwrap();
            let remote: SocketAddr = "10.7.0.9:5300".parse().unwrap();
            app.send_to(b"query", remote).unwrap();
            let query = next_udp(rt, &device);
            assert_eq!(query, (app_addr, remote, b"query".to_vec()));
            let answer = udp_packet(remote, app_addr, b"answer", 1500).unwrap();
            device.send(&answer).unwrap();
            let mut got = [0u8; 64];
            let (n, from) = app.recv_from(&mut got).expect("the answer did not arrive");
            assert_eq!((&got[..n], from), (&b"answer"[..], remote));
            Ok(())
        });
    }

    #[test]
    fn interface_names_are_checked() {
        for good in ["braid0", "tun-lte.1", "a", "fifteen-bytes-x"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "sixteen-bytes-xx", "a/b", "a b", "a:1", "a\0", "é"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
