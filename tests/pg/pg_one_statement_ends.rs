//! A checkpoint that links references and a session's end while runs are
//! open, as one statement on a server (docs/postgres.md, "One round trip
//! per write"): one round trip each with a key; the references numbered as
//! the pipeline numbers them, each open run cancelled with its event before
//! the session's own, hashes chained through them; the same answers, rows
//! and events as the pipeline on the server and on SQLite; past a cap, the
//! pipeline's INVALID_ARGUMENT with nothing written.

use crate::common::*;
use crate::pg_one_statement::{
    differential, events_without_ids, keyed, round_trips, through_proxy,
};
use logbook::{CheckpointRequest, CreateRun, GateKind};
use serde_json::{json, Value};

/// A session paused by a pending gate `ship` with a run open (to prepare
/// the rejection's statement).
fn warm_gate(lg: &logbook::Ledger) -> String {
    let id = lib_create(lg, "warm gate", "a");
    lg.create_run(&id, CreateRun::default(), &keyed("wg1"))
        .unwrap();
    lg.open_gate(&id, "ship", GateKind::UserApproval, &keyed("wg2"))
        .unwrap();
    id
}

fn linking(step: &str, plans: &[&str], ops: &[&str]) -> CheckpointRequest {
    CheckpointRequest {
        step: Some(step.into()),
        plan_ids: plans.iter().map(|s| (*s).to_owned()).collect(),
        operation_ids: ops.iter().map(|s| (*s).to_owned()).collect(),
        ..CheckpointRequest::default()
    }
}

#[test]
fn pg_a_keyed_checkpoint_with_references_and_an_end_with_open_runs_are_one_round_trip() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    // The first of each statement prepares it (one round trip more).
    let warm = lib_create(&lg, "warm", "a");
    lg.checkpoint(&warm, linking("w", &["p0"], &[]), &keyed("w1"))
        .unwrap();
    lg.create_run(&warm, CreateRun::default(), &keyed("w2"))
        .unwrap();
    lg.complete(&warm, "done", &keyed("w3")).unwrap();

    let id = lib_create(&lg, "one", "a");
    assert_eq!(
        count(&mut || {
            let s = lg
                .checkpoint(
                    &id,
                    linking("s1", &["p1", "p2", "p1"], &["o1"]),
                    &keyed("c1"),
                )
                .unwrap();
            assert_eq!(s.value.plan_ids, ["p1", "p2"]);
            assert_eq!(s.value.operation_ids, ["o1"]);
        }),
        1,
        "keyed checkpoint with references"
    );
    let r1 = lg
        .create_run(&id, CreateRun::default(), &keyed("r1"))
        .unwrap();
    let r2 = lg
        .create_run(&id, CreateRun::default(), &keyed("r2"))
        .unwrap();
    lg.start_run(r2.run_id.as_str(), &keyed("s2")).unwrap();
    assert_eq!(
        count(&mut || {
            let s = lg.complete(&id, "done", &keyed("d1")).unwrap();
            assert_eq!(s.value.status.as_str(), "completed");
        }),
        1,
        "keyed complete with two open runs"
    );
    for r in [&r1, &r2] {
        let run = lg.get_run(r.run_id.as_str()).unwrap();
        assert_eq!(run.status.as_str(), "cancelled");
        let err = run.error.unwrap();
        assert_eq!(
            (err.code.as_str(), err.message.as_str()),
            ("SESSION_ENDED", "the session was completed")
        );
    }
    let types = event_types(&env, &id);
    assert_eq!(
        &types[types.len() - 3..],
        ["run_cancelled", "run_cancelled", "completed"]
    );
    // A gate's rejection ends the session: its open run ends first.
    let g = lib_create(&lg, "gated", "a");
    lg.create_run(&g, CreateRun::default(), &keyed("g1"))
        .unwrap();
    lg.open_gate(&g, "ship", GateKind::UserApproval, &keyed("g2"))
        .unwrap();
    lg.reject_gate(&warm_gate(&lg), "ship", "no", false, &keyed("w9"))
        .unwrap();
    assert_eq!(
        count(&mut || {
            lg.reject_gate(&g, "ship", "no", false, &keyed("g3"))
                .unwrap();
        }),
        1,
        "keyed reject with an open run"
    );
    let types = event_types(&env, &g);
    assert_eq!(
        &types[types.len() - 3..],
        ["run_cancelled", "gate_rejected", "failed"]
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// References and run ends through the statement (keyed, on the server),
/// the pipeline on the server (no keys) and the pipeline on SQLite: the
/// same answers, references (numbered on across checkpoints, duplicates
/// and ids already linked skipped), runs and events, hashes the library's.
#[test]
fn pg_linking_and_ending_statements_leave_the_rows_the_pipeline_leaves() {
    // One session per database: a creation time is never below the newest.
    for (n, end) in ["complete", "fail", "cancel", "reject"].iter().enumerate() {
        let env = TestEnv::new();
        differential(&env, 1_782_060_000_000, |lg, st| {
            let (tick, m) = (|| st.tick(), |k: &str| st.m(k));
            let mut seen: Vec<Value> = Vec::new();
            let id = lg
                .create_session(logbook::ledger::CreateSession::titled("links"))
                .unwrap()
                .session_id
                .to_string();
            let sv = |s: &logbook::Session| {
                let mut v = serde_json::to_value(s).unwrap();
                v.as_object_mut().unwrap().remove("session_id");
                v
            };
            tick();
            seen.push(sv(&lg
                .checkpoint(
                    &id,
                    linking("a", &["p1", "p2", "p1"], &["o-ç"]),
                    &m(&format!("{n}a")),
                )
                .unwrap()));
            tick();
            seen.push(sv(&lg
                .checkpoint(&id, linking("b", &["p2", "p3"], &[]), &m(&format!("{n}b")))
                .unwrap()));
            tick();
            let mut runs = Vec::new();
            for r in 0..3 {
                let run = lg
                    .create_run(&id, CreateRun::default(), &m(&format!("{n}r{r}")))
                    .unwrap();
                tick();
                runs.push(run.run_id.to_string());
            }
            // One pending, one running, one already ended (left as it is).
            lg.start_run(&runs[1], &m(&format!("{n}s"))).unwrap();
            tick();
            lg.cancel_run(&runs[2], &m(&format!("{n}x"))).unwrap();
            tick();
            let ended = match *end {
                "complete" => lg.complete(&id, "ok", &m(&format!("{n}e"))),
                "fail" => lg.fail(&id, "broke", &m(&format!("{n}e"))),
                "cancel" => lg.cancel(&id, "stop", &m(&format!("{n}e"))),
                _ => {
                    lg.open_gate(&id, "ship", GateKind::UserApproval, &m(&format!("{n}g")))
                        .unwrap();
                    tick();
                    lg.reject_gate(&id, "ship", "no", true, &m(&format!("{n}e")))
                }
            }
            .unwrap();
            seen.push(sv(&ended));
            let runs: Vec<Value> = runs
                .iter()
                .map(|r| {
                    let mut v = serde_json::to_value(lg.get_run(r).unwrap()).unwrap();
                    let o = v.as_object_mut().unwrap();
                    o.remove("run_id");
                    o.remove("session_id");
                    v
                })
                .collect();
            seen.push(json!(runs));
            let mut events = events_without_ids(lg, &id);
            for e in &mut events {
                e.as_object_mut().unwrap().remove("run_id");
            }
            seen.push(json!(events));
            let report = lg.verify(std::slice::from_ref(&id)).unwrap();
            assert_eq!(report.sessions, 1);
            json!(seen)
        });
    }
}

/// A checkpoint whose references would pass 256 of a kind: the
/// pipeline's INVALID_ARGUMENT, nothing written; up to the cap, applied.
#[test]
fn pg_references_past_the_cap_get_the_pipelines_answer_and_write_nothing() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "cap", "a");
    let ids =
        |from: usize, to: usize| -> Vec<String> { (from..to).map(|i| format!("p{i}")).collect() };
    let req = |plans: Vec<String>| CheckpointRequest {
        step: Some("s".into()),
        plan_ids: plans,
        ..CheckpointRequest::default()
    };
    lg.checkpoint(&id, req(ids(0, 200)), &keyed("c1")).unwrap();
    let rev = lg.get_session(&id).unwrap().rev;
    let e = lg
        .checkpoint(&id, req(ids(150, 257)), &keyed("c2"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT", "{e}");
    assert_eq!(lg.get_session(&id).unwrap().rev, rev, "nothing written");
    // 56 new ones reach the cap exactly.
    let s = lg
        .checkpoint(&id, req(ids(150, 256)), &keyed("c3"))
        .unwrap();
    assert_eq!(s.value.plan_ids.len(), 256);
    assert_eq!(s.value.plan_ids[255], "p255");
    let ordinals = env.scalar(&format!(
        "SELECT count(DISTINCT ordinal) FROM session_refs WHERE session_id = '{id}' AND kind = 'plan' AND ordinal < 256"
    ));
    assert_eq!(ordinals, 256);
    assert_eq!(env.json(&["verify"]).code, 0);
}
