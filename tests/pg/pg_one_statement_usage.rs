//! `session usage` and `session stage` as one statement on a server
//! (docs/postgres.md, "One round trip per write"): keyed, each is one
//! round trip, also usage within a budget's limits; they leave the rows the
//! write pipeline leaves, on the server and on SQLite; usage that crosses a
//! budget's limit (once, however many processes race past it), a sum past
//! 2^53−1 and a stage on a session that is not active get the pipeline's
//! answer.

use crate::common::*;
use crate::pg_one_statement::{
    differential, events_without_ids, keyed, round_trips, through_proxy,
};
use crate::proxy::Proxy;
use logbook::clock::Clock;
use logbook::ledger::CreateSession;
use logbook::{
    Ledger, LedgerOptions, Mutation, OnExceed, RecordUsage, SetBudget, StageAction, StageRequest,
};
use serde_json::{json, Value};
use std::path::Path;

fn usage(i: i64, o: i64, a: i64, d: i64) -> RecordUsage {
    RecordUsage {
        input_tokens: Some(i),
        output_tokens: Some(o),
        api_calls: Some(a),
        duration_ms: Some(d),
    }
}

fn stage(action: StageAction, name: &str, reason: Option<&str>) -> StageRequest {
    StageRequest {
        action,
        name: name.to_owned(),
        attempt: Some(1),
        reason: reason.map(str::to_owned),
    }
}

#[test]
fn pg_keyed_usage_and_stage_are_one_round_trip_each() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    let id = lib_create(&lg, "usage", "a");
    // The first of each statement prepares it (one round trip more).
    lg.record_usage(&id, usage(1, 1, 1, 1), &keyed("w-u"))
        .unwrap();
    lg.stage(&id, stage(StageAction::Start, "plan", None), &keyed("w-s"))
        .unwrap();
    assert_eq!(
        count(&mut || {
            lg.record_usage(&id, usage(10, 5, 1, 300), &keyed("u1"))
                .unwrap();
        }),
        1,
        "keyed usage"
    );
    assert_eq!(
        count(&mut || {
            lg.stage(
                &id,
                stage(StageAction::Complete, "plan", None),
                &keyed("s1"),
            )
            .unwrap();
        }),
        1,
        "keyed stage"
    );
    let s = lg.get_session(&id).unwrap();
    assert_eq!(
        (
            s.usage.input_tokens,
            s.usage.output_tokens,
            s.usage.api_calls,
            s.usage.duration_ms
        ),
        (11, 6, 2, 301)
    );
    assert_eq!(s.stage.as_deref(), Some("plan"));
}

/// The same writes through the statement (keyed, on the server), the
/// pipeline on the server (no keys) and the pipeline on SQLite (keyed), at
/// the same times: the same session and events, and what each returned is
/// the session read back; `verify` recomputes every hash.
#[test]
fn pg_one_statement_usage_and_stage_leave_the_rows_the_pipeline_leaves() {
    let env = TestEnv::new();
    differential(&env, 1_782_070_000_000, |lg, st| {
        let (tick, m) = (|| st.tick(), |k: &str| st.m(k));
        let id = lg
            .create_session(CreateSession {
                app: Some("diff".into()),
                stage: Some("intake".into()),
                ..CreateSession::titled("usage differential")
            })
            .unwrap()
            .session_id
            .to_string();
        let mut returned: Vec<Value> = Vec::new();
        let mut push = |w: logbook::Result<logbook::Written<logbook::Session>>| {
            let w = w.unwrap();
            assert!(w.replayed.is_none());
            let mut v = serde_json::to_value(&*w).unwrap();
            assert_eq!(
                v,
                serde_json::to_value(lg.get_session(&id).unwrap()).unwrap()
            );
            v.as_object_mut().unwrap().remove("session_id");
            returned.push(v);
        };
        tick();
        push(lg.record_usage(&id, usage(120, 30, 1, 850), &m("u1")));
        tick();
        push(lg.stage(&id, stage(StageAction::Start, "build", None), &m("s1")));
        tick();
        push(lg.record_usage(
            &id,
            RecordUsage {
                output_tokens: Some(9_000),
                ..RecordUsage::default()
            },
            &m("u2"),
        ));
        tick();
        push(lg.stage(
            &id,
            stage(StageAction::Fail, "build", Some("tests failed: ç")),
            &m("s2"),
        ));
        tick();
        push(lg.stage(&id, stage(StageAction::Retry, "build", None), &m("s3")));
        assert_eq!(lg.verify(std::slice::from_ref(&id)).unwrap().sessions, 1);
        json!({
            "returned": returned,
            "events": events_without_ids(lg, &id),
        })
    });
}

#[test]
fn pg_what_a_usage_or_stage_statement_cannot_decide_gets_the_pipelines_answer() {
    let env = TestEnv::new();
    let lg = env.ledger();
    // A budget: the pipeline applies its policy.
    let id = lib_create(&lg, "budgeted", "a");
    lg.set_budget(
        &id,
        SetBudget {
            max_tokens: Some(100),
            on_exceed: Some(OnExceed::Pause),
            ..SetBudget::default()
        },
        &Mutation::default(),
    )
    .unwrap();
    let s = lg
        .record_usage(&id, usage(80, 40, 1, 0), &keyed("u1"))
        .unwrap();
    assert_eq!(s.status.as_str(), "paused");
    let types = event_types(&env, &id);
    assert_eq!(
        &types[types.len() - 3..],
        ["usage_recorded", "budget_exceeded", "paused"]
    );
    // A stage on a paused session: refused, nothing written.
    let e = lg
        .stage(&id, stage(StageAction::Start, "x", None), &keyed("s1"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "SESSION_INVALID_TRANSITION");
    // A sum past 2^53−1: refused, nothing recorded.
    let other = lib_create(&lg, "big", "a");
    lg.record_usage(&other, usage(9_007_199_254_740_000, 0, 0, 0), &keyed("b1"))
        .unwrap();
    let e = lg
        .record_usage(&other, usage(1_000, 0, 0, 0), &keyed("b2"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
    assert_eq!(
        lg.get_session(&other).unwrap().usage.input_tokens,
        9_007_199_254_740_000
    );
    // A replay answers as one; other arguments under the key are refused.
    let again = lg
        .record_usage(&other, usage(9_007_199_254_740_000, 0, 0, 0), &keyed("b1"))
        .unwrap();
    assert!(again.replayed.is_some());
    let e = lg
        .record_usage(&other, usage(1, 0, 0, 0), &keyed("b1"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// A budget whose limits the usage stays within (counted from its reset),
/// or one already marked exceeded, takes nothing from a usage write: keyed,
/// session usage and a run's usage are one round trip each; a crossing,
/// the first write strictly over a limit, is the pipeline's (its event and
/// policy). The same writes through the pipeline on the server and on
/// SQLite leave the same sessions, events and budgets.
#[test]
fn pg_keyed_usage_within_a_budget_is_one_round_trip_and_a_crossing_the_pipelines() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    let budget = |id: &str| {
        lg.set_budget(
            id,
            SetBudget {
                max_tokens: Some(100),
                max_api_calls: Some(10),
                max_duration_ms: Some(1_000),
                on_exceed: Some(OnExceed::Pause),
            },
            &keyed(&format!("b-{id}")),
        )
        .unwrap();
    };
    let id = lib_create(&lg, "budgeted", "a");
    budget(&id);
    // 30 tokens before the reset: the budget counts from 30.
    lg.record_usage(&id, usage(30, 0, 1, 0), &keyed("w-u"))
        .unwrap();
    lg.reset_budget(&id, &keyed("reset")).unwrap();
    let within = count(&mut || {
        lg.record_usage(&id, usage(40, 20, 4, 500), &keyed("u1"))
            .unwrap();
    });
    assert_eq!(within, 1, "usage within the budget");
    // Exactly at every limit is not over it.
    let at = count(&mut || {
        lg.record_usage(&id, usage(40, 0, 6, 500), &keyed("u2"))
            .unwrap();
    });
    assert_eq!(at, 1, "usage up to the limits");
    let crossing = count(&mut || {
        let s = lg
            .record_usage(&id, usage(1, 0, 0, 0), &keyed("u3"))
            .unwrap();
        assert_eq!(s.status.as_str(), "paused");
    });
    assert!(crossing >= 3, "a crossing takes the pipeline: {crossing}");
    let after = count(&mut || {
        lg.record_usage(&id, usage(5, 0, 0, 0), &keyed("u4"))
            .unwrap();
    });
    assert_eq!(after, 1, "usage past a budget already exceeded");
    let types = event_types(&env, &id);
    assert_eq!(
        &types[types.len() - 7..],
        [
            "budget_reset",
            "usage_recorded",
            "usage_recorded",
            "usage_recorded",
            "budget_exceeded",
            "paused",
            "usage_recorded"
        ]
    );
    let b = lg.check_budget(&id).unwrap();
    assert_eq!(
        b.used.tokens, 106,
        "136 tokens less the 30 before the reset"
    );

    // A run's usage: within, then across.
    let run_session = lib_create(&lg, "run budget", "a");
    budget(&run_session);
    let run = lg
        .create_run(&run_session, logbook::CreateRun::default(), &keyed("rn"))
        .unwrap();
    lg.start_run(run.run_id.as_str(), &keyed("rs")).unwrap();
    let run_usage = |i: i64, key: &str| {
        lg.record_run_usage(
            run.run_id.as_str(),
            logbook::ledger::RunUsageDelta {
                input_tokens: Some(i),
                ..Default::default()
            },
            &keyed(key),
        )
        .unwrap()
    };
    run_usage(1, "r0");
    assert_eq!(
        count(&mut || drop(run_usage(99, "r1"))),
        1,
        "run usage within"
    );
    let crossing = count(&mut || drop(run_usage(1, "r2")));
    assert!(
        crossing >= 3,
        "a run's crossing takes the pipeline: {crossing}"
    );
    let types = event_types(&env, &run_session);
    assert_eq!(
        &types[types.len() - 3..],
        ["run_usage", "budget_exceeded", "paused"]
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// Usage against a budget through the statement (keyed, on the server), the
/// pipeline on the server (no keys) and the pipeline on SQLite: the same
/// sessions, events and budgets, a crossing and usage past it included.
#[test]
fn pg_usage_within_a_budget_leaves_the_rows_the_pipeline_leaves() {
    let env = TestEnv::new();
    differential(&env, 1_782_080_000_000, |lg, st| {
        let (tick, m) = (|| st.tick(), |k: &str| st.m(k));
        let id = lg
            .create_session(CreateSession::titled("budget differential"))
            .unwrap()
            .session_id
            .to_string();
        tick();
        lg.set_budget(
            &id,
            SetBudget {
                max_tokens: Some(100),
                max_duration_ms: Some(2_000),
                on_exceed: Some(OnExceed::Warn),
                ..SetBudget::default()
            },
            &m("b"),
        )
        .unwrap();
        let mut seen = Vec::new();
        for (n, u) in [
            usage(50, 10, 1, 900),
            usage(40, 0, 1, 1_100),
            usage(1, 0, 0, 0),
            usage(7, 3, 2, 10),
        ]
        .into_iter()
        .enumerate()
        {
            tick();
            let s = lg.record_usage(&id, u, &m(&format!("u{n}"))).unwrap();
            let mut v = serde_json::to_value(&*s).unwrap();
            v.as_object_mut().unwrap().remove("session_id");
            let mut b = serde_json::to_value(lg.check_budget(&id).unwrap()).unwrap();
            b.as_object_mut().unwrap().remove("session_id");
            seen.push(json!([v, b]));
        }
        assert_eq!(lg.verify(std::slice::from_ref(&id)).unwrap().sessions, 1);
        json!({"seen": seen, "events": events_without_ids(lg, &id)})
    });
}

/// Four processes record keyed usage on one budgeted session at once, past
/// its limit (policy `warn`, so every write applies): every write is
/// acknowledged and counted once, and exactly one of them, the first
/// strictly over the limit in the session's order, records the crossing.
#[test]
fn pg_usage_racing_past_a_budget_crosses_it_once() {
    let env = TestEnv::new();
    let id = env.create("raced budget");
    let r = env.json(&[
        "session",
        "budget",
        &id,
        "--max-tokens",
        "100",
        "--on-exceed",
        "warn",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let runs: Vec<Run> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|p| {
                let (env, id) = (&env, &id);
                s.spawn(move || {
                    (0..15)
                        .map(|i| {
                            env.json(&[
                                "session",
                                "usage",
                                id,
                                "--input-tokens",
                                "2",
                                "--idempotency-key",
                                &format!("p{p}-{i}"),
                            ])
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    for r in &runs {
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    }
    let b = env.json(&["session", "budget", &id]).data();
    assert_eq!(b["used"]["tokens"], 120);
    assert_eq!(b["exceeded"], true);
    let types = event_types(&env, &id);
    let crossed: Vec<usize> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| *t == "budget_exceeded")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(crossed.len(), 1, "{types:?}");
    // The crossing follows the 51st usage write (102 tokens > 100).
    let before = types[..crossed[0]]
        .iter()
        .filter(|t| *t == "usage_recorded")
        .count();
    assert_eq!(before, 51, "{types:?}");
    assert_eq!(types.iter().filter(|t| *t == "usage_recorded").count(), 60);
    assert_eq!(env.json(&["verify"]).code, 0);
}
