//! The TUN device's addresses, link state and routes, set with the kernel's classic `ioctl`
//! interface (what `ifconfig` and `route` use; no netlink, no `ip` binary): `SIOCSIFADDR` and
//! `SIOCSIFNETMASK` for IPv4, `SIOCSIFADDR` with `struct in6_ifreq` for IPv6, `SIOCSIFFLAGS`
//! for `IFF_UP`, `SIOCADDRT` with `struct rtentry` / `struct in6_rtmsg` for routes through the
//! device. Each needs `CAP_NET_ADMIN`. An address or route that is already there is not an
//! error, so a restarted daemon sets up a persistent device again.

use std::ffi::CString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

use super::device::{IfReq, valid_name};

pub use crate::config::IpNet;
use crate::config::ipnet::mask32;

/// `struct rtentry` of `<linux/route.h>` (the kernel's layout; glibc's differs only in how it
/// names the padding).
#[repr(C)]
struct RtEntry {
    pad1: libc::c_ulong,
    dst: libc::sockaddr,
    gateway: libc::sockaddr,
    genmask: libc::sockaddr,
    flags: libc::c_ushort,
    pad2: libc::c_short,
    pad3: libc::c_ulong,
    pad4: *mut libc::c_void,
    metric: libc::c_short,
    dev: *mut libc::c_char,
    mtu: libc::c_ulong,
    window: libc::c_ulong,
    irtt: libc::c_ushort,
}

/// `struct in6_rtmsg` of `<linux/ipv6_route.h>`.
#[repr(C)]
struct In6Rtmsg {
    dst: [u8; 16],
    src: [u8; 16],
    gateway: [u8; 16],
    kind: u32,
    dst_len: u16,
    src_len: u16,
    metric: u32,
    info: libc::c_ulong,
    flags: u32,
    ifindex: libc::c_int,
}

/// `struct in6_ifreq` of `<linux/ipv6.h>`.
#[repr(C)]
struct In6Ifreq {
    addr: [u8; 16],
    prefix: u32,
    ifindex: libc::c_int,
}

/// A datagram socket of `family`, the handle the interface `ioctl`s go through.
pub(super) fn control_socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain arguments; the result is checked.
    let raw = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// `ioctl(socket, request, arg)`.
///
/// # Safety
/// `arg` must be the structure the kernel reads (and may write) for `request`.
pub(super) unsafe fn ioctl<T>(
    socket: &OwnedFd,
    request: libc::c_ulong,
    arg: &mut T,
) -> io::Result<()> {
    // The request number's type differs between C libraries (`c_ulong` in glibc, `c_int` in
    // musl, OpenWrt's); `Ioctl` is the one this target's `ioctl` takes.
    let request = request as libc::Ioctl;
    // SAFETY: the caller passes the structure `request` expects; it lives across the call.
    let r = unsafe { libc::ioctl(socket.as_raw_fd(), request, std::ptr::from_mut(arg)) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn sockaddr_v4(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(addr.octets()),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `sockaddr_in` and `sockaddr` are both 16 bytes of plain data.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

fn sockaddr_bytes(sa: &libc::sockaddr) -> [u8; 16] {
    // SAFETY: `sockaddr` is 16 bytes of plain data.
    unsafe { std::mem::transmute::<libc::sockaddr, [u8; 16]>(*sa) }
}

fn ifindex(name: &str) -> io::Result<libc::c_int> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is NUL-terminated and lives across the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    libc::c_int::try_from(index).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// `name` as an interface name, or `InvalidInput` (the `ifreq` holds at most 15 bytes).
fn check_name(name: &str) -> io::Result<()> {
    if valid_name(name) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ))
    }
}

fn already_there(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
}

/// Gives the interface `name` the address `net` (IPv4: the interface's address and netmask;
/// IPv6: one more address with its prefix).
pub fn add_address(name: &str, net: IpNet) -> io::Result<()> {
    check_name(name)?;
    match net.addr {
        IpAddr::V4(a) => {
            let socket = control_socket(libc::AF_INET)?;
            let mut req = IfReq::new(name, &sockaddr_bytes(&sockaddr_v4(a)));
            // SAFETY: `SIOCSIFADDR` reads a `struct ifreq` with `ifr_addr` set.
            unsafe { ioctl(&socket, libc::SIOCSIFADDR, &mut req) }?;
            let mask = Ipv4Addr::from(mask32(net.prefix));
            let mut req = IfReq::new(name, &sockaddr_bytes(&sockaddr_v4(mask)));
            // SAFETY: `SIOCSIFNETMASK` reads a `struct ifreq` with `ifr_netmask` set.
            unsafe { ioctl(&socket, libc::SIOCSIFNETMASK, &mut req) }
        }
        IpAddr::V6(a) => already_there(ipv6_address(name, a, net.prefix, libc::SIOCSIFADDR)),
    }
}

/// `SIOCSIFADDR` or `SIOCDIFADDR` (`request`) of the IPv6 address `addr`/`prefix` on `name`.
fn ipv6_address(name: &str, addr: Ipv6Addr, prefix: u8, request: libc::c_ulong) -> io::Result<()> {
    let socket = control_socket(libc::AF_INET6)?;
    let mut req = In6Ifreq {
        addr: addr.octets(),
        prefix: u32::from(prefix),
        ifindex: ifindex(name)?,
    };
    // SAFETY: on an IPv6 socket both requests read a `struct in6_ifreq`.
    unsafe { ioctl(&socket, request, &mut req) }
}

/// Takes the address `net` (as [`add_address`] gave it) from the interface `name`: IPv4 by
/// setting the interface's address to 0.0.0.0, which Linux takes for removing it; IPv6 with
/// `SIOCDIFADDR`. An address already gone is no error.
pub fn del_address(name: &str, net: IpNet) -> io::Result<()> {
    check_name(name)?;
    match net.addr {
        IpAddr::V4(_) => {
            let socket = control_socket(libc::AF_INET)?;
            let mut req = IfReq::new(name, &sockaddr_bytes(&sockaddr_v4(Ipv4Addr::UNSPECIFIED)));
            // SAFETY: `SIOCSIFADDR` reads a `struct ifreq` with `ifr_addr` set.
            unsafe { ioctl(&socket, libc::SIOCSIFADDR, &mut req) }
        }
        IpAddr::V6(a) => match ipv6_address(name, a, net.prefix, libc::SIOCDIFADDR) {
            Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Ok(()),
            other => other,
        },
    }
}

/// Whether the interface `name` exists, is up and has its carrier (`IFF_UP` and `IFF_RUNNING`):
/// false for a Wi-Fi that lost its access point, an Ethernet without a cable, a modem that
/// hung up, an interface taken down or removed.
pub fn is_running(name: &str) -> io::Result<bool> {
    let want = libc::IFF_UP | libc::IFF_RUNNING;
    Ok(flags(name)?.is_some_and(|flags| flags & want == want))
}

/// The flags (`IFF_UP`, `IFF_RUNNING`, `IFF_LOOPBACK`, …) of the interface `name`; `None`
/// when there is no interface of that name.
pub fn flags(name: &str) -> io::Result<Option<libc::c_int>> {
    check_name(name)?;
    let socket = control_socket(libc::AF_INET)?;
    let mut req = IfReq::new(name, &[]);
    // SAFETY: `SIOCGIFFLAGS` reads the name and writes `ifr_flags` into a `struct ifreq`.
    match unsafe { ioctl(&socket, libc::SIOCGIFFLAGS, &mut req) } {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(None),
        Err(e) => return Err(e),
    }
    // `ifr_flags` is a `short`; its bits are those of the `IFF_*` constants.
    let flags = libc::c_short::from_ne_bytes([req.value[0], req.value[1]]);
    Ok(Some(libc::c_int::from(flags as libc::c_ushort)))
}

/// The names of the host's network interfaces (`if_nameindex`).
pub fn interface_names() -> io::Result<Vec<String>> {
    // SAFETY: no arguments; the result is checked and freed below.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut names = Vec::new();
    let mut entry = list;
    // SAFETY: the list ends with an entry of index 0 and a null name; each name is a
    // NUL-terminated string owned by the list, which lives until `if_freenameindex`.
    unsafe {
        while (*entry).if_index != 0 && !(*entry).if_name.is_null() {
            let name = std::ffi::CStr::from_ptr((*entry).if_name);
            names.push(name.to_string_lossy().into_owned());
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
    }
    Ok(names)
}

/// Sets the MTU of the interface `name`.
pub fn set_mtu(name: &str, mtu: u16) -> io::Result<()> {
    check_name(name)?;
    let mut req = IfReq::new(name, &libc::c_int::from(mtu).to_ne_bytes());
    let socket = control_socket(libc::AF_INET)?;
    // SAFETY: `SIOCSIFMTU` reads a `struct ifreq` with `ifr_mtu` set.
    unsafe { ioctl(&socket, libc::SIOCSIFMTU, &mut req) }
}

/// Brings the interface `name` up (`IFF_UP`).
pub fn set_up(name: &str) -> io::Result<()> {
    check_name(name)?;
    let socket = control_socket(libc::AF_INET)?;
    let mut req = IfReq::new(name, &[]);
    // SAFETY: `SIOCGIFFLAGS` reads the name and writes `ifr_flags` into a `struct ifreq`.
    unsafe { ioctl(&socket, libc::SIOCGIFFLAGS, &mut req) }?;
    let flags = libc::c_short::from_ne_bytes([req.value[0], req.value[1]]);
    let flags = flags | libc::IFF_UP as libc::c_short;
    let mut req = IfReq::new(name, &flags.to_ne_bytes());
    // SAFETY: `SIOCSIFFLAGS` reads a `struct ifreq` with `ifr_flags` set.
    unsafe { ioctl(&socket, libc::SIOCSIFFLAGS, &mut req) }
}

/// Routes the network `net` (host bits zero) through the interface `name`, which must be up.
/// A route already there is no error.
pub fn add_route(name: &str, net: IpNet) -> io::Result<()> {
    already_there(route(name, net, libc::SIOCADDRT))
}

/// Removes the route of `net` through the interface `name` (as [`add_route`] made it). A route
/// already gone is no error.
pub fn del_route(name: &str, net: IpNet) -> io::Result<()> {
    match route(name, net, libc::SIOCDELRT) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        other => other,
    }
}

/// `SIOCADDRT` or `SIOCDELRT` (`request`) of the route of `net` through `name`.
fn route(name: &str, net: IpNet, request: libc::c_ulong) -> io::Result<()> {
    check_name(name)?;
    if !net.is_network() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{net} is not a network (host bits set)"),
        ));
    }
    match net.addr {
        IpAddr::V4(a) => {
            let socket = control_socket(libc::AF_INET)?;
            let mut dev = CString::new(name)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?
                .into_bytes_with_nul();
            let mut entry = RtEntry {
                pad1: 0,
                dst: sockaddr_v4(a),
                gateway: sockaddr_v4(Ipv4Addr::UNSPECIFIED),
                genmask: sockaddr_v4(Ipv4Addr::from(mask32(net.prefix))),
                flags: libc::RTF_UP,
                pad2: 0,
                pad3: 0,
                pad4: std::ptr::null_mut(),
                metric: 0,
                dev: dev.as_mut_ptr().cast(),
                mtu: 0,
                window: 0,
                irtt: 0,
            };
            // SAFETY: on an IPv4 socket `SIOCADDRT` and `SIOCDELRT` read a `struct rtentry`;
            // `rt_dev` points at `dev`, NUL-terminated, which lives across the call.
            unsafe { ioctl(&socket, request, &mut entry) }
        }
        IpAddr::V6(a) => {
            let socket = control_socket(libc::AF_INET6)?;
            let mut msg = In6Rtmsg {
                dst: a.octets(),
                src: [0; 16],
                gateway: [0; 16],
                kind: 0,
                dst_len: u16::from(net.prefix),
                src_len: 0,
                metric: 1,
                info: 0,
                flags: u32::from(libc::RTF_UP),
                ifindex: ifindex(name)?,
            };
            // SAFETY: on an IPv6 socket `SIOCADDRT` and `SIOCDELRT` read a `struct in6_rtmsg`.
            unsafe { ioctl(&socket, request, &mut msg) }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::inbound::tun::device::testing::{in_own_netns, next_udp};
    use std::net::{SocketAddr, UdpSocket};
    use std::process::Command;

    fn ip(args: &[&str]) -> String {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// In a network namespace of the test's own: addresses (IPv4 and IPv6), the link state and
    /// routes (IPv4 and IPv6) set through the ioctls show in `ip`, setting them again is not an
    /// error, and a datagram to a routed address comes out of the device. Needs root (or
    /// `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and `ip`; says so and passes without them.
    #[test]
    fn addresses_link_state_and_routes_are_set_on_a_kernel_device() {
        in_own_netns("braidnc0", |rt, device| {
            if Command::new("ip").arg("-V").output().is_err() {
                return Err("no `ip`".to_owned());
            }
            let name = device.name();
            assert!(!ip(&["link", "show", name]).contains(",UP"));
            let v4: IpNet = "10.9.0.1/24".parse().unwrap();
            let v6: IpNet = "fd09::1/64".parse().unwrap();
            let route4: IpNet = "198.18.0.0/15".parse().unwrap();
            let route6: IpNet = "2001:db8:9::/48".parse().unwrap();
            for _ in 0..2 {
                add_address(name, v4).unwrap();
                add_address(name, v6).unwrap();
                set_up(name).unwrap();
                add_route(name, route4).unwrap();
                add_route(name, route6).unwrap();
            }
            let addresses = ip(&["addr", "show", "dev", name]);
            assert!(addresses.contains("inet 10.9.0.1/24 "), "{addresses}");
            assert!(addresses.contains("inet6 fd09::1/64 "), "{addresses}");
            assert!(ip(&["link", "show", name]).contains(",UP"));
            let routes = ip(&["route", "show", "dev", name]);
            assert!(routes.contains("198.18.0.0/15"), "{routes}");
            assert!(routes.contains("10.9.0.0/24"), "{routes}");
            let routes6 = ip(&["-6", "route", "show", "dev", name]);
            assert!(routes6.contains("2001:db8:9::/48"), "{routes6}");
            // Not a network, or no such device: refused.
            let host: IpNet = "198.18.0.1/15".parse().unwrap();
            assert_eq!(
                add_route(name, host).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
            assert!(add_address("braidnc-none", v4).is_err());
            let long = "sixteen-bytes-xx";
            for result in [add_address(long, v4), set_up(long), add_route(long, route4)] {
                assert_eq!(result.unwrap_err().kind(), io::ErrorKind::InvalidInput);
            }
            assert!(add_route("braidnc-none", route6).is_err());
            // The route carries traffic into the device.
            let app = UdpSocket::bind("10.9.0.1:0").unwrap();
            let remote: SocketAddr = "198.19.1.2:5300".parse().unwrap();
            app.send_to(b"routed", remote).unwrap();
            let (_, dst, payload) = next_udp(rt, &device);
            assert_eq!((dst, payload), (remote, b"routed".to_vec()));
            // Removed (twice: a route already gone is no error), and only those two.
            for _ in 0..2 {
                del_route(name, route4).unwrap();
                del_route(name, route6).unwrap();
            }
            let routes = ip(&["route", "show", "dev", name]);
            assert!(!routes.contains("198.18.0.0/15"), "{routes}");
            assert!(routes.contains("10.9.0.0/24"), "{routes}");
            let routes6 = ip(&["-6", "route", "show", "dev", name]);
            assert!(!routes6.contains("2001:db8:9::/48"), "{routes6}");
            assert_eq!(
                del_route(name, host).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
            Ok(())
        });
    }
}
