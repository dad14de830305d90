//! The line layer between stdio and rmcp's transport (docs/design.md, "MCP").
//!
//! rmcp's stdio transport drops, without a reply, every line that
//! `serde_json` refuses as syntax: text that is not JSON, a string with an
//! unpaired UTF-16 surrogate escape (`"\ud83d"`), arrays and objects nested
//! deeper than serde_json's limit. A client that sent such a `tools/call`
//! would wait for its timeout. So the server reads stdin itself, one line at
//! a time, and checks each line before rmcp sees it:
//!
//! - A line that parses as JSON with every key once
//!   ([`crate::validate::unique_value`]) and has the shape of a JSON-RPC
//!   message (module `frame`) goes to rmcp unchanged. One that holds a key
//!   twice, or has not that shape, is answered by `frame`'s rules (-32600
//!   or -32602, with the id when it can be read, else `null`).
//! - A line that does not, is answered here and never reaches rmcp, so it
//!   runs no tool and stores nothing, and the server reads on:
//!   - `-32602` (invalid params) with the request's `id` when the line is
//!     well-formed apart from its contents — an unpaired surrogate, nesting
//!     deeper than [`MAX_DEPTH`], a number out of range, a string that is not
//!     UTF-8 — and its top-level `id` is a string or an integer that can be
//!     read;
//!   - `-32700` (parse error) with `"id": null` otherwise: not JSON at all,
//!     no readable id (a notification, or the bad string is the id), or a
//!     line longer than [`MAX_LINE_BYTES`].
//!
//!   The error's `message` names the problem and where it is (line and
//!   column), never a value from the line; its `data` is a tool error body
//!   (`INVALID_ARGUMENT`, `details.field` = `params` or `request`), like the
//!   -32602 of an unknown tool.
//! - An empty or all-whitespace line is no message and gets no reply; a
//!   final line without a newline is taken as a line.
//!
//! Every line on stdout is written by one task, [`write_out`]: rmcp's replies
//! (forwarded whole lines at a time from its side of a pipe,
//! [`forward_replies`], which gives an error rmcp wrote without an `id` a
//! `null` one) and this layer's errors go through one channel, so two
//! messages never interleave.

use super::{frame, ToolError};
use crate::error::Error;
use crate::validate::unique::{is_duplicate_key, unique_value};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Serialize;
use serde_json::Value;
use std::fmt;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::sync::mpsc::Sender;

/// The longest line read, in bytes without its newline: 16 MiB, rmcp's own
/// `DEFAULT_MAX_LINE_LENGTH`.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The deepest nesting of arrays and objects a message may have: 127 levels
/// (`serde_json`'s recursion limit refuses the 128th).
pub const MAX_DEPTH: usize = 127;

/// JSON-RPC's parse error.
const PARSE_ERROR: i32 = -32700;
/// JSON-RPC's invalid params.
const INVALID_PARAMS: i32 = frame::INVALID_PARAMS;

/// What to do with one line from stdin.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Hand it to rmcp.
    Forward,
    /// No message (empty or whitespace): nothing to do.
    Skip,
    /// Answer with this JSON-RPC error (one line, without the newline).
    Reply(String),
}

/// Checks one line (without its `\n`; a trailing `\r` and a leading UTF-8
/// byte-order mark are ignored, as rmcp ignores them).
pub fn check_line(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let body = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if body.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    // Keys once each: serde_json would keep the last of two.
    let e = match unique_value(body) {
        Ok(v) => {
            return match frame::check(&v) {
                None => Verdict::Forward,
                Some(r) => Verdict::Reply(refused(r)),
            }
        }
        Err(e) if is_duplicate_key(&e) => match serde_json::from_slice::<Value>(body) {
            Ok(v) => return Verdict::Reply(refused(frame::repeated(body, &v, &e))),
            // A problem after the repeated key: that one is answered.
            Err(later) => later,
        },
        Err(e) => e,
    };
    let problem = problem(&e);
    Verdict::Reply(match readable_id(body) {
        Some(id) => reply(id, INVALID_PARAMS, "params", "invalid params", &problem),
        None => reply(Value::Null, PARSE_ERROR, "request", "parse error", &problem),
    })
}

/// The reply to a message [`frame`] refused.
fn refused(r: frame::Refusal) -> String {
    let kind = if r.code == INVALID_PARAMS {
        "invalid params"
    } else {
        "invalid request"
    };
    reply(r.id, r.code, r.field, kind, &r.problem)
}

/// The reply to a line longer than [`MAX_LINE_BYTES`].
pub fn too_long() -> String {
    let problem = format!("the message is longer than {MAX_LINE_BYTES} bytes");
    reply(Value::Null, PARSE_ERROR, "request", "parse error", &problem)
}

/// A JSON-RPC error response, members in the order rmcp writes them.
#[derive(Serialize)]
struct Reply<'a> {
    jsonrpc: &'static str,
    id: Value,
    error: ReplyError<'a>,
}

#[derive(Serialize)]
struct ReplyError<'a> {
    code: i32,
    message: String,
    data: ToolError<'a>,
}

fn reply(id: Value, code: i32, field: &str, kind: &str, problem: &str) -> String {
    let refused = Error::invalid(field, problem);
    let r = Reply {
        jsonrpc: "2.0",
        id,
        error: ReplyError {
            code,
            message: format!("{kind}: {problem}"),
            data: ToolError::from(&refused),
        },
    };
    // Plain strings, numbers and a `Value` id: serializing cannot fail.
    serde_json::to_string(&r).unwrap_or_default()
}

/// What is wrong, in words, with where: never a piece of the line.
fn problem(e: &serde_json::Error) -> String {
    let at = format!("line {} column {}", e.line(), e.column());
    // serde_json names its error codes only in its messages (pinned by the
    // tests below); anything else is reported in its own words, which
    // never quote the input either.
    let text = e.to_string();
    let what = if text.starts_with("lone leading surrogate in hex escape")
        || text.starts_with("unexpected end of hex escape")
    {
        "a string holds an unpaired UTF-16 surrogate escape; strings must be valid Unicode"
            .to_owned()
    } else if text.starts_with("recursion limit exceeded") {
        format!("arrays and objects nest more than {MAX_DEPTH} levels deep")
    } else if text.starts_with("invalid unicode code point") {
        "a string is not valid UTF-8".to_owned()
    } else if text.starts_with("number out of range") {
        "a number is out of range".to_owned()
    } else {
        let reason = text.strip_suffix(&format!(" at {at}")).unwrap_or(&text);
        format!("the message is not valid JSON ({reason})")
    };
    format!("{what}, at {at}")
}

/// The top-level `id` of a line that is well-formed JSON apart from the
/// contents of its strings, numbers and nesting depth: a string or an
/// integer ([`frame::usable_id`]), given once, in a message whose `jsonrpc`
/// is `"2.0"`. `None` when the line is not that, or has no such id.
fn readable_id(body: &[u8]) -> Option<Value> {
    serde_json::from_slice::<IdOnly>(body).ok()?.0
}

/// A top-level object read for its `id` and `jsonrpc` only: every other
/// member is skipped with [`IgnoredAny`], which checks syntax but not
/// surrogates or depth.
struct IdOnly(Option<Value>);

impl<'de> Deserialize<'de> for IdOnly {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdOnly;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC message object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IdOnly, A::Error> {
                let (mut id, mut version) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    let slot = match key.as_str() {
                        "id" => &mut id,
                        "jsonrpc" => &mut version,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    if slot.is_some() {
                        return Err(de::Error::custom("a member twice"));
                    }
                    *slot = Some(map.next_value::<Value>()?);
                }
                let version_ok = version.as_ref().and_then(Value::as_str) == Some("2.0");
                Ok(IdOnly(id.filter(|v| version_ok && frame::usable_id(v))))
            }
        }
        d.deserialize_map(V)
    }
}

/// Reads stdin line by line until it ends: forwards good lines to `rmcp`
/// (each with its `\n`), sends the error reply for bad ones to `out`. Ends
/// at end of input, on a read error, or when either side has gone; then
/// drops `rmcp`, which rmcp reads as the end of input.
pub async fn read_in<R, W>(input: R, mut rmcp: W, out: Sender<Vec<u8>>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let Ok(complete) = read_line(&mut input, &mut line).await else {
            return;
        };
        let verdict = match complete {
            Line::End => return,
            Line::TooLong => Verdict::Reply(too_long()),
            Line::Read => check_line(&line),
        };
        match verdict {
            Verdict::Skip => {}
            Verdict::Forward => {
                line.push(b'\n');
                if rmcp.write_all(&line).await.is_err() || rmcp.flush().await.is_err() {
                    return;
                }
            }
            Verdict::Reply(text) => {
                let mut bytes = text.into_bytes();
                bytes.push(b'\n');
                if out.send(bytes).await.is_err() {
                    return;
                }
            }
        }
    }
}

enum Line {
    /// A line (its `\n` removed) is in the buffer.
    Read,
    /// The line was longer than [`MAX_LINE_BYTES`]; it has been skipped.
    TooLong,
    /// Input has ended.
    End,
}

/// Reads one line into `buf` (empty on entry), never holding more than
/// [`MAX_LINE_BYTES`] + 1 bytes of it.
async fn read_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Line> {
    let limit = u64::try_from(MAX_LINE_BYTES).unwrap_or(u64::MAX) + 1;
    let n = (&mut *input).take(limit).read_until(b'\n', buf).await?;
    if n == 0 {
        return Ok(Line::End);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Line::Read);
    }
    if buf.len() <= MAX_LINE_BYTES {
        // The last line, without a newline.
        return Ok(Line::Read);
    }
    // Skip the rest of the long line, a bounded piece at a time.
    loop {
        buf.clear();
        let n = (&mut *input).take(limit).read_until(b'\n', buf).await?;
        if n == 0 || buf.last() == Some(&b'\n') {
            buf.clear();
            return Ok(Line::TooLong);
        }
    }
}

/// Forwards rmcp's output to `out` one whole line (one message) at a time,
/// until rmcp closes its side or `out` has gone. An error response rmcp
/// wrote without an `id` member gets `"id": null` ([`with_null_id`]).
pub async fn forward_replies<R: AsyncRead + Unpin>(from_rmcp: R, out: Sender<Vec<u8>>) {
    let mut from_rmcp = BufReader::new(from_rmcp);
    loop {
        let mut line = Vec::new();
        match from_rmcp.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = with_null_id(line);
                if out.send(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// rmcp's line, or, when it is an error response without an `id` member
/// (rmcp's `-32600` to a message it could not read), the same response
/// with `"id": null` after `jsonrpc` (JSON-RPC 2.0 §5: the id is null when
/// it could not be detected).
pub fn with_null_id(line: Vec<u8>) -> Vec<u8> {
    // rmcp writes `jsonrpc` first and `id` second: a line that starts so
    // has its id, whatever its size.
    if line.starts_with(br#"{"jsonrpc":"2.0","id":"#) {
        return line;
    }
    #[derive(serde::Deserialize)]
    struct Bare<'a> {
        #[serde(borrow)]
        id: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow)]
        error: Option<&'a serde_json::value::RawValue>,
    }
    #[derive(Serialize)]
    struct WithId<'a> {
        jsonrpc: &'static str,
        id: (),
        error: &'a serde_json::value::RawValue,
    }
    let Ok(Bare {
        id: None,
        error: Some(error),
    }) = serde_json::from_slice::<Bare<'_>>(&line)
    else {
        return line;
    };
    match serde_json::to_vec(&WithId {
        jsonrpc: "2.0",
        id: (),
        error,
    }) {
        Ok(mut fixed) => {
            fixed.push(b'\n');
            fixed
        }
        Err(_) => line,
    }
}

/// Writes each message from `lines` to stdout and flushes it, until every
/// sender has gone or a write fails.
pub async fn write_out<W: AsyncWrite + Unpin>(
    mut lines: tokio::sync::mpsc::Receiver<Vec<u8>>,
    mut stdout: W,
) {
    while let Some(line) = lines.recv().await {
        if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_of(line: &str) -> Value {
        match check_line(line.as_bytes()) {
            Verdict::Reply(t) => serde_json::from_str(&t).unwrap(),
            v => panic!("expected a reply, got {v:?}"),
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn good_lines_are_forwarded_and_blank_ones_skipped() {
        assert_eq!(
            check_line(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Verdict::Forward
        );
        assert_eq!(
            check_line(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\r"),
            Verdict::Forward
        );
        assert_eq!(check_line(br#"{"s":"\ud83d\ude00"}"#), Verdict::Forward);
        assert_eq!(check_line(b""), Verdict::Skip);
        assert_eq!(check_line(b" \t\r"), Verdict::Skip);
    }

    #[test]
    fn a_reply_is_one_line_with_members_in_rmcps_order() {
        let Verdict::Reply(t) = check_line(br#"{"jsonrpc":"2.0","id":1,"s":"\ud83d"}"#) else {
            panic!("expected a reply");
        };
        assert!(
            t.starts_with(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"#),
            "{t}"
        );
        assert!(!t.contains('\n'));
        assert!(too_long().starts_with(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"#));
    }

    #[test]
    fn the_depth_limit_is_max_depth() {
        assert!(serde_json::from_str::<Value>(&nested(MAX_DEPTH)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(MAX_DEPTH + 1)).is_err());
        // Message 1, params 2, then the arrays.
        let deepest = format!(
            r#"{{"jsonrpc":"2.0","method":"n","params":{{"v":{}}}}}"#,
            nested(MAX_DEPTH - 2)
        );
        assert_eq!(check_line(deepest.as_bytes()), Verdict::Forward);
    }

    #[test]
    fn a_lone_surrogate_with_an_id_is_invalid_params_naming_it() {
        for s in [r"\ud83d", r"\ude00", r"\ud83d\u0041", r"x\ud83d\n"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"m","params":{{"t":"{s}"}}}}"#);
            let r = reply_of(&line);
            assert_eq!(r["id"], 7, "{s}");
            assert_eq!(r["error"]["code"], INVALID_PARAMS, "{s}");
            let m = r["error"]["message"].as_str().unwrap();
            assert!(
                m.starts_with("invalid params: a string holds an unpaired UTF-16 surrogate"),
                "{s}: {m}"
            );
            assert_eq!(r["error"]["data"]["code"], "INVALID_ARGUMENT");
            assert_eq!(r["error"]["data"]["details"]["field"], "params");
        }
    }

    #[test]
    fn too_deep_with_an_id_is_invalid_params_naming_the_limit() {
        let line = format!(
            r#"{{"id":"a-1","jsonrpc":"2.0","method":"m","params":{{"x":{}}}}}"#,
            nested(200)
        );
        let r = reply_of(&line);
        assert_eq!(r["id"], "a-1");
        // Column 181: the 126th `[` after the 55-byte prefix opens level 128.
        assert_eq!(r["error"]["code"], INVALID_PARAMS);
        assert_eq!(
            r["error"]["message"],
            "invalid params: arrays and objects nest more than 127 levels deep, at line 1 column 181"
        );
    }

    #[test]
    fn without_a_readable_id_it_is_a_parse_error_with_a_null_id() {
        let cases = [
            ("not json", "the message is not valid JSON (expected ident)"),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"m""#,
                "the message is not valid JSON (EOF while parsing an object)",
            ),
            (
                r#"{"id":3,}"#,
                "the message is not valid JSON (trailing comma)",
            ),
            (r#"{"id":"\ud83d"}"#, "a string holds an unpaired"),
            (r#"{"method":"m","params":"\ud83d"}"#, "a string holds"),
            (r#"{"id":{"a":1},"s":"\ud83d"}"#, "a string holds"),
            (r#"{"id":1.5,"s":"\ud83d"}"#, "a string holds"),
            (r#"[{"id":1,"s":"\ud83d"}]"#, "a string holds"),
            (r#"{"id":1,"s":"\ud83d"} x"#, "a string holds"),
            // The id of a message that is not JSON-RPC 2.0, or given twice,
            // is not read.
            (r#"{"jsonrpc":"1.0","id":1,"s":"\ud83d"}"#, "a string holds"),
            (r#"{"id":1,"s":"\ud83d"}"#, "a string holds"),
            (
                r#"{"jsonrpc":"2.0","id":1,"id":2,"s":"\ud83d"}"#,
                "a string holds",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"jsonrpc":"2.0","s":"\ud83d"}"#,
                "a string holds",
            ),
        ];
        for (line, start) in cases {
            let r = reply_of(line);
            assert_eq!(r["id"], Value::Null, "{line}");
            assert!(r.as_object().unwrap().contains_key("id"), "{line}");
            assert_eq!(r["error"]["code"], PARSE_ERROR, "{line}");
            let m = r["error"]["message"].as_str().unwrap();
            assert!(
                m.starts_with(&format!("parse error: {start}")),
                "{line}: {m}"
            );
            assert_eq!(r["error"]["data"]["details"]["field"], "request");
        }
    }

    #[test]
    fn other_content_problems_are_named_and_nothing_is_echoed() {
        let r = reply_of(r#"{"jsonrpc":"2.0","id":2,"n":1e400}"#);
        assert_eq!(r["error"]["code"], INVALID_PARAMS);
        assert!(r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a number is out of range"));
        let Verdict::Reply(r) = check_line(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"s\":\"\xff\"}") else {
            panic!("expected a reply");
        };
        let r: Value = serde_json::from_str(&r).unwrap();
        assert!(r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("a string is not valid UTF-8"));
        let secret = r#"{"id":2,"token":"sk-EXAMPLE0000EXAMPLE0000","s":"\ud83d"}"#;
        assert!(!reply_of(secret).to_string().contains("sk-EXAMPLE"));
        let secret = "sk-EXAMPLE0000EXAMPLE0000";
        assert!(!reply_of(secret).to_string().contains("EXAMPLE"));
    }

    #[test]
    fn an_error_rmcp_writes_without_an_id_gets_a_null_id() {
        let bare =
            b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600,\"message\":\"Invalid request\"}}\n";
        assert_eq!(
            String::from_utf8(with_null_id(bare.to_vec())).unwrap(),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid request\"}}\n"
        );
        for kept in [
            &b"{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32601,\"message\":\"m\"}}\n"[..],
            b"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}\n",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n",
        ] {
            assert_eq!(with_null_id(kept.to_vec()), kept);
        }
    }

    #[tokio::test]
    async fn a_long_line_is_skipped_whole_and_reading_goes_on() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\n{\"a\":1}\nlast");
        let mut r = BufReader::new(input.as_slice());
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut r, &mut buf).await.unwrap(),
            Line::TooLong
        ));
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf).await.unwrap(),
            Line::Read
        ));
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf).await.unwrap(),
            Line::Read
        ));
        assert_eq!(buf, b"last");
        buf.clear();
        assert!(matches!(
            read_line(&mut r, &mut buf).await.unwrap(),
            Line::End
        ));
    }
}
