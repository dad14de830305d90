//! SQLite's column readers: the one place that decodes SQLite's values.
//!
//! SQLite does not check that TEXT is valid UTF-8, so text is decoded lossily
//! (bad bytes become U+FFFD, CASES C18) and embedded NULs are kept (C19).
//! JSON and tag columns go on through [`crate::store::codec`], as the
//! PostgreSQL store's do.

use crate::store::codec::{json_of_text, list_of_text};
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

/// Reads an optional JSON column as a raw value, always compact (so `--json`
/// output stays one line even after a hand edit added line breaks).
pub fn opt_json(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Box<RawValue>>> {
    Ok(opt_text(row, idx)?.map(json_of_text))
}

/// Reads a JSON array of strings (tags); anything else reads as empty.
pub fn string_list(row: &Row<'_>, idx: usize) -> rusqlite::Result<Vec<String>> {
    Ok(opt_text(row, idx)?.map(list_of_text).unwrap_or_default())
}
