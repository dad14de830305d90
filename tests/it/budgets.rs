//! `logbook session budget …` and `session usage …` (docs/design.md, "Budgets"; Amber's
//! budget tracker).

use crate::common::*;
use serde_json::{json, Value};

const MAX: i64 = 9_007_199_254_740_991;

fn budget(env: &TestEnv, s: &str, args: &[&str]) -> Value {
    let mut a = vec!["session", "budget", s];
    a.extend_from_slice(args);
    env.json(&a).data()
}

fn usage(env: &TestEnv, s: &str, args: &[&str]) -> Value {
    let mut a = vec!["session", "usage", s];
    a.extend_from_slice(args);
    env.json(&a).data()
}

fn count(env: &TestEnv, s: &str, typ: &str) -> usize {
    event_types(env, s).iter().filter(|t| *t == typ).count()
}

#[track_caller]
fn refused(env: &TestEnv, s: &str, args: &[&str], code: &str, exit: i32) -> Value {
    let before = env.show(s);
    let err = assert_error(&env.json(args), code, exit);
    assert_eq!(env.show(s), before, "{args:?} changed the session");
    err
}

#[test]
fn usage_accumulates_and_check_reports_remaining() {
    let env = TestEnv::new();
    let s = env.create("a");
    let d = budget(&env, &s, &[]);
    assert_eq!(
        (d["exceeded"].as_bool(), &d["on_exceed"]),
        (Some(false), &Value::Null)
    );
    let d = budget(&env, &s, &["--max-tokens", "1000", "--max-api-calls", "10"]);
    assert_eq!(d["on_exceed"], "pause");
    assert_eq!(d["session_rev"], 2);
    let d = usage(
        &env,
        &s,
        &[
            "--input-tokens",
            "300",
            "--output-tokens",
            "200",
            "--api-calls",
            "3",
            "--duration-ms",
            "1500",
        ],
    );
    assert_eq!(d["rev"], 3);
    assert_eq!(
        d["usage"],
        json!({"input_tokens": 300, "output_tokens": 200, "api_calls": 3, "duration_ms": 1500})
    );
    let d = budget(&env, &s, &["--check"]);
    assert_eq!(
        d["used"],
        json!({"tokens": 500, "api_calls": 3, "duration_ms": 1500})
    );
    assert_eq!(
        d["remaining"],
        json!({"tokens": 500, "api_calls": 7, "duration_ms": null})
    );
    assert_eq!(d["exceeded"], false);
    let e = env
        .json(&["session", "events", &s, "--limit", "100"])
        .data()["events"][2]
        .clone();
    assert_eq!(e["type"], "usage_recorded");
    assert_eq!(
        e["data"],
        json!({"input_tokens": 300, "output_tokens": 200, "api_calls": 3, "duration_ms": 1500})
    );
    // `--check` is read-only.
    assert_eq!(
        env.json(&["session", "show", &s]).data()["session"]["rev"],
        3
    );
    assert_rev_matches_events(&env, &s);
}

#[test]
fn crossing_pauses_once_and_reset_rearms() {
    let env = TestEnv::new();
    let s = env.create("a");
    budget(&env, &s, &["--max-tokens", "100"]);
    usage(&env, &s, &["--input-tokens", "100"]); // at the limit: not over
    assert_eq!(count(&env, &s, "budget_exceeded"), 0);
    let d = usage(&env, &s, &["--output-tokens", "1"]);
    assert_eq!(d["status"], "paused");
    let types = event_types(&env, &s);
    assert_eq!(
        types[types.len() - 3..],
        ["usage_recorded", "budget_exceeded", "paused"]
    );
    let ev = env
        .json(&["session", "events", &s, "--limit", "100"])
        .data()["events"]
        .as_array()
        .unwrap()
        .clone();
    let ex = &ev[ev.len() - 2];
    assert_eq!(ex["detail"], "budget exceeded: tokens 101 > 100");
    assert_eq!(
        ex["data"],
        json!({"limits": ["tokens"], "used": {"tokens": 101, "api_calls": 0, "duration_ms": 0},
               "max": {"tokens": 100, "api_calls": null, "duration_ms": null}, "on_exceed": "pause", "status": "paused"})
    );
    // Later writes while over append nothing more (paused sessions still record usage).
    usage(&env, &s, &["--input-tokens", "50"]);
    assert_eq!(count(&env, &s, "budget_exceeded"), 1);
    let d = budget(&env, &s, &["--check"]);
    assert_eq!(
        (d["exceeded"].as_bool(), d["remaining"]["tokens"].as_i64()),
        (Some(true), Some(0))
    );
    assert!(d["exceeded_at_ms"].is_i64());
    // Reset: counts from now; usage sums stay; the next crossing fires again.
    let d = budget(&env, &s, &["--reset"]);
    assert_eq!(
        (d["used"]["tokens"].as_i64(), d["exceeded"].as_bool()),
        (Some(0), Some(false))
    );
    assert_eq!(d["exceeded_at_ms"], Value::Null);
    assert_eq!(d["session_status"], "paused");
    let sess = env.json(&["session", "show", &s]).data()["session"].clone();
    assert_eq!(sess["usage"]["input_tokens"], 150);
    assert_eq!(event_types(&env, &s).last().unwrap(), "budget_reset");
    env.json(&["session", "resume", &s]).data();
    usage(&env, &s, &["--input-tokens", "101"]);
    assert_eq!(count(&env, &s, "budget_exceeded"), 2);
    assert_eq!(
        env.json(&["session", "show", &s]).data()["session"]["status"],
        "paused"
    );
    assert_eq!(env.json(&["verify", &s]).code, 0);
}

#[test]
fn fail_and_warn_policies_and_run_usage_crossing() {
    let env = TestEnv::new();
    let s = env.create("a");
    budget(&env, &s, &["--max-api-calls", "2", "--on-exceed", "fail"]);
    let d = usage(&env, &s, &["--api-calls", "3"]);
    assert_eq!(d["status"], "failed");
    assert_eq!(d["end_reason"], "budget exceeded: api_calls 3 > 2");
    assert!(d["ended_at_ms"].is_i64());
    let types = event_types(&env, &s);
    assert_eq!(
        types[types.len() - 3..],
        ["usage_recorded", "budget_exceeded", "failed"]
    );
    refused(
        &env,
        &s,
        &["session", "usage", &s, "--api-calls", "1"],
        "SESSION_INVALID_TRANSITION",
        5,
    );
    refused(
        &env,
        &s,
        &["session", "budget", &s, "--max-tokens", "5"],
        "SESSION_INVALID_TRANSITION",
        5,
    );
    refused(
        &env,
        &s,
        &["session", "budget", &s, "--reset"],
        "SESSION_INVALID_TRANSITION",
        5,
    );
    assert_eq!(budget(&env, &s, &["--check"])["exceeded"], true);

    // warn: only the event; crossing through run usage counts too.
    let w = env.create("w");
    budget(&env, &w, &["--max-tokens", "10", "--on-exceed", "warn"]);
    let r = env.json(&["run", "create", &w]).data()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    env.json(&["run", "start", &r]).data();
    env.json(&[
        "run",
        "usage",
        &r,
        "--input-tokens",
        "6",
        "--output-tokens",
        "5",
    ])
    .data();
    let types = event_types(&env, &w);
    assert_eq!(types[types.len() - 2..], ["run_usage", "budget_exceeded"]);
    assert_eq!(
        env.json(&["session", "show", &w]).data()["session"]["status"],
        "active"
    );
    // A new, lower limit on a session already over it is the crossing write.
    let p = env.create("p");
    usage(&env, &p, &["--input-tokens", "50"]);
    let d = budget(&env, &p, &["--max-tokens", "10"]);
    assert_eq!(
        (d["exceeded"].as_bool(), d["session_status"].as_str()),
        (Some(true), Some("paused"))
    );
    let types = event_types(&env, &p);
    assert_eq!(
        types[types.len() - 3..],
        ["budget_set", "budget_exceeded", "paused"]
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// 8 processes add usage at once; the budget is crossed by exactly one of
/// them, so exactly one `budget_exceeded` and one `paused`.
#[test]
fn concurrent_writers_cross_a_budget_exactly_once() {
    let env = TestEnv::new();
    let s = env.create("a");
    budget(&env, &s, &["--max-tokens", "350"]);
    let rev0 = env.json(&["session", "show", &s]).data()["session"]["rev"]
        .as_i64()
        .unwrap();
    let cmds = (0..8)
        .map(|_| {
            env.cli(&[
                "--busy-timeout-ms",
                "30000",
                "session",
                "usage",
                &s,
                "--input-tokens",
                "100",
            ])
        })
        .collect();
    let outs = race(env.dir.path(), cmds);
    for o in &outs {
        assert_eq!(o.code, 0, "{o:#?}");
    }
    assert_eq!(count(&env, &s, "budget_exceeded"), 1);
    assert_eq!(count(&env, &s, "paused"), 1);
    assert_eq!(count(&env, &s, "usage_recorded"), 8);
    let sess = env.json(&["session", "show", &s]).data()["session"].clone();
    assert_eq!(
        (sess["rev"].as_i64(), sess["usage"]["input_tokens"].as_i64()),
        (Some(rev0 + 8), Some(800))
    );
    assert_eq!(sess["status"], "paused");
    // The crossing write is the 4th in commit order: 300 → 400.
    let ev = env
        .json(&["session", "events", &s, "--limit", "100"])
        .data()["events"]
        .as_array()
        .unwrap()
        .clone();
    let i = ev
        .iter()
        .position(|e| e["type"] == "budget_exceeded")
        .unwrap();
    assert_eq!(ev[i]["data"]["used"]["tokens"], 400);
    assert_eq!(env.json(&["verify"]).code, 0);
}

#[test]
fn usage_integer_edges_and_refusals_change_nothing() {
    let env = TestEnv::new();
    let s = env.create("a");
    let d = usage(&env, &s, &["--input-tokens", "0"]);
    assert_eq!(d["usage"]["input_tokens"], 0);
    let max = MAX.to_string();
    let d = usage(&env, &s, &["--duration-ms", &max]);
    assert_eq!(d["usage"]["duration_ms"], MAX);
    let over = (MAX + 1).to_string();
    for (args, field) in [
        (vec!["--duration-ms", "1"], "duration_ms"), // total would overflow
        (vec!["--input-tokens", over.as_str()], "input_tokens"),
        (vec!["--api-calls", "-1"], "api_calls"),
        (
            vec!["--output-tokens", "-9007199254740991"],
            "output_tokens",
        ),
    ] {
        let mut a = vec!["session", "usage", s.as_str()];
        a.extend_from_slice(&args);
        let err = refused(&env, &s, &a, "INVALID_ARGUMENT", 2);
        assert_eq!(err["details"]["field"], field, "{args:?}");
        assert!(
            !err["message"].as_str().unwrap().contains("-1"),
            "echoes the value"
        );
    }
    for bad in ["1.5", "1e3", "0x10", "99999999999999999999", "NaN"] {
        refused(
            &env,
            &s,
            &["session", "usage", &s, "--api-calls", bad],
            "INVALID_ARGUMENT",
            2,
        );
        refused(
            &env,
            &s,
            &["session", "budget", &s, "--max-tokens", bad],
            "INVALID_ARGUMENT",
            2,
        );
    }
    refused(&env, &s, &["session", "usage", &s], "INVALID_ARGUMENT", 2);
    refused(
        &env,
        &s,
        &["session", "budget", &s, "--max-tokens", &over],
        "INVALID_ARGUMENT",
        2,
    );
    refused(
        &env,
        &s,
        &["session", "budget", &s, "--on-exceed", "explode"],
        "INVALID_ARGUMENT",
        2,
    );
    refused(
        &env,
        &s,
        &["session", "budget", &s, "--reset"],
        "INVALID_ARGUMENT",
        2,
    );
    refused(
        &env,
        &s,
        &["session", "budget", &s, "--check", "--reset"],
        "INVALID_ARGUMENT",
        2,
    );
    refused(
        &env,
        &s,
        &["session", "usage", &s, "--api-calls", "1", "--if-rev", "1"],
        "SESSION_CONFLICT",
        4,
    );
    assert_error(
        &env.json(&[
            "session",
            "usage",
            "ses_0123456789abcdef",
            "--api-calls",
            "1",
        ]),
        "SESSION_NOT_FOUND",
        3,
    );
    assert_error(
        &env.json(&["session", "budget", "ses_0123456789abcdef"]),
        "SESSION_NOT_FOUND",
        3,
    );
    // A limit of 2^53 - 1 is accepted; the schema refuses more.
    budget(&env, &s, &["--max-tokens", &max]);
    let msg = env
        .try_batch("UPDATE session_budgets SET max_tokens = 9007199254740992")
        .unwrap_err();
    // SQLite: "CHECK constraint failed"; PostgreSQL: 23514 check_violation.
    assert!(
        msg.contains(pick("CHECK constraint failed", "23514:")),
        "{msg}"
    );
}

#[test]
fn idempotent_usage_is_counted_once() {
    let env = TestEnv::new();
    let s = env.create("a");
    let a = [
        "session",
        "usage",
        &s,
        "--input-tokens",
        "5",
        "--idempotency-key",
        "u1",
    ];
    env.json(&a).data();
    let d = env.json(&a).data();
    assert_eq!(
        (d["usage"]["input_tokens"].as_i64(), d["rev"].as_i64()),
        (Some(5), Some(2))
    );
    let b = [
        "session",
        "usage",
        &s,
        "--input-tokens",
        "6",
        "--idempotency-key",
        "u1",
    ];
    refused(&env, &s, &b, "INVALID_ARGUMENT", 2);
}
