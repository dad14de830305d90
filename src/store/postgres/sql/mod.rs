//! The SQL of the PostgreSQL store, one module per table group as on
//! SQLite (`sqlite/sql/sessions.rs`, `sqlite/sql/events.rs`, …): `const` statements
//! next to their row mappers, run by [`super::tx::PgTx`].
//!
//! Every statement is sent with `query_typed` / `execute_typed`: an
//! unnamed statement whose parameter types are given with the values, in
//! one round trip (Parse, Bind, Describe, Execute, Sync), and nothing
//! prepared outlives it, so the store works behind a pooler in transaction
//! mode. No SQL text holds a user value: the two statements assembled at
//! run time (the guarded session UPDATE and `session list`) are built from
//! fixed fragments, statuses as literals from their enum, every value a
//! `$N` parameter.
//!
//! Columns are read with [`col`]: a column of an unexpected type is
//! INTERNAL, never a panic.

pub mod chain;
pub mod events;
pub mod feed;
pub mod list;
pub mod once;
pub mod retention;
pub mod runs;
pub mod sessions;
pub mod show;
pub mod transfer;
pub mod transfer_workflow;
pub mod workflow;

use crate::error::{Error, Result};
use postgres::types::{FromSql, ToSql, Type};
use postgres::Row;

/// One typed parameter of a statement.
pub type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// A parameter list built at run time (the assembled statements).
pub type Params = Vec<(Box<dyn ToSql + Sync>, Type)>;

/// The borrowed form of [`Params`], as the driver takes it.
pub fn borrow(p: &Params) -> Vec<Param<'_>> {
    p.iter().map(|(v, t)| (&**v as _, t.clone())).collect()
}

/// Column `i` of `row` as a `T`.
///
/// # Errors
/// INTERNAL when the column is missing or of another type.
pub fn col<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> Result<T> {
    row.try_get(i)
        .map_err(|e| Error::internal(format!("database error: column {i}: {e}")))
}

/// A `usize` count or limit as a BIGINT parameter (saturating).
pub fn int(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What SQLite's `json_extract(col, '$.a.b')`, read as text, gives for the
/// JSON text PostgreSQL's `col::json #> '{a,b}'` returned (the value's own
/// text, undecoded, so a `\u0000` escape cannot fail the statement): a
/// string decoded, an integer in decimal, a real as Rust prints an `f64`,
/// `true`/`false` as `1`/`0`, JSON null or a missing path as `None`, an
/// object or array as its compact text.
pub fn extracted_text(json: Option<String>) -> Option<String> {
    use serde_json::Value;
    let text = json?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Null) => None,
        Ok(Value::String(s)) => Some(s),
        Ok(Value::Bool(b)) => Some(if b { "1" } else { "0" }.to_owned()),
        Ok(Value::Number(n)) => Some(match n.as_i64() {
            Some(i) => i.to_string(),
            None => n.as_f64().map_or_else(|| n.to_string(), |f| f.to_string()),
        }),
        Ok(_) => Some(minified(&text)),
        Err(_) => Some(text),
    }
}

/// JSON text without the whitespace outside its strings (key order kept).
fn minified(text: &str) -> String {
    let (mut in_string, mut escaped) = (false, false);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c.is_ascii_whitespace() {
            continue;
        }
        out.push(c);
    }
    out
}

/// As [`extracted_text`], for a value SQLite's driver would read as an
/// integer: `None` for JSON null or a missing path.
///
/// # Errors
/// INTERNAL for any other value (SQLite's driver refuses to read a real or
/// a text as an integer, too).
pub fn extracted_int(json: Option<String>) -> Result<Option<i64>> {
    use serde_json::Value;
    let Some(text) = json else { return Ok(None) };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Null) => Ok(None),
        Ok(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64()),
        Ok(Value::Bool(b)) => Ok(Some(i64::from(b))),
        _ => Err(Error::internal(
            "database error: a JSON value read as an integer is not one",
        )),
    }
}

/// As [`extracted_text`], for a value SQLite's driver would read as text:
/// `None` for JSON null or a missing path.
///
/// # Errors
/// INTERNAL for a number, boolean, object or array.
pub fn extracted_string(json: Option<String>) -> Result<Option<String>> {
    use serde_json::Value;
    let Some(text) = json else { return Ok(None) };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Null) => Ok(None),
        Ok(Value::String(s)) => Ok(Some(s)),
        Ok(Value::Object(_)) | Ok(Value::Array(_)) => Ok(Some(minified(&text))),
        _ => Err(Error::internal(
            "database error: a JSON value read as text is not a string",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values SQLite's json_extract gives, as text.
    #[test]
    fn extracted_values_read_as_sqlite_gives_them() {
        let t = |s: &str| extracted_text(Some(s.to_owned()));
        assert_eq!(t(r#""a\u0000b\"""#).as_deref(), Some("a\0b\""));
        assert_eq!(t("12").as_deref(), Some("12"));
        assert_eq!(t("1.5").as_deref(), Some("1.5"));
        assert_eq!(t("true").as_deref(), Some("1"));
        assert_eq!(t("null"), None);
        assert_eq!(extracted_text(None), None);
        assert_eq!(
            t("{ \"b\" : [1, \"x y\"], \"a\": 2 }").as_deref(),
            Some(r#"{"b":[1,"x y"],"a":2}"#)
        );
        assert_eq!(extracted_int(Some("7".into())).unwrap(), Some(7));
        assert!(extracted_int(Some("\"7\"".into())).is_err());
        assert!(extracted_string(Some("7".into())).is_err());
    }
}
