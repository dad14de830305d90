//! Input helpers shared by the import formats: field-by-field JSON access
//! that names the field (and never the value) when something is wrong,
//! order-preserving compaction of JSON objects, and a line reader with a cap.

use super::Bad;
use crate::redact::redact_json;
use crate::validate as v;
use crate::validate::unique::UniqueMap;
pub(crate) use crate::validate::unique::{is_duplicate_key, unique_value};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{self, BufRead};

/// Describes a serde_json parse error without quoting the input.
pub(crate) fn syntax_reason(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Eof => format!(
            "is truncated: the JSON ends early (line {}, column {})",
            e.line(),
            e.column()
        ),
        Category::Syntax => format!(
            "is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        ),
        Category::Data => "has a value of the wrong type".to_owned(),
        Category::Io => "could not be read".to_owned(),
    }
}

/// As [`syntax_reason`], naming a key repeated in one object too (what
/// [`unique_value`] refuses).
pub(crate) fn reason_of(e: &serde_json::Error) -> String {
    if is_duplicate_key(e) {
        SAME_KEY_TWICE.to_owned()
    } else {
        syntax_reason(e)
    }
}

/// A JSON object read lazily, field by field.
pub(crate) struct Obj<'a> {
    map: BTreeMap<String, &'a RawValue>,
    path: String,
}

impl<'a> Obj<'a> {
    /// Parses `text` as one JSON object; `path` prefixes field names in
    /// errors (`""` for the top level).
    pub fn parse(text: &'a str, path: &str) -> Result<Self, Bad> {
        let what = if path.is_empty() { "record" } else { path };
        // Keys once each: serde_json would keep the last of two.
        let map = serde_json::from_str::<UniqueMap<&'a RawValue>>(text)
            .map_err(|e| {
                if is_duplicate_key(&e) {
                    Bad::new(what, SAME_KEY_TWICE)
                } else if e.classify() == serde_json::error::Category::Data {
                    Bad::new(what, "must be a JSON object")
                } else {
                    Bad::new(what, syntax_reason(&e))
                }
            })?
            .0;
        Ok(Obj {
            map,
            path: path.to_owned(),
        })
    }

    /// The full name of field `key`, e.g. `events[2].detail`.
    pub fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The keys present.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    /// The raw value of `key`; `None` when missing or `null`.
    pub fn raw(&self, key: &str) -> Option<&'a RawValue> {
        self.map.get(key).copied().filter(|r| r.get() != "null")
    }

    fn typed<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        what: &str,
    ) -> Result<Option<T>, Bad> {
        match self.raw(key) {
            None => Ok(None),
            Some(r) => serde_json::from_str(r.get())
                .map(Some)
                .map_err(|_| Bad::new(self.name(key), format!("must be {what}"))),
        }
    }

    /// An optional string (`null` or missing: `None`).
    pub fn str_opt(&self, key: &str) -> Result<Option<String>, Bad> {
        self.typed(key, "a string or null")
    }

    /// A required string.
    pub fn str_req(&self, key: &str) -> Result<String, Bad> {
        self.str_opt(key)?
            .ok_or_else(|| Bad::new(self.name(key), "is missing"))
    }

    /// An optional integer.
    pub fn i64_opt(&self, key: &str) -> Result<Option<i64>, Bad> {
        self.typed(key, "an integer or null")
    }

    /// A required integer.
    pub fn i64_req(&self, key: &str) -> Result<i64, Bad> {
        self.i64_opt(key)?
            .ok_or_else(|| Bad::new(self.name(key), "is missing"))
    }

    /// An optional list of strings (missing or null: empty).
    pub fn str_list(&self, key: &str) -> Result<Vec<String>, Bad> {
        Ok(self
            .typed::<Vec<String>>(key, "a list of strings")?
            .unwrap_or_default())
    }

    /// A nested object, or `None` when missing or null.
    pub fn obj(&self, key: &str) -> Result<Option<Obj<'a>>, Bad> {
        match self.raw(key) {
            None => Ok(None),
            Some(r) => Obj::parse(r.get(), &self.name(key)).map(Some).map_err(|b| {
                if b.reason == SAME_KEY_TWICE {
                    b
                } else {
                    Bad::new(self.name(key), "must be a JSON object or null")
                }
            }),
        }
    }

    /// The raw items of a list (missing or null: empty).
    pub fn list(&self, key: &str) -> Result<Vec<&'a RawValue>, Bad> {
        match self.raw(key) {
            None => Ok(Vec::new()),
            Some(r) => serde_json::from_str::<Vec<&'a RawValue>>(r.get())
                .map_err(|_| Bad::new(self.name(key), "must be a list")),
        }
    }
}

/// `text` without whitespace outside strings (valid JSON in, valid JSON
/// out, key order and number spelling kept).
pub(crate) fn minify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_ascii_whitespace() {
            out.push(c);
        }
    }
    out
}

/// The reason given for an object that holds one key twice.
pub(crate) const SAME_KEY_TWICE: &str = "has the same key twice in one object";

/// Parses a JSON value whose text may be stored as given: an object with the
/// same key twice is refused ([`unique_value`]), because the parsed value
/// would keep only the last one, so the redactor would check a different
/// value than the text holds; so is a number that would not be stored
/// exactly ([`v::exact_numbers`]: the stored text is re-serialized when the
/// redactor changes something, and SQLite's JSON functions read it as
/// 64-bit numbers).
fn parse_stored(field: &str, raw: &RawValue) -> Result<Value, Bad> {
    v::exact_numbers(field, raw.get())?;
    unique_value(raw.get().as_bytes()).map_err(|e| {
        if is_duplicate_key(&e) {
            Bad::new(field, SAME_KEY_TWICE)
        } else {
            Bad::new(field, "must be a JSON object with numbers in range")
        }
    })
}

/// Validates a JSON object field (an object, at most 256 KiB compact) and
/// returns the text to store: the input compacted with its key order kept,
/// or, when the redactor changed anything, the redacted value re-serialized.
/// BAD (`field`): not an object, over the cap, or a key repeated in one object.
pub(crate) fn object_text(field: &str, raw: &RawValue) -> Result<String, Bad> {
    let value = parse_stored(field, raw)?;
    v::json_value(field, &value)?;
    let mut red = value.clone();
    redact_json(&mut red);
    if red == value {
        Ok(minify(raw.get()))
    } else {
        serde_json::to_string(&red).map_err(|e| Bad::new(field, format!("cannot be stored: {e}")))
    }
}

/// As [`object_text`] with a larger cap: run input and output, which the
/// verbs take up to `max` bytes of compact JSON (4 MiB).
pub(crate) fn object_text_max(field: &str, raw: &RawValue, max: usize) -> Result<String, Bad> {
    let value = parse_stored(field, raw)?;
    if !value.is_object() {
        return Err(Bad::new(field, "must be a JSON object"));
    }
    let size = v::compact_len(&value)?;
    if size > max {
        return Err(Bad::new(
            field,
            format!("is {size} bytes as compact JSON; the limit is {max} bytes"),
        ));
    }
    let mut red = value.clone();
    redact_json(&mut red);
    if red == value {
        Ok(minify(raw.get()))
    } else {
        serde_json::to_string(&red).map_err(|e| Bad::new(field, format!("cannot be stored: {e}")))
    }
}

/// Validates and redacts a JSON object built by an importer.
pub(crate) fn value_text(field: &str, mut value: Value) -> Result<String, Bad> {
    v::json_value(field, &value)?;
    redact_json(&mut value);
    serde_json::to_string(&value).map_err(|e| Bad::new(field, format!("cannot be stored: {e}")))
}

/// What [`read_line_capped`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    /// End of input, nothing read.
    Eof,
    /// A line (without its `\n`) is in the buffer; bytes consumed.
    Text(u64),
    /// The line was longer than the cap; it was skipped (not buffered);
    /// bytes consumed.
    TooLong(u64),
}

/// Reads one line into `buf` (cleared first), keeping at most `cap` bytes:
/// a longer line is consumed to its end without being kept, so memory
/// stays bounded whatever the input.
pub(crate) fn read_line_capped(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<Line> {
    buf.clear();
    let (mut consumed, mut over) = (0u64, false);
    loop {
        let avail = match r.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(match (consumed, over) {
                (0, _) => Line::Eof,
                (n, true) => Line::TooLong(n),
                (n, false) => Line::Text(n),
            });
        }
        let (chunk, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (&avail[..i], Some(i + 1)),
            None => (avail, None),
        };
        if !over {
            if buf.len() + chunk.len() > cap {
                over = true;
                buf.clear();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let n = done.unwrap_or(avail.len());
        r.consume(n);
        consumed += n as u64;
        if done.is_some() {
            return Ok(if over {
                Line::TooLong(consumed)
            } else {
                Line::Text(consumed)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minify_keeps_order_and_strings() {
        assert_eq!(
            minify("{ \"b\" : 1,\n \"a\": \"x y\\\" z\" }"),
            r#"{"b":1,"a":"x y\" z"}"#
        );
    }

    /// Found by adversarial testing: `{"a":"sk-…","a":1}` parses to
    /// `{"a":1}`, which needs no redaction, so the raw text (holding the
    /// secret) was stored.
    #[test]
    fn object_text_refuses_a_repeated_key_at_any_depth() {
        for text in [
            r#"{"a":"sk-abcdefghijklmnopqrstuvwxyz","a":1}"#,
            r#"{"x":{"b":"sk-abcdefghijklmnopqrstuvwxyz","b":1}}"#,
            r#"{"x":[{"c":1,"c":2}]}"#,
        ] {
            let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
            let bad = object_text("context", &raw).unwrap_err();
            assert_eq!(
                (bad.field.as_str(), bad.reason.as_str()),
                ("context", "has the same key twice in one object"),
                "{text}"
            );
            let bad = object_text_max("input", &raw, 1 << 20).unwrap_err();
            assert_eq!(bad.reason, "has the same key twice in one object");
        }
        let raw: Box<RawValue> = serde_json::from_str(r#"{"a":{"a":1},"b":[{"a":2}]}"#).unwrap();
        assert_eq!(object_text("context", &raw).unwrap(), raw.get());
    }

    #[test]
    fn object_text_keeps_key_order_unless_redacted() {
        let raw: Box<RawValue> = serde_json::from_str(r#"{"step":"a","plan_ids":["p"]}"#).unwrap();
        assert_eq!(object_text("d", &raw).unwrap(), raw.get());
        let raw: Box<RawValue> =
            serde_json::from_str(r#"{"z":1,"password":"hunter2hunter2"}"#).unwrap();
        assert_eq!(
            object_text("d", &raw).unwrap(),
            r#"{"password":"[REDACTED]","z":1}"#
        );
        let arr: Box<RawValue> = serde_json::from_str("[1]").unwrap();
        assert!(object_text("d", &arr).is_err());
    }

    #[test]
    fn capped_lines() {
        let mut r = io::Cursor::new(b"ab\ncdefgh\nij".to_vec());
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 4).unwrap(),
            Line::Text(3)
        );
        assert_eq!(buf, b"ab");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 4).unwrap(),
            Line::TooLong(7)
        );
        assert!(buf.is_empty());
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 4).unwrap(),
            Line::Text(2)
        );
        assert_eq!(buf, b"ij");
        assert_eq!(read_line_capped(&mut r, &mut buf, 4).unwrap(), Line::Eof);
    }
}
