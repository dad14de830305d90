//! The per-session hash chain over events (docs/design.md, "Hash chain"; schema V2).
//!
//! Each event stores `prev_hash` (the previous event's `hash`, or
//! [`GENESIS`] — 32 zero bytes — for seq 0) and
//! `hash = SHA-256(encoding)`, where the encoding is, byte for byte:
//!
//! ```text
//! "logbook.event.v1\n"                 17 bytes, the domain tag
//! prev_hash                            32 bytes
//! session_id   text                    ┐
//! seq          integer                 │ each field as
//! type         text                    │   NULL:    0x00
//! at_ms        integer                 │   integer: 0x01, 8 bytes big-endian two's complement
//! actor_type   text                    │   text:    0x02, 4-byte big-endian byte length,
//! detail       text or NULL            │            the bytes exactly as stored
//! data         text or NULL            │            (data: compact JSON as stored)
//! run_id       text or NULL            ┘
//! ```
//!
//! `event_id` is left out on purpose: it is a position in one database's
//! global feed, not part of the event, so an export imported elsewhere keeps
//! every hash. Text is hashed as the bytes SQLite stores, so a row holding
//! invalid UTF-8 (written by some other client) still verifies.

use sha2::{Digest, Sha256};

/// `prev_hash` of a session's first event: 32 zero bytes.
pub const GENESIS: [u8; 32] = [0; 32];

/// The domain tag that starts every encoding.
pub const DOMAIN: &[u8] = b"logbook.event.v1\n";

/// The hashed fields of one event, as stored (text as raw bytes).
#[derive(Debug, Clone, Copy)]
pub struct EventFields<'a> {
    /// `events.session_id`.
    pub session_id: &'a [u8],
    /// `events.seq`.
    pub seq: i64,
    /// `events.type`.
    pub event_type: &'a [u8],
    /// `events.at_ms`.
    pub at_ms: i64,
    /// `events.actor_type`.
    pub actor_type: &'a [u8],
    /// `events.detail`.
    pub detail: Option<&'a [u8]>,
    /// `events.data` (compact JSON text).
    pub data: Option<&'a [u8]>,
    /// `events.run_id`.
    pub run_id: Option<&'a [u8]>,
}

fn put_text(h: &mut Sha256, v: Option<&[u8]>) {
    match v {
        None => h.update([0u8]),
        Some(b) => {
            h.update([2u8]);
            // Text columns are capped far below 4 GiB (docs/design.md, "Model"); saturate
            // rather than wrap if a raw row were ever that large.
            let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
            h.update(len.to_be_bytes());
            h.update(b);
        }
    }
}

fn put_int(h: &mut Sha256, v: i64) {
    h.update([1u8]);
    h.update(v.to_be_bytes());
}

/// `hash` of an event whose predecessor's hash is `prev`.
pub fn event_hash(prev: &[u8; 32], f: &EventFields<'_>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(DOMAIN);
    h.update(prev);
    put_text(&mut h, Some(f.session_id));
    put_int(&mut h, f.seq);
    put_text(&mut h, Some(f.event_type));
    put_int(&mut h, f.at_ms);
    put_text(&mut h, Some(f.actor_type));
    put_text(&mut h, f.detail);
    put_text(&mut h, f.data);
    put_text(&mut h, f.run_id);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(detail: Option<&'a [u8]>, data: Option<&'a [u8]>) -> EventFields<'a> {
        EventFields {
            session_id: b"ses_00ff00ff00ff00ff",
            seq: 0,
            event_type: b"created",
            at_ms: 1_782_040_000_000,
            actor_type: b"cli",
            detail,
            data,
            run_id: None,
        }
    }

    #[test]
    fn known_answer() {
        // Pinned, and computed independently (Python hashlib over the bytes
        // the module doc lists): changing the encoding breaks stored chains.
        let h = event_hash(&GENESIS, &fields(Some(b"session created"), None));
        assert_eq!(
            hex::encode(h),
            "1c88ecdb69fe97ca8e214879caeecf957ec5d4f0a8f5b7a94451b4701cf02084"
        );
    }

    #[test]
    fn null_empty_and_shifted_bytes_differ() {
        let none = event_hash(&GENESIS, &fields(None, None));
        let empty = event_hash(&GENESIS, &fields(Some(b""), None));
        let moved = event_hash(&GENESIS, &fields(None, Some(b"")));
        let joined = event_hash(&GENESIS, &fields(Some(b"ab"), Some(b"c")));
        let split = event_hash(&GENESIS, &fields(Some(b"a"), Some(b"bc")));
        assert_ne!(none, empty);
        assert_ne!(empty, moved);
        assert_ne!(joined, split);
        let other_prev = event_hash(&[1; 32], &fields(None, None));
        assert_ne!(none, other_prev);
    }
}
