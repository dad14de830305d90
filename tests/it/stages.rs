//! `logbook session stage` (docs/design.md, "Stages").

use crate::common::*;
use serde_json::{json, Value};

fn last_event(env: &TestEnv, id: &str) -> Value {
    let d = env
        .json(&["session", "events", id, "--limit", "1000"])
        .data();
    d["events"].as_array().unwrap().last().unwrap().clone()
}

#[test]
fn each_action_appends_its_event_and_sets_the_stage() {
    let env = TestEnv::new();
    let s = env.create("a");
    let cases: [(&[&str], &str, Value, Option<&str>); 4] = [
        (
            &["start", "reproduce"],
            "stage_started",
            json!({"stage": "reproduce"}),
            None,
        ),
        (
            &[
                "fail",
                "reproduce",
                "--reason",
                "no repro",
                "--attempt",
                "1",
            ],
            "stage_failed",
            json!({"stage": "reproduce", "attempt": 1}),
            Some("no repro"),
        ),
        (
            &["retry", "reproduce", "--attempt", "2"],
            "stage_retrying",
            json!({"stage": "reproduce", "attempt": 2}),
            None,
        ),
        (
            &["complete", "verify"],
            "stage_completed",
            json!({"stage": "verify"}),
            None,
        ),
    ];
    for (k, (args, typ, data, detail)) in cases.iter().enumerate() {
        let mut a = vec!["session", "stage", &s];
        a.extend_from_slice(args);
        let d = env.json(&a).data();
        assert_eq!(d["rev"], 2 + k as i64, "{args:?}");
        assert_eq!(d["status"], "active");
        assert_eq!(d["stage"], args[1]);
        let e = last_event(&env, &s);
        assert_eq!(e["seq"], 1 + k as i64);
        assert_eq!(e["type"], *typ);
        assert_eq!(e["data"], *data);
        assert_eq!(e["detail"].as_str(), *detail);
    }
    assert_eq!(
        event_types(&env, &s),
        [
            "created",
            "stage_started",
            "stage_failed",
            "stage_retrying",
            "stage_completed"
        ]
    );
    assert_rev_matches_events(&env, &s);
    assert_eq!(env.json(&["verify", &s]).code, 0);
}

#[test]
fn stage_refusals_change_nothing() {
    let env = TestEnv::new();
    let s = env.create("a");
    let before = env.show(&s);
    for (args, field) in [
        (vec!["--attempt", "0"], "attempt"),
        (vec!["--attempt", "-1"], "attempt"),
        (vec!["--attempt", "1000001"], "attempt"),
        (vec!["--reason", ""], "reason"),
    ] {
        let mut a = vec!["session", "stage", &s, "start", "x"];
        a.extend_from_slice(&args);
        let e = assert_error(&env.json(&a), "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], field, "{args:?}");
    }
    let long = "n".repeat(129);
    let e = assert_error(
        &env.json(&["session", "stage", &s, "start", &long]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(e["details"]["field"], "stage");
    assert_error(
        &env.json(&["session", "stage", &s, "begin", "x"]),
        "INVALID_ARGUMENT",
        2,
    );
    let e = assert_error(
        &env.json(&["session", "stage", &s, "start", "x", "--if-rev", "7"]),
        "SESSION_CONFLICT",
        4,
    );
    assert_eq!(
        (
            e["details"]["expected_rev"].as_i64(),
            e["details"]["current_rev"].as_i64()
        ),
        (Some(7), Some(1))
    );
    assert_eq!(env.show(&s), before);
    // The longest name is fine.
    let ok = "n".repeat(128);
    assert_eq!(
        env.json(&["session", "stage", &s, "start", &ok]).data()["stage"],
        ok.as_str()
    );

    // Only an active session has stages.
    env.json(&["session", "pause", &s]);
    let paused = env.show(&s);
    let e = assert_error(
        &env.json(&["session", "stage", &s, "start", "y"]),
        "SESSION_INVALID_TRANSITION",
        5,
    );
    assert_eq!(e["details"]["status"], "paused");
    assert_eq!(env.show(&s), paused);
    assert_error(
        &env.json(&["session", "stage", "ses_00000000000000aa", "start", "y"]),
        "SESSION_NOT_FOUND",
        3,
    );
}

#[test]
fn a_stage_reason_is_redacted_and_a_retry_with_the_same_key_applies_once() {
    let env = TestEnv::new();
    let s = env.create("a");
    let secret = "Authorization: Bearer abcdef0123456789SECRET";
    let args = [
        "session",
        "stage",
        &s,
        "fail",
        "deploy",
        "--reason",
        secret,
        "--idempotency-key",
        "k1",
    ];
    let first = env.json(&args).data();
    let again = env.json(&args).data();
    assert_eq!(first["rev"], 2);
    assert_eq!(again["rev"], 2);
    let e = last_event(&env, &s);
    assert_eq!(e["detail"], "Authorization: Bearer [REDACTED]");
    let bytes = env.db_bytes();
    assert!(bytes.windows(14).any(|w| w == b"Bearer [REDACT"));
    assert!(!bytes.windows(6).any(|w| w == b"SECRET"));
}

/// A stage name is stored as given on every path that writes the `stage`
/// column, so one that looks like a secret is refused alike by `session
/// create --stage` (which used to redact it to `[REDACTED]`) and `session
/// stage`, and neither writes anything.
#[test]
fn a_secret_looking_stage_name_is_refused_by_create_and_by_stage_alike() {
    let env = TestEnv::new();
    let s = env.create("a");
    let before = env.json(&["session", "show", &s]).stdout;
    let name = "token=abcdef0123456789";
    for args in [
        vec!["session", "create", "--title", "b", "--stage", name],
        vec!["session", "stage", &s, "start", name],
    ] {
        let e = assert_error(&env.json(&args), "INVALID_ARGUMENT", 2);
        assert_eq!(
            e["message"],
            "invalid `stage`: looks like it holds a secret; stage names are stored as given",
            "{args:?}"
        );
        assert_eq!(e["details"]["field"], "stage");
    }
    assert_eq!(env.json(&["session", "show", &s]).stdout, before);
    let list = env.json(&["session", "list"]).data();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);
    // An ordinary name is stored exactly as given by both.
    let b = env.create_with(&["--title", "b", "--stage", "plan-v2"]);
    let shown = env.json(&["session", "show", &b]).data();
    assert_eq!(shown["session"]["stage"], "plan-v2");
    let d = env
        .json(&["session", "stage", &s, "start", "plan-v2"])
        .data();
    assert_eq!(d["stage"], "plan-v2");
}
