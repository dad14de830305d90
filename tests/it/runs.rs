//! `logbook run …` (issue 4 §1; SPEC §2 Run; the AgentSessionManager seed).

use crate::common::*;
use serde_json::{json, Value};

const MAX: i64 = 9_007_199_254_740_991;

fn create_run(env: &TestEnv, s: &str, extra: &[&str]) -> String {
    let mut a = vec!["run", "create", s];
    a.extend_from_slice(extra);
    env.json(&a).data()["run_id"].as_str().unwrap().to_owned()
}

/// `run show --json` stdout bytes.
fn show_run(env: &TestEnv, r: &str) -> String {
    let out = env.json(&["run", "show", r]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    out.stdout
}

fn events(env: &TestEnv, s: &str) -> Vec<Value> {
    env.json(&["session", "events", s, "--limit", "1000"])
        .data()["events"]
        .as_array()
        .unwrap()
        .clone()
}

/// A refused command: its code and exit, and neither the session nor the run
/// changed by a byte.
#[track_caller]
fn refused(env: &TestEnv, s: &str, r: Option<&str>, args: &[&str], code: &str, exit: i32) -> Value {
    let (s0, r0) = (env.show(s), r.map(|r| show_run(env, r)));
    let err = assert_error(&env.json(args), code, exit);
    assert_eq!(env.show(s), s0, "{args:?} changed the session");
    assert_eq!(r.map(|r| show_run(env, r)), r0, "{args:?} changed the run");
    err
}

#[test]
fn a_run_lifecycle_appends_run_events_and_rolls_usage_into_the_session() {
    let env = TestEnv::new();
    let s = env.create("a");
    let r = create_run(
        &env,
        &s,
        &[
            "--input",
            r#"{"messages":[{"role":"user","content":"Hello"}]}"#,
            "--metadata",
            r#"{"request_id":"req-789"}"#,
        ],
    );
    let d = env.json(&["run", "show", &r]).data();
    assert_eq!(d["status"], "pending");
    assert_eq!(d["session_id"], s.as_str());
    assert_eq!(d["turn_count"], 0);
    assert_eq!(d["metadata"], json!({"request_id": "req-789"}));
    assert_eq!(d["started_at_ms"], Value::Null);

    let d = env.json(&["run", "start", &r]).data();
    assert_eq!(d["status"], "running");
    assert!(d["started_at_ms"].is_i64());
    let args = [
        "run",
        "usage",
        &r,
        "--input-tokens",
        "100",
        "--output-tokens",
        "50",
    ];
    env.json(&args).data();
    let d = env
        .json(&[
            "run",
            "usage",
            &r,
            "--input-tokens",
            "20",
            "--output-tokens",
            "30",
            "--api-calls",
            "2",
        ])
        .data();
    assert_eq!(
        d["usage"],
        json!({"input_tokens": 120, "output_tokens": 80, "api_calls": 2})
    );
    env.json(&["run", "turn", &r]).data();
    let d = env.json(&["run", "turn", &r]).data();
    assert_eq!(d["turn_count"], 2);
    let d = env
        .json(&[
            "run",
            "complete",
            &r,
            "--output",
            r#"{"content":"Hello!","stop_reason":"end_turn"}"#,
        ])
        .data();
    assert_eq!(d["status"], "completed");
    assert_eq!(
        d["output"],
        json!({"content": "Hello!", "stop_reason": "end_turn"})
    );
    assert!(d["ended_at_ms"].as_i64().unwrap() >= d["started_at_ms"].as_i64().unwrap());

    // Each transition was one session mutation with one run_* event.
    let sess = env.json(&["session", "show", &s]).data();
    assert_eq!(sess["session"]["rev"], 8);
    assert_eq!(
        sess["session"]["usage"],
        json!({"input_tokens": 120, "output_tokens": 80, "api_calls": 2, "duration_ms": 0})
    );
    assert_eq!(
        event_types(&env, &s),
        [
            "created",
            "run_created",
            "run_started",
            "run_usage",
            "run_usage",
            "run_turn",
            "run_turn",
            "run_completed"
        ]
    );
    for e in &events(&env, &s)[1..] {
        assert_eq!(e["run_id"], r.as_str(), "{e}");
    }
    assert_eq!(
        events(&env, &s)[4]["data"],
        json!({"input_tokens": 20, "output_tokens": 30, "api_calls": 2})
    );
    assert_rev_matches_events(&env, &s);
    // The chain covers run_id: verify passes, and a changed run_id breaks it.
    assert_eq!(env.json(&["verify", &s]).code, 0);
    let c = env.sql();
    c.execute_batch("DROP TRIGGER events_no_update").unwrap();
    c.execute(
        "UPDATE events SET run_id = 'run_0000000000000000' WHERE session_id = ?1 AND seq = 2",
        [&s],
    )
    .unwrap();
    assert_error(&env.json(&["verify", &s]), "LEDGER_TAMPERED", 6);
}

#[test]
fn fail_cancel_and_timeout_end_runs_and_terminal_runs_are_frozen() {
    let env = TestEnv::new();
    let s = env.create("a");
    let (a, b, c) = (
        create_run(&env, &s, &[]),
        create_run(&env, &s, &[]),
        create_run(&env, &s, &[]),
    );
    env.json(&["run", "start", &a]).data();
    let d = env
        .json(&[
            "run",
            "fail",
            &a,
            "--code",
            "provider_timeout",
            "--message",
            "Timed out",
        ])
        .data();
    assert_eq!(d["status"], "failed");
    assert_eq!(
        d["error"],
        json!({"code": "provider_timeout", "message": "Timed out"})
    );
    let e = events(&env, &s).last().unwrap().clone();
    assert_eq!(
        (e["type"].as_str(), e["detail"].as_str()),
        (Some("run_failed"), Some("Timed out"))
    );
    assert_eq!(e["data"], json!({"code": "provider_timeout"}));
    // pending runs may be cancelled or timed out (they never started).
    assert_eq!(
        env.json(&["run", "cancel", &b]).data()["status"],
        "cancelled"
    );
    assert_eq!(
        env.json(&["run", "timeout", &c]).data()["status"],
        "timeout"
    );
    for r in [&a, &b, &c] {
        for verb in [
            vec!["run", "start", r],
            vec!["run", "complete", r],
            vec!["run", "cancel", r],
            vec!["run", "timeout", r],
            vec!["run", "turn", r],
            vec!["run", "usage", r, "--input-tokens", "1"],
            vec!["run", "fail", r, "--code", "x", "--message", "y"],
        ] {
            let err = refused(&env, &s, Some(r), &verb, "RUN_INVALID_TRANSITION", 5);
            assert_eq!(err["details"]["run_id"], r.as_str());
        }
    }
    // Raw SQL cannot change a terminal run either.
    let msg = env
        .sql()
        .execute("UPDATE runs SET status = 'running' WHERE run_id = ?1", [&a])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("terminal"), "{msg}");
    assert_eq!(env.json(&["verify"]).code, 0);
}

#[test]
fn run_refusals_have_their_codes_and_change_nothing() {
    let env = TestEnv::new();
    let s = env.create("a");
    let r = create_run(&env, &s, &[]);
    let missing_run = "run_0123456789abcdef";
    assert_error(&env.json(&["run", "show", missing_run]), "RUN_NOT_FOUND", 3);
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "start", missing_run],
        "RUN_NOT_FOUND",
        3,
    );
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "start", "run_XYZ"],
        "INVALID_ARGUMENT",
        2,
    );
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "create", "ses_0123456789abcdef"],
        "SESSION_NOT_FOUND",
        3,
    );
    assert_error(
        &env.json(&["run", "list", "ses_0123456789abcdef"]),
        "SESSION_NOT_FOUND",
        3,
    );
    // Not running yet.
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "usage", &r, "--input-tokens", "1"],
        "RUN_INVALID_TRANSITION",
        5,
    );
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "turn", &r],
        "RUN_INVALID_TRANSITION",
        5,
    );
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "complete", &r],
        "RUN_INVALID_TRANSITION",
        5,
    );
    // Bad JSON, not an object, over the cap, missing flags.
    refused(
        &env,
        &s,
        None,
        &["run", "create", &s, "--input", "{nope"],
        "INVALID_ARGUMENT",
        2,
    );
    refused(
        &env,
        &s,
        None,
        &["run", "create", &s, "--input", "[1]"],
        "INVALID_ARGUMENT",
        2,
    );
    let big = env.dir.path().join("big.json");
    std::fs::write(
        &big,
        format!(r#"{{"x":"{}"}}"#, "a".repeat(4 * 1024 * 1024)),
    )
    .unwrap();
    let at = format!("@{}", big.display());
    let err = refused(
        &env,
        &s,
        None,
        &["run", "create", &s, "--input", &at],
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(err["details"]["field"], "input");
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "fail", &r, "--message", "m"],
        "INVALID_ARGUMENT",
        2,
    );
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "fail", &r, "--code", "", "--message", "m"],
        "INVALID_ARGUMENT",
        2,
    );
    // A flag never becomes a value: `--code --json` is a missing code, not
    // the code "--json" (a value that begins with `-` is attached with `=`).
    let err = refused(
        &env,
        &s,
        Some(&r),
        &["run", "fail", &r, "--code", "--json", "--message", "m"],
        "INVALID_ARGUMENT",
        2,
    );
    assert!(err["message"].as_str().unwrap().contains("--code"), "{err}");
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "fail", &r, "--code", "x", "--message", "--json"],
        "INVALID_ARGUMENT",
        2,
    );
    refused(
        &env,
        &s,
        None,
        &["run", "create", &s, "--if-rev", "9"],
        "SESSION_CONFLICT",
        4,
    );
    // Values that begin with `-`, attached to their flags, are taken as
    // they are.
    let r2 = create_run(&env, &s, &[]);
    let d = env
        .json(&["run", "fail", &r2, "--code=-1", "--message=--force failed"])
        .data();
    assert_eq!(
        d["error"],
        json!({"code": "-1", "message": "--force failed"})
    );
    // A terminal session: its runs can no longer change, and no run is added.
    env.json(&["session", "cancel", &s, "--reason", "stop"])
        .data();
    for args in [
        vec!["run", "create", s.as_str()],
        vec!["run", "start", r.as_str()],
        vec!["run", "cancel", r.as_str()],
    ] {
        refused(&env, &s, Some(&r), &args, "SESSION_INVALID_TRANSITION", 5);
    }
    assert_eq!(env.json(&["verify"]).code, 0);
}

#[test]
fn one_running_run_per_session() {
    let env = TestEnv::new();
    let s = env.create("a");
    let (a, b) = (create_run(&env, &s, &[]), create_run(&env, &s, &[]));
    assert_eq!(env.json(&["run", "active", &s]).data(), Value::Null);
    env.json(&["run", "start", &a]).data();
    let err = refused(
        &env,
        &s,
        Some(&b),
        &["run", "start", &b],
        "RUN_INVALID_TRANSITION",
        5,
    );
    assert_eq!(err["details"]["running_run_id"], a.as_str());
    assert_eq!(
        env.json(&["run", "active", &s]).data()["run_id"],
        a.as_str()
    );
    // The partial unique index holds against raw SQL too.
    let msg = env
        .sql()
        .execute("UPDATE runs SET status = 'running' WHERE run_id = ?1", [&b])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("UNIQUE"), "{msg}");
    env.json(&["run", "complete", &a]).data();
    env.json(&["run", "start", &b]).data();
    let listed = env.json(&["run", "list", &s]).data();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [a.as_str(), b.as_str()]);
    let only = env
        .json(&[
            "run",
            "list",
            &s,
            "--status",
            "completed",
            "--status",
            "failed",
        ])
        .data();
    assert_eq!(only.as_array().unwrap().len(), 1);
    assert_eq!(only[0]["run_id"], a.as_str());
}

/// 8 processes race `run start` on 8 pending runs of one session: exactly one
/// wins; the other 7 get RUN_INVALID_TRANSITION naming the winner.
#[test]
fn eight_processes_racing_run_start_leave_exactly_one_running() {
    let env = TestEnv::new();
    let s = env.create("a");
    let runs: Vec<String> = (0..8).map(|_| create_run(&env, &s, &[])).collect();
    let rev0 = env.json(&["session", "show", &s]).data()["session"]["rev"]
        .as_i64()
        .unwrap();
    let cmds = runs
        .iter()
        .map(|r| {
            let mut c = env.command();
            c.arg("--db").arg(env.path()).args([
                "--busy-timeout-ms",
                "30000",
                "run",
                "start",
                r,
                "--json",
            ]);
            c
        })
        .collect();
    let outs = race(env.dir.path(), cmds);
    let winners: Vec<usize> = (0..8).filter(|i| outs[*i].code == 0).collect();
    assert_eq!(winners.len(), 1, "{outs:#?}");
    let w = &runs[winners[0]];
    for (i, o) in outs.iter().enumerate() {
        if i != winners[0] {
            let err = assert_error(o, "RUN_INVALID_TRANSITION", 5);
            assert_eq!(err["details"]["running_run_id"], w.as_str());
        }
    }
    let statuses: Vec<String> = runs
        .iter()
        .map(|r| {
            env.json(&["run", "show", r]).data()["status"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(statuses.iter().filter(|s| *s == "running").count(), 1);
    assert_eq!(statuses[winners[0]], "running");
    let sess = env.json(&["session", "show", &s]).data();
    assert_eq!(sess["session"]["rev"], rev0 + 1);
    assert_rev_matches_events(&env, &s);
    assert_eq!(env.json(&["verify"]).code, 0);
}

#[test]
fn run_usage_integer_edges() {
    let env = TestEnv::new();
    let s = env.create("a");
    let r = create_run(&env, &s, &[]);
    env.json(&["run", "start", &r]).data();
    let d = env
        .json(&["run", "usage", &r, "--input-tokens", "0"])
        .data();
    assert_eq!(d["usage"]["input_tokens"], 0);
    let max = MAX.to_string();
    let d = env
        .json(&["run", "usage", &r, "--input-tokens", &max])
        .data();
    assert_eq!(d["usage"]["input_tokens"], MAX);
    let sess = env.json(&["session", "show", &s]).data();
    assert_eq!(sess["session"]["usage"]["input_tokens"], MAX);
    let over = (MAX + 1).to_string();
    for (args, field) in [
        (vec!["--input-tokens", "1"], "input_tokens"),
        (vec!["--output-tokens", over.as_str()], "output_tokens"),
        (vec!["--api-calls", "-1"], "api_calls"),
    ] {
        let mut a = vec!["run", "usage", r.as_str()];
        a.extend_from_slice(&args);
        let err = refused(&env, &s, Some(&r), &a, "INVALID_ARGUMENT", 2);
        assert_eq!(err["details"]["field"], field, "{args:?}");
    }
    for bad in ["1.5", "ten", "99999999999999999999", ""] {
        let a = ["run", "usage", r.as_str(), "--output-tokens", bad];
        refused(&env, &s, Some(&r), &a, "INVALID_ARGUMENT", 2);
    }
    refused(
        &env,
        &s,
        Some(&r),
        &["run", "usage", &r],
        "INVALID_ARGUMENT",
        2,
    );
    // The session total is checked too: a second run cannot push it over.
    env.json(&["run", "complete", &r]).data();
    let r2 = create_run(&env, &s, &[]);
    env.json(&["run", "start", &r2]).data();
    let err = refused(
        &env,
        &s,
        Some(&r2),
        &["run", "usage", &r2, "--input-tokens", "1"],
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(err["details"]["field"], "input_tokens");
    // The schema refuses what logbook refuses.
    let msg = env
        .sql()
        .execute(
            "UPDATE runs SET output_tokens = 9007199254740992 WHERE run_id = ?1",
            [&r2],
        )
        .unwrap_err()
        .to_string();
    assert!(msg.contains("CHECK"), "{msg}");
}

#[test]
fn idempotent_run_usage_is_applied_once() {
    let env = TestEnv::new();
    let s = env.create("a");
    let r = create_run(&env, &s, &["--idempotency-key", "c1"]);
    assert_eq!(create_run(&env, &s, &["--idempotency-key", "c1"]), r);
    env.json(&["run", "start", &r]).data();
    let args = [
        "run",
        "usage",
        &r,
        "--input-tokens",
        "7",
        "--idempotency-key",
        "k1",
    ];
    env.json(&args).data();
    let d = env.json(&args).data();
    assert_eq!(d["usage"]["input_tokens"], 7);
    let other = [
        "run",
        "usage",
        &r,
        "--input-tokens",
        "8",
        "--idempotency-key",
        "k1",
    ];
    refused(&env, &s, Some(&r), &other, "INVALID_ARGUMENT", 2);
    assert_eq!(
        env.json(&["session", "show", &s]).data()["session"]["usage"]["input_tokens"],
        7
    );
}

#[test]
fn library_round_trips_runs_through_json_maps() {
    use logbook::{CreateRun, Ledger, LedgerOptions, Mutation, Run, RunStatus, RunUsageDelta};
    let env = TestEnv::new();
    let l = Ledger::open(LedgerOptions::at(env.path())).unwrap();
    let s = l
        .create_session(logbook::CreateSession::titled("lib"))
        .unwrap();
    let id = s.session_id.to_string();
    let m = Mutation::default();
    let req = CreateRun {
        input: Some(json!({"messages": [{"role": "user", "content": "token=abcdef123456"}]})),
        metadata: None,
    };
    let run = l.create_run(&id, req, &m).unwrap();
    assert!(run.input.as_ref().unwrap().get().contains("[REDACTED]"));
    let rid = run.run_id.to_string();
    l.start_run(&rid, &m).unwrap();
    let delta = RunUsageDelta {
        input_tokens: Some(100),
        output_tokens: Some(50),
        api_calls: None,
    };
    l.record_run_usage(&rid, delta, &m).unwrap();
    let run = l.increment_turn(&rid, &m).unwrap();
    let text = run.to_json().unwrap();
    assert_eq!(Run::from_json(&text).unwrap().to_json().unwrap(), text);
    assert_eq!(l.active_run(&id).unwrap().unwrap().run_id, run.run_id);
    assert_eq!(l.list_runs(&id, &[RunStatus::Running]).unwrap().len(), 1);
    assert!(l
        .list_runs(&id, &[RunStatus::Completed])
        .unwrap()
        .is_empty());
    let e = l.start_run("run_0123456789abcdef", &m).unwrap_err();
    assert_eq!(e.code(), logbook::ErrorCode::RunNotFound);
    assert_eq!(l.get_session(&id).unwrap().usage.output_tokens, 50);
}

/// Every runs/budgets SQL const prepares, and the hot ones stay prepared
/// across changing bindings (see `hot_statements_are_never_reprepared`).
#[test]
fn run_statements_prepare_and_are_never_reprepared() {
    use logbook::store::{budgets as b, runs as r};
    use rusqlite::{params, StatementStatus};
    let env = TestEnv::new();
    let s = env.create("a");
    let runs: Vec<String> = (0..3).map(|_| create_run(&env, &s, &[])).collect();
    let c = env.sql();
    for sql in r::ALL.iter().chain(b::ALL) {
        c.prepare(sql).unwrap_or_else(|e| panic!("{e}: {sql}"));
    }
    for sql in [
        r::SELECT_RUN,
        r::SELECT_RUNNING_RUN,
        r::SELECT_RUNS_OF_SESSION,
        r::SELECT_OPEN_RUNS_OF_SESSION,
        b::SELECT_SESSION_STATE,
        b::SELECT_BUDGET,
    ] {
        for i in 0..6 {
            let key = if sql.contains("run_id = ?1") {
                runs[i % 3].clone()
            } else {
                s.clone()
            };
            let mut st = c.prepare_cached(sql).unwrap();
            let mut rows = st.query(params![key]).unwrap();
            while rows.next().unwrap().is_some() {}
        }
        let st = c.prepare_cached(sql).unwrap();
        assert_eq!(
            st.get_status(StatementStatus::RePrepare),
            0,
            "re-prepared: {sql}"
        );
    }
    for sql in [
        r::UPDATE_RUN_START,
        r::UPDATE_RUN_TURN,
        r::UPDATE_RUN_CANCEL,
        r::UPDATE_RUN_TIMEOUT,
    ] {
        for i in 0..5 {
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            c.prepare_cached(sql)
                .unwrap()
                .execute(params![runs[i % 3], 1_000 + i as i64])
                .unwrap();
            c.execute_batch("ROLLBACK").unwrap();
        }
        let st = c.prepare_cached(sql).unwrap();
        assert_eq!(
            st.get_status(StatementStatus::RePrepare),
            0,
            "re-prepared: {sql}"
        );
    }
}

/// C25 for V3: a V2 database upgrades with its rows intact; runs then work
/// on its sessions and their chains continue.
#[test]
fn a_v2_database_upgrades_to_runs_and_keeps_its_rows() {
    let env = TestEnv::new();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v2.db"),
        env.path(),
    )
    .unwrap();
    let dump = |c: &rusqlite::Connection| -> String {
        let mut st = c
            .prepare("SELECT session_id || status || rev || updated_at_ms FROM sessions ORDER BY insert_seq")
            .unwrap();
        let mut v: Vec<String> = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut st = c
            .prepare("SELECT event_id || session_id || seq || type || hex(hash) FROM events ORDER BY event_id")
            .unwrap();
        v.extend(
            st.query_map([], |r| r.get::<_, String>(0))
                .unwrap()
                .map(Result::unwrap),
        );
        v.join("\n")
    };
    let before = dump(&env.sql());
    assert!(!before.is_empty());
    assert_eq!(env.json(&["verify"]).code, 0);
    let c = env.sql();
    assert_eq!(dump(&c), before);
    let (ver, hist, ic): (i64, i64, String) = c
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT max(version) FROM refinery_schema_history),
                    (SELECT integrity_check FROM pragma_integrity_check)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (ver, hist, ic.as_str()),
        (
            logbook::store::migrate::LATEST_VERSION,
            logbook::store::migrate::LATEST_VERSION,
            "ok"
        )
    );
    let active: String = c
        .query_row(
            "SELECT session_id FROM sessions WHERE status = 'paused' LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    // Runs live in any non-terminal session, paused included.
    let r = create_run(&env, &active, &[]);
    env.json(&["run", "start", &r]).data();
    env.json(&["run", "usage", &r, "--input-tokens", "5"])
        .data();
    env.json(&["run", "complete", &r]).data();
    env.json(&["session", "budget", &active, "--max-tokens", "100"])
        .data();
    let done: String = c
        .query_row(
            "SELECT session_id FROM sessions WHERE status = 'completed'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_error(
        &env.json(&["run", "create", &done]),
        "SESSION_INVALID_TRANSITION",
        5,
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// `(type, run_id, detail, data)` of one event.
type EventRow = (String, Option<String>, Option<String>, Option<String>);

/// `(type, run_id, detail, data)` of a session's events, in seq order.
fn timeline(env: &TestEnv, s: &str) -> Vec<EventRow> {
    let c = env.sql();
    let mut st = c
        .prepare("SELECT type, run_id, detail, data FROM events WHERE session_id = ?1 ORDER BY seq")
        .unwrap();
    st.query_map([s], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// A run cancelled because its session ended `ended`.
#[track_caller]
fn assert_ended_with_session(env: &TestEnv, r: &str, ended: &str) {
    let d = env.json(&["run", "show", r]).data();
    assert_eq!(d["status"], "cancelled", "{d}");
    assert!(d["ended_at_ms"].is_i64(), "{d}");
    assert_eq!(
        d["error"],
        json!({"code": "SESSION_ENDED", "message": format!("the session was {ended}")})
    );
}

/// The tail a session's end appends: one `run_cancelled` per open run, in
/// creation order, then the terminal event.
#[track_caller]
fn assert_tail(env: &TestEnv, s: &str, before: usize, runs: &[&str], ended: &str, last: &str) {
    assert_tail_then(env, s, before, runs, ended, &[last]);
}

/// As [`assert_tail`], with the events after the runs' cancellations.
#[track_caller]
fn assert_tail_then(
    env: &TestEnv,
    s: &str,
    before: usize,
    runs: &[&str],
    ended: &str,
    last: &[&str],
) {
    let tl = timeline(env, s);
    let tail = &tl[before..];
    assert_eq!(tail.len(), runs.len() + last.len(), "{tail:?}");
    for (e, r) in tail.iter().zip(runs) {
        assert_eq!(
            (e.0.as_str(), e.1.as_deref(), e.2.clone(), e.3.as_deref()),
            (
                "run_cancelled",
                Some(*r),
                Some(format!("the session was {ended}")),
                Some(r#"{"code":"SESSION_ENDED"}"#)
            )
        );
    }
    for (e, want) in tail[runs.len()..].iter().zip(last) {
        assert_eq!((e.0.as_str(), e.1.as_deref()), (*want, None));
    }
}

#[test]
fn ending_a_session_cancels_its_pending_and_running_runs_first() {
    for (verb, flag, ended) in [
        ("complete", "--result", "completed"),
        ("fail", "--reason", "failed"),
        ("cancel", "--reason", "cancelled"),
    ] {
        let env = TestEnv::new();
        let s = env.create("a");
        // A finished run (left as it is), a pending one, a running one.
        let done = create_run(&env, &s, &[]);
        env.json(&["run", "start", &done]).data();
        env.json(&["run", "complete", &done]).data();
        let pending = create_run(&env, &s, &[]);
        let running = create_run(&env, &s, &[]);
        env.json(&["run", "start", &running]).data();
        let done_before = show_run(&env, &done);
        let (rev, n, _) = rev_and_events(&env, &s);
        let d = env.json(&["session", verb, &s, flag, "the end"]).data();
        assert_eq!(d["status"], ended);
        // One mutation: rev + 1, three events.
        assert_eq!(d["rev"], rev + 1, "{verb}");
        assert_eq!(rev_and_events(&env, &s).1, n + 3);
        assert_tail(&env, &s, n as usize, &[&pending, &running], ended, ended);
        assert_ended_with_session(&env, &pending, ended);
        assert_ended_with_session(&env, &running, ended);
        assert_eq!(show_run(&env, &done), done_before);
        let ended_at: Vec<(Option<i64>, i64)> = env
            .sql()
            .prepare("SELECT ended_at_ms, updated_at_ms FROM runs WHERE session_id = ?1")
            .unwrap()
            .query_map([&s], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(ended_at.iter().all(|(e, u)| *e == Some(*u)));
        assert_eq!(
            env.json(&["run", "active", &s]).data(),
            Value::Null,
            "{verb}"
        );
        let open = env.json(&[
            "run", "list", &s, "--status", "pending", "--status", "running",
        ]);
        assert_eq!(open.data(), json!([]));
        // The runs are frozen with their session.
        refused(
            &env,
            &s,
            Some(&running),
            &["run", "cancel", &running],
            "SESSION_INVALID_TRANSITION",
            5,
        );
        assert_eq!(env.json(&["verify", &s]).code, 0, "{verb}");
        assert_eq!(env.json(&["verify"]).code, 0, "{verb}");
    }
}

#[test]
fn a_budget_fail_crossing_cancels_the_sessions_open_runs_before_failed() {
    let env = TestEnv::new();
    let s = env.create("a");
    env.json(&[
        "session",
        "budget",
        &s,
        "--max-tokens",
        "100",
        "--on-exceed",
        "fail",
    ])
    .data();
    let pending = create_run(&env, &s, &[]);
    let running = create_run(&env, &s, &[]);
    env.json(&["run", "start", &running]).data();
    let (rev, n, _) = rev_and_events(&env, &s);
    let d = env
        .json(&["run", "usage", &running, "--input-tokens", "150"])
        .data();
    // The run's own usage is recorded, then the run ends with its session.
    assert_eq!(d["status"], "cancelled");
    assert_eq!(d["usage"]["input_tokens"], 150);
    let sd = env.json(&["session", "show", &s]).data()["session"].clone();
    assert_eq!(sd["status"], "failed");
    assert_eq!(sd["usage"]["input_tokens"], 150);
    assert_eq!(sd["rev"], rev + 1);
    let tl = timeline(&env, &s);
    let types: Vec<&str> = tl[n as usize..].iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        types,
        [
            "run_usage",
            "budget_exceeded",
            "run_cancelled",
            "run_cancelled",
            "failed"
        ]
    );
    assert_tail(
        &env,
        &s,
        n as usize + 2,
        &[&pending, &running],
        "failed",
        "failed",
    );
    assert_ended_with_session(&env, &pending, "failed");
    assert_ended_with_session(&env, &running, "failed");
    assert_eq!(env.json(&["verify", &s]).code, 0);
}

#[test]
fn a_gate_rejection_cancels_the_sessions_open_runs_before_gate_rejected_and_cancelled() {
    let env = TestEnv::new();
    let s = env.create("a");
    let running = create_run(&env, &s, &[]);
    env.json(&["run", "start", &running]).data();
    env.json(&["gate", "open", &s, "--gate", "g", "--kind", "user-approval"])
        .data();
    let (_, n, _) = rev_and_events(&env, &s);
    let d = env
        .json(&[
            "gate", "reject", &s, "--gate", "g", "--reason", "no", "--abort",
        ])
        .data();
    assert_eq!(d["status"], "cancelled");
    assert_tail_then(
        &env,
        &s,
        n as usize,
        &[&running],
        "cancelled",
        &["gate_rejected", "cancelled"],
    );
    assert_ended_with_session(&env, &running, "cancelled");
    assert_eq!(env.json(&["verify", &s]).code, 0);
}

#[test]
fn a_session_with_only_finished_runs_ends_as_before() {
    let env = TestEnv::new();
    let s = env.create("a");
    let (a, b, c) = (
        create_run(&env, &s, &[]),
        create_run(&env, &s, &[]),
        create_run(&env, &s, &[]),
    );
    env.json(&["run", "start", &a]).data();
    env.json(&["run", "complete", &a]).data();
    env.json(&["run", "fail", &b, "--code", "x", "--message", "y"])
        .data();
    env.json(&["run", "timeout", &c]).data();
    let runs_before: Vec<String> = [&a, &b, &c].iter().map(|r| show_run(&env, r)).collect();
    let (rev, n, _) = rev_and_events(&env, &s);
    let d = env
        .json(&["session", "complete", &s, "--result", "ok"])
        .data();
    assert_eq!(d["rev"], rev + 1);
    let tl = timeline(&env, &s);
    assert_eq!(tl.len(), n as usize + 1);
    assert_eq!(tl.last().unwrap().0, "completed");
    let runs_after: Vec<String> = [&a, &b, &c].iter().map(|r| show_run(&env, r)).collect();
    assert_eq!(runs_after, runs_before);
    assert_eq!(env.json(&["verify", &s]).code, 0);
}
