//! The run tools of `logbook mcp serve`, end to end over rmcp's own client:
//! a run driven to completion records actor `mcp` and rolls its usage into
//! the session; each run error class has its exact code and changes
//! nothing.

use crate::common::*;
use crate::mcp::{call, connect, counts, err, ok, replayed, rt, run_count, text};
use serde_json::{json, Value};

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
    let row = env
        .rows(
            &format!(
                "SELECT status, input_tokens, output_tokens, api_calls, turn_count, ended_at_ms, \
                 {} FROM runs WHERE run_id = $1",
                pick(
                    "json_extract(output, '$.content')",
                    "output::json->>'content'"
                )
            ),
            &[&rid],
        )
        .remove(0);
    assert_eq!(
        row[..5],
        [
            json!("completed"),
            json!(120),
            json!(80),
            json!(1),
            json!(1)
        ]
    );
    assert_eq!(row[6], "Hello!");
    assert!(row[5].is_i64());
    let usage = env.rows(
        "SELECT input_tokens, output_tokens, api_calls, rev FROM sessions WHERE session_id = $1",
        &[&sid],
    );
    assert_eq!(
        usage[0],
        [json!(120), json!(80), json!(1), json!(7)],
        "usage rolled up; rev 1 + six run changes"
    );
    let rows: Vec<(i64, String, String, Option<String>)> = env
        .rows(
            "SELECT seq, type, actor_type, run_id FROM events WHERE session_id=$1 ORDER BY seq",
            &[&sid],
        )
        .into_iter()
        .map(|r| {
            (
                r[0].as_i64().unwrap(),
                r[1].as_str().unwrap().to_owned(),
                r[2].as_str().unwrap().to_owned(),
                r[3].as_str().map(str::to_owned),
            )
        })
        .collect();
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
    let keys = env.scalar("SELECT count(*) FROM idempotency_keys");
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
