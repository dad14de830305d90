//! Stored values ↔ Rust values, whichever backend read them: JSON column
//! text as a compact raw value, tag lists, a hash chain's link. Each backend's own row readers
//! (`sqlite::codec`, the PostgreSQL `sql` modules) hand their text here.
//!
//! A JSON column that no longer parses (edited by hand) is returned as a
//! JSON string holding its text rather than failing the whole read.

use serde_json::value::RawValue;

fn fallback_raw(text: String) -> Box<RawValue> {
    let quoted = serde_json::to_string(&text).unwrap_or_else(|_| "null".to_owned());
    RawValue::from_string(quoted).unwrap_or_else(|_| empty_object())
}

/// `{}` as a raw value.
pub fn empty_object() -> Box<RawValue> {
    // "{}" is valid JSON; from_string cannot fail on it.
    serde_json::from_str("{}").unwrap_or_else(|_| unreachable_json())
}

#[allow(clippy::panic)]
fn unreachable_json() -> Box<RawValue> {
    panic!("serde_json rejected the literal {{}}")
}

/// Whether JSON text has no whitespace outside its strings (logbook always
/// stores the compact form; a hand-edited row may not be).
fn is_compact(text: &str) -> bool {
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b.is_ascii_whitespace() {
            return false;
        }
    }
    true
}

/// A JSON column's text as a raw value, always compact; text that does not
/// parse becomes a JSON string holding it. Driver-free: every backend reads
/// its JSON columns through this.
pub fn json_of_text(t: String) -> Box<RawValue> {
    let t = if is_compact(&t) {
        t
    } else {
        match serde_json::from_str::<serde_json::Value>(&t) {
            Ok(v) => v.to_string(),
            Err(_) => return fallback_raw(t),
        }
    };
    match RawValue::from_string(t.clone()) {
        Ok(v) => v,
        Err(_) => fallback_raw(t),
    }
}

/// A JSON array of strings' text as the strings; anything else is empty.
pub fn list_of_text(t: String) -> Vec<String> {
    serde_json::from_str::<Vec<String>>(&t).unwrap_or_default()
}

/// The `prev_hash` for an event after one whose hash is `prev` (`None`
/// before a session's first event: [`crate::chain::GENESIS`]). Stored hashes are 32
/// bytes (a CHECK constraint); anything else is copied in as far as it goes,
/// so the insert trigger refuses the link rather than this code panicking.
pub fn chain_link(prev: Option<&[u8]>) -> [u8; 32] {
    let mut out = crate::chain::GENESIS;
    if let Some(p) = prev {
        let n = p.len().min(32);
        out[..n].copy_from_slice(&p[..n]);
    }
    out
}

/// The stored form of an idempotency key: SHA-256, hex. The caller's key
/// itself never reaches the database (it could hold anything).
pub fn key_sha256(key: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(key.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compactness_ignores_whitespace_inside_strings() {
        assert!(is_compact(r#"{"a":"b c\" d","n":[1,2]}"#));
        assert!(!is_compact("{\n \"a\": 1\n}"));
        assert!(!is_compact(r#"{"a": 1}"#));
    }
}
