//! Input caps and character rules (docs/design.md, "Model" and "Errors").
//!
//! Lengths are counted in Unicode scalar values; JSON caps in bytes of the
//! compact serialization. Over-cap input is rejected, never truncated, and no
//! message repeats the rejected value: it names the field and the limit.

use crate::error::{Error, Result};
use serde_json::Value;

mod numbers;
pub mod unique;
pub use numbers::{exact_numbers, exact_value_numbers};
pub use unique::{is_duplicate_key, unique_value};

/// Title: 1–200 characters.
pub const TITLE_MAX: usize = 200;
/// Goal: at most 4096 characters.
pub const GOAL_MAX: usize = 4096;
/// app, agent_id, route, stage, tag: 1–128 characters.
pub const NAME_MAX: usize = 128;
/// At most 32 tags.
pub const TAGS_MAX: usize = 32;
/// context, metadata, event data: at most 256 KiB compact JSON.
pub const JSON_MAX_BYTES: usize = 256 * 1024;
/// Checkpoint step: 1–200 characters.
pub const STEP_MAX: usize = 200;
/// Checkpoint note: at most 4096 characters.
pub const NOTE_MAX: usize = 4096;
/// Completion result: at most 4096 characters.
pub const RESULT_MAX: usize = 4096;
/// Fail / cancel / pause reason: at most 4096 characters.
pub const REASON_MAX: usize = 4096;
/// Event detail: at most 4096 characters.
pub const DETAIL_MAX: usize = 4096;
/// Linked references: at most 256 per kind per session.
pub const REFS_MAX: usize = 256;
/// A linked reference id: 1–128 characters.
pub const REF_ID_MAX: usize = 128;
/// Idempotency key: 1–128 characters.
pub const IDEMPOTENCY_KEY_MAX: usize = 128;
/// Custom event type: `x.` + name, at most 64 characters.
pub const EVENT_TYPE_MAX: usize = 64;

/// Whether `\n` and `\t` are allowed (only in long free text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// One line: no control characters at all.
    Single,
    /// `\n` and `\t` allowed; other control characters refused.
    Multi,
}

/// Bidirectional-override and isolate controls (U+202A–U+202E,
/// U+2066–U+2069): invisible, and able to make stored text display as
/// something else, so refused like control characters.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn check_chars(field: &str, value: &str, lines: Lines) -> Result<()> {
    if value.chars().any(is_bidi_control) {
        return Err(Error::invalid(
            field,
            "bidirectional override characters are not allowed",
        ));
    }
    let bad = value
        .chars()
        .any(|c| c.is_control() && !(lines == Lines::Multi && (c == '\n' || c == '\t')));
    if bad {
        let allowed = match lines {
            Lines::Single => "control characters are not allowed",
            Lines::Multi => "control characters other than newline and tab are not allowed",
        };
        return Err(Error::invalid(field, allowed));
    }
    Ok(())
}

fn check_len(field: &str, value: &str, min: usize, max: usize) -> Result<()> {
    let n = value.chars().count();
    if n < min {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if n > max {
        return Err(Error::invalid(
            field,
            format!("is {n} characters; the limit is {max}"),
        ));
    }
    Ok(())
}

/// Checks free text: at most `max` characters, control characters per `lines`.
///
/// # Errors
/// INVALID_ARGUMENT naming `field` and the limit.
pub fn text(field: &str, value: &str, min: usize, max: usize, lines: Lines) -> Result<()> {
    check_len(field, value, min, max)?;
    check_chars(field, value, lines)
}

/// Checks a name (app, agent_id, route, stage, tag): 1–128 characters, one
/// line, not only whitespace.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub fn name(field: &str, value: &str) -> Result<()> {
    text(field, value, 1, NAME_MAX, Lines::Single)?;
    if value.trim().is_empty() {
        return Err(Error::invalid(field, "must not be only whitespace"));
    }
    Ok(())
}

/// Checks a title (of a session, a fork, a run …): 1–200 characters, one
/// line, and not only whitespace (docs/design.md, "Model": a title is required, and a blank
/// one names nothing).
///
/// # Errors
/// INVALID_ARGUMENT naming `field`: empty, blank, over 200 characters, or a
/// control character.
pub fn title(field: &str, value: &str) -> Result<()> {
    text(field, value, 1, TITLE_MAX, Lines::Single)?;
    if value.trim().is_empty() {
        return Err(Error::invalid(field, "must not be only whitespace"));
    }
    Ok(())
}

/// Checks free text that must say something — a result, a reason, a note:
/// 1–`max` characters, newlines and tabs allowed, and not only whitespace
/// (an optional one may be absent; given, it must not be blank).
///
/// # Errors
/// INVALID_ARGUMENT naming `field`: empty, blank, over `max` characters,
/// or a control character other than newline and tab.
pub fn prose(field: &str, value: &str, max: usize) -> Result<()> {
    text(field, value, 1, max, Lines::Multi)?;
    if value.trim().is_empty() {
        return Err(Error::invalid(field, "must not be only whitespace"));
    }
    Ok(())
}

/// Checks a name that is stored exactly as given because rows are keyed or
/// matched by it (stage names, gate names, event types): it must not look
/// like a secret, since redacting it would change which row it names.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`: "looks like it holds a secret; `what`
/// are stored as given".
pub fn not_secret(field: &str, value: &str, what: &str) -> Result<()> {
    if crate::redact::redact(value) != value {
        return Err(Error::invalid(
            field,
            format!("looks like it holds a secret; {what} are stored as given"),
        ));
    }
    Ok(())
}

/// [`name`] and [`not_secret`]: a stage or gate name, which rows are keyed
/// or matched by.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub fn keyed_name(field: &str, value: &str, what: &str) -> Result<()> {
    name(field, value)?;
    not_secret(field, value, what)
}

/// Checks an identifier-like token (reference ids, idempotency keys): 1–`max`
/// characters, no whitespace or control characters.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub fn token(field: &str, value: &str, max: usize) -> Result<()> {
    check_len(field, value, 1, max)?;
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(
            field,
            "whitespace and control characters are not allowed",
        ));
    }
    Ok(())
}

/// Checks a reference id given to `checkpoint` (plan, operation or
/// deployment): a [`token`] of at most [`REF_ID_MAX`] characters that does
/// not begin with `-`, which a resolver program would read as an option
/// (`show` passes the id as an argument of its own).
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub fn ref_id(field: &str, value: &str) -> Result<()> {
    token(field, value, REF_ID_MAX)?;
    if value.starts_with('-') {
        return Err(Error::invalid(
            field,
            "must not begin with `-` (a resolver would read it as an option)",
        ));
    }
    Ok(())
}

/// Checks a custom event type: `x.` followed by 1–62 of `[a-z0-9_.-]`.
///
/// # Errors
/// INVALID_ARGUMENT for `type`.
pub fn custom_event_type(value: &str) -> Result<()> {
    let ok = value.len() <= EVENT_TYPE_MAX
        && value.len() > 2
        && value.starts_with("x.")
        && value[2..]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "type",
            format!(
                "must be `x.` followed by lowercase letters, digits, `_`, `.` or `-`, at most {EVENT_TYPE_MAX} characters in all"
            ),
        ))
    }
}

/// Parses a JSON object and checks its compact size (at most 256 KiB).
///
/// A NUL or other control character inside a JSON string is allowed: it is
/// stored escaped (`\u0000`) and returned exactly.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`: not JSON, a number that would not be
/// stored exactly ([`exact_numbers`]), not an object, or over the cap.
pub fn json_object(field: &str, text: &str) -> Result<Value> {
    let value = json_text(field, text)?;
    json_value(field, &value)?;
    Ok(value)
}

/// Parses any JSON value given as text (a JSON-valued flag, `@PATH` or
/// `@-`), refusing a number that would not be stored exactly as given
/// ([`exact_numbers`]) and an object holding one key twice
/// ([`unique_value`]: serde_json would keep the last): the one parse every
/// JSON text input goes through.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`: not JSON, a number out of range, or a
/// key repeated in one object.
pub fn json_text(field: &str, text: &str) -> Result<Value> {
    match unique_value(text.as_bytes()) {
        Ok(value) => {
            exact_numbers(field, text)?;
            Ok(value)
        }
        Err(e) if is_duplicate_key(&e) => Err(Error::invalid(
            field,
            format!(
                "holds the same key twice in one object (line {}, column {})",
                e.line(),
                e.column()
            ),
        )),
        // `1e400` is valid JSON that serde_json refuses: say so rather
        // than "not valid JSON".
        Err(e) => Err(exact_numbers(field, text).err().unwrap_or_else(|| {
            Error::invalid(
                field,
                format!(
                    "is not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                ),
            )
        })),
    }
}

/// Checks a parsed JSON value: an object of at most 256 KiB compact, with
/// no integer above `i64::MAX` ([`exact_value_numbers`]).
///
/// # Errors
/// INVALID_ARGUMENT naming `field`: not an object, over the cap, or an
/// integer out of range.
pub fn json_value(field: &str, value: &Value) -> Result<()> {
    if !value.is_object() {
        return Err(Error::invalid(field, "must be a JSON object"));
    }
    exact_value_numbers(field, value)?;
    let size = compact_len(value)?;
    if size > JSON_MAX_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "is {size} bytes as compact JSON; the limit is {JSON_MAX_BYTES} bytes (256 KiB)"
            ),
        ));
    }
    Ok(())
}

/// The length in bytes of `value`'s compact serialization.
///
/// # Errors
/// INTERNAL if serialization fails (it cannot for a parsed value).
pub fn compact_len(value: &Value) -> Result<usize> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    serde_json::to_writer(&mut c, value).map_err(|e| Error::internal(e.to_string()))?;
    Ok(c.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn code(r: Result<()>) -> Option<ErrorCode> {
        r.err().map(|e| e.code())
    }

    #[test]
    fn caps_count_scalar_values_at_and_over_the_limit() {
        let at = "漢".repeat(TITLE_MAX);
        assert_eq!(code(text("title", &at, 1, TITLE_MAX, Lines::Single)), None);
        let over = "漢".repeat(TITLE_MAX + 1);
        let err = text("title", &over, 1, TITLE_MAX, Lines::Single).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid `title`: is 201 characters; the limit is 200"
        );
        let emoji = format!("{}🙏", "a".repeat(NOTE_MAX - 1));
        assert_eq!(code(text("note", &emoji, 0, NOTE_MAX, Lines::Multi)), None);
        assert_eq!(
            code(text("title", "", 1, TITLE_MAX, Lines::Single)),
            Some(ErrorCode::InvalidArgument)
        );
    }

    #[test]
    fn control_characters_are_refused_except_newline_and_tab_in_long_text() {
        assert!(text("note", "a\nb\tc", 0, 10, Lines::Multi).is_ok());
        assert!(text("title", "a\nb", 0, 10, Lines::Single).is_err());
        assert!(text("note", "a\0b", 0, 10, Lines::Multi).is_err());
        assert!(text("note", "a\u{1b}[31m", 0, 10, Lines::Multi).is_err());
        assert!(text("title", "invoice\u{202E}fdp.exe", 0, 40, Lines::Single).is_err());
    }

    #[test]
    fn json_cap_is_bytes_of_compact_form() {
        // {"k":"<s>"} is 8 bytes plus s.
        let at = format!("{{\"k\": \"{}\"}}", "a".repeat(JSON_MAX_BYTES - 8));
        assert!(json_object("context", &at).is_ok());
        let over = format!("{{\"k\":\"{}\"}}", "a".repeat(JSON_MAX_BYTES - 7));
        let err = json_object("context", &over).unwrap_err();
        assert!(err.to_string().contains("262145 bytes"), "{err}");
        assert!(json_object("context", "[1]").is_err());
        assert!(json_object("context", "{").is_err());
    }

    #[test]
    fn custom_event_types() {
        assert!(custom_event_type("x.build").is_ok());
        assert!(custom_event_type("x.").is_err());
        assert!(custom_event_type("checkpoint").is_err());
        assert!(custom_event_type("x.Build").is_err());
        assert!(custom_event_type(&format!("x.{}", "a".repeat(63))).is_err());
    }
}
