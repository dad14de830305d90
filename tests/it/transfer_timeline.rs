//! Import checks that each session's row agrees with its own timeline,
//! whatever the format (docs/import-export.md, "The row and its
//! timeline"): status and the last status event, rev and the mutations,
//! ended time, final result, checkpoint and the last checkpoint event. And
//! a Phelix import keeps the file's `checkpoint` block as the session's
//! checkpoint, its events as the file has them. Backend-neutral.

use crate::common::*;
use crate::transfer::{amber_id, amber_session, ev as amber_ev, PHELIX};
use logbook::ledger::{StageAction, StageRequest};
use logbook::{
    AppendEvent, Checkpoint, CreateRun, CreateSession, ForkRequest, GateKind, ImportFormat,
    ImportReport, Ledger, ListSessions, LockRequest, Mutation, OnExceed, RecordUsage,
    RunUsageDelta, SetBudget,
};
use serde_json::{json, Value};
use std::path::Path;

fn import(lg: &Ledger, format: ImportFormat, src: &Path) -> ImportReport {
    lg.import(format, src, &mut |_| {}).unwrap()
}

/// `(line, session_id, field, reason)` of each rejection, sorted.
fn rejections(r: &ImportReport) -> Vec<(Option<u64>, String, String, String)> {
    let mut v: Vec<_> = r
        .rejections
        .iter()
        .map(|x| {
            (
                x.line,
                x.session_id.clone().unwrap_or_default(),
                x.field.clone(),
                x.reason.clone(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Every kind of path the verbs write: each session, exported and
/// imported into an empty ledger, passes the check (what logbook writes
/// is consistent by construction; the check must never refuse it).
#[test]
fn every_path_the_verbs_write_imports_again_past_the_timeline_check() {
    let (env, lg) = fresh_ledger();
    let m = Mutation::default();
    let active = || lib_create(&lg, "t", "a");
    // pending → started → checkpoint (with state) → paused → resumed →
    // restored → completed with a result.
    let s1 = lg
        .create_session(CreateSession {
            pending: true,
            ..CreateSession::titled("t")
        })
        .unwrap()
        .session_id
        .to_string();
    lg.start(&s1, None, &m).unwrap();
    let mut c = cp("build", Some("first"));
    c.state = Some(json!({"k": 1}));
    c.plan_ids = vec!["pln_1".into()];
    let first = lg.checkpoint(&s1, c, &m).unwrap().value;
    let first_seq = first.checkpoint.unwrap().seq;
    lg.pause(&s1, Some("later".into()), &m).unwrap();
    lg.resume(&s1, None, &m).unwrap();
    lg.restore(&s1, first_seq, &m).unwrap();
    // A live fork: the source records `forked`, the child created + forked.
    let child = lg
        .fork(&s1, &ForkRequest::default(), &m)
        .unwrap()
        .value
        .session_id
        .to_string();
    lg.complete(&s1, "shipped", &m).unwrap();
    lg.complete(&child, "done", &m).unwrap();
    // Stages, a custom event, a lease, runs (one running when the session
    // fails: it is cancelled with it).
    let s2 = active();
    let stage = |action| StageRequest {
        action,
        name: "build".into(),
        attempt: None,
        reason: None,
    };
    lg.stage(&s2, stage(StageAction::Start), &m).unwrap();
    lg.stage(&s2, stage(StageAction::Retry), &m).unwrap();
    lg.stage(&s2, stage(StageAction::Complete), &m).unwrap();
    let x = AppendEvent {
        event_type: "x.note".into(),
        detail: Some("d".into()),
        data: None,
    };
    lg.append_event(&s2, x, &m).unwrap();
    let lease = lg.lock(&s2, &LockRequest::default(), &m).unwrap();
    lg.unlock(&s2, &lease.token, &m).unwrap();
    let r1 = lg
        .create_run(&s2, CreateRun::default(), &m)
        .unwrap()
        .value
        .run_id
        .to_string();
    lg.start_run(&r1, &m).unwrap();
    let delta = RunUsageDelta {
        input_tokens: Some(5),
        ..RunUsageDelta::default()
    };
    lg.record_run_usage(&r1, delta, &m).unwrap();
    lg.increment_turn(&r1, &m).unwrap();
    lg.complete_run(&r1, None, &m).unwrap();
    let r2 = lg
        .create_run(&s2, CreateRun::default(), &m)
        .unwrap()
        .value
        .run_id
        .to_string();
    lg.cancel_run(&r2, &m).unwrap();
    let r3 = lg
        .create_run(&s2, CreateRun::default(), &m)
        .unwrap()
        .value
        .run_id
        .to_string();
    lg.start_run(&r3, &m).unwrap();
    lg.fail(&s2, "broke", &m).unwrap();
    // Gates: approved (resumed), rejected (failed), aborted (cancelled), auto.
    let s3 = active();
    lg.open_gate(&s3, "g", GateKind::UserApproval, &m).unwrap();
    lg.approve_gate(&s3, "g", None, &m).unwrap();
    lg.open_gate(&s3, "auto", GateKind::Auto, &m).unwrap();
    lg.open_gate(&s3, "g", GateKind::StepConfirm, &m).unwrap();
    lg.reject_gate(&s3, "g", "no", false, &m).unwrap();
    let s4 = active();
    lg.open_gate(&s4, "g", GateKind::UserApproval, &m).unwrap();
    lg.reject_gate(&s4, "g", "stop", true, &m).unwrap();
    let s5 = active();
    lg.open_gate(&s5, "g", GateKind::UserApproval, &m).unwrap();
    // Budgets: a pause, a reset, then a fail past the limit.
    let s6 = active();
    let budget = |policy| SetBudget {
        max_tokens: Some(10),
        on_exceed: Some(policy),
        ..SetBudget::default()
    };
    let over = RecordUsage {
        input_tokens: Some(11),
        ..RecordUsage::default()
    };
    lg.set_budget(&s6, budget(OnExceed::Pause), &m).unwrap();
    lg.record_usage(&s6, over, &m).unwrap();
    lg.resume(&s6, None, &m).unwrap();
    lg.reset_budget(&s6, &m).unwrap();
    lg.set_budget(&s6, budget(OnExceed::Fail), &m).unwrap();
    lg.record_usage(&s6, over, &m).unwrap();
    let s7 = active();
    lg.set_budget(&s7, budget(OnExceed::Warn), &m).unwrap();
    lg.record_usage(&s7, over, &m).unwrap();
    lg.cancel(&s7, "enough", &m).unwrap();
    let file = env.dir.path().join("all.jsonl");
    let out = lg.export_jsonl_file(&[], &file).unwrap();
    assert_eq!(out.sessions, 8);

    let (_env2, fresh) = fresh_ledger();
    let r = import(&fresh, ImportFormat::Jsonl, &file);
    assert_eq!(rejections(&r), vec![]);
    assert_eq!((r.imported, r.rejected), (8, 0));
    fresh.verify(&[]).unwrap();
}

/// A consistent completed session as a logbook JSON Lines value: created,
/// checkpoint `a`, checkpoint `b`, completed `done`; rev 4; hashes left
/// out (the import computes them).
fn line(n: u32) -> Value {
    let t = now_ms() - 100_000;
    let e = |seq: i64, ty: &str, at: i64, detail: Value, data: Value| {
        json!({"seq": seq, "type": ty, "at_ms": at, "actor_type": "cli", "detail": detail,
               "data": data, "run_id": null, "hash": ""})
    };
    json!({
        "format": "logbook.session.v1", "session_id": format!("ses_{n:016x}"),
        "status": "completed", "title": "t", "goal": null, "app": null, "agent_id": null,
        "route": null, "stage": null, "parent_session_id": null, "tags": [], "context": {},
        "metadata": {}, "actor": {"type": "cli", "id": null, "authenticated": false},
        "rev": 4, "checkpoint_seq": 2, "refs": [], "final_result": "done", "end_reason": null,
        "usage": {"input_tokens": 0, "output_tokens": 0, "api_calls": 0, "duration_ms": 0},
        "created_at_ms": t, "updated_at_ms": t + 30, "ended_at_ms": t + 30,
        "events": [
            e(0, "created", t, json!("session created"), Value::Null),
            e(1, "checkpoint", t + 10, Value::Null, json!({"step": "a"})),
            e(2, "checkpoint", t + 20, Value::Null, json!({"step": "b"})),
            e(3, "completed", t + 30, json!("done"), Value::Null),
        ]
    })
}

/// Today each of these sessions imports: its row says one thing, its
/// timeline another.
#[test]
fn a_jsonl_session_whose_row_disagrees_with_its_timeline_is_rejected_naming_the_field() {
    let (env, lg) = fresh_ledger();
    let mut lines = vec![line(1)];
    let mut bad = |n: u32, change: &dyn Fn(&mut Value)| {
        let mut v = line(n);
        change(&mut v);
        lines.push(v);
    };
    bad(2, &|v| {
        v["status"] = json!("failed");
        v["final_result"] = Value::Null;
    });
    bad(3, &|v| v["rev"] = json!(2));
    bad(4, &|v| {
        v["ended_at_ms"] = json!(v["ended_at_ms"].as_i64().unwrap() - 5);
    });
    bad(5, &|v| v["final_result"] = json!("other"));
    bad(6, &|v| v["checkpoint_seq"] = json!(1));
    bad(7, &|v| {
        v["status"] = json!("paused");
        v["ended_at_ms"] = Value::Null;
        v["final_result"] = Value::Null;
        v["rev"] = json!(3);
        v["events"].as_array_mut().unwrap().pop();
    });
    let file = env.dir.path().join("in.jsonl");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let r = import(&lg, ImportFormat::Jsonl, &file);
    let id = |n: u32| format!("ses_{n:016x}");
    let row = |n: u32, field: &str, reason: &str| {
        (
            Some(u64::from(n)),
            id(n),
            field.to_owned(),
            reason.to_owned(),
        )
    };
    assert_eq!(
        rejections(&r),
        vec![
            row(2, "status", "is failed, but the last event that sets the status (events[3], `completed`) leaves the session completed"),
            row(3, "rev", "is 2, but the timeline records at least 3 mutations (events that are each one mutation: created, checkpoint, x.…, stage_*, gate_*, run_*, lease_*, usage and budget changes, forked, checkpoint_restored)"),
            row(4, "ended_at_ms", "must be the at_ms of the event that ended the session (events[3], `completed`)"),
            row(5, "final_result", "must be the detail of the `completed` event that ended the session (events[3])"),
            row(6, "checkpoint_seq", "must be the seq of the last `checkpoint` event (2)"),
            row(7, "status", "is paused, but the last event that sets the status (events[0], `created`) leaves the session pending or active"),
        ]
    );
    assert_eq!((r.imported, r.rejected), (1, 6));
    assert_eq!(
        env.scalar("SELECT count(*) FROM sessions"),
        1,
        "a rejected session leaves no row"
    );
    assert_eq!(env.scalar("SELECT count(*) FROM events"), 4);
}

/// The same check, after conversion, for Phelix and Amber: one function
/// for every format, naming logbook's fields.
#[test]
fn phelix_and_amber_sessions_are_checked_against_their_timelines_too() {
    let (env, lg) = fresh_ledger();
    let dir = env.dir.path().join("phelix/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let file = |id: &str, status: &str, rev: i64, cp_seq: i64, events: Value| {
        let cp_at = events[cp_seq as usize]["at_ms"].clone();
        let f = json!({
            "schema_version": "1", "session_id": id, "status": status, "title": "t",
            "app": null, "actor": {"type": "cli", "id": null, "authenticated": false},
            "rev": rev, "plan_ids": [], "operation_ids": [], "deployment_ids": [],
            "checkpoint": {"step": "s", "note": "n", "at_ms": cp_at, "seq": cp_seq},
            "final_result": "done", "events": events
        });
        std::fs::write(dir.join(format!("{id}.json")), f.to_string()).unwrap();
    };
    let pe = |seq: i64, ty: &str, at: i64| json!({"seq": seq, "type": ty, "at_ms": at, "detail": "done"});
    // The block names the first of two checkpoints.
    file(
        "ses_0000000000000d01",
        "completed",
        4,
        1,
        json!([
            pe(0, "created", 10),
            pe(1, "checkpoint", 20),
            pe(2, "checkpoint", 30),
            pe(3, "completed", 40)
        ]),
    );
    // Completed, with no `completed` event.
    file(
        "ses_0000000000000d02",
        "completed",
        2,
        1,
        json!([pe(0, "created", 10), pe(1, "checkpoint", 20)]),
    );
    let r = import(&lg, ImportFormat::Phelix, &env.dir.path().join("phelix"));
    assert_eq!(
        rejections(&r),
        vec![
            (None, "ses_0000000000000d01".into(), "checkpoint_seq".into(),
             "must be the seq of the last `checkpoint` event (2)".into()),
            (None, "ses_0000000000000d02".into(), "status".into(),
             "is completed, but the last event that sets the status (events[0], `created`) leaves the session pending or active".into()),
        ]
    );
    assert_eq!(r.imported, 0);

    // Amber: a manifest that says paused over a timeline that never paused.
    let root = env.dir.path().join("amber");
    let uuid = "00000000-0000-4000-8000-00000000d003";
    amber_session(
        &root,
        uuid,
        "paused",
        "g",
        &[
            amber_ev("session_created", "2026-06-21T10:00:00Z"),
            amber_ev("session_started", "2026-06-21T10:00:01Z"),
        ],
    );
    let r = import(&lg, ImportFormat::Amber, &root);
    assert_eq!(
        rejections(&r),
        vec![(None, amber_id(uuid), "status".into(),
              "is paused, but the last event that sets the status (events[1], `started`) leaves the session active".into())]
    );
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), 0);
}

/// The fixture's `ses_1a2b3c4d5e6f7081`: its `checkpoint` block says step
/// `deploy`, note `canary at 10%`; its event 2 says `step deploy`. Today
/// the session's checkpoint is read from the event (step null, note `step
/// deploy`).
#[test]
fn phelix_import_keeps_the_files_checkpoint_as_the_sessions_and_its_events_as_they_are() {
    let (env, lg) = fresh_ledger();
    let r = import(&lg, ImportFormat::Phelix, Path::new(PHELIX));
    assert_eq!((r.imported, r.rejected), (2, 0));
    let v = lg.show_session("ses_1a2b3c4d5e6f7081").unwrap();
    assert_eq!(
        v.session.checkpoint,
        Some(Checkpoint {
            step: Some("deploy".into()),
            note: Some("canary at 10%".into()),
            at_ms: 1_782_036_300_000,
            seq: 2,
        })
    );
    let details: Vec<Option<String>> = v.events.iter().map(|e| e.detail.clone()).collect();
    assert_eq!(
        details,
        [
            Some("session created".to_owned()),
            Some("step plan".to_owned()),
            Some("step deploy".to_owned()),
            Some("shipped v3 to 100%".to_owned()),
        ]
    );
    let stored: Vec<Value> = env
        .rows(
            "SELECT detail, data FROM events WHERE session_id = $1 AND seq = 2",
            &["ses_1a2b3c4d5e6f7081"],
        )
        .remove(0);
    assert_eq!(stored, [json!("step deploy"), Value::Null]);
    // Lists show it too.
    let page = lg.list_sessions(&ListSessions::default()).unwrap();
    let listed = page
        .sessions
        .iter()
        .find(|s| s.session_id.as_str() == "ses_1a2b3c4d5e6f7081")
        .unwrap();
    assert_eq!(listed.checkpoint, v.session.checkpoint);
    // The CLI's show.
    let out = env.run(&["session", "show", "ses_1a2b3c4d5e6f7081"]).stdout;
    assert!(
        out.lines()
            .any(|l| l.starts_with("checkpoint deploy (seq 2, ") && l.ends_with("): canary at 10%")),
        "{out}"
    );

    // A checkpoint made here afterwards is the session's from then on.
    let live = "ses_00ff00ff00ff00ff";
    assert_eq!(
        lg.show_session(live)
            .unwrap()
            .session
            .checkpoint
            .unwrap()
            .note
            .as_deref(),
        Some("3 of 12 hosts expire this week")
    );
    let after = lg
        .checkpoint(live, cp("renew", Some("all hosts")), &Mutation::default())
        .unwrap()
        .value;
    let c = after.checkpoint.unwrap();
    assert_eq!(
        (c.step.as_deref(), c.note.as_deref(), c.seq),
        (Some("renew"), Some("all hosts"), 2)
    );
}
