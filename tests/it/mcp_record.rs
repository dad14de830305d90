//! The MCP tools an agent records the rest of its work with (docs/design.md,
//! "MCP"): `logbook_session_events`, `_stage`, `_usage`, `_event`, `_start`,
//! `_pause`, `_resume` and `logbook_gate_open`, end to end over a real
//! `logbook mcp serve`, every effect checked in the DB with plain SQLite.

use crate::common::TestEnv;
use crate::mcp::{call, connect, counts, err, ok, replayed, rt, text, Client};
use serde_json::{json, Value};

/// The newest event of `id`: (seq, type, actor_type, detail, data).
fn last_event(env: &TestEnv, id: &str) -> (i64, String, String, Option<String>, Option<Value>) {
    let r = env
        .rows(
            "SELECT seq, type, actor_type, detail, data FROM events
             WHERE session_id = $1 ORDER BY seq DESC LIMIT 1",
            &[id],
        )
        .remove(0);
    (
        r[0].as_i64().unwrap(),
        r[1].as_str().unwrap().to_owned(),
        r[2].as_str().unwrap().to_owned(),
        r[3].as_str().map(str::to_owned),
        r[4].as_str().map(|d| serde_json::from_str(d).unwrap()),
    )
}

/// Checks a mutation's result: the session at `rev` with `status`, the
/// same object `session show --json` prints as `session`, and one new
/// event of `event_type` by actor `mcp` at seq `rev - 1`; returns that
/// event's (detail, data).
#[track_caller]
fn applied(
    env: &TestEnv,
    s: &Value,
    rev: i64,
    status: &str,
    event_type: &str,
) -> (Option<String>, Option<Value>) {
    let id = s["session_id"].as_str().unwrap();
    assert_eq!(
        (s["rev"].as_i64(), s["status"].as_str()),
        (Some(rev), Some(status)),
        "{s}"
    );
    assert_eq!(&env.json(&["session", "show", id]).data()["session"], s);
    let (seq, ty, actor, detail, data) = last_event(env, id);
    assert_eq!(
        (seq, ty.as_str(), actor.as_str()),
        (rev - 1, event_type, "mcp")
    );
    (detail, data)
}

/// As [`applied`] for a mutation that writes its own event (`first`, at
/// seq `rev - 1`) and then the status change's (`last`, at seq `rev`).
fn applied_then(
    env: &TestEnv,
    s: &Value,
    rev: i64,
    status: &str,
    first: &str,
    last: &str,
) -> (Option<String>, Option<Value>) {
    let id = s["session_id"].as_str().unwrap();
    assert_eq!(
        (s["rev"].as_i64(), s["status"].as_str()),
        (Some(rev), Some(status)),
        "{s}"
    );
    assert_eq!(&env.json(&["session", "show", id]).data()["session"], s);
    let types = crate::common::event_types(env, id);
    assert_eq!(types[(rev - 1) as usize], first);
    let (seq, ty, actor, detail, data) = last_event(env, id);
    assert_eq!((seq, ty.as_str(), actor.as_str()), (rev, last, "mcp"));
    (detail, data)
}

async fn create(client: &Client) -> String {
    let s = ok(&call(client, "logbook_session_create", json!({"title": "t"})).await);
    s["session_id"].as_str().unwrap().to_owned()
}

#[test]
fn each_new_tool_applies_one_event_by_mcp_and_returns_the_session() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let id = create(&client).await;

        let s = ok(&call(
            &client,
            "logbook_session_stage",
            json!({"session_id": id, "action": "retry", "stage": "verify", "attempt": 2,
                   "reason": "flaky network"}),
        )
        .await);
        assert_eq!(s["stage"], "verify");
        let (detail, data) = applied(&env, &s, 2, "active", "stage_retrying");
        assert_eq!(detail.as_deref(), Some("flaky network"));
        assert_eq!(data, Some(json!({"stage": "verify", "attempt": 2})));

        let s = ok(&call(
            &client,
            "logbook_session_usage",
            json!({"session_id": id, "input_tokens": 1200, "output_tokens": 300,
                   "api_calls": 1, "duration_ms": 5000}),
        )
        .await);
        assert_eq!(
            s["usage"],
            json!({"input_tokens": 1200, "output_tokens": 300, "api_calls": 1, "duration_ms": 5000})
        );
        let (_, data) = applied(&env, &s, 3, "active", "usage_recorded");
        assert_eq!(
            data,
            Some(json!({"input_tokens": 1200, "output_tokens": 300, "api_calls": 1, "duration_ms": 5000}))
        );

        let s = ok(&call(
            &client,
            "logbook_session_event",
            json!({"session_id": id, "type": "x.test_run", "detail": "42 passed",
                   "data": {"passed": 42, "suite": ["unit"]}}),
        )
        .await);
        let (detail, data) = applied(&env, &s, 4, "active", "x.test_run");
        assert_eq!(detail.as_deref(), Some("42 passed"));
        assert_eq!(data, Some(json!({"passed": 42, "suite": ["unit"]})));

        let s = ok(&call(
            &client,
            "logbook_session_pause",
            json!({"session_id": id, "reason": "waiting for CI"}),
        )
        .await);
        let (detail, _) = applied(&env, &s, 5, "paused", "paused");
        assert_eq!(detail.as_deref(), Some("waiting for CI"));

        let s = ok(&call(&client, "logbook_session_resume", json!({"session_id": id})).await);
        let (detail, _) = applied(&env, &s, 6, "active", "resumed");
        assert_eq!(detail, None);

        let s = ok(&call(
            &client,
            "logbook_gate_open",
            json!({"session_id": id, "gate": "ci-green", "kind": "auto"}),
        )
        .await);
        let (_, data) = applied(&env, &s, 7, "active", "gate_approved");
        assert_eq!(
            data,
            Some(json!({"gate": "ci-green", "kind": "auto", "round": 1}))
        );
        let s = ok(&call(
            &client,
            "logbook_gate_open",
            json!({"session_id": id, "gate": "deploy", "kind": "user-approval"}),
        )
        .await);
        // The gate's event, then the pause's own (docs/design.md, "Event order"), one rev.
        let (detail, _) = applied_then(&env, &s, 8, "paused", "gate_opened", "paused");
        assert_eq!(detail, None);
        let opened = &env.json(&["session", "show", &id]).data()["events"][7];
        assert_eq!(
            (opened["type"].as_str(), &opened["data"]),
            (
                Some("gate_opened"),
                &json!({"gate": "deploy", "kind": "user-approval", "round": 1})
            )
        );
        // The agent cannot resume past its own pending gate.
        let before = counts(&env);
        let e = err(
            &call(&client, "logbook_session_resume", json!({"session_id": id})).await,
            "GATE_PENDING",
        );
        assert_eq!(e["details"]["gate"], "deploy", "{e}");
        assert_eq!(counts(&env), before);

        // Read back in seq order, two pages.
        let page = ok(&call(
            &client,
            "logbook_session_events",
            json!({"session_id": id, "limit": 5}),
        )
        .await);
        let seqs: Vec<i64> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4]);
        assert_eq!(page["next_after_seq"], 4);
        let rest = call(
            &client,
            "logbook_session_events",
            json!({"session_id": id, "after_seq": 4, "limit": 100}),
        )
        .await;
        let page = ok(&rest);
        let events = page["events"].as_array().unwrap();
        let types: Vec<(i64, &str)> = events
            .iter()
            .map(|e| (e["seq"].as_i64().unwrap(), e["type"].as_str().unwrap()))
            .collect();
        assert_eq!(
            types,
            [
                (5, "resumed"),
                (6, "gate_approved"),
                (7, "gate_opened"),
                (8, "paused")
            ]
        );
        assert!(events.iter().all(|e| e["actor_type"] == "mcp"));
        assert_eq!(page["next_after_seq"], Value::Null);
        // The page is byte for byte the CLI's `--json` data.
        let cli = env.json(&["session", "events", &id, "--after-seq", "4", "--limit", "100"]);
        assert_eq!(cli.stdout.trim(), format!("{{\"ok\":true,\"data\":{}}}", text(&rest)));
        client.cancel().await.unwrap();
    });
}

#[test]
fn each_new_tool_refuses_bad_input_with_its_code_and_changes_nothing() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let id = create(&client).await;
        let ended = create(&client).await;
        ok(&call(
            &client,
            "logbook_session_complete",
            json!({"session_id": ended, "result": "done"}),
        )
        .await);
        let missing = "ses_00000000000000ff";
        let before = counts(&env);
        let cases: Vec<(&str, Value, &str, Option<&str>)> = vec![
            (
                "logbook_session_events",
                json!({"session_id": id, "limit": 0}),
                "INVALID_ARGUMENT",
                Some("limit"),
            ),
            (
                "logbook_session_events",
                json!({"session_id": id, "after_seq": "3"}),
                "INVALID_ARGUMENT",
                Some("after_seq"),
            ),
            (
                "logbook_session_events",
                json!({"session_id": id, "after_seq": -2}),
                "INVALID_ARGUMENT",
                Some("after_seq"),
            ),
            (
                "logbook_session_events",
                json!({"session_id": missing}),
                "SESSION_NOT_FOUND",
                None,
            ),
            (
                "logbook_session_stage",
                json!({"session_id": id, "action": "jump", "stage": "s"}),
                "INVALID_ARGUMENT",
                Some("action"),
            ),
            (
                "logbook_session_stage",
                json!({"session_id": id, "action": "start"}),
                "INVALID_ARGUMENT",
                Some("stage"),
            ),
            (
                "logbook_session_stage",
                json!({"session_id": id, "action": "start", "stage": "s", "attempt": 0}),
                "INVALID_ARGUMENT",
                Some("attempt"),
            ),
            (
                "logbook_session_stage",
                json!({"session_id": ended, "action": "start", "stage": "s"}),
                "SESSION_INVALID_TRANSITION",
                None,
            ),
            (
                "logbook_session_usage",
                json!({"session_id": id}),
                "INVALID_ARGUMENT",
                Some("usage"),
            ),
            (
                "logbook_session_usage",
                json!({"session_id": id, "input_tokens": -1}),
                "INVALID_ARGUMENT",
                Some("input_tokens"),
            ),
            (
                "logbook_session_usage",
                json!({"session_id": id, "api_calls": 1.5}),
                "INVALID_ARGUMENT",
                Some("api_calls"),
            ),
            (
                "logbook_session_usage",
                json!({"session_id": ended, "api_calls": 1}),
                "SESSION_INVALID_TRANSITION",
                None,
            ),
            (
                "logbook_session_event",
                json!({"session_id": id, "type": "test_run"}),
                "INVALID_ARGUMENT",
                Some("type"),
            ),
            (
                "logbook_session_event",
                json!({"session_id": id, "type": "x.t", "data": [1]}),
                "INVALID_ARGUMENT",
                Some("data"),
            ),
            (
                "logbook_session_event",
                json!({"session_id": ended, "type": "x.t"}),
                "SESSION_INVALID_TRANSITION",
                None,
            ),
            (
                "logbook_session_pause",
                json!({"session_id": ended}),
                "SESSION_INVALID_TRANSITION",
                None,
            ),
            (
                "logbook_session_pause",
                json!({"session_id": id, "actor": "root"}),
                "INVALID_ARGUMENT",
                Some("actor"),
            ),
            (
                "logbook_session_resume",
                json!({"session_id": id}),
                "SESSION_INVALID_TRANSITION",
                None,
            ),
            (
                "logbook_session_resume",
                json!({"session_id": "nope"}),
                "INVALID_ARGUMENT",
                None,
            ),
            (
                "logbook_gate_open",
                json!({"session_id": id, "gate": "g", "kind": "manual"}),
                "INVALID_ARGUMENT",
                Some("kind"),
            ),
            (
                "logbook_gate_open",
                json!({"session_id": id, "gate": "", "kind": "auto"}),
                "INVALID_ARGUMENT",
                Some("gate"),
            ),
            (
                "logbook_gate_open",
                json!({"session_id": missing, "gate": "g", "kind": "auto"}),
                "SESSION_NOT_FOUND",
                None,
            ),
            (
                "logbook_gate_open",
                json!({"session_id": ended, "gate": "g", "kind": "auto"}),
                "SESSION_INVALID_TRANSITION",
                None,
            ),
            (
                "logbook_gate_open",
                json!({"session_id": id, "gate": "g", "kind": "auto", "if_rev": 1}),
                "INVALID_ARGUMENT",
                Some("if_rev"),
            ),
        ];
        for (tool, args, code, field) in cases {
            let e = err(&call(&client, tool, args.clone()).await, code);
            if let Some(f) = field {
                assert_eq!(e["details"]["field"], f, "{tool} {args}: {e}");
            }
            assert_eq!(counts(&env), before, "{tool} {args} changed nothing");
        }
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_new_mutation_tool_retried_with_its_idempotency_key_applies_once() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let id = create(&client).await;
        let args = json!({"session_id": id, "type": "x.note", "detail": "once",
                          "idempotency_key": "k-1"});
        let first = ok(&call(&client, "logbook_session_event", args.clone()).await);
        let again = ok(&call(&client, "logbook_session_event", args).await);
        assert_eq!(again, first);
        assert_eq!(first["rev"], 2);
        assert_eq!(counts(&env), (1, 2, 1));
        let e = err(
            &call(
                &client,
                "logbook_session_event",
                json!({"session_id": id, "type": "x.note", "detail": "other",
                       "idempotency_key": "k-1"}),
            )
            .await,
            "INVALID_ARGUMENT",
        );
        assert_eq!(e["details"]["field"], "idempotency_key", "{e}");
        assert_eq!(counts(&env), (1, 2, 1));
        client.cancel().await.unwrap();
    });
}

/// A session created pending over MCP could only be failed there; now
/// `logbook_session_start` begins it, as `logbook session start` does.
#[test]
fn a_pending_session_created_over_mcp_is_started_over_mcp() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(
            &client,
            "logbook_session_create",
            json!({"title": "queued", "pending": true}),
        )
        .await);
        assert_eq!(
            (s["status"].as_str(), s["rev"].as_i64()),
            (Some("pending"), Some(1))
        );
        let id = s["session_id"].as_str().unwrap().to_owned();
        let args = json!({"session_id": id, "reason": "picked up", "idempotency_key": "start-1"});
        let first = call(&client, "logbook_session_start", args.clone()).await;
        assert_eq!(replayed(&first), None);
        let s = ok(&first);
        let (detail, data) = applied(&env, &s, 2, "active", "started");
        assert_eq!((detail.as_deref(), data), (Some("picked up"), None));
        // A retry with its key applies nothing and says so.
        let again = call(&client, "logbook_session_start", args).await;
        assert_eq!(ok(&again), s);
        assert_eq!(replayed(&again), Some(json!({"rev": 2, "seq": 1})));
        assert_eq!(counts(&env), (1, 2, 1));
        // Only a pending session starts; the CLI's codes.
        let e = err(
            &call(&client, "logbook_session_start", json!({"session_id": id})).await,
            "SESSION_INVALID_TRANSITION",
        );
        assert_eq!(
            (
                e["details"]["status"].as_str(),
                e["details"]["verb"].as_str()
            ),
            (Some("active"), Some("start")),
            "{e}"
        );
        err(
            &call(
                &client,
                "logbook_session_start",
                json!({"session_id": "ses_00000000000000ff"}),
            )
            .await,
            "SESSION_NOT_FOUND",
        );
        let e = err(
            &call(
                &client,
                "logbook_session_start",
                json!({"session_id": id, "if_rev": 2}),
            )
            .await,
            "INVALID_ARGUMENT",
        );
        assert_eq!(e["details"]["field"], "if_rev");
        assert_eq!(counts(&env), (1, 2, 1), "the refusals changed nothing");
        // The same session as one the CLI started.
        let cli = env.create_with(&["--title", "queued", "--pending"]);
        let c = env
            .json(&["session", "start", &cli, "--reason", "picked up"])
            .data();
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&c), keys(&s));
        assert_eq!(
            (c["status"].as_str(), c["rev"].as_i64()),
            (Some("active"), Some(2))
        );
        client.cancel().await.unwrap();
    });
}
