//! The emulator's configuration file (`braid emu -c FILE`, documented in `docs/emu.md`).
//!
//! A file is a list of `[[path]]` tables. Each holds the relay's two addresses (`listen`,
//! `forward`) and the link parameters of the scenario schema (`docs/scenarios.md`), which are
//! not re-implemented here: the link keys of every path are handed, as a scenario, to
//! [`ScenarioFile`], so they mean, default and validate exactly as they do for the simulator
//! (ranges are drawn from the file's `seed`, traces are read relative to the file). The relay's
//! own keys (`listen`, `forward`, `rebind_at`) are taken out of each table first.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use braid_sched_core::Timestamp;

use crate::scenario::{PathSpec, ScenarioError, ScenarioFile};

/// Default period of the counters `braid emu` prints.
pub const DEFAULT_STATS_INTERVAL: Duration = Duration::from_secs(5);

/// Keys of a `[[path]]` table that belong to the relay rather than to the link model.
const RELAY_KEYS: [&str; 3] = ["listen", "forward", "rebind_at"];

/// The most rebinding times one path may list (`rebind_at`).
pub const MAX_REBINDS: usize = 64;

/// The latest rebinding time, seconds (the bound the scenario schema puts on outage times).
const MAX_REBIND_S: f64 = 1e9;

/// Keys allowed at the top of the file.
const TOP_KEYS: [&str; 3] = ["seed", "stats_interval_s", "path"];

/// Why an emulator configuration was refused. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum EmuConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML, or a field has the wrong type or is unknown.
    #[error("{file}: field `{field}`: {message}")]
    Parse {
        /// The file.
        file: PathBuf,
        /// The field (`path[1].listen`), or `(file)` for a syntax error.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A link parameter was refused by the scenario schema (the message names the field).
    #[error("{0}")]
    Link(#[from] ScenarioError),
}

/// One emulated path: a relay from `listen` to `forward` through a link model.
#[derive(Clone, Debug)]
pub struct EmuPath {
    /// Where clients send (port 0: an ephemeral port, see the handle's addresses).
    pub listen: SocketAddr,
    /// Where the relay sends what clients sent (the server).
    pub forward: SocketAddr,
    /// Both directions of the link: forward is client to server, reverse server to client.
    pub link: PathSpec,
    /// When every client mapping of the path gets a new upstream socket (a NAT rebinding),
    /// emulator time, ascending (`rebind_at`; empty: never).
    pub rebind_at: Vec<Timestamp>,
}

/// A validated emulator configuration.
#[derive(Clone, Debug)]
pub struct EmuConfig {
    /// The file it came from (for messages).
    pub file: PathBuf,
    /// The seed the link parameters and link randomness were drawn from.
    pub seed: u64,
    /// How often `braid emu` prints its counters.
    pub stats_interval: Duration,
    /// The paths, in file order.
    pub paths: Vec<EmuPath>,
}

impl EmuConfig {
    /// Reads and validates `file`.
    pub fn load(file: &Path) -> Result<EmuConfig, EmuConfigError> {
        let text = crate::input::read_text_capped(file, crate::input::MAX_INPUT_FILE_BYTES)
            .map_err(|source| EmuConfigError::Io {
                file: file.to_path_buf(),
                source,
            })?;
        EmuConfig::parse(&text, file)
    }

    /// Parses and validates `text`; `file` names it in errors and anchors relative trace paths.
    pub fn parse(text: &str, file: &Path) -> Result<EmuConfig, EmuConfigError> {
        let parse_err = |field: &str, message: String| EmuConfigError::Parse {
            file: file.to_path_buf(),
            field: field.to_string(),
            message,
        };
        let mut top: toml::Table = toml::from_str(text)
            .map_err(|e| parse_err("(file)", e.to_string().trim_end().replace('\n', " ")))?;
        if let Some(key) = top.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
            let expected = format!("unknown key, expected one of {TOP_KEYS:?}");
            return Err(parse_err(key, expected));
        }
        let seed = match top.get("seed") {
            None => crate::scenario::DEFAULT_SEED,
            Some(toml::Value::Integer(s)) if *s >= 0 => *s as u64,
            Some(v) => {
                return Err(parse_err(
                    "seed",
                    format!("expected an integer >= 0, found {v}"),
                ));
            }
        };
        let stats_interval = match top.get("stats_interval_s") {
            None => DEFAULT_STATS_INTERVAL,
            Some(v) => stats_interval(v).ok_or_else(|| {
                parse_err(
                    "stats_interval_s",
                    format!("expected seconds in [0.1, 3600], found {v}"),
                )
            })?,
        };
        let Some(toml::Value::Array(paths)) = top.remove("path") else {
            return Err(parse_err(
                "path",
                "expected one or more [[path]] tables".into(),
            ));
        };
        let mut relays = Vec::with_capacity(paths.len());
        let mut links = Vec::with_capacity(paths.len());
        let mut listens = HashSet::new();
        for (i, path) in paths.into_iter().enumerate() {
            let toml::Value::Table(mut table) = path else {
                return Err(parse_err(&format!("path[{i}]"), "expected a table".into()));
            };
            // A scenario's path key that means nothing to a relay: the endpoints choose it.
            if table.contains_key("congestion") {
                return Err(parse_err(
                    &format!("path[{i}].congestion"),
                    "the emulator carries packets, it runs no congestion controller: set the \
                     link's `congestion` in the client's file"
                        .into(),
                ));
            }
            let mut addr = |key: &str| -> Result<SocketAddr, EmuConfigError> {
                let field = format!("path[{i}].{key}");
                let value = table.remove(key).ok_or_else(|| {
                    parse_err(&field, "missing; expected \"127.0.0.1:PORT\"".into())
                })?;
                loopback_addr(&value).map_err(|m| parse_err(&field, m))
            };
            let listen = addr(RELAY_KEYS[0])?;
            let forward = addr(RELAY_KEYS[1])?;
            if forward.port() == 0 {
                // Port 0 means "any free port" only when binding; nothing can be sent to it.
                return Err(parse_err(
                    &format!("path[{i}].forward"),
                    format!(
                        "port 0 cannot be sent to; expected the server's port, found {forward}"
                    ),
                ));
            }
            if listen.port() != 0 && !listens.insert(listen) {
                let field = format!("path[{i}].listen");
                return Err(parse_err(
                    &field,
                    format!("{listen} is used by an earlier path"),
                ));
            }
            let rebind_at = match table.remove(RELAY_KEYS[2]) {
                None => Vec::new(),
                Some(value) => rebind_times(&value).map_err(|(index, message)| {
                    let at = index.map(|k| format!("[{k}]")).unwrap_or_default();
                    parse_err(&format!("path[{i}].rebind_at{at}"), message)
                })?,
            };
            relays.push((listen, forward, rebind_at));
            links.push(toml::Value::Table(table));
        }
        // A forward address that is a relay's own listen address (this path's or another's)
        // sends the relayed datagrams back into the emulator: a loop that multiplies them.
        for (i, (_, forward, _)) in relays.iter().enumerate() {
            if let Some(j) = relays.iter().position(|(listen, _, _)| listen == forward) {
                let whose = if i == j {
                    "its own".to_string()
                } else {
                    format!("path[{j}]'s")
                };
                return Err(parse_err(
                    &format!("path[{i}].forward"),
                    format!(
                        "{forward} is {whose} listen address: the relay would send to itself \
                         (a feedback loop); expected the server's address"
                    ),
                ));
            }
        }
        let specs = link_specs(links, seed, file)?;
        let paths = relays
            .into_iter()
            .zip(specs)
            .map(|((listen, forward, rebind_at), link)| EmuPath {
                listen,
                forward,
                link,
                rebind_at,
            })
            .collect();
        Ok(EmuConfig {
            file: file.to_path_buf(),
            seed,
            stats_interval,
            paths,
        })
    }
}

fn stats_interval(v: &toml::Value) -> Option<Duration> {
    let secs = match v {
        toml::Value::Float(f) => *f,
        toml::Value::Integer(i) => *i as f64,
        _ => return None,
    };
    (0.1..=3600.0)
        .contains(&secs)
        .then(|| Duration::from_secs_f64(secs))
}

/// The times of a `rebind_at` list: at most [`MAX_REBINDS`] finite seconds in
/// [0, [`MAX_REBIND_S`]], ascending. An error gives the index of the offending entry, if one is.
fn rebind_times(value: &toml::Value) -> Result<Vec<Timestamp>, (Option<usize>, String)> {
    let Some(list) = value.as_array() else {
        return Err((
            None,
            format!("expected a list of seconds [t1, t2, ...], found {value}"),
        ));
    };
    if list.len() > MAX_REBINDS {
        return Err((
            None,
            format!("expected at most {MAX_REBINDS} times, found {}", list.len()),
        ));
    }
    let mut previous = 0.0;
    let mut times = Vec::with_capacity(list.len());
    for (k, v) in list.iter().enumerate() {
        let secs = match v {
            toml::Value::Float(f) => *f,
            toml::Value::Integer(i) => *i as f64,
            _ => f64::NAN,
        };
        // NaN fails both comparisons, so a non-number or NaN is refused here too.
        if !(secs >= previous && secs <= MAX_REBIND_S) {
            let expected = if k == 0 {
                format!("seconds in [0, {MAX_REBIND_S:e}]")
            } else {
                format!("seconds in [0, {MAX_REBIND_S:e}], sorted (not before {previous})")
            };
            return Err((Some(k), format!("expected {expected}, found {v}")));
        }
        previous = secs;
        times.push(Timestamp::from_secs_f64(secs));
    }
    Ok(times)
}

/// An `ip:port` string whose address is loopback (127.0.0.0/8 or ::1): the emulator relays
/// only on this machine.
fn loopback_addr(value: &toml::Value) -> Result<SocketAddr, String> {
    let Some(text) = value.as_str() else {
        return Err(format!(
            "expected a string \"127.0.0.1:PORT\", found {value}"
        ));
    };
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("expected ip:port (no host names), found {text:?}"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "expected a loopback address (127.0.0.0/8 or ::1): the emulator only relays on \
             this machine, found {text:?}"
        ));
    }
    Ok(addr)
}

/// Validates and resolves the link keys of every path through the scenario schema: a scenario
/// whose paths are these tables, with a nominal application and duration the emulator ignores.
fn link_specs(
    links: Vec<toml::Value>,
    seed: u64,
    file: &Path,
) -> Result<Vec<PathSpec>, EmuConfigError> {
    let text = links_as_scenario(links.clone(), file)?;
    let parsed = ScenarioFile::parse(&text, file).map_err(|e| match e {
        // The parser's line and column would point into the generated text: keep its
        // message (which names the key) and find the path it is in.
        ScenarioError::Parse { file, message } => EmuConfigError::Parse {
            field: failing_path(&links, &file),
            file,
            message: message
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("invalid link keys")
                .trim()
                .to_string(),
        },
        other => link_error(other),
    })?;
    Ok(parsed.resolve(seed).map_err(link_error)?.paths)
}

/// `links` as the text of a scenario file with only those paths.
fn links_as_scenario(links: Vec<toml::Value>, file: &Path) -> Result<String, EmuConfigError> {
    let mut scenario = toml::Table::new();
    scenario.insert("name".into(), "emu".into());
    scenario.insert("duration_s".into(), toml::Value::Float(1e7));
    let mut app = toml::Table::new();
    app.insert("kind".into(), "bulk".into());
    app.insert("bytes".into(), toml::Value::Integer(1));
    scenario.insert("app".into(), toml::Value::Table(app));
    scenario.insert("path".into(), toml::Value::Array(links));
    toml::to_string(&scenario).map_err(|e| EmuConfigError::Parse {
        file: file.to_path_buf(),
        field: "path".into(),
        message: e.to_string(),
    })
}

/// `path[i]` for the first link that the scenario parser refuses on its own (`path` if none
/// does alone).
fn failing_path(links: &[toml::Value], file: &Path) -> String {
    links
        .iter()
        .position(|link| {
            links_as_scenario(vec![link.clone()], file)
                .is_ok_and(|text| ScenarioFile::parse(&text, file).is_err())
        })
        .map_or_else(|| "path".to_string(), |i| format!("path[{i}]"))
}

/// A scenario error about a link as an emulator error: the same file and field, without the
/// word "scenario" (this file is not one).
fn link_error(e: ScenarioError) -> EmuConfigError {
    match e {
        ScenarioError::Invalid {
            file,
            field,
            expected,
            found,
        } => EmuConfigError::Parse {
            file,
            field,
            message: format!("expected {expected}, found {found}"),
        },
        ScenarioError::Trace {
            file,
            field,
            source,
        } => EmuConfigError::Parse {
            file,
            field,
            message: source.to_string(),
        },
        other => EmuConfigError::Link(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EmuConfig, EmuConfigError> {
        EmuConfig::parse(text, Path::new("emu.toml"))
    }

    const TWO: &str = r#"
        seed = 7
        [[path]]
        name = "wifi"
        listen = "127.0.0.1:0"
        forward = "127.0.0.1:4433"
        rate_mbps = 30
        delay_ms = 10
        outages = [[5.0, 10.0]]
        [[path]]
        name = "lte"
        listen = "127.0.0.1:0"
        forward = "127.0.0.1:4433"
        rate_mbps = 20
        delay_ms = 20
        reverse = { delay_ms = 5 }
    "#;

    #[test]
    fn two_paths_use_the_scenario_link_model() {
        let c = parse(TWO).unwrap();
        assert_eq!(c.seed, 7);
        assert_eq!(c.paths.len(), 2);
        assert_eq!(c.paths[0].link.name, "wifi");
        assert_eq!(c.paths[0].link.forward.delay_ms, 10.0);
        assert_eq!(c.paths[0].link.reverse.outages, vec![(5.0, 10.0)]);
        assert_eq!(c.paths[1].link.reverse.delay_ms, 5.0);
        assert_eq!(c.paths[1].forward, "127.0.0.1:4433".parse().unwrap());
    }

    #[test]
    fn errors_name_file_and_field() {
        let cases = [
            (
                TWO.replace("127.0.0.1:4433", "10.0.0.1:4433"),
                "path[0].forward",
            ),
            (
                TWO.replace(
                    "forward = \"127.0.0.1:4433\"\n        rate_mbps = 30",
                    "rate_mbps = 30",
                ),
                "path[0].forward",
            ),
            (TWO.replace("\"127.0.0.1:0\"", "5"), "path[0].listen"),
            (
                TWO.replace("localhost", "x")
                    .replace("127.0.0.1:4433", "localhost:4433"),
                "path[0].forward",
            ),
            (
                TWO.replace("rate_mbps = 20", "rate_mbps = -1"),
                "path[1].rate_mbps",
            ),
            (TWO.replace("delay_ms = 10", "delay_msx = 10"), "delay_msx"),
            (
                TWO.replace("delay_ms = 20", "delay_msx = 20"),
                "field `path[1]`: unknown field `delay_msx`",
            ),
            (
                TWO.replace("rate_mbps = 20", "rate_mbps = \"fast\""),
                "field `path[1]`: invalid type",
            ),
            (
                TWO.replace("delay_ms = 20", "delay_ms = 20\ncongestion = \"bbr\""),
                "`path[1].congestion`: the emulator carries packets",
            ),
            (TWO.replace("seed = 7", "seed = \"x\""), "seed"),
            (TWO.replace("seed = 7", "speed = 7"), "speed"),
            (
                TWO.replace("seed = 7", "seed = 7\nstats_interval_s = 0.0"),
                "stats_interval_s",
            ),
            ("[[path]\n".to_string(), "(file)"),
            ("seed = 1".to_string(), "path"),
        ];
        for (text, field) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains("emu.toml"), "{e}");
            assert!(
                !e.contains("scenario"),
                "an emulator file is not a scenario: {e}"
            );
            assert!(e.contains(field), "{field} not in {e}");
        }
    }

    #[test]
    fn same_listen_twice_is_refused() {
        let text = TWO.replace("127.0.0.1:0", "127.0.0.1:40001");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("path[1].listen"), "{e}");
    }

    #[test]
    fn forward_to_port_zero_is_refused() {
        let text = TWO.replace("127.0.0.1:4433", "127.0.0.1:0");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("emu.toml"), "{e}");
        assert!(e.contains("path[0].forward"), "{e}");
        assert!(e.contains("port 0"), "{e}");
    }

    #[test]
    fn forward_to_a_listen_address_is_refused() {
        // Its own listen address.
        let own = TWO.replacen("127.0.0.1:0", "127.0.0.1:4433", 1);
        let e = parse(&own).unwrap_err().to_string();
        assert!(e.contains("emu.toml"), "{e}");
        assert!(e.contains("path[0].forward"), "{e}");
        assert!(e.contains("its own listen"), "{e}");
        // A later path's listen address.
        let later = TWO
            .replacen("127.0.0.1:4433", "127.0.0.1:40002", 1)
            .replacen("127.0.0.1:0", "127.0.0.1:40001", 1)
            .replacen("127.0.0.1:0", "127.0.0.1:40002", 1);
        let e = parse(&later).unwrap_err().to_string();
        assert!(e.contains("path[0].forward"), "{e}");
        assert!(e.contains("path[1]'s listen"), "{e}");
        // An earlier path's listen address.
        let earlier = TWO.replacen("127.0.0.1:0", "127.0.0.1:40001", 1).replace(
            "forward = \"127.0.0.1:4433\"\n        rate_mbps = 20",
            "forward = \"127.0.0.1:40001\"\n        rate_mbps = 20",
        );
        let e = parse(&earlier).unwrap_err().to_string();
        assert!(e.contains("path[1].forward"), "{e}");
        assert!(e.contains("path[0]'s listen"), "{e}");
    }

    #[test]
    fn rebind_times_are_an_emulator_key() {
        let text = TWO.replace(
            "outages = [[5.0, 10.0]]",
            "outages = [[5.0, 10.0]]\nrebind_at = [0, 2.5, 2.5, 7]",
        );
        let c = parse(&text).unwrap();
        let secs: Vec<f64> = c.paths[0]
            .rebind_at
            .iter()
            .map(|t| t.as_secs_f64())
            .collect();
        assert_eq!(secs, vec![0.0, 2.5, 2.5, 7.0]);
        assert!(c.paths[1].rebind_at.is_empty(), "default: never");
        // The link keys beside it still go through the scenario schema.
        assert_eq!(c.paths[0].link.reverse.outages, vec![(5.0, 10.0)]);
        let most = format!("rebind_at = [{}]", vec!["1"; MAX_REBINDS].join(", "));
        let text = TWO.replace("delay_ms = 20", &format!("delay_ms = 20\n{most}"));
        assert_eq!(parse(&text).unwrap().paths[1].rebind_at.len(), MAX_REBINDS);
    }

    #[test]
    fn bad_rebind_times_name_the_field() {
        let too_many = format!("[{}]", vec!["1"; MAX_REBINDS + 1].join(", "));
        let cases = [
            ("3.0", "path[0].rebind_at`: expected a list"),
            ("\"4s\"", "path[0].rebind_at`: expected a list"),
            (&too_many, "path[0].rebind_at`: expected at most 64"),
            ("[-1.0]", "path[0].rebind_at[0]`"),
            ("[1.0, nan]", "path[0].rebind_at[1]`"),
            ("[1.0, inf]", "path[0].rebind_at[1]`"),
            ("[1.0, 2e9]", "path[0].rebind_at[1]`"),
            ("[1.0, \"2\"]", "path[0].rebind_at[1]`"),
            ("[1.0, [2.0]]", "path[0].rebind_at[1]`"),
            ("[4.0, 7.0, 5.0]", "path[0].rebind_at[2]`: expected seconds"),
        ];
        for (value, field) in cases {
            let text = TWO.replace(
                "outages = [[5.0, 10.0]]",
                &format!("outages = [[5.0, 10.0]]\nrebind_at = {value}"),
            );
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.starts_with("emu.toml: field `"), "{e}");
            assert!(e.contains(field), "{field} not in {e}");
        }
        // The second path's list is named as its own.
        let text = TWO.replace("delay_ms = 20", "delay_ms = 20\nrebind_at = [2, 1]");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("path[1].rebind_at[1]"), "{e}");
        assert!(e.contains("not before 2"), "{e}");
    }

    #[test]
    fn ipv6_loopback_is_allowed() {
        let text = TWO.replace("127.0.0.1:0", "[::1]:0");
        assert!(parse(&text).is_ok());
    }
}
