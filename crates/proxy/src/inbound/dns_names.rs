//! Names learned from the DNS answers the TUN inbound hands to applications, so that a
//! `[[route]]`'s `domains` apply to the TUN inbound too: its connections name only an address,
//! but the application asked for that address by name a moment before, and the answer came back
//! through braid. Each A and AAAA record of an answer maps its address to the name the question
//! asked (the name an application, and a route, knows, even where the answer went through
//! CNAMEs), for the record's TTL and at least [`KEEP_AT_LEAST`] (applications and system
//! resolvers keep answers for longer than they are told), at most [`MAX_NAMES`] addresses.
//! Answers over TCP, DNS over TLS or HTTPS, and answers an application got before braid ran
//! are not seen.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Addresses remembered at most; the one due to be forgotten first makes room for a new one.
pub const MAX_NAMES: usize = 4096;
/// How long an address keeps its name at least, whatever the record's TTL.
pub const KEEP_AT_LEAST: Duration = Duration::from_secs(300);
/// How long at most.
const KEEP_AT_MOST: Duration = Duration::from_secs(86_400);
/// Addresses taken from one answer at most (an answer may hold thousands of records; a full
/// table costs a pass over it per address learned).
pub const MAX_RECORDS_PER_ANSWER: usize = 16;

/// The addresses of recent DNS answers, with the names they answered.
#[derive(Debug, Default)]
pub struct LearnedNames(Mutex<HashMap<IpAddr, (Arc<str>, Instant)>>);

impl LearnedNames {
    /// Learns the addresses of `message` if it is a DNS answer (anything else is ignored);
    /// how many.
    pub fn learn(&self, message: &[u8], now: Instant) -> usize {
        let Some((name, records)) = parse_answer(message) else {
            return 0;
        };
        let name: Arc<str> = name.into();
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for &(ip, ttl) in &records {
            let keep = Duration::from_secs(u64::from(ttl)).clamp(KEEP_AT_LEAST, KEEP_AT_MOST);
            if map.len() >= MAX_NAMES && !map.contains_key(&ip) {
                map.retain(|_, (_, until)| *until > now);
                if map.len() >= MAX_NAMES
                    && let Some(first) = map.iter().min_by_key(|(_, (_, until))| *until)
                {
                    let first = *first.0;
                    map.remove(&first);
                }
            }
            map.insert(ip, (name.clone(), now + keep));
        }
        records.len()
    }

    /// The name `ip` was last given for, while it is remembered.
    pub fn name_of(&self, ip: IpAddr, now: Instant) -> Option<Arc<str>> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&ip)
            .filter(|(_, until)| *until > now)
            .map(|(name, _)| name.clone())
    }
}

/// A DNS answer's question name (lower-case, no final dot) and its A and AAAA records'
/// addresses with their TTLs (the first [`MAX_RECORDS_PER_ANSWER`]); `None` for a query, an
/// error answer, or anything malformed before the records taken.
pub fn parse_answer(msg: &[u8]) -> Option<(String, Vec<(IpAddr, u32)>)> {
    let u16_at = |at: usize| Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]));
    let flags = u16_at(2)?;
    // An answer (QR), not truncated, no error (RCODE 0), one question.
    if flags & 0x8000 == 0 || flags & 0x0200 != 0 || flags & 0x000f != 0 || u16_at(4)? != 1 {
        return None;
    }
    let answers = u16_at(6)?;
    let (name, mut at) = read_name(msg, 12)?;
    at += 4; // QTYPE, QCLASS
    let mut records = Vec::new();
    for _ in 0..answers {
        if records.len() == MAX_RECORDS_PER_ANSWER {
            break;
        }
        at = skip_name(msg, at)?;
        let (kind, class) = (u16_at(at)?, u16_at(at + 2)?);
        let ttl = u32::from_be_bytes(msg.get(at + 4..at + 8)?.try_into().ok()?);
        let len = usize::from(u16_at(at + 8)?);
        let data = msg.get(at + 10..at + 10 + len)?;
        at += 10 + len;
        let ip = match (kind, class, data.len()) {
            (1, 1, 4) => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(data).ok()?)),
            (28, 1, 16) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(data).ok()?)),
            _ => continue,
        };
        records.push((ip, ttl));
    }
    Some((name, records))
}

/// Pointers followed at most while reading one name.
const MAX_JUMPS: usize = 16;

/// The name at `at` (labels, compression pointers followed), as text, and the offset past it
/// where it began; `None` when malformed, longer than 253 bytes, or not printable ASCII.
fn read_name(msg: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut name = String::new();
    let mut end = None;
    let mut jumps = 0;
    loop {
        let len = *msg.get(at)?;
        match len {
            0 => {
                let end = end.unwrap_or(at + 1);
                return (!name.is_empty()).then_some((name, end));
            }
            1..=63 => {
                let label = msg.get(at + 1..at + 1 + usize::from(len))?;
                if !label.iter().all(|b| b.is_ascii_graphic() && *b != b'.') {
                    return None;
                }
                if !name.is_empty() {
                    name.push('.');
                }
                name.extend(label.iter().map(|b| char::from(b.to_ascii_lowercase())));
                if name.len() > 253 {
                    return None;
                }
                at += 1 + usize::from(len);
            }
            0xc0..=0xff => {
                let low = *msg.get(at + 1)?;
                jumps += 1;
                if jumps > MAX_JUMPS {
                    return None;
                }
                end.get_or_insert(at + 2);
                at = (usize::from(len & 0x3f) << 8) | usize::from(low);
            }
            _ => return None,
        }
    }
}

/// The offset past the name at `at`, without reading it.
fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)?;
        match len {
            0 => return Some(at + 1),
            1..=63 => at += 1 + usize::from(len),
            0xc0..=0xff => return msg.get(at + 1).map(|_| at + 2),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// An answer to `name` (asked as A) with `records` (type, data, TTL), the first record's
    /// owner written as a pointer to the question.
    fn answer(name: &str, records: &[(u16, &[u8], u32)]) -> Vec<u8> {
        let mut m = vec![
            0x12,
            0x34,
            0x81,
            0x80,
            0,
            1,
            0,
            records.len() as u8,
            0,
            0,
            0,
            0,
        ];
        for label in name.split('.') {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.extend_from_slice(&[0, 0, 1, 0, 1]);
        for (i, (kind, data, ttl)) in records.iter().enumerate() {
            if i == 0 {
                m.extend_from_slice(&[0xc0, 12]);
            } else {
                m.extend_from_slice(&[3, b'c', b'd', b'n', 0]);
            }
            m.extend_from_slice(&kind.to_be_bytes());
            m.extend_from_slice(&[0, 1]);
            m.extend_from_slice(&ttl.to_be_bytes());
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(data);
        }
        m
    }

    #[test]
    fn an_answer_gives_its_addresses_under_the_question_s_name() {
        let cname = [3, b'c', b'd', b'n', 0];
        let m = answer(
            "Video.Example",
            &[
                (5, &cname, 60),
                (1, &[203, 0, 113, 7], 30),
                (
                    28,
                    &[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
                    7200,
                ),
            ],
        );
        let (name, records) = parse_answer(&m).unwrap();
        assert_eq!(name, "video.example");
        assert_eq!(
            records,
            [
                ("203.0.113.7".parse().unwrap(), 30),
                ("2001:db8::9".parse().unwrap(), 7200)
            ]
        );
        let names = LearnedNames::default();
        let now = Instant::now();
        assert_eq!(names.learn(&m, now), 2);
        let v4: IpAddr = "203.0.113.7".parse().unwrap();
        assert_eq!(names.name_of(v4, now).as_deref(), Some("video.example"));
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        assert_eq!(names.name_of(mapped, now).as_deref(), Some("video.example"));
        // A 30 s TTL is kept for KEEP_AT_LEAST, and no longer.
        assert!(
            names
                .name_of(v4, now + KEEP_AT_LEAST - Duration::from_secs(1))
                .is_some()
        );
        assert!(names.name_of(v4, now + KEEP_AT_LEAST).is_none());
    }

    #[test]
    fn queries_errors_and_malformed_messages_teach_nothing() {
        let good = answer("a.example", &[(1, &[192, 0, 2, 1], 60)]);
        let mut query = good.clone();
        query[2] &= 0x7f;
        let mut nxdomain = good.clone();
        nxdomain[3] |= 3;
        let mut looped = good.clone();
        looped[12] = 0xc0;
        looped[13] = 12;
        for bad in [
            &query[..],
            &nxdomain,
            &looped,
            &good[..good.len() - 1],
            &[],
            &[0; 12],
        ] {
            assert!(parse_answer(bad).is_none(), "{bad:?}");
        }
        // Every truncation and every single-byte change parses or not, without a panic.
        for cut in 0..good.len() {
            let _ = parse_answer(&good[..cut]);
        }
        for i in 0..good.len() {
            for b in [0u8, 1, 63, 64, 0xc0, 0xff] {
                let mut m = good.clone();
                m[i] = b;
                let _ = parse_answer(&m);
            }
        }
    }

    #[test]
    fn an_answer_teaches_its_first_records_only() {
        let ips: Vec<[u8; 4]> = (0..40u8).map(|i| [192, 0, 2, i]).collect();
        let records: Vec<(u16, &[u8], u32)> = ips.iter().map(|ip| (1, &ip[..], 60)).collect();
        let (_, got) = parse_answer(&answer("many.example", &records)).unwrap();
        assert_eq!(got.len(), MAX_RECORDS_PER_ANSWER);
        assert_eq!(got[15].0, IpAddr::from([192, 0, 2, 15]));
    }

    #[test]
    fn a_full_table_forgets_the_address_due_first() {
        let names = LearnedNames::default();
        let now = Instant::now();
        for i in 0..MAX_NAMES as u32 {
            let ip = (0x0a00_0000 + i).to_be_bytes();
            let m = answer("many.example", &[(1, &ip, 300 + i)]);
            names.learn(&m, now);
        }
        let first: IpAddr = Ipv4Addr::from(0x0a00_0000u32).into();
        assert!(names.name_of(first, now).is_some());
        names.learn(&answer("new.example", &[(1, &[192, 0, 2, 9], 60)]), now);
        assert!(names.name_of(first, now).is_none(), "the first due went");
        let new: IpAddr = "192.0.2.9".parse().unwrap();
        assert_eq!(names.name_of(new, now).as_deref(), Some("new.example"));
        assert_eq!(names.0.lock().unwrap().len(), MAX_NAMES);
    }
}
