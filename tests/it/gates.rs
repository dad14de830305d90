//! `logbook gate open|approve|reject|list` (docs/design.md, "Gates").

use crate::common::*;
use serde_json::Value;

fn show(env: &TestEnv, id: &str) -> Value {
    env.json(&["session", "show", id]).data()
}

fn last_event(env: &TestEnv, id: &str) -> Value {
    let v = show(env, id);
    v["events"].as_array().unwrap().last().unwrap().clone()
}

fn open(env: &TestEnv, id: &str, gate: &str, kind: &str) -> Value {
    env.json(&["gate", "open", id, "--gate", gate, "--kind", kind])
        .data()
}

#[test]
fn an_auto_gate_is_approved_at_once_and_the_session_keeps_going() {
    let env = TestEnv::new();
    let s = env.create("a");
    let d = open(&env, &s, "lint", "auto");
    assert_eq!(
        (d["status"].as_str(), d["rev"].as_i64()),
        (Some("active"), Some(2))
    );
    let e = last_event(&env, &s);
    assert_eq!(e["type"], "gate_approved");
    assert_eq!(
        e["data"],
        serde_json::json!({"gate": "lint", "kind": "auto", "round": 1})
    );
    let v = show(&env, &s);
    assert_eq!(v["blocking_gate"], Value::Null);
    let g = env.json(&["gate", "list", &s]).data();
    assert_eq!(g["gates"][0]["status"], "approved");
    assert_eq!(g["gates"][0]["decided_seq"], 1);
    assert_eq!(g["gates"][0]["opened_seq"], 1);
    assert_rev_matches_events(&env, &s);
}

#[test]
fn blocking_kinds_pause_show_names_the_gate_and_approve_resumes() {
    for kind in ["user-approval", "step-confirm"] {
        let env = TestEnv::new();
        let s = env.create("a");
        let d = open(&env, &s, "deploy", kind);
        assert_eq!(d["status"], "paused", "{kind}");
        // The gate's event, then the status change's own (docs/design.md, "Event order").
        assert_eq!(event_types(&env, &s), ["created", "gate_opened", "paused"]);
        assert_eq!(d["rev"], 2);
        let v = show(&env, &s);
        assert_eq!(v["blocking_gate"]["name"], "deploy");
        assert_eq!(v["blocking_gate"]["kind"], kind);
        assert_eq!(v["blocking_gate"]["status"], "pending");
        let human = env.run(&["session", "show", &s]).stdout;
        assert!(human.contains("blocked_on gate deploy"), "{human}");

        // resume cannot bypass the gate
        let before = env.show(&s);
        let e = assert_error(&env.json(&["session", "resume", &s]), "GATE_PENDING", 5);
        assert_eq!(e["details"]["gate"], "deploy");
        assert_eq!(env.show(&s), before);

        let d = env
            .json(&["gate", "approve", &s, "--gate", "deploy", "--note", "lgtm"])
            .data();
        assert_eq!(
            (d["status"].as_str(), d["rev"].as_i64()),
            (Some("active"), Some(3))
        );
        let e = &show(&env, &s)["events"][3];
        assert_eq!(
            (e["type"].as_str(), e["detail"].as_str()),
            (Some("gate_approved"), Some("lgtm"))
        );
        assert_eq!(
            event_types(&env, &s),
            [
                "created",
                "gate_opened",
                "paused",
                "gate_approved",
                "resumed"
            ]
        );
        assert_eq!(show(&env, &s)["blocking_gate"], Value::Null);
        let g = &env.json(&["gate", "list", &s]).data()["gates"][0];
        assert_eq!(
            (g["status"].as_str(), g["decided_seq"].as_i64()),
            (Some("approved"), Some(3))
        );
        assert_eq!(g["reason"], "lgtm");
        // Two mutations with two events each.
        assert_eq!(d["rev"], 3);
        assert_eq!(env.json(&["verify"]).code, 0);
    }
}

#[test]
fn reject_fails_the_session_and_abort_cancels_it() {
    for (abort, status) in [(false, "failed"), (true, "cancelled")] {
        let env = TestEnv::new();
        let s = env.create("a");
        open(&env, &s, "g", "user-approval");
        let mut a = vec!["gate", "reject", &s, "--gate", "g", "--reason", "too risky"];
        if abort {
            a.push("--abort");
        }
        let d = env.json(&a).data();
        assert_eq!(d["status"], status);
        assert_eq!(d["end_reason"], "too risky");
        assert!(d["ended_at_ms"].is_i64());
        // The rejection, then the status change's own event (docs/design.md, "Event order"):
        // a reader of the feed that counts endings sees this one too.
        let e = last_event(&env, &s);
        assert_eq!(
            (e["seq"].as_i64(), e["type"].as_str(), e["detail"].as_str()),
            (Some(4), Some(status), Some("too risky"))
        );
        let shown = env.json(&["session", "show", &s]).data();
        let rejected = &shown["events"][3];
        assert_eq!(rejected["type"], "gate_rejected");
        assert_eq!(rejected["data"]["outcome"], status);
        assert_eq!(
            event_types(&env, &s),
            ["created", "gate_opened", "paused", "gate_rejected", status]
        );
        assert_eq!(d["rev"], 3);
        let g = &env.json(&["gate", "list", &s]).data()["gates"][0];
        assert_eq!(
            (g["status"].as_str(), g["outcome"].as_str()),
            (Some("rejected"), Some(status))
        );

        // Deciding again: GATE_ALREADY_DECIDED, exit 5, nothing changes.
        let before = env.show(&s);
        for args in [
            vec!["gate", "approve", &s, "--gate", "g"],
            vec!["gate", "reject", &s, "--gate", "g", "--reason", "again"],
        ] {
            let e = assert_error(&env.json(&args), "GATE_ALREADY_DECIDED", 5);
            assert_eq!(e["details"]["status"], "rejected");
            assert_eq!(e["details"]["decided_seq"], 3);
        }
        assert_eq!(env.show(&s), before);
        assert_eq!(env.json(&["verify"]).code, 0);
    }
}

#[test]
fn gate_refusals_change_nothing() {
    let env = TestEnv::new();
    let s = env.create("a");
    let before = env.show(&s);
    let e = assert_error(
        &env.json(&["gate", "approve", &s, "--gate", "nope"]),
        "GATE_NOT_FOUND",
        3,
    );
    assert_eq!(e["details"]["gate"], "nope");
    assert_error(
        &env.json(&["gate", "reject", &s, "--gate", "nope", "--reason", "r"]),
        "GATE_NOT_FOUND",
        3,
    );
    assert_error(
        &env.json(&["gate", "open", &s, "--gate", "g", "--kind", "maybe"]),
        "INVALID_ARGUMENT",
        2,
    );
    let long = "g".repeat(129);
    assert_error(
        &env.json(&["gate", "open", &s, "--gate", &long, "--kind", "auto"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_error(
        &env.json(&[
            "gate", "open", &s, "--gate", "g", "--kind", "auto", "--if-rev", "9",
        ]),
        "SESSION_CONFLICT",
        4,
    );
    assert_error(
        &env.json(&[
            "gate",
            "open",
            "ses_00000000000000aa",
            "--gate",
            "g",
            "--kind",
            "auto",
        ]),
        "SESSION_NOT_FOUND",
        3,
    );
    assert_error(
        &env.json(&["gate", "list", "ses_00000000000000aa"]),
        "SESSION_NOT_FOUND",
        3,
    );
    assert_eq!(env.show(&s), before);

    // Gates open on active sessions only; an approval needs a pending gate.
    open(&env, &s, "g", "step-confirm");
    let paused = env.show(&s);
    let e = assert_error(
        &env.json(&["gate", "open", &s, "--gate", "h", "--kind", "auto"]),
        "SESSION_INVALID_TRANSITION",
        5,
    );
    assert_eq!(e["details"]["status"], "paused");
    assert_error(
        &env.json(&["gate", "approve", &s, "--gate", "g", "--if-rev", "1"]),
        "SESSION_CONFLICT",
        4,
    );
    assert_eq!(env.show(&s), paused);
    // A pending gate of a cancelled session can no longer be decided.
    env.json(&["session", "cancel", &s, "--reason", "stop"])
        .data();
    let cancelled = env.show(&s);
    assert_eq!(show(&env, &s)["blocking_gate"], Value::Null);
    assert_error(
        &env.json(&["gate", "approve", &s, "--gate", "g"]),
        "SESSION_INVALID_TRANSITION",
        5,
    );
    assert_eq!(env.show(&s), cancelled);
}

#[test]
fn a_decided_gate_name_opens_again_as_a_new_round() {
    let env = TestEnv::new();
    let s = env.create("a");
    open(&env, &s, "verify", "user-approval");
    env.json(&["gate", "approve", &s, "--gate", "verify"])
        .data();
    open(&env, &s, "verify", "user-approval");
    let e = &show(&env, &s)["events"][5];
    assert_eq!(
        (e["type"].as_str(), e["data"]["round"].as_i64()),
        (Some("gate_opened"), Some(2))
    );
    env.json(&["gate", "approve", &s, "--gate", "verify"])
        .data();
    let g = env.json(&["gate", "list", &s]).data();
    let rounds: Vec<(i64, &str)> = g["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["round"].as_i64().unwrap(), g["status"].as_str().unwrap()))
        .collect();
    assert_eq!(rounds, [(1, "approved"), (2, "approved")]);
    let human = env.run(&["gate", "list", &s]).stdout;
    assert!(human.starts_with("GATE"), "{human}");
    // A retried approval with the same key applies once.
    open(&env, &s, "ship", "user-approval");
    let a = [
        "gate",
        "approve",
        &s,
        "--gate",
        "ship",
        "--idempotency-key",
        "k",
    ];
    let first = env.json(&a).data();
    let again = env.json(&a).data();
    assert_eq!(first["rev"], again["rev"]);
    // Four gate mutations of two events each after `created`; the retry
    // wrote nothing.
    assert_eq!(first["rev"], 7);
    assert_eq!(event_types(&env, &s).len(), 13);
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// Raw SQL cannot decide a gate twice or delete one.
#[test]
fn gate_triggers_hold_against_raw_sql() {
    let env = TestEnv::new();
    let s = env.create("a");
    open(&env, &s, "g", "auto");
    for sql in [
        "UPDATE session_gates SET status = 'rejected'",
        "UPDATE session_gates SET status = 'pending', decided_seq = NULL, decided_at_ms = NULL",
        "DELETE FROM session_gates",
    ] {
        let err = env.try_batch(sql).unwrap_err();
        assert!(
            err.contains("logbook:") && err.contains("gate"),
            "{sql}: {err}"
        );
    }
}

/// Gates open only on active sessions, so there is one pending gate at most;
/// should raw SQL plant a second, `show` names the newest (highest gate_id),
/// whatever the names' index order.
#[test]
fn show_names_the_newest_pending_gate_when_raw_sql_planted_two() {
    let env = TestEnv::new();
    let s = env.create("a");
    open(&env, &s, "alpha", "user-approval");
    env.batch(&format!(
        "INSERT INTO session_gates (session_id, name, round, kind, status, opened_seq, opened_at_ms) \
         VALUES ('{s}', 'zeta', 1, 'step-confirm', 'pending', 1, 0)"
    ));
    let v = show(&env, &s);
    assert_eq!(v["blocking_gate"]["name"], "zeta");
    assert_eq!(v["blocking_gate"]["kind"], "step-confirm");
}
