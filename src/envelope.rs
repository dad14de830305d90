//! The one JSON envelope of logbook's answers (docs/design.md, "Errors" and "CLI"): what the CLI
//! prints under `--json` and what an MCP tool result carries. Rendering
//! only; the CLI (`src/cli/output.rs`, `src/cli/exit.rs`) and the MCP
//! server ([`crate::mcp`]) both build their output from [`Envelope`].
//!
//! # Wire format
//!
//! Compact JSON, members in this order (struct declaration order, never a
//! map's):
//!
//! - Success: `{"ok":true,"data":…}`; for an idempotent replay
//!   `{"ok":true,"data":…,"replayed":{"rev":R,"seq":S}}` ([`Replayed`]:
//!   the rev the first attempt left, `null` when it was not recorded, and
//!   the seq of the event it wrote). A first attempt has no `replayed`.
//! - Failure: `{"ok":false,"error":{"code":…,"message":…,"retryable":…,"details":{…}}}`
//!   ([`ErrorBody`]): the stable code (docs/errors.md), a lowercase message that never
//!   echoes a rejected value, the code's retryable flag, and the details
//!   object of [`Details`] (keys in alphabetical order).
//!
//! An MCP tool result carries the same parts: on success, the `data` JSON
//! as its text block and as `structuredContent`, and for a replay a second
//! text block and `_meta` holding [`ReplayedMember`],
//! `{"replayed":{"rev":R,"seq":S}}`; on failure `isError: true` and the
//! [`ErrorBody`] as its text block and `structuredContent` (and as the
//! `data` of a JSON-RPC error).
//!
//! `tests/golden/envelopes/` pins one envelope of each shape, from the
//! library, the CLI and the MCP server.

use crate::error::{Details, Error, ErrorCode};
use crate::ledger::{Replayed, Written};
use serde::{Serialize, Serializer};
use std::borrow::Cow;

/// A failure's `error` object: `{"code","message","retryable","details"}`.
///
/// The same object is an MCP tool error's body, and the `data` of the MCP
/// server's JSON-RPC errors.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorBody<'a> {
    /// The stable code (docs/design.md, "Errors"), serialized as its wire string, e.g.
    /// `"SESSION_NOT_FOUND"`.
    pub code: ErrorCode,
    /// A lowercase message naming the field and the rule, never the value.
    pub message: Cow<'a, str>,
    /// Whether the same call may succeed if sent again: the code's flag.
    pub retryable: bool,
    /// The error's structured fields.
    pub details: Details<'a>,
}

impl<'a> ErrorBody<'a> {
    /// A body of the caller's own: `code` with its retryable flag, and
    /// `message` and `details` as given (the CLI's usage errors and import
    /// report).
    pub fn new(code: ErrorCode, message: impl Into<Cow<'a, str>>, details: Details<'a>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
            retryable: code.retryable(),
            details,
        }
    }
}

impl<'a> From<&'a Error> for ErrorBody<'a> {
    /// The body of a library error: its code, its message (its `Display`,
    /// without the sources' text), and its details.
    fn from(e: &'a Error) -> Self {
        ErrorBody::new(e.code(), e.to_string(), e.wire_details())
    }
}

/// One answer: success with its `data` (and a replay's `replayed`), or
/// failure with its [`ErrorBody`]. Serializes as the module docs show.
///
/// `T` is the data's type; a failure's is never used (the default,
/// `serde_json::Value`, serves).
#[derive(Debug, Clone)]
pub enum Envelope<'a, T: ?Sized = serde_json::Value> {
    /// `{"ok":true,"data":…}`, with `"replayed"` after `data` when
    /// `replayed` is `Some`.
    Success {
        /// The command's or tool's value.
        data: &'a T,
        /// What the first attempt of a replayed call produced.
        replayed: Option<Replayed>,
    },
    /// `{"ok":false,"error":{…}}`.
    Failure(ErrorBody<'a>),
}

impl<'a, T: ?Sized> Envelope<'a, T> {
    /// A success envelope without `replayed` (a read, or a first attempt).
    pub fn success(data: &'a T) -> Self {
        Envelope::Success {
            data,
            replayed: None,
        }
    }

    /// A failure envelope of a library error ([`ErrorBody::from`]).
    pub fn error(e: &'a Error) -> Self {
        Envelope::Failure(ErrorBody::from(e))
    }
}

impl<'a, T> Envelope<'a, T> {
    /// A mutation's success envelope: its value, and for an idempotent
    /// replay the `replayed` member.
    pub fn written(w: &'a Written<T>) -> Self {
        Envelope::Success {
            data: &w.value,
            replayed: w.replayed,
        }
    }
}

impl<T: ?Sized + Serialize> Envelope<'_, T> {
    /// The envelope as compact JSON, one line without its newline.
    ///
    /// # Errors
    /// The data's own serialization error (e.g. a map with non-string
    /// keys); logbook's values never fail.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

#[derive(Serialize)]
struct SuccessWire<'a, T: ?Sized> {
    ok: bool,
    data: &'a T,
    #[serde(skip_serializing_if = "Option::is_none")]
    replayed: Option<Replayed>,
}

#[derive(Serialize)]
struct FailureWire<'a, 'b> {
    ok: bool,
    error: &'b ErrorBody<'a>,
}

impl<T: ?Sized + Serialize> Serialize for Envelope<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Envelope::Success { data, replayed } => SuccessWire {
                ok: true,
                data: *data,
                replayed: *replayed,
            }
            .serialize(s),
            Envelope::Failure(error) => FailureWire { ok: false, error }.serialize(s),
        }
    }
}

/// The `replayed` member alone, as an object:
/// `{"replayed":{"rev":R,"seq":S}}` — the second text block and the `_meta`
/// of a replayed MCP tool result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReplayedMember {
    /// What the first attempt produced.
    pub replayed: Replayed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn success_has_ok_then_data() {
        let data = json!({"b": 1, "a": 2});
        assert_eq!(
            Envelope::success(&data).to_json().unwrap(),
            r#"{"ok":true,"data":{"a":2,"b":1}}"#
        );
    }

    #[test]
    fn replayed_follows_data_and_a_first_attempt_has_none() {
        let w = Written::replay(
            json!({"rev": 3}),
            Replayed {
                rev: Some(2),
                seq: 1,
            },
        );
        assert_eq!(
            Envelope::written(&w).to_json().unwrap(),
            r#"{"ok":true,"data":{"rev":3},"replayed":{"rev":2,"seq":1}}"#
        );
        let first = Written::applied(json!(1));
        assert_eq!(
            Envelope::written(&first).to_json().unwrap(),
            r#"{"ok":true,"data":1}"#
        );
        let member = ReplayedMember {
            replayed: Replayed { rev: None, seq: 0 },
        };
        assert_eq!(
            serde_json::to_string(&member).unwrap(),
            r#"{"replayed":{"rev":null,"seq":0}}"#
        );
    }

    #[test]
    fn failure_carries_code_message_retryable_details_in_order() {
        let e = Error::Busy { timeout_ms: 250 };
        let env: Envelope = Envelope::error(&e);
        assert_eq!(
            env.to_json().unwrap(),
            r#"{"ok":false,"error":{"code":"STORE_BUSY","message":"the database stayed locked for longer than the busy timeout (250 ms)","retryable":true,"details":{"busy_timeout_ms":250}}}"#
        );
    }

    #[test]
    fn a_body_of_the_callers_own_keeps_its_message_and_details() {
        let source = Error::invalid("--title <TITLE>", "missing required argument");
        let body = ErrorBody::new(
            ErrorCode::InvalidArgument,
            "missing required argument",
            source.wire_details(),
        );
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"code":"INVALID_ARGUMENT","message":"missing required argument","retryable":false,"details":{"field":"--title <TITLE>","reason":"missing required argument"}}"#
        );
        let report = ErrorBody::new(
            ErrorCode::InvalidArgument,
            "1 session(s) rejected",
            Details::report(json!({"rejected": 1, "imported": 0})),
        );
        assert_eq!(
            serde_json::to_string(&report).unwrap(),
            r#"{"code":"INVALID_ARGUMENT","message":"1 session(s) rejected","retryable":false,"details":{"imported":0,"rejected":1}}"#
        );
    }
}
