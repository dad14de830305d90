//! Idempotent replays say what happened (docs/design.md, "CLI"): a retry
//! with the same key applies nothing, returns the value as it is now, and
//! its envelope gains `"replayed":{"rev":R,"seq":S}` — the rev the first
//! attempt left and the seq of the event it wrote. A first attempt has no
//! `replayed` member. A write whose reply is lost has landed once: its retry
//! says so, by SESSION_CONFLICT or by its idempotency key (CASES C28).

use crate::common::*;
use serde_json::{json, Value};
use std::fs;

/// Runs `args` twice (first attempt, then the retry) and returns both
/// envelopes.
fn twice(env: &TestEnv, args: &[&str]) -> (Value, Value) {
    let first = env.json(args);
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    let again = env.json(args);
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    (first.json(), again.json())
}

#[test]
fn a_replayed_checkpoint_reports_the_first_attempts_rev_and_seq() {
    let env = TestEnv::new();
    let s = env.create("t");
    let args = [
        "session",
        "checkpoint",
        &s,
        "--step",
        "deploy",
        "--idempotency-key",
        "k-1",
    ];
    let (first, again) = twice(&env, &args);
    // The first attempt's envelope has only `ok` and `data` (serde_json's
    // map lists them sorted; the emitted order is checked below).
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["data", "ok"]);
    assert_eq!(first["data"]["rev"], 2);
    assert_eq!(again["replayed"], json!({"rev": 2, "seq": 1}));
    assert_eq!(again["data"], first["data"]);
    // The emitted text keeps the order ok, data, replayed.
    let text = env.json(&args).stdout;
    assert!(
        text.starts_with(r#"{"ok":true,"data":{"#)
            && text
                .trim_end()
                .ends_with(r#","replayed":{"rev":2,"seq":1}}"#),
        "{text}"
    );
    // Another write in between: the replay still names the first attempt,
    // while `data` is the session as it is now.
    env.checkpoint(&s, "later");
    let later = env.json(&args).json();
    assert_eq!(later["replayed"], json!({"rev": 2, "seq": 1}));
    assert_eq!(later["data"]["rev"], 3);
    assert_eq!(
        event_types(&env, &s),
        ["created", "checkpoint", "checkpoint"]
    );
    // Human output says so in one line.
    let human = env.run(&args);
    assert_eq!(human.code, 0);
    let lines: Vec<&str> = human
        .stdout
        .lines()
        .filter(|l| l.starts_with("replayed"))
        .collect();
    assert_eq!(
        lines,
        ["replayed   an earlier call with this idempotency key already applied this (event seq 1, rev 2); nothing was applied again"]
    );
}

#[test]
fn replays_of_every_kind_of_mutation_say_what_the_first_attempt_did() {
    let env = TestEnv::new();
    // create: rev 1, the created event.
    let c = [
        "session",
        "create",
        "--title",
        "t",
        "--idempotency-key",
        "c-1",
    ];
    let (first, again) = twice(&env, &c);
    assert_eq!(first.get("replayed"), None);
    assert_eq!(again["replayed"], json!({"rev": 1, "seq": 0}));
    let s = first["data"]["session_id"].as_str().unwrap().to_owned();
    assert_eq!(again["data"]["session_id"], s.as_str());

    // a run verb: the session's rev and the run event's seq.
    let (first, again) = twice(&env, &["run", "create", &s, "--idempotency-key", "r-1"]);
    assert_eq!(first.get("replayed"), None);
    assert_eq!(again["replayed"], json!({"rev": 2, "seq": 1}));
    assert_eq!(again["data"]["run_id"], first["data"]["run_id"]);

    // a budget verb.
    let (_, again) = twice(
        &env,
        &[
            "session",
            "budget",
            &s,
            "--max-tokens",
            "100",
            "--idempotency-key",
            "b-1",
        ],
    );
    assert_eq!(again["replayed"], json!({"rev": 3, "seq": 2}));

    // a gate verb writing two events: the seq of the gate's own event.
    let (_, again) = twice(
        &env,
        &[
            "gate",
            "open",
            &s,
            "--gate",
            "g",
            "--kind",
            "user-approval",
            "--idempotency-key",
            "g-1",
        ],
    );
    assert_eq!(again["replayed"], json!({"rev": 4, "seq": 3}));
    assert_eq!(again["data"]["status"], "paused");

    // a transition whose first attempt ended open runs (several events).
    env.json(&["gate", "approve", &s, "--gate", "g"]).data();
    let (first, again) = twice(
        &env,
        &[
            "session",
            "complete",
            &s,
            "--result",
            "done",
            "--idempotency-key",
            "e-1",
        ],
    );
    assert_eq!(first["data"]["rev"], 6);
    let types = event_types(&env, &s);
    let completed = types.iter().rposition(|t| t == "completed").unwrap();
    assert_eq!(again["replayed"], json!({"rev": 6, "seq": completed}));
    assert_eq!(types[completed - 1], "run_cancelled");
    // Replays applied nothing.
    assert_eq!(types.len(), completed + 1);
}

// A V1 SQLite file.
sqlite_only! {
/// A key recorded before schema V6 has no stored rev: its replay reports
/// `"rev":null` and the seq (tests/fixtures/v1.db holds one such key, `k-1`,
/// from `session checkpoint … --step one`).
#[test]
fn a_key_recorded_before_schema_6_replays_with_a_null_rev() {
    let env = TestEnv::new();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v1.db"),
        env.path(),
    )
    .unwrap();
    let s = "ses_302f4a8513709233";
    let r = env.json(&[
        "session",
        "checkpoint",
        s,
        "--step",
        "one",
        "--idempotency-key",
        "k-1",
    ]);
    let j = r.json();
    assert_eq!(j["ok"], true, "{}", r.stdout);
    assert_eq!(j["replayed"], json!({"rev": null, "seq": 1}));
    assert_eq!(j["data"]["rev"], 2);
    let human = env.run(&[
        "session",
        "checkpoint",
        s,
        "--step",
        "one",
        "--idempotency-key",
        "k-1",
    ]);
    assert!(
        human.stdout.contains("(event seq 1, an unrecorded rev)"),
        "{}",
        human.stdout
    );
}
}

/// Runs `logbook ARGS…` so that its reply is lost: stdout closed (`>&-`),
/// or a pipe whose reader has already left. Returns (exit code, stderr).
fn lost_reply(env: &TestEnv, mode: &str, args: &[&str]) -> (Option<i32>, String) {
    match mode {
        "closed" => {
            let mut c = env.sh("exec \"$@\" >&-");
            let o = c.arg("sh").arg(bin()).args(args).output().unwrap();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        }
        _ => {
            let rc = env.dir.path().join("rc");
            let _ = fs::remove_file(&rc);
            let mut c = env.sh("( sleep 1; \"$@\"; echo $? >\"$0\" ) | true");
            let o = c.arg(&rc).arg(bin()).args(args).output().unwrap();
            assert!(o.status.success());
            let code = fs::read_to_string(&rc).unwrap().trim().parse().ok();
            (code, String::from_utf8_lossy(&o.stderr).into_owned())
        }
    }
}

/// C28 (a): a write whose reply is lost commits once and exits cleanly;
/// the retry's SESSION_CONFLICT shows that the write landed.
#[test]
fn c28_a_lost_reply_then_retry_shows_the_write_landed() {
    let env = TestEnv::new();
    let db = env.path().to_str().unwrap().to_owned();
    for mode in ["closed", "gone"] {
        let id = env.create("t");
        let r = env.checkpoint(&id, "s0")["rev"].as_i64().unwrap();
        let rs = r.to_string();
        let args = [
            "--db",
            &db,
            "session",
            "checkpoint",
            &id,
            "--step",
            "s1",
            "--if-rev",
            &rs,
            "--json",
        ];
        let (code, stderr) = lost_reply(&env, mode, &args);
        let run = Run {
            code: code.unwrap_or(-1),
            stdout: String::new(),
            stderr,
        };
        assert_no_panic(&run);
        assert_eq!(code, Some(0), "{mode}: {}", run.stderr);
        assert_eq!(rev_and_events(&env, &id), (r + 1, r + 1, r), "{mode}");

        let retry = env.json(&[
            "session",
            "checkpoint",
            &id,
            "--step",
            "s1",
            "--if-rev",
            &rs,
        ]);
        let e = assert_error(&retry, "SESSION_CONFLICT", 4);
        assert_eq!(e["details"]["current_rev"], r + 1);
        assert_eq!(e["details"]["expected_rev"], r);
        assert_eq!(
            e["details"]["latest_event"],
            json!({"seq": r, "type": "checkpoint", "step": "s1"})
        );
        assert_eq!(rev_and_events(&env, &id), (r + 1, r + 1, r));
    }
}

/// C28 (a) with an idempotency key: the retry returns the first result and
/// applies nothing again; the same key with other arguments is refused.
#[test]
fn c28_a_lost_reply_retried_with_its_idempotency_key_applies_once() {
    let env = TestEnv::new();
    let db = env.path().to_str().unwrap().to_owned();
    let id = env.create("t");
    let args = [
        "--db",
        &db,
        "session",
        "checkpoint",
        &id,
        "--step",
        "s1",
        "--idempotency-key",
        "k1",
        "--json",
    ];
    let (code, _) = lost_reply(&env, "closed", &args);
    assert_eq!(code, Some(0));
    assert_eq!(rev_and_events(&env, &id), (2, 2, 1));
    let d = env
        .json(&[
            "session",
            "checkpoint",
            &id,
            "--step",
            "s1",
            "--idempotency-key",
            "k1",
        ])
        .data();
    assert_eq!(
        (d["rev"].as_i64(), d["checkpoint"]["seq"].as_i64()),
        (Some(2), Some(1))
    );
    assert_eq!(rev_and_events(&env, &id), (2, 2, 1));
    let r = env.json(&[
        "session",
        "checkpoint",
        &id,
        "--step",
        "other",
        "--idempotency-key",
        "k1",
    ]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "idempotency_key"
    );
    assert_eq!(rev_and_events(&env, &id), (2, 2, 1));
}

/// C28 (b): two creates with one idempotency key make one session.
#[test]
fn c28_create_twice_with_one_idempotency_key_makes_one_session() {
    let env = TestEnv::new();
    let args = [
        "session",
        "create",
        "--title",
        "t",
        "--app",
        "a",
        "--idempotency-key",
        "create-1",
    ];
    let first = env.json(&args).data();
    let second = env.json(&args).data();
    assert_eq!(first, second);
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), 1);
    assert_eq!(env.scalar("SELECT count(*) FROM events"), 1);
    let r = env.json(&[
        "session",
        "create",
        "--title",
        "other",
        "--app",
        "a",
        "--idempotency-key",
        "create-1",
    ]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "idempotency_key"
    );
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), 1);
}
