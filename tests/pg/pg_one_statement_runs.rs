//! Run verbs as one statement on a server (docs/postgres.md, "One round
//! trip per write"): a keyed run verb is one round trip; it leaves the rows
//! the write pipeline leaves (runs, events, the session, hashes the
//! library recomputes), on the server and on SQLite; what the statement
//! cannot decide (a budget, a lease, a refused transition, a second running
//! run, a total past 2^53−1, a replay) gets the pipeline's answer; a reply
//! lost on the way back is applied once.

use crate::common::*;
use crate::pg_one_statement::{
    cuts, differential, events_without_ids, keyed, queued, round_trips, server_port, through_proxy,
    via,
};
use crate::proxy::Proxy;
use logbook::clock::Clock;
use logbook::ledger::{CreateSession, RunUsageDelta, SetBudget};
use logbook::{CreateRun, Ledger, LedgerOptions, LockRequest, Mutation, OnExceed, RunError};
use serde_json::{json, Value};
use std::path::Path;

fn usage(i: i64, o: i64, a: i64) -> RunUsageDelta {
    RunUsageDelta {
        input_tokens: Some(i),
        output_tokens: Some(o),
        api_calls: Some(a),
    }
}

fn new_run(lg: &Ledger, id: &str) -> String {
    lg.create_run(id, CreateRun::default(), &Mutation::default())
        .unwrap()
        .run_id
        .to_string()
}

#[test]
fn pg_a_keyed_run_verb_is_one_round_trip() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    let id = lib_create(&lg, "runs", "a");
    // The first of each statement prepares it (one round trip more).
    let warm = lg
        .create_run(&id, CreateRun::default(), &keyed("w-n"))
        .unwrap()
        .run_id
        .to_string();
    lg.start_run(&warm, &keyed("w-s")).unwrap();
    lg.record_run_usage(&warm, usage(1, 1, 1), &keyed("w-u"))
        .unwrap();
    lg.increment_turn(&warm, &keyed("w-t")).unwrap();
    lg.complete_run(&warm, Some(json!({"ok": 1})), &keyed("w-c"))
        .unwrap();
    let mut created = None;
    assert_eq!(
        count(&mut || {
            created = Some(
                lg.create_run(&id, CreateRun::default(), &keyed("n"))
                    .unwrap(),
            );
        }),
        1,
        "keyed create"
    );
    let run = created.unwrap().run_id.to_string();
    let steps: [(&str, &mut dyn FnMut()); 4] = [
        ("start", &mut || {
            lg.start_run(&run, &keyed("s")).unwrap();
        }),
        ("usage", &mut || {
            lg.record_run_usage(&run, usage(10, 5, 1), &keyed("u"))
                .unwrap();
        }),
        ("turn", &mut || {
            lg.increment_turn(&run, &keyed("t")).unwrap();
        }),
        ("complete", &mut || {
            lg.complete_run(&run, Some(json!({"ok": 2})), &keyed("c"))
                .unwrap();
        }),
    ];
    for (name, f) in steps {
        assert_eq!(count(f), 1, "keyed {name}");
    }
    // Without a key: the pipeline's transaction (BEGIN … COMMIT).
    let other = new_run(&lg, &id);
    let unkeyed = count(&mut || {
        lg.start_run(&other, &Mutation::default()).unwrap();
    });
    assert!(
        unkeyed >= 3,
        "an unkeyed run verb took {unkeyed} round trips"
    );
    assert_eq!(lg.verify(std::slice::from_ref(&id)).unwrap().events, 13);
}

/// What a session's runs look like from outside: every run as JSON
/// without its id (ids are random), in creation order.
fn runs_without_ids(lg: &Ledger, id: &str) -> Vec<Value> {
    lg.list_runs(id, &[])
        .unwrap()
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("run_id");
            o.remove("session_id");
            v
        })
        .collect()
}

/// Events without ids and without the run ids they carry.
fn events_without_run_ids(lg: &Ledger, id: &str) -> Vec<Value> {
    events_without_ids(lg, id)
        .into_iter()
        .map(|mut e| {
            let o = e.as_object_mut().unwrap();
            o.remove("run_id");
            o.remove("hash");
            o.remove("prev_hash");
            e
        })
        .collect()
}

/// The same run verbs through the statement (keyed, on the server), the
/// pipeline on the server (no keys) and the pipeline on SQLite (keyed), at
/// the same times: the same runs, events and session, and what each verb
/// returned is the run as it is read back; `verify` recomputes every hash.
#[test]
fn pg_one_statement_run_verbs_leave_the_rows_the_pipeline_leaves() {
    let env = TestEnv::new();
    differential(&env, 1_782_060_000_000, |lg, st| {
        let (tick, m) = (|| st.tick(), |k: &str| st.m(k));
        let id = lg
            .create_session(CreateSession {
                app: Some("diff".into()),
                ..CreateSession::titled("runs differential")
            })
            .unwrap()
            .session_id
            .to_string();
        let mut returned: Vec<Value> = Vec::new();
        let mut push = |r: logbook::Result<logbook::Written<logbook::Run>>| {
            let r = r.unwrap();
            assert!(r.replayed.is_none());
            let back = lg.get_run(r.run_id.as_str()).unwrap();
            assert_eq!(
                serde_json::to_value(&*r).unwrap(),
                serde_json::to_value(&back).unwrap()
            );
            let mut v = serde_json::to_value(&*r).unwrap();
            v.as_object_mut().unwrap().remove("run_id");
            v.as_object_mut().unwrap().remove("session_id");
            returned.push(v);
        };
        let create = |input: Value, k: &str| {
            let r = lg
                .create_run(
                    &id,
                    CreateRun {
                        input: Some(input),
                        metadata: Some(json!({"model": "m-1"})),
                    },
                    &m(k),
                )
                .unwrap();
            let back = lg.get_run(r.run_id.as_str()).unwrap();
            assert_eq!(
                serde_json::to_value(&*r).unwrap(),
                serde_json::to_value(&back).unwrap()
            );
            r.run_id.to_string()
        };
        tick();
        let a = create(json!({"q": "ç"}), "a-n");
        tick();
        push(lg.start_run(&a, &m("a-s")));
        tick();
        push(lg.record_run_usage(&a, usage(120, 30, 1), &m("a-u1")));
        tick();
        push(lg.record_run_usage(
            &a,
            RunUsageDelta {
                output_tokens: Some(7),
                ..RunUsageDelta::default()
            },
            &m("a-u2"),
        ));
        tick();
        push(lg.increment_turn(&a, &m("a-t1")));
        tick();
        push(lg.increment_turn(&a, &m("a-t2")));
        tick();
        push(lg.complete_run(&a, Some(json!({"answer": [1, "ü"]})), &m("a-c")));
        tick();
        let b = create(json!({}), "b-n");
        tick();
        push(lg.fail_run(
            &b,
            RunError {
                code: "E_TOOL".into(),
                message: "the tool\nfailed".into(),
            },
            &m("b-f"),
        ));
        tick();
        let c = create(json!({}), "c-n");
        tick();
        push(lg.start_run(&c, &m("c-s")));
        tick();
        push(lg.cancel_run(&c, &m("c-x")));
        tick();
        let d = create(json!({}), "d-n");
        tick();
        push(lg.timeout_run(&d, &m("d-t")));
        tick();
        let e = create(json!({}), "e-n");
        tick();
        // Completing a pending run is refused, the same way everywhere.
        let refused = lg.complete_run(&e, None, &m("e-c")).unwrap_err();
        assert_eq!(refused.code().as_str(), "RUN_INVALID_TRANSITION");
        push(lg.start_run(&e, &m("e-s")));
        tick();
        push(lg.complete_run(&e, None, &m("e-c2")));
        let mut s = serde_json::to_value(lg.get_session(&id).unwrap()).unwrap();
        s.as_object_mut().unwrap().remove("session_id");
        assert_eq!(lg.verify(std::slice::from_ref(&id)).unwrap().sessions, 1);
        json!({
            "returned": returned,
            "runs": runs_without_ids(lg, &id),
            "events": events_without_run_ids(lg, &id),
            "session": s,
        })
    });
    // The keyed ledger's seventeen applied verbs left their keys (the
    // unkeyed one none); `pg_a_keyed_run_verb_is_one_round_trip` shows
    // they are sent as one statement.
    let keys: i64 = env.scalar("SELECT count(*) FROM idempotency_keys");
    assert_eq!(keys, 17);
}

#[test]
fn pg_what_a_run_statement_cannot_decide_gets_the_pipelines_answer() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "run rules", "a");
    let code = |r: logbook::Result<logbook::Written<logbook::Run>>| {
        r.unwrap_err().code().as_str().to_owned()
    };
    // No such run.
    assert_eq!(
        code(lg.start_run("run_00000000000000aa", &keyed("x0"))),
        "RUN_NOT_FOUND"
    );
    let a = new_run(&lg, &id);
    // A transition the run's state machine refuses.
    assert_eq!(
        code(lg.increment_turn(&a, &keyed("x1"))),
        "RUN_INVALID_TRANSITION"
    );
    let first = lg.start_run(&a, &keyed("a-s")).unwrap();
    // A replay: applied once, answered as a replay with the run as it is.
    let again = lg.start_run(&a, &keyed("a-s")).unwrap();
    assert!(again.replayed.is_some());
    assert_eq!(again.status, first.status);
    // The same key, other arguments.
    assert_eq!(code(lg.cancel_run(&a, &keyed("a-s"))), "INVALID_ARGUMENT");
    // A second running run.
    let b = new_run(&lg, &id);
    let e = lg.start_run(&b, &keyed("b-s")).unwrap_err();
    assert_eq!(e.code().as_str(), "RUN_INVALID_TRANSITION", "{e}");
    assert_eq!(e.details()["running_run_id"], a.as_str(), "{e}");
    // --if-rev behind.
    let e = lg
        .increment_turn(
            &a,
            &Mutation {
                if_rev: Some(1),
                ..keyed("a-t")
            },
        )
        .unwrap_err();
    assert_eq!(e.code().as_str(), "SESSION_CONFLICT");
    // A total past 2^53−1: refused, nothing recorded.
    lg.record_run_usage(&a, usage(9_007_199_254_740_000, 0, 0), &keyed("a-u1"))
        .unwrap();
    assert_eq!(
        code(lg.record_run_usage(&a, usage(1_000, 0, 0), &keyed("a-u2"))),
        "INVALID_ARGUMENT"
    );
    // A budget: usage goes through the pipeline, which applies its policy.
    let c_id = lib_create(&lg, "budgeted", "a");
    lg.set_budget(
        &c_id,
        SetBudget {
            max_tokens: Some(100),
            on_exceed: Some(OnExceed::Pause),
            ..SetBudget::default()
        },
        &Mutation::default(),
    )
    .unwrap();
    let c = new_run(&lg, &c_id);
    lg.start_run(&c, &keyed("c-s")).unwrap();
    lg.record_run_usage(&c, usage(80, 40, 1), &keyed("c-u"))
        .unwrap();
    let types = event_types(&env, &c_id);
    assert_eq!(
        &types[types.len() - 3..],
        ["run_usage", "budget_exceeded", "paused"]
    );
    // A lease held by another token.
    let lease = lg
        .lock(
            &id,
            &LockRequest {
                ttl_ms: Some(60_000),
                ..LockRequest::default()
            },
            &Mutation::default(),
        )
        .unwrap();
    assert_eq!(code(lg.increment_turn(&a, &keyed("a-t2"))), "LEASE_HELD");
    lg.unlock(&id, &lease.token, &Mutation::default()).unwrap();
    // An ended session.
    lg.cancel(&id, "stop", &Mutation::default()).unwrap();
    assert_eq!(
        code(lg.start_run(&b, &keyed("b-s2"))),
        "SESSION_INVALID_TRANSITION"
    );
    // The end cancelled the open runs first, with their events.
    let types = event_types(&env, &id);
    assert_eq!(
        &types[types.len() - 3..],
        ["run_cancelled", "run_cancelled", "cancelled"]
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// A keyed run verb whose reply is lost is resolved by its key: applied
/// once (the run created once, the usage counted once), answered as a
/// replay.
#[test]
fn pg_a_lost_reply_to_a_run_statement_is_applied_once() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let id = lib_create(&lg, "lost", "a");
    proxy.cut_after_next(b"logbook_event_hash");
    let created = lg
        .create_run(&id, CreateRun::default(), &keyed("n"))
        .unwrap();
    assert_eq!(cuts(&proxy, 1), 1, "the create's reply was cut");
    assert!(
        created.replayed.is_some(),
        "the retry found the key: a replay"
    );
    let run = created.run_id.to_string();
    assert_eq!(lg.list_runs(&id, &[]).unwrap().len(), 1, "created once");
    lg.start_run(&run, &keyed("s")).unwrap();
    proxy.cut_after_next(b"logbook_event_hash");
    let w = lg
        .record_run_usage(&run, usage(10, 5, 1), &keyed("u"))
        .unwrap();
    assert_eq!(cuts(&proxy, 2), 2, "the statement's reply was cut");
    assert!(w.replayed.is_some(), "the retry found the key: a replay");
    assert_eq!(
        (
            w.usage.input_tokens,
            w.usage.output_tokens,
            w.usage.api_calls
        ),
        (10, 5, 1)
    );
    let s = lg.get_session(&id).unwrap();
    assert_eq!((s.usage.input_tokens, s.usage.api_calls), (10, 1));
    assert_eq!(
        event_types(&env, &id),
        ["created", "run_created", "run_started", "run_usage"]
    );
}

/// Two keyed run verbs queued on the session's row: the second's
/// statement was planned on a snapshot in which the run was still running,
/// and finds it ended once the first commits. It applies nothing (not the
/// session's rev, not its sums) and the pipeline answers as it would have
/// answered had it come second (RUN_INVALID_TRANSITION: the run has
/// ended), and the run's sums, the session's and the events agree.
#[test]
fn pg_a_run_verb_queued_behind_its_runs_end_applies_nothing_and_gets_the_pipelines_answer() {
    type Verb = fn(&Ledger, &str) -> logbook::Result<()>;
    let verbs: [(&str, Verb); 3] = [
        ("usage", |lg, run| {
            lg.record_run_usage(run, usage(10, 5, 1), &keyed("late"))
                .map(drop)
        }),
        ("turn", |lg, run| {
            lg.increment_turn(run, &keyed("late")).map(drop)
        }),
        ("complete", |lg, run| {
            lg.complete_run(run, None, &keyed("late")).map(drop)
        }),
    ];
    for (name, late) in verbs {
        let env = TestEnv::new();
        let lg = env.ledger();
        let id = lib_create(&lg, "race", "a");
        let run = new_run(&lg, &id);
        lg.start_run(&run, &Mutation::default()).unwrap();
        let (first, second) = queued(
            &env,
            &id,
            {
                let run = run.clone();
                move |lg| lg.cancel_run(&run, &keyed("first")).map(drop)
            },
            {
                let run = run.clone();
                move |lg| late(lg, &run)
            },
        );
        first.unwrap();
        let e = second.unwrap_err();
        assert_eq!(e.code().as_str(), "RUN_INVALID_TRANSITION", "{name}");
        let s = lg.get_session(&id).unwrap();
        let r = lg.get_run(&run).unwrap();
        assert_eq!(
            (
                s.rev,
                s.usage.input_tokens,
                s.usage.api_calls,
                r.usage.input_tokens,
                r.turn_count
            ),
            (4, 0, 0, 0, 0),
            "{name}: the session and the run after a refused late {name}"
        );
        assert_eq!(
            lg.verify(std::slice::from_ref(&id)).unwrap().events,
            4,
            "{name}"
        );
    }
}
