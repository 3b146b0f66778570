//! Links from a pattern of device names: a `[[link]]` whose `interface` holds `*` or `?`
//! (`interface = "usb*"`) stands for one link per network device whose name matches while
//! that device is there and up, so a phone tethered over USB or a second modem plugged in is
//! used as soon as it appears, and its link leaves when it goes. Each such link has the
//! table's settings, is bound to its device (`interface_required`: a link that could not be
//! bound would take the same route as the others) and is named `NAME@DEVICE` (`tether@usb0`),
//! so its data budget, status and metrics are its own.
//!
//! [`expand`] turns the file's tables into the links wanted now, given the devices; the
//! client's [`super::client::LinkContext`] puts them in force at start, at a reload and after
//! each change the kernel reports ([`super::ifwatch`]).

use std::collections::HashSet;

use braid_sched_core::MAX_PATHS;

use super::status::LinkPatternStatus;
use crate::config::LinkConfig;
use crate::inbound::tun::netconf;

/// A network device, as far as a pattern's links care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Device {
    /// Its name (`wlan0`).
    pub name: String,
    /// Administratively up (`IFF_UP`): `ip link set DEV up`, or brought up by the system.
    pub up: bool,
    /// The loopback device, never a link.
    pub loopback: bool,
}

/// The host's network devices by name; none where they cannot be listed (the error logged).
pub(crate) fn devices() -> Vec<Device> {
    let names = match netconf::interface_names() {
        Ok(names) => names,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the network devices for the links' interface patterns");
            return Vec::new();
        }
    };
    let mut devices: Vec<Device> = names
        .into_iter()
        .filter_map(|name| {
            // Gone since listed: left out.
            let flags = netconf::flags(&name).ok().flatten()?;
            Some(Device {
                up: flags & libc::IFF_UP != 0,
                loopback: flags & libc::IFF_LOOPBACK != 0,
                name,
            })
        })
        .collect();
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices
}

/// Whether the device name `name` matches `pattern`: `*` stands for any run of bytes (none
/// too), `?` for one byte, every other byte for itself.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    // Where the last `*` was and the name position it has taken up to: on a mismatch it takes
    // one more byte (the usual linear-time backtracking for a single kind of star).
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    star = Some((sp, sn + 1));
                    pi = sp + 1;
                    ni = sn + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The links wanted now.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Expanded {
    /// The tables without a pattern, in file order, then each pattern's links in file order
    /// and by device name: at most [`MAX_PATHS`].
    pub links: Vec<LinkConfig>,
    /// The names of the pattern links left out: beyond [`MAX_PATHS`], or named as a table
    /// without a pattern is.
    pub left_out: Vec<String>,
    /// Each table with a pattern, and its links.
    pub patterns: Vec<LinkPatternStatus>,
}

/// The links `file` (a configuration's `[[link]]` tables, validated) stands for, given the
/// host's `devices`: its tables without a pattern as they are, and one link per device that
/// is up, is not the loopback device or `tun` (the client's own TUN device), is not named by
/// a table without a pattern, and whose name matches a table's pattern (the first such table
/// in the file takes it).
pub(crate) fn expand(file: &[LinkConfig], devices: &[Device], tun: Option<&str>) -> Expanded {
    let mut links: Vec<LinkConfig> = file.iter().filter(|l| !l.is_pattern()).cloned().collect();
    let mut taken: HashSet<String> = links
        .iter()
        .filter_map(|l| l.interface.clone())
        .chain(tun.map(str::to_owned))
        .collect();
    let mut left_out = Vec::new();
    let mut patterns = Vec::new();
    for table in file.iter().filter(|l| l.is_pattern()) {
        let pattern = table.interface.as_deref().unwrap_or_default();
        let mut status = LinkPatternStatus {
            name: table.name.clone(),
            pattern: pattern.to_owned(),
            ..LinkPatternStatus::default()
        };
        for device in devices {
            if !device.up
                || device.loopback
                || taken.contains(&device.name)
                || !matches(pattern, &device.name)
            {
                continue;
            }
            taken.insert(device.name.clone());
            let name = format!("{}@{}", table.name, device.name);
            if links.len() >= MAX_PATHS || links.iter().any(|l| l.name == name) {
                status.left_out.push(name.clone());
                left_out.push(name);
                continue;
            }
            status.links.push(name.clone());
            // Bound to its device or nothing: unbound, every device's link would take the same
            // route.
            links.push(LinkConfig {
                name,
                interface: Some(device.name.clone()),
                interface_required: true,
                ..table.clone()
            });
        }
        patterns.push(status);
    }
    Expanded {
        links,
        left_out,
        patterns,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn patterns_match_as_shell_globs() {
        for (pattern, name, want) in [
            ("usb*", "usb0", true),
            ("usb*", "usb", true),
            ("usb*", "xusb0", false),
            ("*", "wlan0", true),
            ("*", "", true),
            ("wlan?", "wlan0", true),
            ("wlan?", "wlan10", false),
            ("enx*", "enx00e04c680001", true),
            ("*0", "wwan0", true),
            ("*0", "wwan01", false),
            ("w*n*", "wwan0", true),
            ("w*n*1", "wwan0", false),
            ("*a*b*c", "aXbXbXc", true),
            ("*a*b*c", "aXcXbX", false),
            ("wwan0", "wwan0", true),
            ("wwan0", "wwan00", false),
            ("**", "x", true),
            ("?*?", "x", false),
            ("?*?", "xy", true),
        ] {
            assert_eq!(matches(pattern, name), want, "{pattern:?} {name:?}");
        }
    }

    fn link(name: &str, interface: Option<&str>) -> LinkConfig {
        crate::config::ClientConfig::parse(
            std::path::Path::new("t.toml"),
            &format!(
                "user = \"u\"\nkey = \"{}\"\nserver_fingerprint = \"{}\"\n[[link]]\nname = \
                 \"{name}\"\nserver = \"127.0.0.1:4433\"\n{}",
                "11".repeat(32),
                "22".repeat(32),
                interface.map_or(String::new(), |i| format!("interface = \"{i}\"")),
            ),
        )
        .unwrap()
        .links
        .remove(0)
    }

    fn device(name: &str) -> Device {
        Device {
            name: name.into(),
            up: true,
            loopback: false,
        }
    }

    fn names(expanded: &Expanded) -> Vec<(&str, Option<&str>)> {
        expanded
            .links
            .iter()
            .map(|l| (l.name.as_str(), l.interface.as_deref()))
            .collect()
    }

    #[test]
    fn a_pattern_stands_for_a_link_per_device_that_is_up_and_not_taken() {
        let file = [
            link("tether", Some("usb*")),
            link("wifi", Some("wlan0")),
            link("any", Some("*")),
            link("plain", None),
        ];
        let mut devices = vec![
            device("braid0"),
            device("eth0"),
            Device {
                loopback: true,
                ..device("lo")
            },
            device("usb0"),
            Device {
                up: false,
                ..device("usb1")
            },
            device("usb2"),
            device("wlan0"),
        ];
        let expanded = expand(&file, &devices, Some("braid0"));
        assert_eq!(
            names(&expanded),
            [
                ("wifi", Some("wlan0")),
                ("plain", None),
                ("tether@usb0", Some("usb0")),
                ("tether@usb2", Some("usb2")),
                ("any@eth0", Some("eth0")),
            ]
        );
        assert!(expanded.left_out.is_empty());
        let pattern = |name: &str, pattern: &str, links: &[&str]| LinkPatternStatus {
            name: name.into(),
            pattern: pattern.into(),
            links: links.iter().map(|&l| l.to_owned()).collect(),
            left_out: Vec::new(),
        };
        assert_eq!(
            expanded.patterns,
            [
                pattern("tether", "usb*", &["tether@usb0", "tether@usb2"]),
                pattern("any", "*", &["any@eth0"]),
            ]
        );
        // Each has the table's settings but its own name and device.
        assert_eq!(
            expanded.links[2],
            LinkConfig {
                name: "tether@usb0".into(),
                interface: Some("usb0".into()),
                interface_required: true,
                ..file[0].clone()
            }
        );
        // Without the TUN device, `*` takes it as well; a device gone takes its link along.
        devices.retain(|d| d.name != "usb0");
        assert_eq!(
            names(&expand(&file, &devices, None)),
            [
                ("wifi", Some("wlan0")),
                ("plain", None),
                ("tether@usb2", Some("usb2")),
                ("any@braid0", Some("braid0")),
                ("any@eth0", Some("eth0")),
            ]
        );
        // No devices (they could not be listed): the tables without a pattern alone.
        assert_eq!(
            names(&expand(&file, &[], None)),
            [("wifi", Some("wlan0")), ("plain", None)]
        );
    }

    #[test]
    fn pattern_links_beyond_the_path_limit_or_named_as_another_link_are_left_out() {
        let mut file: Vec<LinkConfig> = (0..MAX_PATHS - 2)
            .map(|i| link(&format!("l{i}"), None))
            .collect();
        file.push(link("t@usb0", None));
        file.insert(0, link("t", Some("usb*")));
        let devices: Vec<Device> = (0..4).map(|i| device(&format!("usb{i}"))).collect();
        let expanded = expand(&file, &devices, None);
        assert_eq!(expanded.links.len(), MAX_PATHS);
        assert_eq!(expanded.links[MAX_PATHS - 1].name, "t@usb1");
        assert_eq!(expanded.left_out, ["t@usb0", "t@usb2", "t@usb3"]);
        assert_eq!(expanded.patterns[0].links, ["t@usb1"]);
        assert_eq!(expanded.patterns[0].left_out, expanded.left_out);
    }
}
