//! Ending a session ends its runs first (docs/design.md, "Runs"): completing, failing
//! or cancelling a session, a budget's fail crossing and a gate rejection
//! each cancel the session's pending and running runs, one `run_cancelled`
//! per run in creation order, before the session's own terminal event; a
//! session whose runs had all finished ends as before.

use crate::common::*;
use crate::runs::{create_run, refused, show_run};
use serde_json::{json, Value};

/// `(type, run_id, detail, data)` of one event.
type EventRow = (String, Option<String>, Option<String>, Option<String>);

/// `(type, run_id, detail, data)` of a session's events, in seq order.
fn timeline(env: &TestEnv, s: &str) -> Vec<EventRow> {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    env.rows(
        "SELECT type, run_id, detail, data FROM events WHERE session_id = $1 ORDER BY seq",
        &[s],
    )
    .iter()
    .map(|r| (text(&r[0]).unwrap(), text(&r[1]), text(&r[2]), text(&r[3])))
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
        let ended_at = env.rows(
            "SELECT ended_at_ms, updated_at_ms FROM runs WHERE session_id = $1",
            &[&s],
        );
        assert!(ended_at.iter().all(|r| r[0].is_i64() && r[0] == r[1]));
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
