//! `logbook mcp serve` end to end (issue 5 §4): the real binary as a child
//! process, driven by rmcp's own client (and, where the test needs exact
//! control of the wire, by raw JSON-RPC lines), with every effect checked
//! in the DB through plain SQLite.

use crate::common::{bin, TestEnv};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

pub(crate) type Client = RunningService<RoleClient, ()>;

const TOOLS: [&str; 25] = [
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

fn stderr_path(env: &TestEnv) -> std::path::PathBuf {
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

/// The `data` of a successful call (checks text and structuredContent agree).
#[track_caller]
/// What a replayed mutation's result says of its first attempt (SPEC §5):
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
    let c = env.sql();
    let n = |t: &str| -> i64 {
        c.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
            .unwrap()
    };
    (n("sessions"), n("events"), n("idempotency_keys"))
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
                true, false, false, false, false, false, false, // recording, gate_open
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

#[test]
fn drives_a_session_to_completion_with_actor_mcp_and_cli_identical_json() {
    let env = TestEnv::new();
    let (id, shown) = rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(
            &client,
            "logbook_session_create",
            json!({"title": "ship billing v3", "app": "billing", "tags": ["deploy", "deploy", "v3"],
                   "context": {"ticket": "B-42"}, "goal": null}),
        )
        .await);
        assert_eq!(
            (s["status"].as_str(), s["rev"].as_i64()),
            (Some("active"), Some(1))
        );
        assert_eq!(s["actor"]["type"], "mcp");
        assert_eq!(s["tags"], json!(["deploy", "v3"]));
        let id = s["session_id"].as_str().unwrap().to_owned();
        let s = ok(&call(
            &client,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "deploy", "note": "canary at 10%",
                   "plan_ids": ["pln_1"], "deployment_ids": ["dep-9"]}),
        )
        .await);
        assert_eq!(s["rev"], 2);
        assert_eq!(s["checkpoint"]["step"], "deploy");
        assert_eq!(s["plan_ids"], json!(["pln_1"]));
        let s = ok(&call(
            &client,
            "logbook_session_complete",
            json!({"session_id": id, "result": "shipped v3 to 100%"}),
        )
        .await);
        assert_eq!(
            (s["status"].as_str(), s["rev"].as_i64()),
            (Some("completed"), Some(3))
        );
        let list = ok(&call(
            &client,
            "logbook_session_list",
            json!({"status": ["completed"], "app": "billing"}),
        )
        .await);
        assert_eq!(list["sessions"][0]["session_id"], id.as_str());
        assert_eq!(list["next_cursor"], Value::Null);
        let feed = ok(&call(
            &client,
            "logbook_events",
            json!({"after": 0, "sessions": [id], "limit": 2}),
        )
        .await);
        let types: Vec<&str> = feed["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["created", "checkpoint"]);
        let more = ok(&call(
            &client,
            "logbook_events",
            json!({"after": feed["next_cursor"]}),
        )
        .await);
        assert_eq!(more["events"][0]["type"], "completed");
        let shown = text(&call(&client, "logbook_session_show", json!({"session_id": id})).await);
        client.cancel().await.unwrap();
        (id, shown)
    });
    // The show tool's text is byte-for-byte the CLI's `--json` data.
    let cli = env.json(&["session", "show", &id]);
    let envelope = format!("{{\"ok\":true,\"data\":{shown}}}");
    assert_eq!(cli.stdout.trim(), envelope);
    let c = env.sql();
    let actor: String = c
        .query_row(
            "SELECT actor_type FROM sessions WHERE session_id=?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(actor, "mcp");
    let rows: Vec<(i64, String, String)> = c
        .prepare("SELECT seq, type, actor_type FROM events WHERE session_id=?1 ORDER BY seq")
        .unwrap()
        .query_map([&id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want = [(0, "created"), (1, "checkpoint"), (2, "completed")];
    assert_eq!(rows.len(), 3);
    for ((seq, ty, actor), (ws, wt)) in rows.iter().zip(want) {
        assert_eq!((*seq, ty.as_str(), actor.as_str()), (ws, wt, "mcp"));
    }
}

#[test]
fn each_error_class_has_its_exact_code_and_changes_nothing() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let id = s["session_id"].as_str().unwrap().to_owned();
        let done = ok(&call(&client, "logbook_session_create", json!({"title": "done"})).await);
        let done_id = done["session_id"].as_str().unwrap().to_owned();
        ok(&call(
            &client,
            "logbook_session_complete",
            json!({"session_id": done_id, "result": "r"}),
        )
        .await);
        let before = counts(&env);
        let show_before = env.show(&id);

        let cases: Vec<(&str, Value, &str, &str)> = vec![
            (
                "logbook_session_show",
                json!({"session_id": "ses_xyz"}),
                "INVALID_ARGUMENT",
                "session_id",
            ),
            (
                "logbook_session_checkpoint",
                json!({"session_id": "SES_0000000000000000", "step": "s"}),
                "INVALID_ARGUMENT",
                "session_id",
            ),
            (
                "logbook_session_create",
                json!({"title": "a".repeat(201)}),
                "INVALID_ARGUMENT",
                "title",
            ),
            (
                "logbook_session_checkpoint",
                json!({"session_id": id, "note": "n".repeat(4097)}),
                "INVALID_ARGUMENT",
                "note",
            ),
            (
                "logbook_session_create",
                json!({"title": "t", "colour": "red"}),
                "INVALID_ARGUMENT",
                "colour",
            ),
            (
                "logbook_session_checkpoint",
                json!({"session_id": id, "step": "s", "if_rev": 1}),
                "INVALID_ARGUMENT",
                "if_rev",
            ),
            (
                "logbook_session_create",
                json!({"title": 5}),
                "INVALID_ARGUMENT",
                "title",
            ),
            (
                "logbook_session_create",
                json!({"title": "t", "tags": "deploy"}),
                "INVALID_ARGUMENT",
                "tags",
            ),
            (
                "logbook_session_create",
                json!({"title": "t", "context": "[1]"}),
                "INVALID_ARGUMENT",
                "context",
            ),
            (
                "logbook_session_create",
                json!({"title": "a\u{0}b"}),
                "INVALID_ARGUMENT",
                "title",
            ),
            (
                "logbook_session_create",
                json!({}),
                "INVALID_ARGUMENT",
                "title",
            ),
            (
                "logbook_session_list",
                json!({"limit": 0}),
                "INVALID_ARGUMENT",
                "limit",
            ),
            (
                "logbook_session_list",
                json!({"limit": "ten"}),
                "INVALID_ARGUMENT",
                "limit",
            ),
            (
                "logbook_session_list",
                json!({"status": ["done"]}),
                "INVALID_ARGUMENT",
                "status",
            ),
            (
                "logbook_session_list",
                json!({"since": "2030-01-01T00:00:00"}),
                "INVALID_ARGUMENT",
                "since",
            ),
            (
                "logbook_events",
                json!({"after": "-1"}),
                "INVALID_ARGUMENT",
                "after",
            ),
            (
                "logbook_session_checkpoint",
                json!({"session_id": id}),
                "INVALID_ARGUMENT",
                "checkpoint",
            ),
            (
                "logbook_session_checkpoint",
                json!({"session_id": "ses_0000000000000000", "step": "s"}),
                "SESSION_NOT_FOUND",
                "",
            ),
            (
                "logbook_session_create",
                json!({"title": "t", "parent": "ses_0000000000000000"}),
                "SESSION_NOT_FOUND",
                "",
            ),
            (
                "logbook_session_complete",
                json!({"session_id": done_id, "result": "again"}),
                "SESSION_INVALID_TRANSITION",
                "",
            ),
            (
                "logbook_session_checkpoint",
                json!({"session_id": done_id, "step": "late"}),
                "SESSION_INVALID_TRANSITION",
                "",
            ),
            (
                "logbook_session_fail",
                json!({"session_id": done_id, "reason": "late"}),
                "SESSION_INVALID_TRANSITION",
                "",
            ),
        ];
        for (tool, args, code, field) in cases {
            let e = err(&call(&client, tool, args.clone()).await, code);
            if !field.is_empty() && field != "checkpoint" {
                assert_eq!(e["details"]["field"], field, "{tool} {args}: {e}");
            }
            if code == "SESSION_INVALID_TRANSITION" {
                assert_eq!(e["details"]["status"], "completed", "{e}");
            }
            assert_eq!(counts(&env), before, "{tool} {args} changed the DB");
        }
        assert_eq!(env.show(&id), show_before);
        // An unknown tool is a protocol error, as MCP specifies.
        let r = client
            .call_tool(CallToolRequestParams::new("logbook_session_cancel"))
            .await;
        let Err(rmcp::ServiceError::McpError(e)) = r else {
            panic!("expected a JSON-RPC error, got {r:?}")
        };
        assert_eq!(e.code.0, -32602);
        assert_eq!(e.data.unwrap()["code"], "INVALID_ARGUMENT");
        client.cancel().await.unwrap();
    });
}

#[test]
fn store_busy_while_another_connection_holds_the_write_lock() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[("LOGBOOK_BUSY_TIMEOUT_MS", "200")]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let id = s["session_id"].as_str().unwrap().to_owned();
        let before = counts(&env);
        let holder = env.sql();
        holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let t0 = std::time::Instant::now();
        let args = json!({"session_id": id, "step": "s"});
        let e = err(
            &call(&client, "logbook_session_checkpoint", args.clone()).await,
            "STORE_BUSY",
        );
        assert!(t0.elapsed() < std::time::Duration::from_secs(3));
        assert_eq!(e["details"]["busy_timeout_ms"], 200, "{e}");
        holder.execute_batch("ROLLBACK").unwrap();
        assert_eq!(counts(&env), before);
        // The same call succeeds once the lock is gone (retryable).
        assert_eq!(
            ok(&call(&client, "logbook_session_checkpoint", args).await)["rev"],
            2
        );
        client.cancel().await.unwrap();
    });
}

const SK: &str = "sk-EXAMPLE0000EXAMPLE0000";
const GHP: &str = "ghp_EXAMPLE0EXAMPLE0EXAMPLE0EXAMPLE00000";

#[test]
fn secrets_are_redacted_in_the_db_and_never_echoed_in_errors() {
    let env = TestEnv::new();
    let mut replies = String::new();
    let id = rt().block_on(async {
        let client = connect(&env, &[("RUST_LOG", "trace")]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let id = s["session_id"].as_str().unwrap().to_owned();
        let s = ok(&call(
            &client,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "s", "note": format!("pushed with {GHP}")}),
        )
        .await);
        assert_eq!(s["checkpoint"]["note"], "pushed with [REDACTED]");
        let failures = [
            (
                "logbook_session_checkpoint",
                json!({"session_id": id, "note": format!("{}{SK}", "a".repeat(4097 - SK.len()))}),
            ),
            (
                "logbook_session_checkpoint",
                json!({"session_id": "ses_0000000000000000", "note": GHP}),
            ),
            ("logbook_session_list", json!({"limit": SK})),
            ("logbook_session_list", json!({"cursor": GHP})),
            ("logbook_session_create", json!({"title": "t", GHP: 1})),
            ("logbook_session_show", json!({"session_id": SK})),
            ("logbook_events", json!({"after": GHP})),
        ];
        for (tool, args) in failures {
            let r = call(&client, tool, args).await;
            assert_eq!(r.is_error, Some(true));
            replies.push_str(&text(&r));
        }
        client.cancel().await.unwrap();
        id
    });
    for secret in [SK, GHP] {
        assert!(
            !replies.contains(secret),
            "an error echoed a secret: {replies}"
        );
        let stderr = std::fs::read_to_string(stderr_path(&env)).unwrap();
        assert!(!stderr.contains(secret), "stderr holds a secret");
        for suffix in ["", "-wal"] {
            let mut p = env.db.clone().into_os_string();
            p.push(suffix);
            if let Ok(bytes) = std::fs::read(&p) {
                let hay = String::from_utf8_lossy(&bytes);
                assert!(!hay.contains(secret), "{suffix} file holds a secret");
            }
        }
    }
    let note: String = env
        .sql()
        .query_row(
            "SELECT detail FROM events WHERE session_id=?1 AND type='checkpoint'",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(note, "pushed with [REDACTED]");
}

#[test]
fn an_actor_in_the_input_is_refused_and_never_recorded() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let e = err(
            &call(
                &client,
                "logbook_session_create",
                json!({"title": "t", "actor": {"type": "cli", "id": "root"}}),
            )
            .await,
            "INVALID_ARGUMENT",
        );
        assert_eq!(e["details"]["field"], "actor");
        assert_eq!(counts(&env).0, 0);
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let id = s["session_id"].as_str().unwrap().to_owned();
        err(
            &call(
                &client,
                "logbook_session_complete",
                json!({"session_id": id, "result": "r", "actor_type": "cli"}),
            )
            .await,
            "INVALID_ARGUMENT",
        );
        client.cancel().await.unwrap();
    });
    let c = env.sql();
    let other: i64 = c
        .query_row(
            "SELECT (SELECT count(*) FROM sessions WHERE actor_type<>'mcp') + (SELECT count(*) FROM events WHERE actor_type<>'mcp')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(other, 0);
}

#[test]
fn an_idempotency_key_retry_applies_once() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let create = json!({"title": "t", "idempotency_key": "create-1"});
        let a = call(&client, "logbook_session_create", create.clone()).await;
        let b = call(&client, "logbook_session_create", create).await;
        assert_eq!(ok(&a), ok(&b));
        // A replay says so, and what its first attempt did (SPEC §5).
        assert_eq!(replayed(&a), None);
        assert_eq!(replayed(&b), Some(json!({"rev": 1, "seq": 0})));
        let id = ok(&a)["session_id"].as_str().unwrap().to_owned();
        let args = json!({"session_id": id, "step": "s1", "idempotency_key": "k-1"});
        let first = call(&client, "logbook_session_checkpoint", args.clone()).await;
        let again = call(&client, "logbook_session_checkpoint", args).await;
        assert_eq!(ok(&first), ok(&again));
        assert_eq!(ok(&again)["rev"], 2);
        assert_eq!(replayed(&first), None);
        assert_eq!(replayed(&again), Some(json!({"rev": 2, "seq": 1})));
        let other = json!({"session_id": id, "step": "s2", "idempotency_key": "k-1"});
        err(
            &call(&client, "logbook_session_checkpoint", other).await,
            "INVALID_ARGUMENT",
        );
        client.cancel().await.unwrap();
    });
    assert_eq!(counts(&env).0, 1);
    assert_eq!(counts(&env).1, 2, "created + one checkpoint");
}

#[test]
fn an_idle_server_holds_no_read_transaction_c14() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let id = s["session_id"].as_str().unwrap().to_owned();
        for i in 0..50 {
            ok(&call(
                &client,
                "logbook_session_checkpoint",
                json!({"session_id": id, "step": format!("s{i}")}),
            )
            .await);
        }
        ok(&call(&client, "logbook_session_show", json!({"session_id": id})).await);
        ok(&call(&client, "logbook_session_list", json!({})).await);
        // The server now idles between calls, its process alive.
        let c = env.sql();
        let (busy, log, done): (i64, i64, i64) = c
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!(
            (busy, log, done),
            (0, 0, 0),
            "TRUNCATE checkpoint went through"
        );
        let mut wal = env.db.clone().into_os_string();
        wal.push("-wal");
        assert_eq!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0), 0);
        // And the server still works afterwards.
        ok(&call(
            &client,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "after"}),
        )
        .await);
        client.cancel().await.unwrap();
    });
}

/// A raw stdio session: sends `lines` (after the handshake), closes stdin,
/// and returns (stdout lines, stderr, exit code).
fn raw_session(env: &TestEnv, db: &std::path::Path, lines: &[Value]) -> (Vec<Value>, String, i32) {
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

fn tools_call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
}

fn reply_body(v: &Value) -> Value {
    serde_json::from_str(v["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

#[test]
fn stdout_is_only_protocol_and_a_bad_db_is_a_stderr_diagnostic_then_a_tool_error() {
    let env = TestEnv::new();
    let file = env.dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let db = file.join("ledger.db");
    let (out, stderr, code) = raw_session(
        &env,
        &db,
        &[tools_call(
            1,
            "logbook_session_create",
            json!({"title": "t"}),
        )],
    );
    assert_eq!(code, 0, "exits 0 when stdin closes; stderr: {stderr}");
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[1]["id"], 1);
    assert_eq!(out[1]["result"]["isError"], true);
    assert_eq!(reply_body(&out[1])["code"], "STORE_IO");
    assert!(stderr.contains("error[STORE_IO]"), "{stderr}");
}

#[test]
fn the_same_request_id_twice_applies_once_c28() {
    let env = TestEnv::new();
    let id = env.create("t");
    let step = tools_call(
        7,
        "logbook_session_checkpoint",
        json!({"session_id": id, "step": "s1"}),
    );
    let other = tools_call(
        7,
        "logbook_session_checkpoint",
        json!({"session_id": id, "step": "s2"}),
    );
    let (out, stderr, code) = raw_session(&env, &env.db, &[step.clone(), step, other]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out[1], out[2], "the repeat gets the first reply");
    assert_eq!(reply_body(&out[1])["rev"], 2);
    assert_eq!(out[3]["result"]["isError"], true);
    assert_eq!(reply_body(&out[3])["code"], "INVALID_ARGUMENT");
    assert_eq!(reply_body(&out[3])["details"]["field"], "request_id");
    assert_eq!(counts(&env).1, 2, "created + one checkpoint");
}

#[test]
fn a_failed_write_leaves_no_lock_and_no_partial_change_c03() {
    let env = TestEnv::new();
    let id = env.create("t");
    env.sql()
        .execute_batch(
            "CREATE TRIGGER boom BEFORE INSERT ON events WHEN instr(coalesce(NEW.detail,'')||coalesce(NEW.data,''),'BOOM') BEGIN SELECT RAISE(ABORT,'boom'); END;",
        )
        .unwrap();
    let before = env.show(&id);
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let r = call(
            &client,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "s", "note": "BOOM"}),
        )
        .await;
        assert_eq!(r.is_error, Some(true), "{}", text(&r));
        assert_eq!(env.show(&id), before);
        // Another writer gets the lock at once while the server stays up.
        let other = env.sql();
        other.busy_timeout(std::time::Duration::ZERO).unwrap();
        other.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").unwrap();
        assert_eq!(env.json(&["session", "create", "--title", "x"]).code, 0);
        let s = ok(&call(
            &client,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "s2"}),
        )
        .await);
        assert_eq!(s["rev"], 2);
        client.cancel().await.unwrap();
    });
}

#[test]
fn two_servers_and_the_cli_append_gap_free_across_a_kill_c10() {
    let env = TestEnv::new();
    let id = env.create("t");
    let cli_loop = |tag: &'static str| {
        let db = env.db.clone();
        let home = env.dir.path().to_path_buf();
        let id = id.clone();
        std::thread::spawn(move || {
            for i in 0..20 {
                let o = Command::new(bin())
                    .env_clear()
                    .env("HOME", &home)
                    .args(["--db"])
                    .arg(&db)
                    .args([
                        "session",
                        "checkpoint",
                        &id,
                        "--step",
                        &format!("{tag}{i}"),
                        "--json",
                    ])
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
            }
        })
    };
    for round in ["a", "b"] {
        let cli = cli_loop(if round == "a" { "c" } else { "d" });
        rt().block_on(async {
            let client = connect(&env, &[]).await;
            for i in 0..20 {
                ok(&call(
                    &client,
                    "logbook_session_checkpoint",
                    json!({"session_id": id, "step": format!("{round}{i}")}),
                )
                .await);
            }
            // Dropping the transport kills the server process (kill, not a clean close).
            drop(client);
        });
        cli.join().unwrap();
    }
    let c = env.sql();
    let (n, lo, hi): (i64, i64, i64) = c
        .query_row(
            "SELECT count(*), min(seq), max(seq) FROM events WHERE session_id=?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((n, lo, hi), (81, 0, 80));
    let mcp: i64 = c
        .query_row(
            "SELECT count(*) FROM events WHERE session_id=?1 AND actor_type='mcp'",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(mcp, 40);
}

#[test]
fn stdin_closed_before_the_handshake_exits_zero_with_empty_stdout() {
    let env = TestEnv::new();
    let o = server_command(&env, &env.db, &[])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
}

/// (runs) row count, alongside [`counts`].
fn run_count(env: &TestEnv) -> i64 {
    env.sql()
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn drives_a_run_to_completion_with_actor_mcp_and_session_usage_rolled_up() {
    let env = TestEnv::new();
    let (sid, rid, shown) = rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let sid = s["session_id"].as_str().unwrap().to_owned();
        let create = json!({"session_id": sid, "input": {"messages": [{"role": "user", "content": "Hello"}]},
                            "metadata": {"request_id": "req-789"}, "idempotency_key": "run-1"});
        let r = ok(&call(&client, "logbook_run_create", create.clone()).await);
        assert_eq!(r["status"], "pending");
        assert_eq!(r["session_id"], sid.as_str());
        assert_eq!(r["metadata"], json!({"request_id": "req-789"}));
        // A retry with the same key returns the same run, adds nothing, and
        // says what the first attempt did.
        let again = call(&client, "logbook_run_create", create).await;
        assert_eq!(ok(&again), r);
        assert_eq!(replayed(&again), Some(json!({"rev": 2, "seq": 1})));
        let rid = r["run_id"].as_str().unwrap().to_owned();
        let run = |extra: Value| {
            let mut a = json!({"run_id": rid});
            a.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            a
        };
        let r = ok(&call(&client, "logbook_run_start", run(json!({}))).await);
        assert_eq!(r["status"], "running");
        let active = ok(&call(&client, "logbook_run_active", json!({"session_id": sid})).await);
        assert_eq!(active["run"]["run_id"], rid.as_str());
        ok(&call(
            &client,
            "logbook_run_usage",
            run(json!({"input_tokens": 100, "output_tokens": 50, "api_calls": 1})),
        )
        .await);
        let r = ok(&call(
            &client,
            "logbook_run_usage",
            run(json!({"input_tokens": 20, "output_tokens": 30, "idempotency_key": "u-2"})),
        )
        .await);
        assert_eq!(
            r["usage"],
            json!({"input_tokens": 120, "output_tokens": 80, "api_calls": 1})
        );
        let r = ok(&call(&client, "logbook_run_turn", run(json!({}))).await);
        assert_eq!(r["turn_count"], 1);
        let r = ok(&call(
            &client,
            "logbook_run_complete",
            run(json!({"output": {"content": "Hello!", "stop_reason": "end_turn"}})),
        )
        .await);
        assert_eq!(r["status"], "completed");
        assert!(r["ended_at_ms"].is_i64());
        assert_eq!(r["output"]["stop_reason"], "end_turn");
        let active = ok(&call(&client, "logbook_run_active", json!({"session_id": sid})).await);
        assert_eq!(active, json!({"run": null}));
        let list = ok(&call(
            &client,
            "logbook_run_list",
            json!({"session_id": sid, "status": ["completed"]}),
        )
        .await);
        assert_eq!(list["runs"].as_array().unwrap().len(), 1);
        assert_eq!(list["runs"][0]["run_id"], rid.as_str());
        let none = ok(&call(
            &client,
            "logbook_run_list",
            json!({"session_id": sid, "status": ["pending", "running"]}),
        )
        .await);
        assert_eq!(none, json!({"runs": []}));
        let shown = text(&call(&client, "logbook_run_show", json!({"run_id": rid})).await);
        client.cancel().await.unwrap();
        (sid, rid, shown)
    });
    // The show tool's text is byte-for-byte the CLI's `--json` data.
    let cli = env.json(&["run", "show", &rid]);
    assert_eq!(
        cli.stdout.trim(),
        format!("{{\"ok\":true,\"data\":{shown}}}")
    );
    let c = env.sql();
    let row: (String, i64, i64, i64, i64, Option<i64>, String) = c
        .query_row(
            "SELECT status, input_tokens, output_tokens, api_calls, turn_count, ended_at_ms, \
             json_extract(output, '$.content') FROM runs WHERE run_id = ?1",
            [&rid],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        (row.0.as_str(), row.1, row.2, row.3, row.4, row.6.as_str()),
        ("completed", 120, 80, 1, 1, "Hello!")
    );
    assert!(row.5.is_some());
    let usage: (i64, i64, i64, i64) = c
        .query_row(
            "SELECT input_tokens, output_tokens, api_calls, rev FROM sessions WHERE session_id = ?1",
            [&sid],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        usage,
        (120, 80, 1, 7),
        "usage rolled up; rev 1 + six run changes"
    );
    let rows: Vec<(i64, String, String, Option<String>)> = c
        .prepare(
            "SELECT seq, type, actor_type, run_id FROM events WHERE session_id=?1 ORDER BY seq",
        )
        .unwrap()
        .query_map([&sid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want = [
        "created",
        "run_created",
        "run_started",
        "run_usage",
        "run_usage",
        "run_turn",
        "run_completed",
    ];
    assert_eq!(rows.len(), want.len(), "{rows:?}");
    for (i, ((seq, ty, actor, run_id), w)) in rows.iter().zip(want).enumerate() {
        assert_eq!((*seq, ty.as_str(), actor.as_str()), (i as i64, w, "mcp"));
        let want_run = (i > 0).then_some(rid.as_str());
        assert_eq!(run_id.as_deref(), want_run, "{ty}");
    }
    assert_eq!(run_count(&env), 1);
    let keys: i64 = c
        .query_row("SELECT count(*) FROM idempotency_keys", [], |r| r.get(0))
        .unwrap();
    assert_eq!(keys, 2);
    assert_eq!(env.json(&["verify", &sid]).code, 0);
}

#[test]
fn each_run_error_class_has_its_exact_code_and_changes_nothing() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let sid = s["session_id"].as_str().unwrap().to_owned();
        let new_run = || call(&client, "logbook_run_create", json!({"session_id": sid}));
        let pending = ok(&new_run().await)["run_id"].as_str().unwrap().to_owned();
        let running = ok(&new_run().await)["run_id"].as_str().unwrap().to_owned();
        ok(&call(&client, "logbook_run_start", json!({"run_id": running})).await);
        let done = ok(&new_run().await)["run_id"].as_str().unwrap().to_owned();
        ok(&call(&client, "logbook_run_cancel", json!({"run_id": done})).await);
        // At the edge: 0 and 2^53-1 are accepted (on a run of another session).
        let s2 = ok(&call(&client, "logbook_session_create", json!({"title": "edge"})).await);
        let s2 = s2["session_id"].as_str().unwrap().to_owned();
        let edge = ok(&call(&client, "logbook_run_create", json!({"session_id": s2})).await);
        let edge = edge["run_id"].as_str().unwrap().to_owned();
        ok(&call(&client, "logbook_run_start", json!({"run_id": edge})).await);
        let r = ok(&call(
            &client,
            "logbook_run_usage",
            json!({"run_id": edge, "input_tokens": 0, "output_tokens": 9_007_199_254_740_991_i64}),
        )
        .await);
        assert_eq!(r["usage"]["output_tokens"], 9_007_199_254_740_991_i64);
        let ended = ok(&call(&client, "logbook_session_create", json!({"title": "ended"})).await);
        let ended = ended["session_id"].as_str().unwrap().to_owned();
        ok(&call(
            &client,
            "logbook_session_complete",
            json!({"session_id": ended, "result": "r"}),
        )
        .await);

        let before = (counts(&env), run_count(&env));
        let shows: Vec<String> = [&sid, &s2].iter().map(|s| env.show(s)).collect();
        let missing = "run_0000000000000000";
        let cases: Vec<(&str, Value, &str, &str)> = vec![
            (
                "logbook_run_show",
                json!({"run_id": missing}),
                "RUN_NOT_FOUND",
                "",
            ),
            (
                "logbook_run_start",
                json!({"run_id": missing}),
                "RUN_NOT_FOUND",
                "",
            ),
            (
                "logbook_run_cancel",
                json!({"run_id": missing}),
                "RUN_NOT_FOUND",
                "",
            ),
            (
                "logbook_run_start",
                json!({"run_id": done}),
                "RUN_INVALID_TRANSITION",
                "",
            ),
            (
                "logbook_run_complete",
                json!({"run_id": pending}),
                "RUN_INVALID_TRANSITION",
                "",
            ),
            (
                "logbook_run_turn",
                json!({"run_id": pending}),
                "RUN_INVALID_TRANSITION",
                "",
            ),
            (
                "logbook_run_usage",
                json!({"run_id": pending, "api_calls": 1}),
                "RUN_INVALID_TRANSITION",
                "",
            ),
            (
                "logbook_run_fail",
                json!({"run_id": done, "code": "c", "message": "m"}),
                "RUN_INVALID_TRANSITION",
                "",
            ),
            (
                "logbook_run_timeout",
                json!({"run_id": done}),
                "RUN_INVALID_TRANSITION",
                "",
            ),
            // A second running run in the session.
            (
                "logbook_run_start",
                json!({"run_id": pending}),
                "RUN_INVALID_TRANSITION",
                "",
            ),
            (
                "logbook_run_show",
                json!({"run_id": "run_xyz"}),
                "INVALID_ARGUMENT",
                "run_id",
            ),
            (
                "logbook_run_start",
                json!({"run_id": 7}),
                "INVALID_ARGUMENT",
                "run_id",
            ),
            ("logbook_run_start", json!({}), "INVALID_ARGUMENT", "run_id"),
            (
                "logbook_run_start",
                json!({"run_id": running, "if_rev": 3}),
                "INVALID_ARGUMENT",
                "if_rev",
            ),
            (
                "logbook_run_start",
                json!({"run_id": pending, "actor": "root"}),
                "INVALID_ARGUMENT",
                "actor",
            ),
            (
                "logbook_run_usage",
                json!({"run_id": running}),
                "INVALID_ARGUMENT",
                "usage",
            ),
            (
                "logbook_run_usage",
                json!({"run_id": running, "input_tokens": -1}),
                "INVALID_ARGUMENT",
                "input_tokens",
            ),
            (
                "logbook_run_usage",
                json!({"run_id": running, "output_tokens": 9_007_199_254_740_992_i64}),
                "INVALID_ARGUMENT",
                "output_tokens",
            ),
            (
                "logbook_run_usage",
                json!({"run_id": running, "api_calls": 18_446_744_073_709_551_615_u64}),
                "INVALID_ARGUMENT",
                "api_calls",
            ),
            (
                "logbook_run_usage",
                json!({"run_id": running, "api_calls": 1.5}),
                "INVALID_ARGUMENT",
                "api_calls",
            ),
            (
                "logbook_run_usage",
                json!({"run_id": running, "api_calls": "1"}),
                "INVALID_ARGUMENT",
                "api_calls",
            ),
            // The run's total would pass 2^53-1.
            (
                "logbook_run_usage",
                json!({"run_id": edge, "output_tokens": 1}),
                "INVALID_ARGUMENT",
                "output_tokens",
            ),
            (
                "logbook_run_create",
                json!({"session_id": sid, "input": [1]}),
                "INVALID_ARGUMENT",
                "input",
            ),
            (
                "logbook_run_complete",
                json!({"run_id": running, "output": "done"}),
                "INVALID_ARGUMENT",
                "output",
            ),
            (
                "logbook_run_fail",
                json!({"run_id": running, "code": "", "message": "m"}),
                "INVALID_ARGUMENT",
                "code",
            ),
            (
                "logbook_run_fail",
                json!({"run_id": running, "code": "c"}),
                "INVALID_ARGUMENT",
                "message",
            ),
            (
                "logbook_run_list",
                json!({"session_id": sid, "status": ["done"]}),
                "INVALID_ARGUMENT",
                "status",
            ),
            (
                "logbook_run_create",
                json!({"session_id": "ses_0000000000000000"}),
                "SESSION_NOT_FOUND",
                "",
            ),
            (
                "logbook_run_list",
                json!({"session_id": "ses_0000000000000000"}),
                "SESSION_NOT_FOUND",
                "",
            ),
            (
                "logbook_run_active",
                json!({"session_id": "ses_0000000000000000"}),
                "SESSION_NOT_FOUND",
                "",
            ),
            (
                "logbook_run_create",
                json!({"session_id": ended}),
                "SESSION_INVALID_TRANSITION",
                "",
            ),
        ];
        for (tool, args, code, field) in cases {
            let e = err(&call(&client, tool, args.clone()).await, code);
            if !field.is_empty() {
                assert_eq!(e["details"]["field"], field, "{tool} {args}: {e}");
            }
            assert_eq!(
                (counts(&env), run_count(&env)),
                before,
                "{tool} {args} changed the DB"
            );
        }
        let e = err(
            &call(&client, "logbook_run_start", json!({"run_id": pending})).await,
            "RUN_INVALID_TRANSITION",
        );
        assert_eq!(e["details"]["running_run_id"], running.as_str(), "{e}");
        let after: Vec<String> = [&sid, &s2].iter().map(|s| env.show(s)).collect();
        assert_eq!(after, shows);
        client.cancel().await.unwrap();
    });
}

/// Issue 5 §3: with an idle `mcp serve` attached, a reader holding a long
/// transaction pins the WAL while writers go on; once the reader ends, the
/// WAL drops back under `journal_size_limit` (64 MiB): the idle server holds
/// nothing that keeps it large.
#[test]
fn an_idle_server_and_a_pinning_reader_do_not_grow_the_wal_for_good() {
    use logbook::{CheckpointRequest, Ledger, LedgerOptions, Mutation, SyncMode};
    let env = TestEnv::new();
    let limit = u64::try_from(logbook::store::open::JOURNAL_SIZE_LIMIT_BYTES).unwrap();
    let mut wal = env.db.clone().into_os_string();
    wal.push("-wal");
    let wal_len = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let id = s["session_id"].as_str().unwrap().to_owned();
        ok(&call(&client, "logbook_session_show", json!({"session_id": id})).await);
        let writer = Ledger::open(LedgerOptions {
            sync: SyncMode::Normal,
            ..LedgerOptions::at(&env.db)
        })
        .unwrap();
        let note = "n".repeat(1024);
        let reader = env.sql();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        let mut n = 0;
        while wal_len() <= limit && n < 80_000 {
            let req = CheckpointRequest {
                step: Some(format!("k{n}")),
                note: Some(note.clone()),
                ..Default::default()
            };
            writer.checkpoint(&id, req, &Mutation::default()).unwrap();
            n += 1;
        }
        let pinned = wal_len();
        assert!(pinned > limit, "the reader should pin the WAL: {pinned}");
        reader.execute_batch("COMMIT").unwrap();
        for k in 0..100 {
            let req = CheckpointRequest {
                step: Some(format!("after{k}")),
                ..Default::default()
            };
            writer.checkpoint(&id, req, &Mutation::default()).unwrap();
        }
        let after = wal_len();
        assert!(
            after <= limit,
            "-wal is {after} bytes after the reader left (was {pinned})"
        );
        // The idle server still answers, and sees every write.
        let shown = ok(&call(&client, "logbook_session_show", json!({"session_id": id})).await);
        assert_eq!(shown["session"]["rev"], 1 + n + 100);
        client.cancel().await.unwrap();
    });
}

/// An unknown JSON-RPC method gets -32601 with a fixed message: rmcp's
/// default repeated the method name, which could hold a secret (found by
/// adversarial testing).
#[test]
fn an_unknown_method_is_not_repeated_in_the_error() {
    let env = TestEnv::new();
    let db = env.path().to_path_buf();
    let (out, stderr, code) = raw_session(
        &env,
        &db,
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "sk-abcdefghijklmnopqrstuvwxyz", "params": {}}),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        out[1],
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "method not found"}})
    );
    assert!(!stderr.contains("abcdefghijklm"));
}
