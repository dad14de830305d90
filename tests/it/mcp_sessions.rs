//! The session tools of `logbook mcp serve`, end to end over rmcp's own
//! client: a session driven to completion records actor `mcp` and returns
//! the same JSON as the CLI; each error class has its exact code and
//! changes nothing; STORE_BUSY under another connection's lock; secrets
//! redacted in the DB and never echoed; an actor in the input refused; an
//! idempotency-key retry applied once.

use crate::common::*;
use crate::mcp::{call, connect, counts, err, ok, replayed, rt, stderr_path, text};
use rmcp::model::CallToolRequestParams;
use serde_json::{json, Value};

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
        // On PostgreSQL the feed shows an event once every older
        // transaction of the server has ended (another test's may still
        // run): wait for it, within 30 s.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let feed = loop {
            let feed = ok(&call(
                &client,
                "logbook_events",
                json!({"after": 0, "sessions": [id], "limit": 2}),
            )
            .await);
            if !on_pg()
                || feed["events"].as_array().unwrap().len() == 2
                || std::time::Instant::now() > until
            {
                break feed;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let types: Vec<&str> = feed["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["created", "checkpoint"]);
        let more = loop {
            let more = ok(&call(
                &client,
                "logbook_events",
                json!({"after": feed["next_cursor"]}),
            )
            .await);
            if !on_pg()
                || more["events"].as_array().is_some_and(|e| !e.is_empty())
                || std::time::Instant::now() > until
            {
                break more;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(more["events"][0]["type"], "completed");
        let shown = text(&call(&client, "logbook_session_show", json!({"session_id": id})).await);
        client.cancel().await.unwrap();
        (id, shown)
    });
    // The show tool's text is byte-for-byte the CLI's `--json` data.
    let cli = env.json(&["session", "show", &id]);
    let envelope = format!("{{\"ok\":true,\"data\":{shown}}}");
    assert_eq!(cli.stdout.trim(), envelope);
    let actor = env.rows(
        "SELECT actor_type FROM sessions WHERE session_id=$1",
        &[&id],
    );
    assert_eq!(actor[0][0], "mcp");
    let rows: Vec<(i64, String, String)> = env
        .rows(
            "SELECT seq, type, actor_type FROM events WHERE session_id=$1 ORDER BY seq",
            &[&id],
        )
        .into_iter()
        .map(|r| {
            (
                r[0].as_i64().unwrap(),
                r[1].as_str().unwrap().to_owned(),
                r[2].as_str().unwrap().to_owned(),
            )
        })
        .collect();
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
        let holder = env.hold_write_lock(&id);
        let t0 = std::time::Instant::now();
        let args = json!({"session_id": id, "step": "s"});
        let e = err(
            &call(&client, "logbook_session_checkpoint", args.clone()).await,
            "STORE_BUSY",
        );
        assert!(t0.elapsed() < std::time::Duration::from_secs(3));
        assert_eq!(e["details"]["busy_timeout_ms"], 200, "{e}");
        holder.release();
        assert_eq!(counts(&env), before);
        // The same call succeeds once the lock is gone (retryable).
        assert_eq!(
            ok(&call(&client, "logbook_session_checkpoint", args).await)["rev"],
            2
        );
        client.cancel().await.unwrap();
    });
}

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
    let note = env.rows(
        "SELECT detail FROM events WHERE session_id=$1 AND type='checkpoint'",
        &[&id],
    );
    assert_eq!(note[0][0], "pushed with [REDACTED]");
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
    let other = env.scalar(
        "SELECT (SELECT count(*) FROM sessions WHERE actor_type<>'mcp') + (SELECT count(*) FROM events WHERE actor_type<>'mcp')",
    );
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
        // A replay says so, and what its first attempt did (docs/design.md, "CLI").
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

/// README says where an MCP result carries `replayed`: `_meta.replayed`
/// and a second text block, never inside `structuredContent` (which
/// [`crate::mcp::ok`] checks is the data alone).
#[test]
fn readme_says_where_mcp_results_carry_replayed() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "an MCP tool result carries it as `_meta.replayed` and as a second text block `{\"replayed\":{\"rev\":R,\"seq\":S}}`"
        ),
        "README's --idempotency-key paragraph"
    );
    assert!(!flat.contains("MCP tool results carry the same member"));
}
