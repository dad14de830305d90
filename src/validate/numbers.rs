//! JSON numbers that would not be stored exactly as given (docs/design.md, "Exact numbers"):
//! the one check every JSON input passes (CLI flags, MCP arguments,
//! imports), on the text where there is one, so that nothing is silently
//! rounded.

use crate::error::{Error, Result};
use serde_json::Value;

/// Why a number would not be stored exactly as given.
const INT_RANGE: &str =
    "an integer outside the 64-bit range (-9223372036854775808 to 9223372036854775807)";
const FLOAT_RANGE: &str =
    "a number beyond the range of a 64-bit float (magnitudes about 5e-324 to 1.8e308)";
const FLOAT_DIGITS: &str =
    "a number with more precision than a 64-bit float holds, so it would be stored rounded";

/// Refuses a number of the JSON text `text` that logbook would not store
/// exactly as given, instead of storing a changed value.
///
/// JSON values are parsed into 64-bit numbers before they are stored (and
/// SQLite's JSON functions read them back as such), so:
/// - an integer (no fraction, no exponent) must lie within `i64`
///   (−9223372036854775808 ..= 9223372036854775807): beyond it serde_json
///   would keep only a float approximation, and from 2^63 on SQLite's
///   `json_extract` reads even an exactly stored integer as a REAL;
/// - any other number (`1.5`, `1e19`) must have the same decimal value as
///   the 64-bit float it parses to prints back as (`0.1` and `1e300` pass,
///   `0.1000000000000000055511151231257827` and `1e400` do not).
///
/// Such a value is kept exactly when sent as a JSON string. Only the text's
/// number tokens are examined (strings are skipped); a text that is not
/// JSON is left for the parser to refuse.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`; the reason gives the number's place
/// inside it (`n`, `items[2].size`) when every key on the way is a plain
/// name, and never the number itself.
pub fn exact_numbers(field: &str, text: &str) -> Result<()> {
    enum Frame<'t> {
        Object {
            key: Option<&'t str>,
            want_key: bool,
        },
        Array(usize),
    }
    let b = text.as_bytes();
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let end = i.min(b.len());
                if let Some(Frame::Object { key, want_key }) = stack.last_mut() {
                    if *want_key {
                        // Both ends sit on ASCII bytes (or the text's end).
                        *key = text.get(start..end);
                        *want_key = false;
                    }
                }
                i += 1;
            }
            b'{' => {
                stack.push(Frame::Object {
                    key: None,
                    want_key: true,
                });
                i += 1;
            }
            b'[' => {
                stack.push(Frame::Array(0));
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                i += 1;
            }
            b',' => {
                match stack.last_mut() {
                    Some(Frame::Array(n)) => *n += 1,
                    Some(Frame::Object { want_key, .. }) => *want_key = true,
                    None => {}
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                if let Err(why) = number_exact(&text[start..i]) {
                    let mut place = String::new();
                    for f in &stack {
                        match f {
                            Frame::Object { key: Some(k), .. } if plain_key(k) => {
                                if !place.is_empty() {
                                    place.push('.');
                                }
                                place.push_str(k);
                            }
                            Frame::Object { .. } => {
                                place.clear();
                                break;
                            }
                            Frame::Array(n) => place.push_str(&format!("[{n}]")),
                        }
                    }
                    return Err(inexact(field, &place, why));
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// Refuses an integer of a parsed JSON value above `i64::MAX` (a `u64`):
/// stored as written, but read back by SQLite's JSON functions as an
/// approximate REAL. The check [`exact_numbers`] makes on text, for values
/// built in code (library callers, MCP arguments).
///
/// # Errors
/// INVALID_ARGUMENT naming `field`, as [`exact_numbers`].
pub fn exact_value_numbers(field: &str, value: &Value) -> Result<()> {
    fn walk(v: &Value, place: &mut Vec<String>, nameable: bool) -> Option<(String, bool)> {
        match v {
            Value::Number(n) if n.is_u64() && !n.is_i64() => Some((place.concat(), nameable)),
            Value::Array(items) => items.iter().enumerate().find_map(|(i, x)| {
                place.push(format!("[{i}]"));
                let found = walk(x, place, nameable);
                place.pop();
                found
            }),
            Value::Object(m) => m.iter().find_map(|(k, x)| {
                let sep = if place.is_empty() { "" } else { "." };
                place.push(format!("{sep}{k}"));
                let found = walk(x, place, nameable && plain_key(k));
                place.pop();
                found
            }),
            _ => None,
        }
    }
    match walk(value, &mut Vec::new(), true) {
        None => Ok(()),
        Some((place, nameable)) => Err(inexact(
            field,
            if nameable { &place } else { "" },
            INT_RANGE,
        )),
    }
}

/// A key that may be repeated in a message: short, plain, not a secret.
fn plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 64
        && k.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        && crate::redact::redact(k) == k
}

fn inexact(field: &str, place: &str, why: &str) -> Error {
    let at = if place.is_empty() {
        String::new()
    } else {
        format!(" (at `{place}`)")
    };
    Error::invalid(
        field,
        format!("holds {why}{at}, which would not be stored exactly; send it as a string"),
    )
}

/// Whether one number token is stored exactly; `Ok` also for a token that
/// is not a JSON number at all (the parser refuses it).
fn number_exact(tok: &str) -> std::result::Result<(), &'static str> {
    let Some((neg, digits, exp)) = decimal(tok) else {
        return Ok(());
    };
    if !tok.contains(['.', 'e', 'E']) {
        return tok.parse::<i64>().map(|_| ()).map_err(|_| INT_RANGE);
    }
    let Some(exp) = exp else {
        return Err(FLOAT_RANGE);
    };
    let Ok(x) = serde_json::from_str::<f64>(tok) else {
        return Err(FLOAT_RANGE);
    };
    // The text serde_json writes for the parsed float (shortest form).
    let back = serde_json::to_string(&x).map_err(|_| FLOAT_RANGE)?;
    match decimal(&back) {
        // Zero reads as (false, "", 0) whatever its sign or spelling.
        Some((bn, bd, Some(be))) if bn == neg && bd == digits && be == exp => Ok(()),
        // Too small: the float is 0.
        _ if x == 0.0 => Err(FLOAT_RANGE),
        _ => Err(FLOAT_DIGITS),
    }
}

/// A JSON number token as (negative, significant digits without leading or
/// trailing zeros, power of ten) — `None` when it is not a JSON number;
/// the power is `None` when it does not fit an `i64`.
fn decimal(tok: &str) -> Option<(bool, String, Option<i64>)> {
    let (neg, rest) = match tok.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, tok),
    };
    let (mant, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let digits_ok = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let int_ok = digits_ok(int) && (int == "0" || !int.starts_with('0'));
    let frac_ok = !mant.contains('.') || digits_ok(frac);
    let exp_ok = exp.is_none_or(|e| digits_ok(e.strip_prefix(['+', '-']).unwrap_or(e)));
    if !(int_ok && frac_ok && exp_ok) {
        return None;
    }
    let all = format!("{int}{frac}");
    let lead = all.trim_start_matches('0');
    let sig = lead.trim_end_matches('0');
    let power = exp
        .map_or(Some(0), |e| e.parse::<i64>().ok())
        .and_then(|p| p.checked_sub(i64::try_from(frac.len()).ok()?))
        .and_then(|p| p.checked_add(i64::try_from(lead.len() - sig.len()).ok()?));
    if sig.is_empty() {
        return Some((false, String::new(), Some(0)));
    }
    Some((neg, sig.to_owned(), power))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_that_would_change_when_stored_are_refused_with_their_place() {
        for ok in [
            "9223372036854775807",
            "-9223372036854775808",
            "0",
            "-0",
            "-0.0",
            "1.5",
            "0.1",
            "100.000",
            "1e19",
            "1E+2",
            "5e-324",
            "1.7976931348623157e308",
            "0e999999999999999999999",
        ] {
            let text = format!("{{\"n\":[{ok}]}}");
            assert!(exact_numbers("input", &text).is_ok(), "{ok}");
            assert!(super::super::json_text("input", &text).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("9223372036854775808", INT_RANGE),
            ("18446744073709551615", INT_RANGE),
            ("18446744073709551616", INT_RANGE),
            ("-9223372036854775809", INT_RANGE),
            ("1e400", FLOAT_RANGE),
            ("-1e400", FLOAT_RANGE),
            ("1e-400", FLOAT_RANGE),
            ("1e99999999999999999999", FLOAT_RANGE),
            ("0.1000000000000000055511151231257827", FLOAT_DIGITS),
            ("9007199254740993.0", FLOAT_DIGITS),
        ] {
            let text = format!("{{\"n\":[{bad}]}}");
            for e in [
                exact_numbers("input", &text).unwrap_err(),
                super::super::json_text("input", &text).unwrap_err(),
            ] {
                assert_eq!(e.details()["field"], "input", "{bad}");
                let reason = e.details()["reason"].as_str().unwrap().to_owned();
                assert!(
                    reason.starts_with(&format!("holds {why} (at `n[0]`)")),
                    "{bad}: {reason}"
                );
                assert!(!reason.replace(why, "").contains(bad), "{reason}");
            }
        }
        // Strings are skipped; the place follows keys and indexes; a key
        // that is not a plain name is not repeated.
        let text = r#"{"s":"1e400","a":{"b":[1,{"c":18446744073709551616}]}}"#;
        let e = exact_numbers("data", text).unwrap_err();
        assert!(e.to_string().contains("(at `a.b[1].c`)"), "{e}");
        for text in [
            r#"{"we\"ird":1e400}"#,
            r#"{"ghp_abcdefghijklmnopqrstuvwxyz0123456789":1e400}"#,
        ] {
            let e = exact_numbers("data", text).unwrap_err();
            assert!(!e.to_string().contains("(at"), "{e}");
        }
        assert!(exact_numbers("data", r#"{"s":"18446744073709551616"}"#).is_ok());
        // Values built in code: an integer above i64::MAX is refused.
        let e = exact_value_numbers("metadata", &serde_json::json!({"k": [u64::MAX]})).unwrap_err();
        assert!(e.to_string().contains("(at `k[0]`)"), "{e}");
        assert!(super::super::json_value("metadata", &serde_json::json!({"k": u64::MAX})).is_err());
        assert!(super::super::json_value(
            "metadata",
            &serde_json::json!({"k": i64::MAX, "f": 1e300})
        )
        .is_ok());
    }
}
