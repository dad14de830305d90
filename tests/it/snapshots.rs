//! Checkpoint snapshots, restore and fork (docs/design.md, "Snapshots").

use crate::common::*;
use serde_json::{json, Value};

fn data(env: &TestEnv, args: &[&str]) -> Value {
    env.json(args).data()
}

fn context(env: &TestEnv, id: &str) -> Value {
    data(env, &["session", "show", id])["session"]["context"].clone()
}

#[test]
fn checkpoints_list_seq_step_time_and_size() {
    let env = TestEnv::new();
    let s = env.create("a");
    let state = r#"{ "plan": ["a", "b"], "n": 1 }"#;
    let d = data(
        &env,
        &[
            "session",
            "checkpoint",
            &s,
            "--step",
            "plan",
            "--state",
            state,
        ],
    );
    let compact = r#"{"n":1,"plan":["a","b"]}"#;
    let ev = data(&env, &["session", "events", &s])["events"][1].clone();
    assert_eq!(ev["data"]["snapshot"]["size_bytes"], compact.len());
    assert_eq!(ev["data"]["step"], "plan");
    // A checkpoint with only a state is allowed; one without is not stored.
    data(&env, &["session", "checkpoint", &s, "--state", "{}"]);
    data(&env, &["session", "checkpoint", &s, "--step", "nostate"]);
    let l = data(&env, &["session", "checkpoints", &s]);
    let rows: Vec<(i64, Value, i64)> = l["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["seq"].as_i64().unwrap(),
                c["step"].clone(),
                c["size_bytes"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (1, json!("plan"), compact.len() as i64),
            (2, Value::Null, 2)
        ]
    );
    assert_eq!(l["checkpoints"][0]["at_ms"], ev["at_ms"]);
    assert_eq!(d["rev"], 2);
    let human = env.run(&["session", "checkpoints", &s]).stdout;
    assert!(human.starts_with("SEQ"), "{human}");
    assert_rev_matches_events(&env, &s);
}

#[test]
fn state_caps_and_shape_are_checked_and_nothing_is_stored_on_refusal() {
    let env = TestEnv::new();
    let s = env.create("a");
    let before = env.show(&s);
    let cap = 256 * 1024;
    let big = format!(r#"{{"k":"{}"}}"#, "x".repeat(cap - 8 + 1));
    let file = env.dir.path().join("state.json");
    std::fs::write(&file, &big).unwrap();
    let at = format!("@{}", file.display());
    for bad in ["[1]", "\"s\"", "{", at.as_str()] {
        let e = assert_error(
            &env.json(&["session", "checkpoint", &s, "--step", "x", "--state", bad]),
            "INVALID_ARGUMENT",
            2,
        );
        assert_eq!(e["details"]["field"], "state", "{bad}");
    }
    assert_eq!(env.show(&s), before);
    // Exactly at the cap is accepted, byte for byte.
    let ok = format!(r#"{{"k":"{}"}}"#, "x".repeat(cap - 8));
    assert_eq!(ok.len(), cap);
    std::fs::write(&file, &ok).unwrap();
    data(
        &env,
        &["session", "checkpoint", &s, "--step", "x", "--state", &at],
    );
    assert_eq!(
        data(&env, &["session", "checkpoints", &s])["checkpoints"][0]["size_bytes"],
        cap
    );
    let n: i64 = env.scalar("SELECT count(*) FROM session_snapshots");
    assert_eq!(n, 1);
}

#[test]
fn restore_round_trips_stage_and_context_and_never_rewinds_usage() {
    let env = TestEnv::new();
    let s = env.create_with(&["--title", "a", "--context", r#"{"v":0}"#, "--stage", "s0"]);
    let state = json!({"v": 1, "nested": {"emoji": "🙏", "list": [1, 2.5, null]}, "token": "password=hunter2"});
    data(&env, &["session", "stage", &s, "start", "build"]);
    data(
        &env,
        &[
            "session",
            "checkpoint",
            &s,
            "--step",
            "c1",
            "--state",
            &state.to_string(),
        ],
    );
    data(&env, &["session", "stage", &s, "start", "deploy"]);
    // Usage accrues (another feature writes it; here an operator does).
    env.batch(&format!(
        "UPDATE sessions SET input_tokens = 500, api_calls = 7, rev = rev + 1 WHERE session_id = '{s}'"
    ));
    let usage = data(&env, &["session", "show", &s])["session"]["usage"].clone();
    let rev = data(&env, &["session", "show", &s])["session"]["rev"]
        .as_i64()
        .unwrap();
    let d = data(
        &env,
        &[
            "session",
            "restore",
            &s,
            "--checkpoint",
            "2",
            "--if-rev",
            &rev.to_string(),
        ],
    );
    assert_eq!(d["stage"], "build");
    let mut want = state.clone();
    want["token"] = json!("[REDACTED]");
    assert_eq!(d["context"], want);
    assert_eq!(d["usage"], usage);
    assert_eq!(d["rev"], rev + 1);
    assert_eq!(d["status"], "active");
    let last = data(&env, &["session", "show", &s])["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["type"], "checkpoint_restored");
    assert_eq!(last["data"]["checkpoint_seq"], 2);
    assert_eq!(last["data"]["stage"], "build");
    // A paused session restores too.
    data(&env, &["session", "pause", &s]);
    assert_eq!(
        data(&env, &["session", "restore", &s, "--checkpoint", "2"])["status"],
        "paused"
    );
    assert_eq!(context(&env, &s), want);
    // (No `verify` here: the operator's raw usage UPDATE bumped rev without
    // an event, which verify rightly reports.)
}

#[test]
fn restore_refusals_change_nothing() {
    let env = TestEnv::new();
    let s = env.create("a");
    data(
        &env,
        &[
            "session",
            "checkpoint",
            &s,
            "--step",
            "c1",
            "--state",
            r#"{"a":1}"#,
        ],
    );
    data(&env, &["session", "checkpoint", &s, "--step", "plain"]);
    let before = env.show(&s);
    for seq in ["0", "2", "99"] {
        let e = assert_error(
            &env.json(&["session", "restore", &s, "--checkpoint", seq]),
            "CHECKPOINT_NOT_FOUND",
            3,
        );
        assert_eq!(e["details"]["seq"].to_string(), seq);
    }
    assert_error(
        &env.json(&["session", "restore", &s, "--checkpoint", "-1"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_error(
        &env.json(&[
            "session",
            "restore",
            &s,
            "--checkpoint",
            "1",
            "--if-rev",
            "1",
        ]),
        "SESSION_CONFLICT",
        4,
    );
    assert_error(
        &env.json(&[
            "session",
            "restore",
            "ses_00000000000000aa",
            "--checkpoint",
            "1",
        ]),
        "SESSION_NOT_FOUND",
        3,
    );
    assert_eq!(env.show(&s), before);
    data(&env, &["session", "complete", &s, "--result", "done"]);
    let done = env.show(&s);
    assert_error(
        &env.json(&["session", "restore", &s, "--checkpoint", "1"]),
        "SESSION_INVALID_TRANSITION",
        5,
    );
    assert_eq!(env.show(&s), done);
}

#[test]
fn fork_creates_a_child_from_a_snapshot_with_forked_events_on_both() {
    let env = TestEnv::new();
    let s = env.create_with(&[
        "--title",
        "source",
        "--app",
        "web",
        "--goal",
        "g",
        "--tag",
        "t1",
        "--metadata",
        r#"{"m":1}"#,
    ]);
    data(&env, &["session", "stage", &s, "start", "plan"]);
    data(
        &env,
        &[
            "session",
            "checkpoint",
            &s,
            "--step",
            "c1",
            "--state",
            r#"{"x":1}"#,
        ],
    );
    data(&env, &["session", "stage", &s, "start", "build"]);
    data(
        &env,
        &[
            "session",
            "checkpoint",
            &s,
            "--step",
            "c2",
            "--state",
            r#"{"x":2}"#,
        ],
    );
    let src_rev = data(&env, &["session", "show", &s])["session"]["rev"]
        .as_i64()
        .unwrap();

    // Default: the newest snapshot and the source's title.
    let c = data(&env, &["session", "fork", &s]);
    let cid = c["session_id"].as_str().unwrap().to_owned();
    assert_eq!(c["parent_session_id"], s.as_str());
    assert_eq!(
        (c["title"].as_str(), c["status"].as_str()),
        (Some("source"), Some("active"))
    );
    assert_eq!(c["context"], json!({"x": 2}));
    assert_eq!(c["stage"], "build");
    assert_eq!(
        (c["app"].as_str(), c["goal"].as_str()),
        (Some("web"), Some("g"))
    );
    assert_eq!(c["tags"], json!(["t1"]));
    assert_eq!(c["metadata"], json!({"m": 1}));
    assert_eq!(c["rev"], 2);
    assert_eq!(event_types(&env, &cid), ["created", "forked"]);
    let ce = data(&env, &["session", "events", &cid])["events"][1].clone();
    assert_eq!(
        ce["data"],
        json!({"parent_session_id": s, "checkpoint_seq": 4})
    );
    let src = data(&env, &["session", "show", &s]);
    assert_eq!(src["session"]["rev"], src_rev + 1);
    let se = src["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(se["type"], "forked");
    assert_eq!(
        se["data"],
        json!({"child_session_id": cid, "checkpoint_seq": 4})
    );
    assert_eq!(src["children"]["total"], 1);

    // An older snapshot and a new title.
    let c2 = data(
        &env,
        &[
            "session",
            "fork",
            &s,
            "--checkpoint",
            "2",
            "--title",
            "retry",
        ],
    );
    assert_eq!(
        (c2["title"].as_str(), c2["stage"].as_str()),
        (Some("retry"), Some("plan"))
    );
    assert_eq!(c2["context"], json!({"x": 1}));
    assert_eq!(c2["usage"]["input_tokens"], 0);
    assert_rev_matches_events(&env, &s);
    assert_rev_matches_events(&env, &cid);
    assert_eq!(env.json(&["verify"]).code, 0);
}

#[test]
fn a_terminal_source_forks_without_being_touched() {
    let env = TestEnv::new();
    let s = env.create("a");
    data(
        &env,
        &[
            "session",
            "checkpoint",
            &s,
            "--step",
            "good",
            "--state",
            r#"{"ok":true}"#,
        ],
    );
    data(&env, &["session", "fail", &s, "--reason", "broke later"]);
    let before = env.show(&s);
    let c = data(&env, &["session", "fork", &s, "--checkpoint", "1"]);
    assert_eq!(c["context"], json!({"ok": true}));
    assert_eq!(c["parent_session_id"], s.as_str());
    let strip = |t: &str| {
        let mut v: Value = serde_json::from_str(t).unwrap();
        v["data"].as_object_mut().unwrap().remove("children");
        v
    };
    assert_eq!(strip(&env.show(&s)), strip(&before));
    assert_eq!(
        data(&env, &["session", "show", &s])["children"]["active"],
        1
    );
    assert_error(
        &env.json(&["session", "fork", &s, "--if-rev", "9"]),
        "SESSION_CONFLICT",
        4,
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}

#[test]
fn fork_refusals_and_an_idempotent_retry() {
    let env = TestEnv::new();
    let s = env.create("a");
    let before = env.show(&s);
    assert_error(
        &env.json(&["session", "fork", &s]),
        "CHECKPOINT_NOT_FOUND",
        3,
    );
    assert_error(
        &env.json(&["session", "fork", "ses_00000000000000aa"]),
        "SESSION_NOT_FOUND",
        3,
    );
    let long = "t".repeat(201);
    assert_error(
        &env.json(&["session", "fork", &s, "--title", &long]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(env.show(&s), before);
    let n: i64 = env.scalar("SELECT count(*) FROM sessions");
    assert_eq!(n, 1);
    data(
        &env,
        &["session", "checkpoint", &s, "--step", "c", "--state", "{}"],
    );
    let a = ["session", "fork", &s, "--idempotency-key", "fork-1"];
    let first = data(&env, &a);
    let again = data(&env, &a);
    assert_eq!(first["session_id"], again["session_id"]);
    let n: i64 = env.scalar("SELECT count(*) FROM sessions");
    assert_eq!(n, 2);
}

/// Snapshots are immutable and tied to a checkpoint event, even for raw SQL.
#[test]
fn snapshot_triggers_hold_against_raw_sql() {
    let env = TestEnv::new();
    let s = env.create("a");
    data(
        &env,
        &["session", "checkpoint", &s, "--step", "c", "--state", "{}"],
    );
    for sql in [
        "UPDATE session_snapshots SET state = '{\"a\":1}', size_bytes = 7".to_owned(),
        "DELETE FROM session_snapshots".to_owned(),
        format!("INSERT INTO session_snapshots (session_id, seq, state, size_bytes, at_ms) VALUES ('{s}', 0, '{{}}', 2, 0)"),
    ] {
        let err = env.try_batch(&sql).unwrap_err();
        assert!(err.contains("logbook:") && err.contains("snapshot"), "{sql}: {err}");
    }
}

#[test]
fn the_library_reads_a_snapshot_with_its_state() {
    // Ledger::snapshot (the Python package's Ledger.snapshot,
    // docs/python.md): the newest, or the one at a seq, with its state as
    // it was stored; refusals as restore's.
    let (_env, l) = crate::common::fresh_ledger();
    let s = l
        .create_session(logbook::CreateSession::titled("a"))
        .unwrap()
        .session_id
        .to_string();
    let m = logbook::Mutation::default();
    for (step, v) in [("one", 1), ("two", 2)] {
        let req = logbook::CheckpointRequest {
            step: Some(step.into()),
            state: Some(json!({ "v": v })),
            ..Default::default()
        };
        l.checkpoint(&s, req, &m).unwrap();
    }
    let newest = l.snapshot(&s, None).unwrap();
    assert_eq!((newest.seq, newest.step.as_deref()), (2, Some("two")));
    assert_eq!(newest.state, json!({ "v": 2 }));
    assert_eq!(newest.size_bytes, 7);
    assert_eq!(l.snapshot(&s, Some(1)).unwrap().state, json!({ "v": 1 }));
    let code = |r: logbook::Result<logbook::ledger::Snapshot>| r.unwrap_err().code().as_str();
    assert_eq!(code(l.snapshot(&s, Some(0))), "CHECKPOINT_NOT_FOUND");
    assert_eq!(code(l.snapshot(&s, Some(-1))), "INVALID_ARGUMENT");
    assert_eq!(
        code(l.snapshot("ses_0000000000000000", None)),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(code(l.snapshot("nope", None)), "INVALID_ARGUMENT");
}

/// A checkpoint with a payload (docs/design.md, "Snapshots"): the bytes
/// come back exactly, the event records their size and SHA-256, the
/// listing shows their size; bad payloads are refused and change nothing.
#[test]
fn a_payload_is_kept_byte_for_byte_and_recorded_by_its_event() {
    use sha2::{Digest, Sha256};
    let (_env, l) = crate::common::fresh_ledger();
    let s = l
        .create_session(logbook::CreateSession::titled("a"))
        .unwrap()
        .session_id
        .to_string();
    let m = logbook::Mutation::default();
    // Every byte value, NULs, invalid UTF-8, and a secret-looking text the
    // JSON values would have redacted.
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend_from_slice(b"\0\0sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789\xc3\x28");
    let big: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    for (step, p) in [("small", &bytes), ("big", &big)] {
        let req = logbook::CheckpointRequest {
            step: Some(step.into()),
            state: Some(json!({ "step": step })),
            payload: Some(p.clone()),
            ..Default::default()
        };
        l.checkpoint(&s, req, &m).unwrap();
    }
    let first = l.snapshot(&s, Some(1)).unwrap();
    assert_eq!(first.payload.as_deref(), Some(&bytes[..]));
    assert_eq!(first.payload_bytes, Some(bytes.len() as i64));
    let newest = l.snapshot(&s, None).unwrap();
    assert_eq!((newest.seq, newest.payload.as_deref()), (2, Some(&big[..])));
    // The JSON shape names the size, never the bytes.
    let shape = serde_json::to_value(&newest).unwrap();
    assert_eq!(shape["payload_bytes"], big.len() as i64);
    assert!(shape.get("payload").is_none(), "{shape}");
    let events = l.session_events(&s, None, None).unwrap();
    let rec = &serde_json::to_value(&events).unwrap()["events"][1]["data"]["snapshot"];
    assert_eq!(rec["payload_bytes"], bytes.len() as i64);
    assert_eq!(rec["payload_sha256"], hex::encode(Sha256::digest(&bytes)));
    let list = serde_json::to_value(l.list_snapshots(&s).unwrap()).unwrap();
    let sizes: Vec<&Value> = list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["payload_bytes"])
        .collect();
    assert_eq!(sizes, [&json!(bytes.len()), &json!(big.len())]);
    // A checkpoint without a payload records none and lists none.
    let plain = logbook::CheckpointRequest {
        state: Some(json!({})),
        ..Default::default()
    };
    l.checkpoint(&s, plain, &m).unwrap();
    let third = l.snapshot(&s, None).unwrap();
    assert_eq!(
        (third.seq, third.payload, third.payload_bytes),
        (3, None, None)
    );
    assert_eq!(l.verify(std::slice::from_ref(&s)).unwrap().events, 4);

    // Refusals: a payload without a state, one byte over 16 MiB.
    let rev = l.get_session(&s).unwrap().rev;
    let refused = |req: logbook::CheckpointRequest| {
        let e = l.checkpoint(&s, req, &m).unwrap_err();
        (e.code().as_str(), e.to_string().contains("payload"))
    };
    let lone = logbook::CheckpointRequest {
        step: Some("x".into()),
        payload: Some(vec![1]),
        ..Default::default()
    };
    assert_eq!(refused(lone), ("INVALID_ARGUMENT", true));
    let over = logbook::CheckpointRequest {
        state: Some(json!({})),
        payload: Some(vec![0; logbook::ledger::PAYLOAD_MAX_BYTES + 1]),
        ..Default::default()
    };
    assert_eq!(refused(over), ("INVALID_ARGUMENT", true));
    assert_eq!(l.get_session(&s).unwrap().rev, rev);
    let n: i64 = _env.scalar("SELECT count(*) FROM session_snapshots");
    assert_eq!(n, 3);
}

/// A key replayed with the same payload is a replay; with other bytes it
/// is a different request (the payload's SHA-256 is in the event's data,
/// which the key's digest covers).
#[test]
fn a_key_replayed_with_another_payload_is_refused() {
    let (_env, l) = crate::common::fresh_ledger();
    let s = l
        .create_session(logbook::CreateSession::titled("a"))
        .unwrap()
        .session_id
        .to_string();
    let m = logbook::Mutation {
        idempotency_key: Some("cp-1".into()),
        ..Default::default()
    };
    let req = |p: &[u8]| logbook::CheckpointRequest {
        state: Some(json!({})),
        payload: Some(p.to_vec()),
        ..Default::default()
    };
    let a = l.checkpoint(&s, req(b"one"), &m).unwrap();
    let b = l.checkpoint(&s, req(b"one"), &m).unwrap();
    assert_eq!((a.rev, b.rev), (2, 2));
    let e = l.checkpoint(&s, req(b"two"), &m).unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
    assert!(e.to_string().contains("different arguments"), "{e}");
    assert_eq!(
        l.snapshot(&s, None).unwrap().payload.as_deref(),
        Some(&b"one"[..])
    );
}

/// A payload altered, removed or replaced behind the ledger's back (its
/// triggers disabled) is caught: the snapshot is never handed back and
/// `verify` names the checkpoint.
#[test]
fn a_tampered_payload_is_caught_by_the_read_and_by_verify() {
    let tampers: [&str; 3] = if on_pg() {
        [
            "UPDATE session_snapshots SET payload = '\\x00ff03'::bytea",
            "UPDATE session_snapshots SET payload = NULL",
            "UPDATE session_snapshots SET payload = '\\x00ff0203'::bytea",
        ]
    } else {
        [
            "UPDATE session_snapshots SET payload = X'00ff03'",
            "UPDATE session_snapshots SET payload = NULL",
            "UPDATE session_snapshots SET payload = X'00ff0203'",
        ]
    };
    for tamper in tampers {
        let (env, l) = crate::common::fresh_ledger();
        let s = l
            .create_session(logbook::CreateSession::titled("a"))
            .unwrap()
            .session_id
            .to_string();
        let req = logbook::CheckpointRequest {
            state: Some(json!({"k": 1})),
            payload: Some(vec![0, 0xff, 2]),
            ..Default::default()
        };
        l.checkpoint(&s, req, &logbook::Mutation::default())
            .unwrap();
        assert_eq!(env.json(&["verify"]).code, 0);
        let off = if on_pg() {
            "ALTER TABLE session_snapshots DISABLE TRIGGER ALL;"
        } else {
            "DROP TRIGGER session_snapshots_no_update;"
        };
        env.batch(&format!("{off} {tamper}"));
        let e = l.snapshot(&s, None).unwrap_err();
        assert_eq!(e.code().as_str(), "LEDGER_TAMPERED", "{tamper}");
        let err = assert_error(&env.json(&["verify"]), "LEDGER_TAMPERED", 6);
        assert_eq!(
            (
                err["details"]["seq"].as_i64(),
                err["details"]["problem"].as_str()
            ),
            (Some(1), Some("snapshot")),
            "{tamper}"
        );
    }
}
