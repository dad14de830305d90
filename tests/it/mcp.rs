//! `logbook mcp serve` end to end (docs/design.md, "MCP"): the real binary as a child
//! process, driven by rmcp's own client (and, where the test needs exact
//! control of the wire, by raw JSON-RPC lines), with every effect checked
//! in the DB through plain SQLite.
//!
//! This module holds the client helpers the `mcp_*` modules share and the
//! tools list; the session tools are in `mcp_sessions.rs`, the run tools in
//! `mcp_runs.rs`, the server process in `mcp_server.rs`, the recording
//! tools in `mcp_record.rs` and raw lines in `mcp_wire.rs`.

use crate::common::{bin, TestEnv};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

pub(crate) type Client = RunningService<RoleClient, ()>;

const TOOLS: [&str; 26] = [
    "logbook_session_create",
    "logbook_session_show",
    "logbook_session_list",
    "logbook_session_checkpoint",
    "logbook_session_complete",
    "logbook_session_fail",
    "logbook_session_events",
    "logbook_session_stage",
    "logbook_session_usage",
    "logbook_session_event",
    "logbook_session_start",
    "logbook_session_pause",
    "logbook_session_resume",
    "logbook_gate_open",
    "logbook_events",
    "logbook_run_create",
    "logbook_run_start",
    "logbook_run_usage",
    "logbook_run_turn",
    "logbook_run_complete",
    "logbook_run_fail",
    "logbook_run_cancel",
    "logbook_run_timeout",
    "logbook_run_show",
    "logbook_run_list",
    "logbook_run_active",
];

pub(crate) fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// `logbook mcp serve --db <env.db>` with a cleared environment, stderr
/// into `<dir>/stderr.log`.
pub(crate) fn server_command(
    env: &TestEnv,
    db: &std::path::Path,
    vars: &[(&str, &str)],
) -> Command {
    let mut c = Command::new(bin());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.dir.path())
        .env("TZ", "UTC")
        .arg("--db")
        .arg(db)
        .args(["mcp", "serve"]);
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// Where [`connect`] sends the server's stderr.
pub(crate) fn stderr_path(env: &TestEnv) -> std::path::PathBuf {
    env.dir.path().join("stderr.log")
}

pub(crate) async fn connect(env: &TestEnv, vars: &[(&str, &str)]) -> Client {
    let cmd = tokio::process::Command::from(server_command(env, &env.db, vars));
    let log = std::fs::File::create(stderr_path(env)).expect("stderr log");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(log)
        .spawn()
        .expect("spawn logbook mcp serve");
    ().serve(transport).await.expect("MCP handshake")
}

pub(crate) async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().expect("arguments are an object"));
    client.call_tool(params).await.expect("tools/call reply")
}

pub(crate) fn text(r: &CallToolResult) -> String {
    // One content block; a replay adds a second, `{"replayed":…}` (see
    // [`replayed`]).
    let blocks = 1 + usize::from(replayed(r).is_some());
    assert_eq!(r.content.len(), blocks, "content blocks: {r:?}");
    r.content[0]
        .as_text()
        .map(|t| t.text.clone())
        .expect("a text block")
}

/// What a replayed mutation's result says of its first attempt (docs/design.md, "CLI"):
/// `_meta.replayed`, which must equal the second text block's `replayed`;
/// `None` for a first attempt (one block, no `_meta`).
pub(crate) fn replayed(r: &CallToolResult) -> Option<Value> {
    let meta = r.meta.as_ref().and_then(|m| m.0.get("replayed").cloned());
    if let Some(m) = &meta {
        let block: Value =
            serde_json::from_str(&r.content[1].as_text().expect("a text block").text)
                .expect("the replay block is JSON");
        assert_eq!(block, json!({"replayed": m}));
    } else {
        assert_eq!(r.meta, None);
    }
    meta
}

/// The `data` of a successful call (checks text and structuredContent agree).
#[track_caller]
pub(crate) fn ok(r: &CallToolResult) -> Value {
    assert_eq!(r.is_error, Some(false), "expected success: {}", text(r));
    let v: Value = serde_json::from_str(&text(r)).expect("text is JSON");
    assert_eq!(r.structured_content.as_ref(), Some(&v));
    v
}

/// The error body of a failed call; asserts its code and retryable flag.
#[track_caller]
pub(crate) fn err(r: &CallToolResult, code: &str) -> Value {
    assert_eq!(r.is_error, Some(true), "expected an error: {}", text(r));
    let v: Value = serde_json::from_str(&text(r)).expect("text is JSON");
    assert_eq!(r.structured_content.as_ref(), Some(&v));
    assert_eq!(v["code"], code, "{v}");
    let retryable = matches!(code, "STORE_BUSY" | "SESSION_CONFLICT" | "LEASE_HELD");
    assert_eq!(v["retryable"], retryable, "{v}");
    assert!(v["message"].is_string() && v["details"].is_object(), "{v}");
    v
}

/// (sessions, events, idempotency keys): the whole DB's row counts.
pub(crate) fn counts(env: &TestEnv) -> (i64, i64, i64) {
    let n = |t: &str| env.scalar(&format!("SELECT count(*) FROM {t}"));
    (n("sessions"), n("events"), n("idempotency_keys"))
}

/// A raw stdio session: sends `lines` (after the handshake), closes stdin,
/// and returns (stdout lines, stderr, exit code).
pub(crate) fn raw_session(
    env: &TestEnv,
    db: &std::path::Path,
    lines: &[Value],
) -> (Vec<Value>, String, i32) {
    let mut child = server_command(env, db, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "0"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let mut out = Vec::new();
    let mut reader = stdout.lines();
    writeln!(stdin, "{init}").unwrap();
    let reply = reader.next().unwrap().unwrap();
    out.push(serde_json::from_str::<Value>(&reply).expect("stdout line is JSON"));
    writeln!(stdin, "{initialized}").unwrap();
    // One request at a time, each answered before the next is sent.
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
        let reply = reader.next().unwrap().unwrap();
        out.push(serde_json::from_str::<Value>(&reply).expect("stdout line is JSON"));
    }
    drop(stdin);
    for rest in reader {
        out.push(serde_json::from_str::<Value>(&rest.unwrap()).expect("stdout line is JSON"));
    }
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    for v in &out {
        assert_eq!(v["jsonrpc"], "2.0", "stdout holds only JSON-RPC: {v}");
    }
    (out, stderr, status.code().unwrap_or(-1))
}

/// A raw `tools/call` request line.
pub(crate) fn tools_call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
}

/// The tool result a raw `tools/call` reply carries, parsed.
pub(crate) fn reply_body(v: &Value) -> Value {
    serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// (runs) row count, alongside [`counts`].
pub(crate) fn run_count(env: &TestEnv) -> i64 {
    env.scalar("SELECT count(*) FROM runs")
}

#[test]
fn tools_list_returns_every_tool_with_closed_schemas() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, TOOLS);
        let required = |name: &str| -> Value {
            let t = tools.iter().find(|t| t.name == name).unwrap();
            let s = t.schema_as_json_value();
            assert_eq!(s["type"], "object");
            assert_eq!(s["additionalProperties"], false, "{name} is closed");
            assert!(s["properties"].get("actor").is_none());
            assert!(s["properties"].get("if_rev").is_none());
            s["required"].clone()
        };
        assert_eq!(required("logbook_session_create"), json!(["title"]));
        assert_eq!(required("logbook_session_show"), json!(["session_id"]));
        assert_eq!(required("logbook_session_list"), json!([]));
        assert_eq!(
            required("logbook_session_checkpoint"),
            json!(["session_id"])
        );
        assert_eq!(
            required("logbook_session_complete"),
            json!(["session_id", "result"])
        );
        assert_eq!(
            required("logbook_session_fail"),
            json!(["session_id", "reason"])
        );
        assert_eq!(required("logbook_session_events"), json!(["session_id"]));
        assert_eq!(
            required("logbook_session_stage"),
            json!(["session_id", "action", "stage"])
        );
        for t in [
            "logbook_session_usage",
            "logbook_session_start",
            "logbook_session_pause",
            "logbook_session_resume",
        ] {
            assert_eq!(required(t), json!(["session_id"]), "{t}");
        }
        assert_eq!(
            required("logbook_session_event"),
            json!(["session_id", "type"])
        );
        assert_eq!(
            required("logbook_gate_open"),
            json!(["session_id", "gate", "kind"])
        );
        assert_eq!(required("logbook_events"), json!([]));
        assert_eq!(required("logbook_run_create"), json!(["session_id"]));
        for t in [
            "logbook_run_start",
            "logbook_run_usage",
            "logbook_run_turn",
            "logbook_run_complete",
            "logbook_run_cancel",
            "logbook_run_timeout",
            "logbook_run_show",
        ] {
            assert_eq!(required(t), json!(["run_id"]), "{t}");
        }
        assert_eq!(
            required("logbook_run_fail"),
            json!(["run_id", "code", "message"])
        );
        assert_eq!(required("logbook_run_list"), json!(["session_id"]));
        assert_eq!(required("logbook_run_active"), json!(["session_id"]));
        let ro: Vec<bool> = tools
            .iter()
            .map(|t| t.annotations.as_ref().unwrap().read_only_hint == Some(true))
            .collect();
        assert_eq!(
            ro,
            [
                false, true, true, false, false, false, // sessions
                true, false, false, false, false, false, false, false, // recording, gate_open
                true,  // events
                false, false, false, false, false, false, false, false, true, true, true,
            ]
        );
        for t in &tools {
            let keyed = t.schema_as_json_value()["properties"]
                .get("idempotency_key")
                .is_some();
            let read_only = t.annotations.as_ref().unwrap().read_only_hint == Some(true);
            assert_eq!(keyed, !read_only, "{}: a key exactly on mutations", t.name);
        }
        let usage = tools
            .iter()
            .find(|t| t.name == "logbook_run_usage")
            .unwrap()
            .schema_as_json_value();
        for f in ["input_tokens", "output_tokens", "api_calls"] {
            assert_eq!(usage["properties"][f]["type"], "integer", "{f}");
        }
        let schema = |name: &str| {
            tools
                .iter()
                .find(|t| t.name == name)
                .unwrap()
                .schema_as_json_value()
        };
        assert_eq!(
            schema("logbook_session_stage")["properties"]["action"]["enum"],
            json!(["start", "complete", "fail", "retry"])
        );
        assert_eq!(
            schema("logbook_gate_open")["properties"]["kind"]["enum"],
            json!(["auto", "user-approval", "step-confirm"])
        );
        for f in ["input_tokens", "output_tokens", "api_calls", "duration_ms"] {
            assert_eq!(
                schema("logbook_session_usage")["properties"][f]["type"],
                "integer",
                "{f}"
            );
        }
        // An agent must not decide its own gate: no approve or reject tool,
        // and the gate tool says so.
        assert!(
            names
                .iter()
                .all(|n| !n.contains("approve") && !n.contains("reject")),
            "{names:?}"
        );
        let gate = tools
            .iter()
            .find(|t| t.name == "logbook_gate_open")
            .unwrap();
        let why = gate.description.as_deref().unwrap_or_default();
        assert!(
            why.contains("an agent must not decide its own gate"),
            "{why}"
        );
        let create = tools[0].schema_as_json_value();
        for f in ["idempotency_key", "tags", "context", "pending", "parent"] {
            assert!(create["properties"].get(f).is_some(), "create has {f}");
        }
        client.cancel().await.unwrap();
    });
}
