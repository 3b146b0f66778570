//! The authenticated join: the first (and only) bidirectional stream of every path connection
//! carries one JOIN from the client, and the server answers one byte, [`JOIN_OK`] (with the
//! bits of [`JOIN_OK_FRAGMENTS`], [`JOIN_OK_ABANDON`], [`JOIN_OK_DATAGRAM_LIMIT`],
//! [`JOIN_OK_PING`], [`JOIN_OK_SESSION_NEWS`] and [`JOIN_OK_BACKUP_FLOOR`] for what both ends
//! know, and
//! [`JOIN_OK_CREATED`] when the join started the session: [`answer`], [`parse_answer`]) or
//! [`JOIN_REFUSED`], then closes a refused connection. To a JOIN with flag bit 6
//! ([`FLAG_SECOND_ANSWER_BYTE`]) an accepted join's answer has a second byte, the bits of what
//! else the server knows ([`ANSWER2_PATH_CONGESTION`]).
//!
//! ```text
//! JOIN = version u8 (1) | user_len u8 | user | session_id [16] | path_id u8 | flags u8
//!        (bit 0: backup tier; bit 1: reassembles DATAGRAM_FRAGMENT; bit 2: may send
//!        PATH_ABANDON; bit 3: knows DATAGRAM_LIMIT; bit 4: opens ping flows; bit 5: wants to
//!        hear whether the join started the session; bit 6: reads a second answer byte;
//!        bit 7: knows BACKUP_FLOOR; other bits ignored)
//!        | weight u16 (big endian) | name_len u8 | link name | mac [32]
//! mac  = HMAC-SHA256(user key, "braid-join-v1" | exporter | session_id | path_id)
//! exporter = TLS exporter of this connection, label "EXPORTER-braid-join", no context, 32 bytes
//! ```
//!
//! The exporter binds the proof to this TLS connection: a JOIN replayed on another connection
//! fails. The decoder is sans-IO and returns a typed error for any malformed input.

use braid_sched_core::{MAX_PATHS, PathId};
use ring::hmac;

use crate::session::Tier;

/// The JOIN version this build speaks.
pub const JOIN_VERSION: u8 = 1;
/// The TLS exporter label.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-braid-join";
/// The server's answer: joined.
pub const JOIN_OK: u8 = 0;
/// The server's answer to a JOIN with flag bit 1: joined, and the server reassembles
/// DATAGRAM_FRAGMENT frames too. A server that does not (an older one) answers [`JOIN_OK`], and
/// a client that did not set the bit is never sent this answer.
pub const JOIN_OK_FRAGMENTS: u8 = 2;
/// The server's answer bit to a JOIN with flag bit 2: joined, and the server knows the
/// PATH_ABANDON frame, so the client may send it. Combined with [`JOIN_OK_FRAGMENTS`]; a server
/// that does not know it (an older one) answers without it, and a client that did not set the
/// bit is never sent it.
pub const JOIN_OK_ABANDON: u8 = 4;
/// The server's answer bit to a JOIN with flag bit 3: joined, and the server knows the
/// DATAGRAM_LIMIT frame (it sends its own and takes the client's). Combined with the others; an
/// older server answers without it, and a client that did not set the bit is never sent it.
pub const JOIN_OK_DATAGRAM_LIMIT: u8 = 8;
/// The server's answer bit to a JOIN with flag bit 4: joined, and the server relays ICMP echoes
/// (ping flows, [`crate::session::FlowKind::Ping`]). Combined with the others; an older server
/// answers without it, and a client that did not set the bit is never sent it.
pub const JOIN_OK_PING: u8 = 16;
/// The server's answer bit to a JOIN with flag bit 5: joined, and the server says (with
/// [`JOIN_OK_CREATED`]) whether this join started the session. Combined with the others; an
/// older server answers without it (and never says so), and a client that did not set the bit
/// is never sent it.
pub const JOIN_OK_SESSION_NEWS: u8 = 32;
/// The server's answer bit to a JOIN with flag bit 5: this join started the session; the
/// server had no session of that id (only with [`JOIN_OK_SESSION_NEWS`]). A client whose
/// session had already joined learns so that the server lost it (a restart, or its idle
/// timeout): the flows it had are unknown there.
pub const JOIN_OK_CREATED: u8 = 64;
/// The server's answer bit to a JOIN with flag bit 7: joined, and the server knows the
/// BACKUP_FLOOR frame (it takes the client's floor for backups for what it sends on the
/// session). Combined with the others; an older server answers without it, and a client that
/// did not set the bit is never sent it.
pub const JOIN_OK_BACKUP_FLOOR: u8 = 128;

/// JOIN flag bit 6: the client reads a second byte of an accepted join's answer. The answer's
/// first byte has no bit left (bit 6 is [`JOIN_OK_CREATED`]); the second carries what else the
/// server knows. A server that does not know this bit (an older one) answers one byte, and the
/// client reads the answer to the stream's end, so it tells the two apart.
pub const FLAG_SECOND_ANSWER_BYTE: u8 = 64;
/// The second answer byte's bit 0: the server knows the PATH_CONGESTION frame (it runs the
/// controller the client chose for a link on what it sends on that link's path). Bits 3 to 7
/// are for later: a server sets none, a client ignores them.
pub const ANSWER2_PATH_CONGESTION: u8 = 1;
/// The second answer byte's bit 1: the server knows OPEN's redundant mark
/// ([`crate::session::frame::OPEN_REDUNDANT`]: it sends such a flow's side redundantly too).
pub const ANSWER2_REDUNDANT_FLOWS: u8 = 2;
/// The second answer byte's bit 2: the server knows the PATH_RATE_CAP frame (it keeps what it
/// sends on a link's path to the rate the client's link takes).
pub const ANSWER2_PATH_RATE_CAP: u8 = 4;
/// Every bit of the second answer byte this build sets.
pub const ANSWER2_ALL: u8 =
    ANSWER2_PATH_CONGESTION | ANSWER2_REDUNDANT_FLOWS | ANSWER2_PATH_RATE_CAP;

/// What the second byte of the server's answer says it knows (all false from an older server,
/// which sends none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerKnows {
    /// PATH_CONGESTION ([`ANSWER2_PATH_CONGESTION`]).
    pub path_congestion: bool,
    /// OPEN's redundant mark ([`ANSWER2_REDUNDANT_FLOWS`]).
    pub redundant_flows: bool,
    /// PATH_RATE_CAP ([`ANSWER2_PATH_RATE_CAP`]).
    pub path_rate_cap: bool,
}

impl ServerKnows {
    /// What the second answer byte `bits` says (other bits ignored).
    pub fn from_bits(bits: u8) -> Self {
        ServerKnows {
            path_congestion: bits & ANSWER2_PATH_CONGESTION != 0,
            redundant_flows: bits & ANSWER2_REDUNDANT_FLOWS != 0,
            path_rate_cap: bits & ANSWER2_PATH_RATE_CAP != 0,
        }
    }
}

/// What one end of a path said it knows in the JOIN exchange: the JOIN's flag bits 1 to 5 and
/// 7 (the client's word) and the answer's bits of the same values (the server's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerKnows {
    /// It reassembles DATAGRAM_FRAGMENT frames (bit 1).
    pub fragments: bool,
    /// It knows PATH_ABANDON (bit 2).
    pub abandon: bool,
    /// It knows DATAGRAM_LIMIT (bit 3).
    pub datagram_limit: bool,
    /// It opens (client) or relays (server) ping flows (bit 4).
    pub ping: bool,
    /// It wants to hear (client) or says (server) whether a join started the session (bit 5).
    pub session_news: bool,
    /// It knows BACKUP_FLOOR (bit 7).
    pub backup_floor: bool,
}

impl PeerKnows {
    /// What this build knows.
    pub const ALL: PeerKnows = PeerKnows {
        fragments: true,
        abandon: true,
        datagram_limit: true,
        ping: true,
        session_news: true,
        backup_floor: true,
    };

    /// Its bits, as the JOIN's flags and the answer carry them.
    pub fn bits(self) -> u8 {
        [
            (self.fragments, JOIN_OK_FRAGMENTS),
            (self.abandon, JOIN_OK_ABANDON),
            (self.datagram_limit, JOIN_OK_DATAGRAM_LIMIT),
            (self.ping, JOIN_OK_PING),
            (self.session_news, JOIN_OK_SESSION_NEWS),
            (self.backup_floor, JOIN_OK_BACKUP_FLOOR),
        ]
        .into_iter()
        .filter(|&(known, _)| known)
        .fold(0, |bits, (_, bit)| bits | bit)
    }

    /// What `bits` say (other bits ignored).
    pub fn from_bits(bits: u8) -> Self {
        PeerKnows {
            fragments: bits & JOIN_OK_FRAGMENTS != 0,
            abandon: bits & JOIN_OK_ABANDON != 0,
            datagram_limit: bits & JOIN_OK_DATAGRAM_LIMIT != 0,
            ping: bits & JOIN_OK_PING != 0,
            session_news: bits & JOIN_OK_SESSION_NEWS != 0,
            backup_floor: bits & JOIN_OK_BACKUP_FLOOR != 0,
        }
    }
}

/// The server's answer to an accepted `join`: [`JOIN_OK`] with the bits of what the client
/// said it knows (the server knows them all), and [`JOIN_OK_CREATED`] when the join `created`
/// the session and the client asked to hear it; then, to a client that reads one
/// ([`Join::second_answer_byte`]), the second byte: [`ANSWER2_ALL`].
pub fn answer(join: &Join, created: bool) -> Vec<u8> {
    let created = if created && join.knows.session_news {
        JOIN_OK_CREATED
    } else {
        0
    };
    let first = JOIN_OK | join.knows.bits() | created;
    if join.second_answer_byte {
        vec![first, ANSWER2_ALL]
    } else {
        vec![first]
    }
}

/// What an accepted join's answer says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JoinAnswer {
    /// What the server knows.
    pub knows: PeerKnows,
    /// The join started the session ([`JOIN_OK_CREATED`]).
    pub created: bool,
    /// What the answer's second byte says the server knows.
    pub server: ServerKnows,
}

/// What the server's answer says, for a join with [`FLAG_SECOND_ANSWER_BYTE`] (its second
/// byte comes from a server that knows the bit; an older one sends the first alone); `None` for
/// [`JOIN_REFUSED`] or anything else (an answer of [`JOIN_OK_CREATED`] without
/// [`JOIN_OK_SESSION_NEWS`] too, or more than two bytes).
pub fn parse_answer(answer: &[u8]) -> Option<JoinAnswer> {
    let (&a, second) = answer.split_first()?;
    let second = match *second {
        [] => 0,
        [b] => b,
        _ => return None,
    };
    (a & !(PeerKnows::ALL.bits() | JOIN_OK_CREATED) == JOIN_OK
        && (a & JOIN_OK_CREATED == 0 || a & JOIN_OK_SESSION_NEWS != 0))
        .then(|| JoinAnswer {
            knows: PeerKnows::from_bits(a),
            created: a & JOIN_OK_CREATED != 0,
            server: ServerKnows::from_bits(second),
        })
}

/// JOIN flag bit 0: the link is a backup.
const FLAG_BACKUP: u8 = 1;
/// The server's answer: refused (no reason is given).
pub const JOIN_REFUSED: u8 = 1;
/// The longest JOIN: all variable fields at their limit.
pub const MAX_JOIN: usize = 1 + 1 + 255 + 16 + 1 + 1 + 2 + 1 + 255 + 32;
/// The QUIC application close code of a refused join.
pub const REFUSED_CLOSE_CODE: u32 = 0x1;
/// The QUIC application close code of a path connection closed because its end's session is
/// over (it closed, or its daemon stops). The session's CLOSE frame, an unreliable datagram, is
/// discarded with whatever quinn still buffered when the connection closes right after it (a
/// path busy with a download), so the other end also takes this code for the session's close:
/// its session ends at once, its flows reset, instead of waiting out its idle timeout with
/// flows the peer no longer knows. An older peer closes with 0 and takes this as any close.
pub const SESSION_CLOSED_CODE: u32 = 0x5343;

/// A client-chosen session id.
pub type SessionId = [u8; 16];

/// A decoded JOIN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Join {
    /// The user.
    pub user: String,
    /// The session the path joins.
    pub session_id: SessionId,
    /// The path's id within the session.
    pub path: PathId,
    /// The link's tier.
    pub tier: Tier,
    /// The link's weight.
    pub weight: u16,
    /// What the client knows (flag bits 1 to 5 and 7): it reassembles DATAGRAM_FRAGMENT frames,
    /// may send PATH_ABANDON, knows DATAGRAM_LIMIT, opens ping flows, wants to hear whether the
    /// join started the session, knows BACKUP_FLOOR.
    pub knows: PeerKnows,
    /// The client reads a second answer byte (flag bit 6, [`FLAG_SECOND_ANSWER_BYTE`]).
    pub second_answer_byte: bool,
    /// The link's name (for logs and status).
    pub link_name: String,
    /// The proof.
    pub mac: [u8; 32],
}

/// A malformed JOIN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// The input ended while reading `field`.
    #[error("JOIN truncated at `{field}`")]
    Truncated {
        /// The field.
        field: &'static str,
    },
    /// Another version.
    #[error("JOIN version {0} is not supported")]
    Version(u8),
    /// A text field is empty or not UTF-8.
    #[error("JOIN field `{field}` is not valid text")]
    Text {
        /// The field.
        field: &'static str,
    },
    /// The path id is not below `MAX_PATHS`, or the weight is zero.
    #[error("JOIN field `{field}` = {value} is out of range")]
    Range {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// Bytes follow the MAC.
    #[error("JOIN has {0} trailing bytes")]
    Trailing(usize),
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], JoinError> {
        if self.buf.len() < n {
            return Err(JoinError::Truncated { field });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn byte(&mut self, field: &'static str) -> Result<u8, JoinError> {
        Ok(self.take(1, field)?[0])
    }

    fn text(&mut self, field: &'static str) -> Result<String, JoinError> {
        let len = self.byte(field)? as usize;
        let bytes = self.take(len, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) if !s.is_empty() => Ok(s.to_owned()),
            _ => Err(JoinError::Text { field }),
        }
    }
}

impl Join {
    /// Encodes the JOIN (names longer than 255 bytes are cut at a character boundary).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAX_JOIN);
        out.push(JOIN_VERSION);
        push_text(&mut out, &self.user);
        out.extend_from_slice(&self.session_id);
        out.push(self.path.0);
        let backup = if self.tier == Tier::Backup {
            FLAG_BACKUP
        } else {
            0
        };
        let second = if self.second_answer_byte {
            FLAG_SECOND_ANSWER_BYTE
        } else {
            0
        };
        out.push(backup | second | self.knows.bits());
        out.extend_from_slice(&self.weight.to_be_bytes());
        push_text(&mut out, &self.link_name);
        out.extend_from_slice(&self.mac);
        out
    }

    /// Decodes a whole JOIN message.
    pub fn decode(buf: &[u8]) -> Result<Join, JoinError> {
        let mut r = Reader { buf };
        let version = r.byte("version")?;
        if version != JOIN_VERSION {
            return Err(JoinError::Version(version));
        }
        let user = r.text("user")?;
        let mut session_id = [0u8; 16];
        session_id.copy_from_slice(r.take(16, "session_id")?);
        let path = r.byte("path_id")?;
        if usize::from(path) >= MAX_PATHS {
            return Err(JoinError::Range {
                field: "path_id",
                value: u64::from(path),
            });
        }
        let flags = r.byte("flags")?;
        let w = r.take(2, "weight")?;
        let weight = u16::from_be_bytes([w[0], w[1]]);
        if weight == 0 {
            return Err(JoinError::Range {
                field: "weight",
                value: 0,
            });
        }
        let link_name = r.text("link_name")?;
        let mut mac = [0u8; 32];
        mac.copy_from_slice(r.take(32, "mac")?);
        if !r.buf.is_empty() {
            return Err(JoinError::Trailing(r.buf.len()));
        }
        Ok(Join {
            user,
            session_id,
            path: PathId(path),
            tier: if flags & FLAG_BACKUP != 0 {
                Tier::Backup
            } else {
                Tier::Primary
            },
            weight,
            knows: PeerKnows::from_bits(flags),
            second_answer_byte: flags & FLAG_SECOND_ANSWER_BYTE != 0,
            link_name,
            mac,
        })
    }
}

fn push_text(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.push(end as u8);
    out.extend_from_slice(&s.as_bytes()[..end]);
}

fn mac_input(exporter: &[u8; 32], session_id: &SessionId, path: PathId) -> [u8; 13 + 32 + 16 + 1] {
    let mut m = [0u8; 13 + 32 + 16 + 1];
    m[..13].copy_from_slice(b"braid-join-v1");
    m[13..45].copy_from_slice(exporter);
    m[45..61].copy_from_slice(session_id);
    m[61] = path.0;
    m
}

/// The proof for a JOIN on the connection whose exporter output is `exporter`.
pub fn compute_mac(
    key: &[u8; 32],
    exporter: &[u8; 32],
    session_id: &SessionId,
    path: PathId,
) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let tag = hmac::sign(&key, &mac_input(exporter, session_id, path));
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// Checks a JOIN's proof in constant time. `key` is `None` for an unknown user: a dummy key is
/// checked instead so that the answer takes the same time and is the same refusal.
pub fn verify_mac(key: Option<&[u8; 32]>, exporter: &[u8; 32], join: &Join) -> bool {
    let dummy = [0u8; 32];
    let k = hmac::Key::new(hmac::HMAC_SHA256, key.unwrap_or(&dummy));
    let ok = hmac::verify(
        &k,
        &mac_input(exporter, &join.session_id, join.path),
        &join.mac,
    )
    .is_ok();
    ok && key.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Join {
        Join {
            user: "alice".into(),
            session_id: [7; 16],
            path: PathId(1),
            tier: Tier::Backup,
            weight: 3,
            knows: PeerKnows::ALL,
            second_answer_byte: true,
            link_name: "lte".into(),
            mac: compute_mac(&[9; 32], &[5; 32], &[7; 16], PathId(1)),
        }
    }

    #[test]
    fn round_trip_and_mac() {
        let j = sample();
        let bytes = j.encode();
        assert!(bytes.len() <= MAX_JOIN);
        let d = Join::decode(&bytes).unwrap();
        assert_eq!(d, j);
        assert!(verify_mac(Some(&[9; 32]), &[5; 32], &d));
        assert!(!verify_mac(Some(&[8; 32]), &[5; 32], &d), "wrong key");
        assert!(
            !verify_mac(Some(&[9; 32]), &[6; 32], &d),
            "other connection"
        );
        assert!(!verify_mac(None, &[5; 32], &d), "unknown user");
        let mut other_path = d.clone();
        other_path.path = PathId(2);
        assert!(!verify_mac(Some(&[9; 32]), &[5; 32], &other_path));
        let plain = Join {
            tier: Tier::Primary,
            knows: PeerKnows::default(),
            second_answer_byte: false,
            ..j
        };
        assert_eq!(Join::decode(&plain.encode()).unwrap(), plain);
    }

    #[test]
    fn flag_bits_are_read_one_by_one_and_unknown_ones_ignored() {
        let bytes = sample().encode();
        let flags_at = 1 + 1 + 5 + 16 + 1;
        assert_eq!(bytes[flags_at], 0xff);
        let (n, y) = (false, true);
        for (flags, tier, fragments, abandon, limit, ping, news, second, floor) in [
            (0b0000_0000, Tier::Primary, n, n, n, n, n, n, n),
            (0b0000_0001, Tier::Backup, n, n, n, n, n, n, n),
            (0b0000_0010, Tier::Primary, y, n, n, n, n, n, n),
            (0b0000_0100, Tier::Primary, n, y, n, n, n, n, n),
            (0b0000_1000, Tier::Primary, n, n, y, n, n, n, n),
            (0b0001_0000, Tier::Primary, n, n, n, y, n, n, n),
            (0b0010_0000, Tier::Primary, n, n, n, n, y, n, n),
            (0b0100_0000, Tier::Primary, n, n, n, n, n, y, n),
            (0b1000_0000, Tier::Primary, n, n, n, n, n, n, y),
            (0b1111_1111, Tier::Backup, y, y, y, y, y, y, y),
        ] {
            let mut b = bytes.clone();
            b[flags_at] = flags;
            let j = Join::decode(&b).unwrap();
            assert_eq!(
                (
                    j.tier,
                    j.knows.fragments,
                    j.knows.abandon,
                    j.knows.datagram_limit,
                    j.knows.ping,
                    j.knows.session_news,
                    j.second_answer_byte,
                    j.knows.backup_floor
                ),
                (tier, fragments, abandon, limit, ping, news, second, floor),
                "flags {flags:#010b}"
            );
        }
    }

    #[test]
    fn the_answer_carries_what_both_ends_know_and_an_older_one_still_reads() {
        for bits in 0..64u8 {
            let knows = PeerKnows {
                fragments: bits & 1 != 0,
                abandon: bits & 2 != 0,
                datagram_limit: bits & 4 != 0,
                ping: bits & 8 != 0,
                session_news: bits & 16 != 0,
                backup_floor: bits & 32 != 0,
            };
            let join = Join {
                knows,
                second_answer_byte: false,
                ..sample()
            };
            for created in [false, true] {
                let bytes = answer(&join, created);
                let [byte] = bytes[..] else {
                    panic!("{bytes:?} is not one byte")
                };
                // Said to be new only to a client that asked.
                let told = created && knows.session_news;
                assert_eq!(
                    byte,
                    ((bits & 31) << 1)
                        | (u8::from(knows.backup_floor) * JOIN_OK_BACKUP_FLOOR)
                        | (u8::from(told) * JOIN_OK_CREATED),
                    "{knows:?}"
                );
                assert_eq!(
                    parse_answer(&[byte]),
                    Some(JoinAnswer {
                        knows,
                        created: told,
                        server: ServerKnows::default(),
                    })
                );
                // To a client that reads a second byte: the same first byte, then what else
                // the server knows.
                let asked = Join {
                    second_answer_byte: true,
                    ..join.clone()
                };
                assert_eq!(answer(&asked, created), vec![byte, 0b111]);
                assert_eq!(
                    parse_answer(&answer(&asked, created)),
                    Some(JoinAnswer {
                        knows,
                        created: told,
                        server: ServerKnows {
                            path_congestion: true,
                            redundant_flows: true,
                            path_rate_cap: true,
                        },
                    })
                );
            }
        }
        // A second byte's bits one by one; unknown ones are ignored.
        assert_eq!(
            parse_answer(&[0, 0xf8]),
            Some(JoinAnswer::default()),
            "bits a later server may set"
        );
        assert_eq!(
            parse_answer(&[0, 2]).map(|a| a.server),
            Some(ServerKnows {
                path_congestion: false,
                redundant_flows: true,
                path_rate_cap: false,
            })
        );
        assert_eq!(
            parse_answer(&[0, 1]).map(|a| a.server),
            Some(ServerKnows {
                path_congestion: true,
                redundant_flows: false,
                path_rate_cap: false,
            })
        );
        assert_eq!(
            parse_answer(&[0, 4]).map(|a| a.server),
            Some(ServerKnows {
                path_rate_cap: true,
                ..ServerKnows::default()
            })
        );
        // What older servers answer, what a refusal is, and what no server sends.
        assert_eq!(parse_answer(&[0]), Some(JoinAnswer::default()));
        assert_eq!(
            parse_answer(&[6]).map(|a| a.knows),
            Some(PeerKnows {
                fragments: true,
                abandon: true,
                ..PeerKnows::default()
            })
        );
        for refused in [
            &[JOIN_REFUSED][..],
            &[3],
            &[64],
            &[64 | 128],
            &[0xff],
            &[],
            &[0, 0, 0],
            &[JOIN_REFUSED, ANSWER2_ALL],
        ] {
            assert_eq!(parse_answer(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn every_truncation_and_bad_field_is_an_error() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(Join::decode(&bytes[..n]).is_err(), "prefix {n}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Join::decode(&long), Err(JoinError::Trailing(1)));
        let mut v = bytes.clone();
        v[0] = 2;
        assert_eq!(Join::decode(&v), Err(JoinError::Version(2)));
        let mut p = bytes.clone();
        p[1 + 1 + 5 + 16] = 200;
        assert!(matches!(
            Join::decode(&p),
            Err(JoinError::Range {
                field: "path_id",
                ..
            })
        ));
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let base = sample().encode();
        for _ in 0..20_000 {
            let mut b = base.clone();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..b.len());
                b[i] = rng.random();
            }
            b.truncate(rng.random_range(0..=b.len()));
            let _ = Join::decode(&b);
        }
    }
}
