//! `logbook mcp serve` on raw stdio: lines the SDK's transport would drop
//! without a reply (docs/design.md, "MCP") — not JSON, an unpaired surrogate,
//! nesting past serde_json's depth limit — each get a JSON-RPC error, store
//! nothing, and the server goes on serving.

use crate::common::TestEnv;
use crate::mcp::{counts, server_command};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

/// One raw connection, after the handshake.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Lines<BufReader<ChildStdout>>,
    probes: i64,
}

impl Raw {
    fn start(env: &TestEnv) -> Raw {
        let mut child = server_command(env, &env.db, &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let replies = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut raw = Raw {
            child,
            stdin,
            replies,
            probes: 0,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0"}}});
        raw.write(&init.to_string());
        assert_eq!(raw.next()["id"], 0);
        raw.write(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        raw
    }

    fn write(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn next(&mut self) -> Value {
        let line = self.replies.next().expect("a reply line").unwrap();
        serde_json::from_str(&line).expect("stdout line is JSON")
    }

    /// Sends `line`, then a `ping` probe; returns every reply that came
    /// before the probe's (the server answers lines in order, so a dropped
    /// line shows as an empty list instead of a hang).
    fn send(&mut self, line: &str) -> Vec<Value> {
        self.probes += 1;
        let probe = format!("probe-{}", self.probes);
        self.write(line);
        self.write(&json!({"jsonrpc": "2.0", "id": probe, "method": "ping"}).to_string());
        let mut before = Vec::new();
        loop {
            let v = self.next();
            if v["id"] == probe.as_str() {
                assert_eq!(v["result"], json!({}), "{v}");
                return before;
            }
            before.push(v);
        }
    }

    /// Sends a request and returns its reply (nothing else may come first).
    fn request(&mut self, v: &Value) -> Value {
        self.write(&v.to_string());
        let reply = self.next();
        assert_eq!(reply["id"], v["id"], "{reply}");
        reply
    }

    /// Closes stdin; returns the exit code after checking stdout is empty.
    fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        let rest: Vec<String> = self.replies.by_ref().map(Result::unwrap).collect();
        assert!(rest.is_empty(), "{rest:?}");
        self.child.wait().unwrap().code().unwrap_or(-1)
    }
}

fn create_line(id: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"logbook_session_create","arguments":{arguments}}}}}"#
    )
}

/// The one reply, checked to be a JSON-RPC error with `code` and `id`;
/// returns its message.
#[track_caller]
fn error_reply(replies: &[Value], code: i64, id: &Value) -> String {
    assert_eq!(replies.len(), 1, "exactly one reply: {replies:?}");
    let r = &replies[0];
    assert_eq!(r["jsonrpc"], "2.0");
    assert!(r.as_object().unwrap().contains_key("id"), "{r}");
    assert_eq!(&r["id"], id, "{r}");
    assert!(r.get("result").is_none(), "{r}");
    assert_eq!(r["error"]["code"], code, "{r}");
    let data = &r["error"]["data"];
    assert_eq!(data["code"], "INVALID_ARGUMENT", "{r}");
    let field = if code == -32700 { "request" } else { "params" };
    assert_eq!(data["details"]["field"], field, "{r}");
    r["error"]["message"].as_str().unwrap().to_owned()
}

/// A good create after the bad lines is answered and is all that is stored.
fn a_good_call_is_answered_and_is_all_that_is_stored(env: &TestEnv, raw: &mut Raw) {
    let good = create_line("100", r#"{"title":"after the bad lines"}"#);
    let reply = raw.request(&serde_json::from_str(&good).unwrap());
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert_eq!(
        reply["result"]["structuredContent"]["title"],
        "after the bad lines"
    );
    assert_eq!(counts(env), (1, 1, 0), "only the good call stored anything");
}

#[test]
fn a_line_that_is_not_json_gets_a_parse_error_with_a_null_id_and_the_server_goes_on() {
    let env = TestEnv::new();
    let mut raw = Raw::start(&env);
    let m = error_reply(&raw.send("not json"), -32700, &Value::Null);
    assert_eq!(
        m,
        "parse error: the message is not valid JSON (expected ident), at line 1 column 2"
    );
    // A create cut short: its id is never trusted from broken JSON.
    let cut = create_line("5", r#"{"title":"cut short""#);
    let cut = &cut[..cut.len() - 2];
    let m = error_reply(&raw.send(cut), -32700, &Value::Null);
    assert_eq!(
        m,
        format!(
            "parse error: the message is not valid JSON (EOF while parsing an object), at line 1 column {}",
            cut.len()
        )
    );
    assert_eq!(counts(&env), (0, 0, 0));
    a_good_call_is_answered_and_is_all_that_is_stored(&env, &mut raw);
    assert_eq!(raw.finish(), 0);
}

#[test]
fn an_unpaired_surrogate_is_invalid_params_with_the_request_id_and_stores_nothing() {
    let env = TestEnv::new();
    let mut raw = Raw::start(&env);
    let line = create_line("7", r#"{"title":"\ud83d"}"#);
    let m = error_reply(&raw.send(&line), -32602, &json!(7));
    let column = line.find(r"\ud83d").unwrap() + r#"\ud83d""#.len();
    assert_eq!(
        m,
        format!(
            "invalid params: a string holds an unpaired UTF-16 surrogate escape; strings must be valid Unicode, at line 1 column {column}"
        )
    );
    // A lone trailing surrogate, with a string id.
    let line = create_line(r#""req-8""#, r#"{"title":"a\ude00b"}"#);
    let m = error_reply(&raw.send(&line), -32602, &json!("req-8"));
    assert!(m.contains("unpaired UTF-16 surrogate"), "{m}");
    // The surrogate is in the id itself: the id cannot be read.
    let line = create_line(r#""\ud83d""#, r#"{"title":"t"}"#);
    let m = error_reply(&raw.send(&line), -32700, &Value::Null);
    assert!(
        m.starts_with("parse error: a string holds an unpaired"),
        "{m}"
    );
    assert_eq!(counts(&env), (0, 0, 0));
    a_good_call_is_answered_and_is_all_that_is_stored(&env, &mut raw);
    assert_eq!(raw.finish(), 0);
}

#[test]
fn nesting_past_the_depth_limit_is_invalid_params_with_the_request_id_and_stores_nothing() {
    let env = TestEnv::new();
    let mut raw = Raw::start(&env);
    let deep = format!(r#"{{"v":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
    let line = create_line("9", &format!(r#"{{"title":"t","context":{deep}}}"#));
    let m = error_reply(&raw.send(&line), -32602, &json!(9));
    // Levels: message 1, params 2, arguments 3, context 4, then the
    // arrays; serde_json refuses the 128th, which is the 124th `[`.
    let column = line.find('[').unwrap() + 124;
    assert_eq!(
        m,
        format!(
            "invalid params: arrays and objects nest more than 127 levels deep, at line 1 column {column}"
        )
    );
    // Too deep and no id (a notification): a parse error with a null id.
    let note = format!(r#"{{"jsonrpc":"2.0","method":"notifications/x","params":{deep}}}"#);
    let m = error_reply(&raw.send(&note), -32700, &Value::Null);
    assert!(m.contains("nest more than 127 levels deep"), "{m}");
    assert_eq!(counts(&env), (0, 0, 0));
    a_good_call_is_answered_and_is_all_that_is_stored(&env, &mut raw);
    assert_eq!(raw.finish(), 0);
}

#[test]
fn blank_lines_get_no_reply_and_a_last_line_without_a_newline_is_served() {
    let env = TestEnv::new();
    let mut raw = Raw::start(&env);
    assert_eq!(raw.send(""), Vec::<Value>::new());
    assert_eq!(raw.send("  \t"), Vec::<Value>::new());
    let line = create_line("3", r#"{"title":"no newline"}"#);
    let mut stdin = raw.stdin.take().unwrap();
    stdin.write_all(line.as_bytes()).unwrap();
    drop(stdin);
    let reply = raw.next();
    assert_eq!(reply["id"], 3, "{reply}");
    assert_eq!(reply["result"]["structuredContent"]["title"], "no newline");
    assert_eq!(raw.finish(), 0);
    assert_eq!(counts(&env), (1, 1, 0));
}

/// The one reply, checked to be a JSON-RPC error with `code` and an `id`
/// member equal to `id`; returns its `error` object.
#[track_caller]
fn error_with_id(replies: &[Value], code: i64, id: &Value) -> Value {
    assert_eq!(replies.len(), 1, "exactly one reply: {replies:?}");
    let r = &replies[0];
    let o = r.as_object().unwrap();
    assert_eq!(
        o.keys().map(String::as_str).collect::<Vec<_>>(),
        ["error", "id", "jsonrpc"],
        "{r}"
    );
    assert_eq!((&r["jsonrpc"], &r["id"]), (&json!("2.0"), id), "{r}");
    assert_eq!(r["error"]["code"], code, "{r}");
    r["error"].clone()
}

/// JSON-RPC 2.0 §5: an error response always has `id`, `null` when the
/// request's id cannot be read. rmcp wrote `-32600` with no `id` member at
/// all for each of these.
#[test]
fn every_error_reply_carries_an_id_null_when_the_request_id_cannot_be_read() {
    let env = TestEnv::new();
    let mut raw = Raw::start(&env);
    let create = |id: &str| create_line(id, r#"{"title":"never stored"}"#);
    let cases = [
        (
            create("1").replace(r#""jsonrpc":"2.0""#, r#""jsonrpc":"1.0""#),
            r#"`jsonrpc` must be "2.0""#,
        ),
        (
            format!("[{}]", create("2")),
            "a batch (a JSON array of messages) is not served: send one message per line",
        ),
        (
            create(r#"{"n":3}"#),
            "`id` must be a string or an integer (no fraction or exponent, within 64 bits)",
        ),
        (
            create("4.5"),
            "`id` must be a string or an integer (no fraction or exponent, within 64 bits)",
        ),
        (
            create("4.0"),
            "`id` must be a string or an integer (no fraction or exponent, within 64 bits)",
        ),
        (
            create("null"),
            "`id` must be a string or an integer (no fraction or exponent, within 64 bits)",
        ),
        (
            create("5").replacen(r#""id":5"#, r#""id":5,"id":6"#, 1),
            "the message holds `id` twice",
        ),
    ];
    for (line, problem) in &cases {
        let e = error_with_id(&raw.send(line), -32600, &Value::Null);
        assert_eq!(
            e["message"],
            format!("invalid request: {problem}"),
            "{line}"
        );
        assert_eq!(e["data"]["code"], "INVALID_ARGUMENT");
        assert_eq!(e["data"]["details"]["field"], "request");
    }
    // A readable id comes back with the refusal.
    let line = r#"{"jsonrpc":"2.0","id":"r-7","method":"ping","params":"x"}"#;
    let e = error_with_id(&raw.send(line), -32600, &json!("r-7"));
    assert_eq!(
        e["message"],
        "invalid request: `params` must be an object (or an array)"
    );
    let line = r#"{"jsonrpc":"2.0","id":8,"method":"ping","params":[1]}"#;
    let e = error_with_id(&raw.send(line), -32602, &json!(8));
    assert_eq!(
        e["message"],
        "invalid params: the params do not have the shape this method takes"
    );
    // What rmcp still answers itself (a notification it cannot read) gets
    // `"id": null` on the way out.
    let line = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#;
    let e = error_with_id(&raw.send(line), -32600, &Value::Null);
    assert_eq!(e["message"], "Invalid request");
    assert_eq!(counts(&env), (0, 0, 0));
    a_good_call_is_answered_and_is_all_that_is_stored(&env, &mut raw);
    assert_eq!(raw.finish(), 0);
}

/// A `tools/call` whose params cannot be a call — none, no string `name`,
/// `arguments` that is not an object — is -32602 (invalid params) with its
/// id; rmcp answered most of these -32601 "method not found", or -32600
/// without an id.
#[test]
fn tools_call_without_params_or_with_non_object_arguments_is_invalid_params_with_its_id() {
    let env = TestEnv::new();
    let mut raw = Raw::start(&env);
    let call = |id: u32, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call"{params}}}"#)
    };
    let needs = "tools/call needs `params`: an object with the tool's `name` and its `arguments`";
    let cases = [
        (call(1, ""), "params", needs),
        (call(2, r#","params":null"#), "params", needs),
        (
            call(3, r#","params":[]"#),
            "params",
            "the `params` of tools/call must be an object",
        ),
        (
            call(4, r#","params":{}"#),
            "name",
            "`name` must be the tool's name, a string",
        ),
        (
            call(5, r#","params":{"name":5,"arguments":{}}"#),
            "name",
            "`name` must be the tool's name, a string",
        ),
    ];
    let args = "`arguments` must be a JSON object (or left out)";
    let mut id = 5;
    let with_args: Vec<(String, &str, &str)> =
        ["\"x\"", "[{\"title\":\"t\"}]", "null", "7", "false"]
            .iter()
            .map(|a| {
                id += 1;
                (
                    call(
                        id,
                        &format!(
                            r#","params":{{"name":"logbook_session_create","arguments":{a}}}"#
                        ),
                    ),
                    "arguments",
                    args,
                )
            })
            .collect();
    for (n, (line, field, problem)) in cases.into_iter().chain(with_args).enumerate() {
        let e = error_with_id(&raw.send(&line), -32602, &json!(n + 1));
        assert_eq!(e["message"], format!("invalid params: {problem}"), "{line}");
        assert_eq!(
            (&e["data"]["code"], &e["data"]["details"]["field"]),
            (&json!("INVALID_ARGUMENT"), &json!(field)),
            "{line}"
        );
    }
    assert_eq!(counts(&env), (0, 0, 0));
    a_good_call_is_answered_and_is_all_that_is_stored(&env, &mut raw);
    assert_eq!(raw.finish(), 0);
}

/// An object holding a key twice is refused, never read last-wins (which
/// stored `"title":"b"` for the first line below): in the arguments and
/// anywhere in params -32602 with the id, among the message's own members
/// -32600.
#[test]
fn a_duplicate_key_in_a_message_is_refused_not_read_last_wins() {
    let env = TestEnv::new();
    let mut raw = Raw::start(&env);
    let at = "an object holds the same key twice, at line 1 column";
    let line = create_line("1", r#"{"title":"a","title":"b"}"#);
    let e = error_with_id(&raw.send(&line), -32602, &json!(1));
    let column = line.rfind(r#""title""#).unwrap() + r#""title""#.len();
    assert_eq!(e["message"], format!("invalid params: {at} {column}"));
    assert_eq!(e["data"]["details"]["field"], "params");
    let line = create_line(
        r#""two""#,
        r#"{"title":"t","context":{"k":{"sk-x":1,"sk-x":2}}}"#,
    );
    let e = error_with_id(&raw.send(&line), -32602, &json!("two"));
    assert!(!e.to_string().contains("sk-x"), "{e}");
    let line = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"logbook_session_list","name":"logbook_session_create","arguments":{"title":"t"}}}"#;
    error_with_id(&raw.send(line), -32602, &json!(3));
    let line = create_line("4", r#"{"title":"t"}"#).replacen(
        r#""method":"tools/call""#,
        r#""method":"tools/call","method":"tools/call""#,
        1,
    );
    let e = error_with_id(&raw.send(&line), -32600, &json!(4));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid request: the message holds a member twice ("),
        "{e}"
    );
    assert_eq!(counts(&env), (0, 0, 0));
    a_good_call_is_answered_and_is_all_that_is_stored(&env, &mut raw);
    assert_eq!(raw.finish(), 0);
}
