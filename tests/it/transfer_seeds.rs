//! Importing the Phelix and Amber formats (docs/import-export.md): the Phelix and Amber
//! fixtures import, verify and map ids, states and types as documented;
//! malformed Phelix files are rejected whole and malformed Amber sessions
//! one by one (a secret-looking stage, a token-shaped path redacted, a
//! timeline that is not a regular file); thousands of Amber sessions import
//! in batches.

use crate::common::*;
use crate::transfer::{
    amber_id, amber_session, amber_sessions, assert_counts, ev, import_ok, import_rejecting, mode,
    rows_anywhere, table_counts, AMBER, AMBER_UUID, PHELIX, SECRET,
};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn phelix_fixture_imports_verifies_and_exports_back_the_same_content() {
    let env = TestEnv::new();
    let r = import_ok(&env, "phelix", Path::new(PHELIX));
    assert_counts(&r, 2, 0, 0);
    assert_eq!(r["events"], 6);
    assert_eq!(env.json(&["verify"]).code, 0);

    let s = env
        .json(&["session", "show", "ses_1a2b3c4d5e6f7081"])
        .data();
    assert_eq!(s["session"]["status"], "completed");
    assert_eq!(s["session"]["rev"], 4);
    assert_eq!(s["session"]["actor"]["type"], "cli");
    assert_eq!(s["session"]["final_result"], "shipped v3 to 100%");
    // The checkpoint block is kept as given and is the session's
    // checkpoint; the event it points at is kept exactly (see
    // transfer_fidelity.rs), its detail still `step deploy`.
    let block =
        json!({"step": "deploy", "note": "canary at 10%", "at_ms": 1782036300000_i64, "seq": 2});
    assert_eq!(s["session"]["metadata"]["phelix"]["checkpoint"], block);
    assert_eq!(s["session"]["checkpoint"], block);
    assert_eq!(s["events"][2]["detail"], "step deploy");
    assert_eq!(s["session"]["plan_ids"], json!(["pln_7f3a"]));
    let seqs: Vec<i64> = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3]);
    assert_eq!(
        event_types(&env, "ses_1a2b3c4d5e6f7081"),
        ["created", "checkpoint", "checkpoint", "completed"]
    );
    let a = env
        .json(&["session", "show", "ses_00ff00ff00ff00ff"])
        .data();
    assert_eq!(
        (a["session"]["status"].clone(), a["session"]["rev"].clone()),
        (json!("active"), json!(2))
    );
    assert_eq!(a["session"]["actor"]["type"], "mcp");

    // A second import changes nothing.
    let before = (
        env.show("ses_1a2b3c4d5e6f7081"),
        env.show("ses_00ff00ff00ff00ff"),
    );
    let counts = table_counts(&env);
    assert_counts(&import_ok(&env, "phelix", Path::new(PHELIX)), 0, 2, 0);
    assert_eq!(
        before,
        (
            env.show("ses_1a2b3c4d5e6f7081"),
            env.show("ses_00ff00ff00ff00ff")
        )
    );
    assert_eq!(counts, table_counts(&env));

    // Exported under a permissive umask: folders 0700, files 0600, and the
    // same fields and values as the fixture.
    let out = env.dir.path().join("out/phelix");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .arg(bin())
        .args([
            "--db",
            env.db.to_str().unwrap(),
            "export",
            "--format",
            "phelix",
            "--out",
        ])
        .arg(&out)
        .env_clear()
        .env("HOME", env.dir.path())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(mode(&env.dir.path().join("out")), 0o700);
    assert_eq!(mode(&out), 0o700);
    assert_eq!(mode(&out.join("sessions")), 0o700);
    for name in ["ses_1a2b3c4d5e6f7081.json", "ses_00ff00ff00ff00ff.json"] {
        let got = out.join("sessions").join(name);
        assert_eq!(mode(&got), 0o600, "{name}");
        let got: Value = serde_json::from_slice(&std::fs::read(got).unwrap()).unwrap();
        let want: Value = serde_json::from_slice(
            &std::fs::read(Path::new(PHELIX).join("sessions").join(name)).unwrap(),
        )
        .unwrap();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn amber_fixture_maps_ids_states_types_and_keeps_the_rest() {
    let env = TestEnv::new();
    let r = import_ok(&env, "amber", Path::new(AMBER));
    assert_counts(&r, 1, 0, 0);
    assert_eq!(env.json(&["verify"]).code, 0);
    let id = amber_id(AMBER_UUID);
    let s = env.json(&["session", "show", &id]).data();
    let ses = &s["session"];
    assert_eq!(ses["status"], "completed");
    assert_eq!(ses["title"], "fix login bug");
    assert_eq!(ses["goal"], "fix login bug");
    assert_eq!(ses["route"], "bugfix-quick");
    assert_eq!(ses["stage"], "verify");
    assert_eq!(ses["rev"], 10);
    assert_eq!(ses["usage"]["api_calls"], 42);
    assert_eq!(ses["usage"]["duration_ms"], 180000);
    assert_eq!(ses["metadata"]["amber"]["session_id"], AMBER_UUID);
    assert_eq!(ses["metadata"]["amber"]["usage"]["tokens"], 15000);
    assert_eq!(ses["checkpoint"]["step"], "after-repro");
    assert_eq!(ses["checkpoint"]["seq"], 5);
    assert_eq!(
        event_types(&env, &id),
        [
            "created",
            "started",
            "stage_started",
            "gate_opened",
            "gate_approved",
            "checkpoint",
            "stage_completed",
            "stage_started",
            "stage_completed",
            "completed"
        ]
    );
    let ev = &s["events"];
    assert_eq!(ev[0]["at_ms"], 1782036000000_i64);
    assert_eq!(ev[3]["data"], json!({"gateId": "user-approval-fix"}));
    assert_eq!(
        ev[5]["data"]["snapshot"]["manifest"]["currentStage"],
        "reproduce"
    );
    assert_eq!(ev[9]["data"], json!({"status": "success"}));

    // Idempotent: same id, nothing changes.
    let before = env.show(&id);
    assert_counts(&import_ok(&env, "amber", Path::new(AMBER)), 0, 1, 0);
    // The `.amber` and `.amber/sessions` folders work as SRC too.
    let dot = Path::new(AMBER).join(".amber");
    assert_counts(&import_ok(&env, "amber", &dot), 0, 1, 0);
    assert_counts(&import_ok(&env, "amber", &dot.join("sessions")), 0, 1, 0);
    assert_eq!(before, env.show(&id));
}

/// An Amber manifest whose `currentStage` looks like a secret is rejected
/// (stage names are stored as given, as `session stage` stores them), and
/// the rest of the import goes ahead.
#[test]
fn an_amber_stage_that_looks_like_a_secret_is_rejected() {
    let env = TestEnv::new();
    let root = env.dir.path().join("proj");
    let start = json!({"type": "session_created", "timestamp": "2026-06-21T10:00:00Z"});
    let (good, bad) = (
        "00000000-0000-4000-8000-000000000001",
        "00000000-0000-4000-8000-000000000002",
    );
    amber_session(&root, good, "executing", "g", std::slice::from_ref(&start));
    amber_session(&root, bad, "executing", "g", std::slice::from_ref(&start));
    let manifest = json!({"sessionId": bad, "goal": "g", "route": "r", "state": "executing",
        "currentStage": "password=hunter2hunter2", "createdAt": "2026-06-21T10:00:00Z"});
    let dir = root.join(".amber/sessions").join(bad);
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let (_, d) = import_rejecting(&env, "amber", &root);
    assert_counts(&d, 1, 0, 1);
    let r = &d["rejections"][0];
    assert_eq!(r["field"], "currentStage");
    assert_eq!(
        r["reason"],
        "looks like it holds a secret; stage names are stored as given"
    );
    assert_eq!(rows_anywhere(&env, &amber_id(bad)), 0);
    let s = env.json(&["session", "show", &amber_id(good)]).data();
    assert_eq!(s["session"]["stage"], "build");
}

/// A rejection names its file, and a path from the input tree passes the
/// redactor (found by adversarial testing: an Amber folder named like a
/// token was printed as is).
#[test]
fn a_rejected_file_path_shaped_like_a_token_is_redacted() {
    let env = TestEnv::new();
    let root = env.dir.path().join("proj");
    let start = json!({"type": "session_created", "timestamp": "2026-06-21T10:00:00Z"});
    amber_session(
        &root,
        "sk-abcdefghijklmnopqrstuvwxyz",
        "executing",
        "g",
        &[start],
    );
    let (run, d) = import_rejecting(&env, "amber", &root);
    assert_counts(&d, 0, 0, 1);
    let file = d["rejections"][0]["file"].as_str().unwrap();
    assert!(
        file.ends_with("/sessions/[REDACTED]/manifest.json"),
        "{file}"
    );
    assert!(!run.stdout.contains("abcdefghijklm") && !run.stderr.contains("abcdefghijklm"));
}

#[test]
fn malformed_amber_sessions_are_rejected_or_mapped_as_documented() {
    let env = TestEnv::new();
    let root = env.dir.path().join("proj");
    let u = |n: u32| format!("00000000-0000-4000-8000-{n:012x}");
    let start = ev("session_created", "2026-06-21T10:00:00Z");
    // 1: unknown but well-formed type, a time that steps back, a secret goal.
    amber_session(
        &root,
        &u(1),
        "executing",
        &format!("first line {SECRET}\nsecond"),
        &[
            start.clone(),
            json!({"type": "lint_ran", "timestamp": "2026-06-21T10:01:00Z", "files": 3}),
            ev("stage_started", "2026-06-21T09:59:00Z"),
        ],
    );
    // 2: a malformed type on line 2.
    amber_session(
        &root,
        &u(2),
        "executing",
        "g",
        &[start.clone(), ev("Bad Type", "2026-06-21T10:01:00Z")],
    );
    // 3: an unknown state.
    amber_session(
        &root,
        &u(3),
        "levitating",
        "g",
        std::slice::from_ref(&start),
    );
    // 4: a truncated timeline line.
    let dir4 = root.join(".amber/sessions").join(u(4));
    amber_session(&root, &u(4), "paused", "g", std::slice::from_ref(&start));
    std::fs::write(
        dir4.join("timeline.jsonl"),
        format!("{start}\n{{\"type\":\"stage_st"),
    )
    .unwrap();
    // 5: aborted maps to cancelled; the reason is kept.
    amber_session(
        &root,
        &u(5),
        "aborted",
        "g",
        &[
            start.clone(),
            json!({"type": "session_aborted", "timestamp": "2026-06-21T10:02:00Z", "reason": "user quit"}),
        ],
    );

    let (_, d) = import_rejecting(&env, "amber", &root);
    assert_counts(&d, 2, 0, 3);
    let mut rej: Vec<(String, Option<u64>, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let file = r["file"].as_str().unwrap();
            let rel = file.split(".amber/sessions/").nth(1).unwrap().to_owned();
            (
                rel,
                r["line"].as_u64(),
                r["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    rej.sort();
    assert_eq!(
        rej,
        vec![
            (
                format!("{}/timeline.jsonl", u(2)),
                Some(2),
                "type".to_owned()
            ),
            (format!("{}/manifest.json", u(3)), None, "state".to_owned()),
            (
                format!("{}/timeline.jsonl", u(4)),
                Some(2),
                "line".to_owned()
            ),
        ]
    );
    for n in [2, 3, 4] {
        assert_eq!(rows_anywhere(&env, &amber_id(&u(n))), 0);
    }
    let s = env.json(&["session", "show", &amber_id(&u(1))]).data();
    assert_eq!(s["session"]["status"], "active");
    assert_eq!(s["session"]["stage"], "build");
    assert_eq!(s["session"]["title"], "first line [REDACTED]");
    assert_eq!(s["session"]["goal"], "first line [REDACTED]\nsecond");
    assert_eq!(s["events"][1]["type"], "x.amber.lint_ran");
    assert_eq!(s["events"][1]["data"], json!({"files": 3}));
    assert_eq!(s["events"][2]["at_ms"], s["events"][1]["at_ms"]);
    assert_eq!(s["events"][2]["data"]["timestamp"], "2026-06-21T09:59:00Z");
    let c = env.json(&["session", "show", &amber_id(&u(5))]).data();
    assert_eq!(c["session"]["status"], "cancelled");
    assert_eq!(c["session"]["end_reason"], "user quit");
    assert_eq!(env.json(&["verify"]).code, 0);
    if !on_pg() {
        drop(env.sql());
    }
    assert!(!contains_bytes(&env.db_bytes(), SECRET.as_bytes()));
}

#[test]
fn thousands_of_generated_amber_sessions_import_in_batches() {
    let env = TestEnv::new();
    let root = env.dir.path().join("many");
    let n = 3000u32;
    amber_sessions(
        &root,
        n,
        &[
            ev("session_created", "2026-06-21T10:00:00Z"),
            ev("session_started", "2026-06-21T10:00:01Z"),
            json!({"type": "stage_started", "timestamp": "2026-06-21T10:00:02Z", "stage": "s"}),
            ev("session_completed", "2026-06-21T10:00:03Z"),
        ],
    );
    let d = import_ok(&env, "amber", &root);
    assert_counts(&d, n as u64, 0, 0);
    assert_eq!(d["events"], 4 * n as u64);
    assert_eq!(table_counts(&env)[..1], [n as i64]);
    assert_eq!(env.json(&["verify"]).code, 0);
    assert_counts(&import_ok(&env, "amber", &root), 0, n as u64, 0);
}

#[test]
fn malformed_phelix_files_are_rejected_whole() {
    let env = TestEnv::new();
    let dir = env.dir.path().join("phelix/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let good =
        std::fs::read_to_string(Path::new(PHELIX).join("sessions/ses_1a2b3c4d5e6f7081.json"))
            .unwrap();
    std::fs::write(dir.join("ses_1a2b3c4d5e6f7081.json"), &good).unwrap();
    // The same session under another file name.
    std::fs::write(dir.join("ses_0000000000000001.json"), &good).unwrap();
    // Truncated.
    std::fs::write(
        dir.join("ses_0000000000000002.json"),
        &good[..good.len() / 2],
    )
    .unwrap();
    // A checkpoint that names a non-checkpoint event.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["session_id"] = json!("ses_0000000000000003");
    v["checkpoint"]["seq"] = json!(0);
    std::fs::write(dir.join("ses_0000000000000003.json"), v.to_string()).unwrap();
    std::fs::write(dir.join("notes.txt"), "not a session").unwrap();

    let (_, d) = import_rejecting(&env, "phelix", &env.dir.path().join("phelix"));
    assert_counts(&d, 1, 0, 3);
    let mut got: Vec<(String, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let f = r["file"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned();
            (f, r["field"].as_str().unwrap().to_owned())
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "ses_0000000000000001.json".to_owned(),
                "session_id".to_owned()
            ),
            ("ses_0000000000000002.json".to_owned(), "file".to_owned()),
            (
                "ses_0000000000000003.json".to_owned(),
                "checkpoint.seq".to_owned()
            ),
        ]
    );
    assert_eq!(rows_anywhere(&env, "ses_0000000000000003"), 0);
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// An Amber timeline that is a FIFO or a link to a device (found by
/// adversarial testing) is rejected as "not a regular file" instead of
/// blocking or reading without end; the other sessions import.
#[test]
fn an_amber_timeline_that_is_not_a_regular_file_is_rejected() {
    let env = TestEnv::new();
    let root = env.dir.path().join("proj");
    let u = |n: u32| format!("00000000-0000-4000-8000-{n:012x}");
    let done = [
        ev("session_created", "2026-06-21T10:00:00Z"),
        ev("session_completed", "2026-06-21T10:00:03Z"),
    ];
    for n in 1..=3 {
        amber_session(&root, &u(n), "completed", "g", &done);
    }
    let timeline = |n: u32| {
        root.join(".amber/sessions")
            .join(u(n))
            .join("timeline.jsonl")
    };
    std::fs::remove_file(timeline(1)).unwrap();
    let made = Command::new("mkfifo").arg(timeline(1)).status().unwrap();
    assert!(made.success());
    std::fs::remove_file(timeline(2)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", timeline(2)).unwrap();

    let mut c = Command::new("timeout");
    c.arg("60").arg(bin()).args([
        "--db",
        env.db.to_str().unwrap(),
        "--json",
        "import",
        "--format",
        "amber",
        root.to_str().unwrap(),
    ]);
    let r = Run::from(c.output().unwrap());
    let err = assert_error(&r, "INVALID_ARGUMENT", 2);
    let d = &err["details"];
    assert_counts(d, 1, 0, 2);
    // Sorted: the report follows the folder's listing order.
    let got: Vec<(String, String, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let file = r["file"].as_str().unwrap();
            let session = file.split('/').rev().nth(1).unwrap().to_owned();
            (
                session,
                r["field"].as_str().unwrap().to_owned(),
                r["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = |n: u32| {
        (
            u(n),
            "timeline".to_owned(),
            "is not a regular file".to_owned(),
        )
    };
    let mut got = got;
    got.sort();
    assert_eq!(got, vec![want(1), want(2)]);
}

/// The 24-hour bound on imported times (attack report #3) holds for the
/// Phelix and Amber formats too: a Phelix file whose last event lies in 2100, and an
/// Amber session created in 2100, are rejected naming the field (logbook's
/// name for it, as every time check of an import); the others import.
#[test]
fn phelix_and_amber_sessions_from_the_future_are_rejected() {
    let reason = "lies more than 24 hours after now (the ledger's clock): every session and event written after it would take its time, so it is refused";
    let env = TestEnv::new();
    let dir = env.dir.path().join("phelix/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let good =
        std::fs::read_to_string(Path::new(PHELIX).join("sessions/ses_1a2b3c4d5e6f7081.json"))
            .unwrap();
    std::fs::write(dir.join("ses_1a2b3c4d5e6f7081.json"), &good).unwrap();
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["session_id"] = json!("ses_0000000000000003");
    v["events"][3]["at_ms"] = json!(4_102_444_800_000i64);
    std::fs::write(dir.join("ses_0000000000000003.json"), v.to_string()).unwrap();
    let (_, d) = import_rejecting(&env, "phelix", &env.dir.path().join("phelix"));
    assert_counts(&d, 1, 0, 1);
    let r = &d["rejections"][0];
    assert_eq!(
        (&r["field"], &r["reason"], &r["session_id"]),
        (
            &json!("updated_at_ms"),
            &json!(reason),
            &json!("ses_0000000000000003")
        )
    );
    assert_eq!(rows_anywhere(&env, "ses_0000000000000003"), 0);

    let root = env.dir.path().join("proj");
    let (now, later) = (
        "00000000-0000-4000-8000-000000000001",
        "00000000-0000-4000-8000-000000000002",
    );
    amber_session(
        &root,
        now,
        "executing",
        "g",
        &[ev("session_created", "2026-06-21T10:00:00Z")],
    );
    amber_session(
        &root,
        later,
        "executing",
        "g",
        &[ev("session_created", "2100-01-01T00:00:00Z")],
    );
    let (_, d) = import_rejecting(&env, "amber", &root);
    assert_counts(&d, 1, 0, 1);
    let r = &d["rejections"][0];
    assert_eq!(
        (&r["field"], &r["reason"], &r["session_id"]),
        (
            &json!("created_at_ms"),
            &json!(reason),
            &json!(amber_id(later))
        )
    );
    assert_eq!(rows_anywhere(&env, &amber_id(later)), 0);
    let created = env.json(&["session", "create", "--title", "today"]).data();
    assert!(created["created_at_ms"].as_i64().unwrap() <= now_ms());
}
