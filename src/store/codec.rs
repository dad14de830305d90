//! Column ↔ Rust value mapping: the one place that decodes rows.
//!
//! SQLite does not check that TEXT is valid UTF-8, so text is decoded lossily
//! (bad bytes become U+FFFD, CASES C18) and embedded NULs are kept (C19).
//! A JSON column that no longer parses (edited by hand) is returned as a JSON
//! string holding its text rather than failing the whole read.

use rusqlite::types::ValueRef;
use rusqlite::Row;
use serde_json::value::RawValue;

/// Reads an optional TEXT column, lossily.
pub fn opt_text(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<String>> {
    Ok(match row.get_ref(idx)? {
        ValueRef::Null => None,
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
        ValueRef::Integer(i) => Some(i.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
    })
}

/// Reads a TEXT column that should not be NULL (NULL reads as "").
pub fn text(row: &Row<'_>, idx: usize) -> rusqlite::Result<String> {
    Ok(opt_text(row, idx)?.unwrap_or_default())
}

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

/// Reads an optional JSON column as a raw value, always compact (so `--json`
/// output stays one line even after a hand edit added line breaks).
pub fn opt_json(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Box<RawValue>>> {
    Ok(opt_text(row, idx)?.map(json_of_text))
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

/// Reads a JSON array of strings (tags); anything else reads as empty.
pub fn string_list(row: &Row<'_>, idx: usize) -> rusqlite::Result<Vec<String>> {
    Ok(opt_text(row, idx)?.map(list_of_text).unwrap_or_default())
}

/// A JSON array of strings' text as the strings; anything else is empty.
pub fn list_of_text(t: String) -> Vec<String> {
    serde_json::from_str::<Vec<String>>(&t).unwrap_or_default()
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
