//! `logbook run …` (docs/design.md, "Runs").
//! Here: the lifecycle and its events, the refusals, one running run per
//! session, usage at its integer edges and under idempotency keys. How a
//! session's end cancels its runs is in `runs_ending.rs`; the library, the
//! statements and the V2 upgrade in `runs_store.rs`.

use crate::common::*;
use serde_json::{json, Value};

const MAX: i64 = 9_007_199_254_740_991;

pub(crate) fn create_run(env: &TestEnv, s: &str, extra: &[&str]) -> String {
    let mut a = vec!["run", "create", s];
    a.extend_from_slice(extra);
    env.json(&a).data()["run_id"].as_str().unwrap().to_owned()
}

/// `run show --json` stdout bytes.
pub(crate) fn show_run(env: &TestEnv, r: &str) -> String {
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
pub(crate) fn refused(
    env: &TestEnv,
    s: &str,
    r: Option<&str>,
    args: &[&str],
    code: &str,
    exit: i32,
) -> Value {
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
    env.batch(pick(
        "DROP TRIGGER events_no_update",
        "ALTER TABLE events DISABLE TRIGGER ALL",
    ));
    env.batch(&format!(
        "UPDATE events SET run_id = 'run_0000000000000000' WHERE session_id = '{s}' AND seq = 2"
    ));
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
        .try_batch(&format!(
            "UPDATE runs SET status = 'running' WHERE run_id = '{a}'"
        ))
        .unwrap_err();
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
        .try_batch(&format!(
            "UPDATE runs SET status = 'running' WHERE run_id = '{b}'"
        ))
        .unwrap_err();
    // SQLite: "UNIQUE constraint failed"; PostgreSQL: 23505 unique_violation.
    assert!(
        msg.contains(pick("UNIQUE constraint failed", "23505:")),
        "{msg}"
    );
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
        .try_batch(&format!(
            "UPDATE runs SET output_tokens = 9007199254740992 WHERE run_id = '{r2}'"
        ))
        .unwrap_err();
    assert!(
        msg.contains(pick("CHECK constraint failed", "23514:")),
        "{msg}"
    );
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
