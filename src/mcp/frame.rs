//! The shape of one JSON-RPC message, checked by the line layer
//! ([`super::wire`]) after the line has parsed as JSON and before rmcp
//! sees it.
//!
//! rmcp answers a message it cannot read as JSON-RPC with `-32600` and no
//! `id` member at all, and reads an object holding a key twice as its last
//! copy. JSON-RPC 2.0 (§5) wants every error response to carry `id`, `null`
//! when the request's id cannot be read. So a message with an `id` member
//! is checked here, and refused with its id whenever that id can be read:
//!
//! - `-32600` (invalid request) with `"id": null`: a batch (a JSON array;
//!   MCP sends one message per line), a message that is not an object, an
//!   `id` that is not a string or an integer written as one within 64 bits
//!   (`null`, `1.5`, `1.0`, an object, …), an `id` given twice, a
//!   `jsonrpc` other than `"2.0"`;
//! - `-32600` with the id: another member given twice, no `method` (and no
//!   `result` or `error`), a `method` that is not a string, `params` that
//!   is neither an object nor an array;
//! - `-32602` (invalid params) with the id: a `tools/call` without
//!   `params`, whose `params` is not an object, whose `name` is not a string
//!   or whose `arguments` is there and not an object (`null` included); a
//!   key given twice inside the message (in `arguments` too: never read
//!   last-wins); params that do not fit rmcp's type for the method (an
//!   array, a `_meta` that is not an object, …).
//!
//! A message without an `id` member (a notification, or no JSON-RPC at all)
//! goes to rmcp as it is — rmcp ignores or answers it as before — unless it
//! holds a key twice: then it is refused here with `"id": null`. Whatever
//! error rmcp still writes without an `id` gets `"id": null` on its way out
//! ([`super::wire::forward_replies`]).
//!
//! Messages name the member and the rule, never a value from the line.

use crate::validate::unique::DUPLICATE_KEY;
use rmcp::model::ClientJsonRpcMessage;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// JSON-RPC's invalid request.
pub(super) const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC's invalid params.
pub(super) const INVALID_PARAMS: i32 = -32602;

/// Why a message is refused, and with which id.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Refusal {
    /// The JSON-RPC error code.
    pub code: i32,
    /// The request's id, or `null` when it cannot be read.
    pub id: Value,
    /// The field the tool error body names: `request`, `params`, `name` or
    /// `arguments`.
    pub field: &'static str,
    /// What is wrong, in words.
    pub problem: String,
}

impl Refusal {
    fn request(id: Value, problem: impl Into<String>) -> Self {
        Refusal {
            code: INVALID_REQUEST,
            id,
            field: "request",
            problem: problem.into(),
        }
    }

    fn params(id: Value, field: &'static str, problem: impl Into<String>) -> Self {
        Refusal {
            code: INVALID_PARAMS,
            id,
            field,
            problem: problem.into(),
        }
    }
}

/// Whether `id` is one a reply can carry back as it came: a string, or an
/// integer written without fraction or exponent within `i64` (rmcp's
/// `NumberOrString`, which would turn `1.0` into `1`).
pub(super) fn usable_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64(),
        _ => false,
    }
}

const BAD_ID: &str =
    "`id` must be a string or an integer (no fraction or exponent, within 64 bits)";
const BAD_VERSION: &str = "`jsonrpc` must be \"2.0\"";

/// The checks of a message's own members that decide its id: the refusal
/// (always with a `null` id), or the id (`None`: no `id` member).
fn id_of(obj: &Map<String, Value>, repeated: &[String]) -> Result<Option<Value>, Refusal> {
    if repeated.iter().any(|k| k == "id") {
        return Err(Refusal::request(
            Value::Null,
            "the message holds `id` twice",
        ));
    }
    let Some(id) = obj.get("id") else {
        return Ok(None);
    };
    if !usable_id(id) {
        return Err(Refusal::request(Value::Null, BAD_ID));
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Refusal::request(Value::Null, BAD_VERSION));
    }
    Ok(Some(id.clone()))
}

fn not_an_object(v: &Value) -> Refusal {
    if v.is_array() {
        Refusal::request(
            Value::Null,
            "a batch (a JSON array of messages) is not served: send one message per line",
        )
    } else {
        Refusal::request(Value::Null, "a message must be a JSON object")
    }
}

/// Checks a message read with every key once ([`crate::validate::unique_value`]).
/// `None`: hand it to rmcp.
pub(super) fn check(v: &Value) -> Option<Refusal> {
    let Some(obj) = v.as_object() else {
        return Some(not_an_object(v));
    };
    let id = match id_of(obj, &[]) {
        Err(r) => return Some(r),
        // No id: rmcp's rules for notifications apply.
        Ok(None) => return None,
        Ok(Some(id)) => id,
    };
    let Some(method) = obj.get("method") else {
        if obj.contains_key("result") || obj.contains_key("error") {
            // A response: rmcp's to match.
            return None;
        }
        return Some(Refusal::request(id, "the message has no `method`"));
    };
    let Some(method) = method.as_str() else {
        return Some(Refusal::request(id, "`method` must be a string"));
    };
    match obj.get("params") {
        None | Some(Value::Null | Value::Object(_) | Value::Array(_)) => {}
        Some(_) => {
            return Some(Refusal::request(
                id,
                "`params` must be an object (or an array)",
            ))
        }
    }
    if method == "tools/call" {
        if let Some(r) = tools_call(obj.get("params"), &id) {
            return Some(r);
        }
    }
    // The type rmcp reads the line as: whatever fails it here would get
    // rmcp's -32600 without an id.
    if ClientJsonRpcMessage::deserialize(v).is_err() {
        return Some(Refusal::params(
            id,
            "params",
            "the params do not have the shape this method takes",
        ));
    }
    None
}

/// A `tools/call`'s params: an object with the tool's `name` (a string)
/// and, if there, `arguments` (an object).
fn tools_call(params: Option<&Value>, id: &Value) -> Option<Refusal> {
    let Some(params) = params.filter(|p| !p.is_null()) else {
        return Some(Refusal::params(
            id.clone(),
            "params",
            "tools/call needs `params`: an object with the tool's `name` and its `arguments`",
        ));
    };
    let Some(params) = params.as_object() else {
        return Some(Refusal::params(
            id.clone(),
            "params",
            "the `params` of tools/call must be an object",
        ));
    };
    if !params.get("name").is_some_and(Value::is_string) {
        return Some(Refusal::params(
            id.clone(),
            "name",
            "`name` must be the tool's name, a string",
        ));
    }
    match params.get("arguments") {
        None | Some(Value::Object(_)) => None,
        Some(_) => Some(Refusal::params(
            id.clone(),
            "arguments",
            "`arguments` must be a JSON object (or left out)",
        )),
    }
}

/// The refusal of a message that holds a key twice: `v` is the line read
/// last-wins (for its members), `e` the refusal of the unique read (for
/// where the second key is). Never `None`: such a message is not served.
pub(super) fn repeated(body: &[u8], v: &Value, e: &serde_json::Error) -> Refusal {
    let Some(obj) = v.as_object() else {
        return not_an_object(v);
    };
    let at = format!(
        "{DUPLICATE_KEY}, at line {} column {}",
        e.line(),
        e.column()
    );
    let repeated = repeated_members(body);
    let id = match id_of(obj, &repeated) {
        Err(r) => return r,
        Ok(id) => id.unwrap_or(Value::Null),
    };
    if !repeated.is_empty() {
        return Refusal::request(id, format!("the message holds a member twice ({at})"));
    }
    Refusal::params(id, "params", at)
}

/// The names of the top-level members that come more than once.
fn repeated_members(body: &[u8]) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a JSON-RPC message object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                    let (mut seen, mut twice) = (Vec::<String>::new(), Vec::new());
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<IgnoredAny>()?;
                        if seen.contains(&key) {
                            if !twice.contains(&key) {
                                twice.push(key);
                            }
                        } else {
                            seen.push(key);
                        }
                    }
                    Ok(Keys(twice))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_slice::<Keys>(body)
        .map(|k| k.0)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::unique_value;

    /// The refusal of one line, as the line layer decides it.
    fn refusal(line: &str) -> Option<Refusal> {
        match unique_value(line.as_bytes()) {
            Ok(v) => check(&v),
            Err(e) => {
                let v: Value = serde_json::from_str(line).unwrap();
                Some(repeated(line.as_bytes(), &v, &e))
            }
        }
    }

    #[track_caller]
    fn refused(line: &str, code: i32, id: Value, field: &str) -> String {
        let r = refusal(line).unwrap_or_else(|| panic!("not refused: {line}"));
        assert_eq!(
            (r.code, &r.id, r.field),
            (code, &id, field),
            "{line}: {r:?}"
        );
        r.problem
    }

    #[test]
    fn well_formed_messages_go_to_rmcp() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":null}"#,
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t","arguments":{"a":{"a":1}}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"x/custom","params":{"k":1}}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            // Notifications are rmcp's to ignore or answer, as before.
            r#"{"jsonrpc":"1.0","method":"x"}"#,
            r#"{"method":"notifications/cancelled","params":5}"#,
        ] {
            assert_eq!(refusal(line), None, "{line}");
        }
    }

    #[test]
    fn an_id_that_cannot_be_read_is_null() {
        let cases = [
            (r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, BAD_VERSION),
            (r#"{"id":1,"method":"ping"}"#, BAD_VERSION),
            (r#"[{"jsonrpc":"2.0","id":2,"method":"ping"}]"#, "a batch"),
            (r#""ping""#, "a message must be a JSON object"),
            (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, BAD_ID),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, BAD_ID),
            (r#"{"jsonrpc":"2.0","id":1.0,"method":"ping"}"#, BAD_ID),
            (r#"{"jsonrpc":"2.0","id":1e2,"method":"ping"}"#, BAD_ID),
            (
                r#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"ping"}"#,
                BAD_ID,
            ),
            (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, BAD_ID),
            (r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, BAD_ID),
            (
                r#"{"jsonrpc":"2.0","id":3,"id":4,"method":"ping"}"#,
                "the message holds `id` twice",
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","id":3}"#,
                "the message holds `id` twice",
            ),
            (
                r#"{"jsonrpc":"1.0","id":3,"params":{"a":1,"a":1}}"#,
                BAD_VERSION,
            ),
        ];
        for (line, start) in cases {
            let p = refused(line, INVALID_REQUEST, Value::Null, "request");
            assert!(p.starts_with(start), "{line}: {p}");
        }
    }

    #[test]
    fn a_readable_id_comes_back_with_the_refusal() {
        let id = || Value::from(7);
        let p = refused(
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","method":"tools/list"}"#,
            INVALID_REQUEST,
            id(),
            "request",
        );
        assert_eq!(
            p,
            "the message holds a member twice (an object holds the same key twice, at line 1 column 48)"
        );
        refused(
            r#"{"jsonrpc":"2.0","id":7}"#,
            INVALID_REQUEST,
            id(),
            "request",
        );
        refused(
            r#"{"jsonrpc":"2.0","id":7,"method":5}"#,
            INVALID_REQUEST,
            id(),
            "request",
        );
        refused(
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":"x"}"#,
            INVALID_REQUEST,
            id(),
            "request",
        );
        for line in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":null}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1]}"#,
        ] {
            refused(line, INVALID_PARAMS, id(), "params");
        }
        for line in [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5}}"#,
        ] {
            refused(line, INVALID_PARAMS, id(), "name");
        }
        for args in ["\"x\"", "[1]", "null", "5", "true"] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"t","arguments":{args}}}}}"#
            );
            refused(&line, INVALID_PARAMS, id(), "arguments");
        }
        // What rmcp's own type refuses.
        for line in [
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","_meta":5}}"#,
        ] {
            refused(line, INVALID_PARAMS, id(), "params");
        }
        // A key twice inside the message: never read last-wins.
        let p = refused(
            r#"{"jsonrpc":"2.0","id":"k","method":"tools/call","params":{"name":"t","arguments":{"title":"a","title":"b"}}}"#,
            INVALID_PARAMS,
            Value::from("k"),
            "params",
        );
        assert_eq!(
            p,
            "an object holds the same key twice, at line 1 column 101"
        );
        // ... in a notification too, with a null id.
        refused(
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"a":1,"a":2}}"#,
            INVALID_PARAMS,
            Value::Null,
            "params",
        );
    }
}
