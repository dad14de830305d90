//! Imports keep every field of every event exactly as the input has it
//! (docs/design.md, "Import formats"): seq, type, at_ms, detail and data, read back with plain
//! SQL, for each of the three importers. A fact of the input that logbook
//! derives from events elsewhere (Phelix's checkpoint block, Amber's
//! checkpoint label and file) is kept beside the events, never by changing
//! one.

use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;

const PHELIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/phelix");

/// Every event of a session as stored: `{seq, type, at_ms, detail, data}`
/// (data parsed, or null), by seq.
fn stored_events(env: &TestEnv, id: &str) -> Vec<Value> {
    env.rows(
        "SELECT seq, type, at_ms, detail, data FROM events WHERE session_id = $1 ORDER BY seq",
        &[id],
    )
    .into_iter()
    .map(|r| {
        json!({
            "seq": r[0],
            "type": r[1],
            "at_ms": r[2],
            "detail": r[3],
            "data": r[4].as_str().map_or(Value::Null, |d| serde_json::from_str(d).unwrap()),
        })
    })
    .collect()
}

/// The same five fields of events as an input gives them (a missing
/// `detail` or `data` is null).
fn given_events(events: &Value) -> Vec<Value> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            json!({
                "seq": e["seq"],
                "type": e["type"],
                "at_ms": e["at_ms"],
                "detail": e.get("detail").cloned().unwrap_or(Value::Null),
                "data": e.get("data").cloned().unwrap_or(Value::Null),
            })
        })
        .collect()
}

#[track_caller]
fn import(env: &TestEnv, format: &str, src: &Path) -> Value {
    env.json(&["import", "--format", format, src.to_str().unwrap()])
        .data()
}

/// The fixture's `ses_1a2b3c4d5e6f7081`: event 2 says "step deploy", the
/// checkpoint block's note "canary at 10%". The event used to be given the
/// note as its detail; now the block is the session's checkpoint and the
/// event keeps its own.
#[test]
fn phelix_import_keeps_every_event_exactly_and_the_checkpoint_block_beside_them() {
    let env = TestEnv::new();
    let r = import(&env, "phelix", Path::new(PHELIX));
    assert_eq!(
        (r["imported"].clone(), r["rejected"].clone()),
        (json!(2), json!(0))
    );
    for name in ["ses_1a2b3c4d5e6f7081", "ses_00ff00ff00ff00ff"] {
        let file: Value = serde_json::from_slice(
            &std::fs::read(Path::new(PHELIX).join(format!("sessions/{name}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(
            stored_events(&env, name),
            given_events(&file["events"]),
            "{name}"
        );
        let s = env.json(&["session", "show", name]).data();
        assert_eq!(
            s["session"]["metadata"]["phelix"]["checkpoint"], file["checkpoint"],
            "{name}"
        );
    }
    assert_eq!(
        stored_events(&env, "ses_1a2b3c4d5e6f7081")[2]["detail"],
        "step deploy"
    );
    assert_eq!(env.json(&["verify"]).code, 0);

    // A crafted file: a checkpoint event with data of its own and a detail
    // unlike the block's note, a multi-line detail, an event without one.
    // Its rev is 4: each of its four events is a mutation of its own (it
    // said 3 before import checked rev against the timeline, and is
    // rejected with 3 now).
    let dir = env.dir.path().join("crafted/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let id = "ses_0000000000000c01";
    let file = json!({
        "schema_version": "1", "session_id": id, "status": "active", "title": "t",
        "app": null, "actor": {"type": "cli", "id": null, "authenticated": false}, "rev": 4,
        "plan_ids": [], "operation_ids": [], "deployment_ids": [],
        "checkpoint": {"step": "s2", "note": "the note", "at_ms": 30, "seq": 2},
        "final_result": null,
        "events": [
            {"seq": 0, "type": "created", "at_ms": 10, "detail": "session created"},
            {"seq": 1, "type": "x.note", "at_ms": 20, "detail": "line one\nline two\tend"},
            {"seq": 2, "type": "checkpoint", "at_ms": 30, "detail": "step s2",
             "data": {"z": 1, "a": {"nested": [1.5, "x", null]}, "step": "other"}},
            {"seq": 3, "type": "x.quiet", "at_ms": 30}
        ]
    });
    std::fs::write(dir.join(format!("{id}.json")), file.to_string()).unwrap();
    let r = import(&env, "phelix", &env.dir.path().join("crafted"));
    assert_eq!(r["imported"], 1);
    assert_eq!(stored_events(&env, id), given_events(&file["events"]));
    let s = env.json(&["session", "show", id]).data();
    assert_eq!(
        s["session"]["metadata"]["phelix"]["checkpoint"],
        file["checkpoint"]
    );
    // The block is the session's checkpoint, not the event's `data.step`
    // and detail.
    assert_eq!(s["session"]["checkpoint"], file["checkpoint"]);
    assert_eq!(env.json(&["verify"]).code, 0);

    // Phelix export writes the block back, and every event as it was.
    let out = env.dir.path().join("out");
    let e = env.json(&[
        "export",
        "--format",
        "phelix",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(e.code, 0, "{}", e.stdout);
    let back: Value =
        serde_json::from_slice(&std::fs::read(out.join(format!("sessions/{id}.json"))).unwrap())
            .unwrap();
    assert_eq!(back["checkpoint"], file["checkpoint"]);
    let without_data: Vec<Value> = file["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            json!({"seq": e["seq"], "type": e["type"], "at_ms": e["at_ms"],
                   "detail": e.get("detail").cloned().unwrap_or(Value::Null)})
        })
        .collect();
    assert_eq!(back["events"], json!(without_data));
}

/// logbook's own format: every event field as the line has it (the pin for
/// the importer that never rewrote one).
#[test]
fn jsonl_import_keeps_every_event_exactly() {
    let env = TestEnv::new();
    let id = "ses_0000000000000c02";
    let events = json!([
        {"seq": 0, "type": "created", "at_ms": 10, "actor_type": "cli", "detail": "session created",
         "data": null, "run_id": null, "hash": ""},
        {"seq": 1, "type": "checkpoint", "at_ms": 20, "actor_type": "mcp", "detail": "a note\nover two lines",
         "data": {"step": "build", "z": [1, 2.25, {"k": "v"}], "a": -9223372036854775808_i64},
         "run_id": null, "hash": ""},
        {"seq": 2, "type": "x.custom", "at_ms": 20, "actor_type": "lib", "detail": null,
         "data": {"unicode": "é ✓"}, "run_id": null, "hash": ""}
    ]);
    let line = json!({
        "format": "logbook.session.v1", "session_id": id, "status": "active", "title": "t",
        "goal": null, "app": null, "agent_id": null, "route": null, "stage": null,
        "parent_session_id": null, "tags": [], "context": {}, "metadata": {},
        "actor": {"type": "cli", "id": null, "authenticated": false}, "rev": 3,
        "checkpoint_seq": 1, "refs": [], "final_result": null, "end_reason": null,
        "usage": {"input_tokens": 0, "output_tokens": 0, "api_calls": 0, "duration_ms": 0},
        "created_at_ms": 10, "updated_at_ms": 20, "ended_at_ms": null, "events": events
    });
    let file = env.dir.path().join("in.jsonl");
    std::fs::write(&file, format!("{line}\n")).unwrap();
    assert_eq!(import(&env, "jsonl", &file)["imported"], 1);
    assert_eq!(stored_events(&env, id), given_events(&events));
    let actors: Vec<Value> = env
        .rows(
            "SELECT actor_type FROM events WHERE session_id = $1 ORDER BY seq",
            &[id],
        )
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(actors, ["cli", "mcp", "lib"]);
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// Amber: a checkpoint line's own `step` and `snapshot` fields used to be
/// overwritten by the label and the checkpoint file. Each event's data is
/// the line without `type` and `timestamp` (which become the event's type
/// and at_ms); `step` and `snapshot` are added only where the line has no
/// such field.
#[test]
fn amber_import_never_replaces_a_field_of_a_line() {
    let env = TestEnv::new();
    let uuid = "00000000-0000-4000-8000-00000000c003";
    let dir = env.dir.path().join("proj/.amber/sessions").join(uuid);
    std::fs::create_dir_all(dir.join("checkpoints")).unwrap();
    let manifest = json!({"sessionId": uuid, "goal": "g", "state": "executing",
                          "currentStage": "build"});
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let snap = json!({"manifest": {"currentStage": "build"}});
    std::fs::write(dir.join("checkpoints/cp-1.json"), snap.to_string()).unwrap();
    let lines = [
        json!({"type": "session_created", "timestamp": "2026-06-21T10:00:00Z", "goal": "g"}),
        // Its own step and snapshot, besides a label and a checkpoint file.
        json!({"type": "checkpoint_created", "timestamp": "2026-06-21T10:01:00Z",
               "checkpointId": "cp-1", "label": "from-label",
               "step": "own step", "snapshot": {"mine": [1, 2]}}),
        // Neither: both are added.
        json!({"type": "checkpoint_created", "timestamp": "2026-06-21T10:02:00Z",
               "checkpointId": "cp-1", "label": "second"}),
        json!({"type": "lint_ran", "timestamp": "2026-06-21T10:03:00Z",
               "files": 3, "ok": true, "detail": "kept in data"}),
    ];
    let tl: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("timeline.jsonl"), tl).unwrap();
    assert_eq!(
        import(&env, "amber", &env.dir.path().join("proj"))["imported"],
        1
    );

    let data = |l: &Value, extra: &[(&str, Value)]| {
        let mut m = l.as_object().unwrap().clone();
        m.remove("type");
        m.remove("timestamp");
        for (k, v) in extra {
            m.insert((*k).to_owned(), v.clone());
        }
        Value::Object(m)
    };
    let want = vec![
        json!({"seq": 0, "type": "created", "at_ms": 1782036000000_i64, "detail": null,
               "data": data(&lines[0], &[])}),
        json!({"seq": 1, "type": "checkpoint", "at_ms": 1782036060000_i64, "detail": null,
               "data": data(&lines[1], &[])}),
        json!({"seq": 2, "type": "checkpoint", "at_ms": 1782036120000_i64, "detail": null,
               "data": data(&lines[2], &[("step", json!("second")), ("snapshot", snap.clone())])}),
        json!({"seq": 3, "type": "x.amber.lint_ran", "at_ms": 1782036180000_i64, "detail": null,
               "data": data(&lines[3], &[])}),
    ];
    let id = {
        use sha2::{Digest, Sha256};
        let h = Sha256::digest(format!("amber:{uuid}").as_bytes());
        format!("ses_{}", &hex::encode(h)[..16])
    };
    assert_eq!(stored_events(&env, &id), want);
    assert_eq!(env.json(&["verify"]).code, 0);
}
