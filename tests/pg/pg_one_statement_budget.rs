//! `budget` on a session that has one and `budget --reset` as one
//! statement on a server (docs/postgres.md, "One round trip per write"):
//! keyed, a change of limits or policy that leaves usage within every
//! merged limit and a reset are one round trip each and answer with the
//! budget the statement wrote; they leave the budgets, sessions and events
//! (the `budget_set` and `budget_reset` data built by the server) the
//! pipeline leaves on the server and on SQLite; a change that puts usage
//! over a limit, a reset without a budget and a replay get the pipeline's
//! answer.

use crate::common::*;
use crate::pg_one_statement::{
    cuts, differential, events_without_ids, keyed, round_trips, server_port, through_proxy, via,
};
use crate::proxy::Proxy;
use logbook::ledger::CreateSession;
use logbook::{OnExceed, RecordUsage, SetBudget};
use serde_json::{json, Value};
use std::path::Path;

fn tokens(i: i64) -> RecordUsage {
    RecordUsage {
        input_tokens: Some(i),
        ..RecordUsage::default()
    }
}

#[test]
fn pg_keyed_budget_changes_and_resets_are_one_round_trip_each() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    let limit = |t: Option<i64>, a: Option<i64>| SetBudget {
        max_tokens: t,
        max_api_calls: a,
        ..SetBudget::default()
    };
    // The first of each statement prepares it (one round trip more).
    let warm = lib_create(&lg, "warm", "a");
    lg.set_budget(&warm, limit(Some(9), None), &keyed("w1"))
        .unwrap();
    lg.reset_budget(&warm, &keyed("w2")).unwrap();

    let id = lib_create(&lg, "budgeted", "a");
    assert_eq!(
        count(&mut || drop(
            lg.set_budget(&id, limit(Some(100), None), &keyed("b1"))
                .unwrap()
        )),
        1,
        "a new budget"
    );
    lg.record_usage(&id, tokens(80), &keyed("u1")).unwrap();
    let mut merged = None;
    assert_eq!(
        count(&mut || {
            merged = Some(
                lg.set_budget(&id, limit(None, Some(5)), &keyed("b2"))
                    .unwrap(),
            );
        }),
        1,
        "another limit on a budget within its limits"
    );
    let merged = merged.unwrap();
    assert_eq!(
        (merged.max_tokens, merged.max_api_calls, merged.on_exceed),
        (Some(100), Some(5), Some(OnExceed::Pause)),
        "what is not given is kept"
    );
    assert_eq!(
        (
            merged.used.tokens,
            merged.remaining.tokens,
            merged.session_rev
        ),
        (80, Some(20), 4)
    );
    // Lowered under the usage: the crossing is the pipeline's.
    let crossing = count(&mut || {
        let b = lg
            .set_budget(&id, limit(Some(50), None), &keyed("b3"))
            .unwrap();
        assert!(b.exceeded_at_ms.is_some());
        assert_eq!(b.session_status, "paused");
    });
    assert!(crossing >= 3, "a crossing takes the pipeline: {crossing}");
    let mut reset = None;
    assert_eq!(
        count(&mut || reset = Some(lg.reset_budget(&id, &keyed("r1")).unwrap())),
        1,
        "a reset"
    );
    let reset = reset.unwrap();
    assert_eq!(
        (
            reset.used.tokens,
            reset.exceeded,
            reset.exceeded_at_ms,
            reset.max_tokens
        ),
        (0, false, None, Some(50))
    );
    // A replay answers with the budget as it stands, nothing written.
    let again = lg.reset_budget(&id, &keyed("r1")).unwrap();
    assert_eq!(again.replayed.map(|r| r.rev), Some(Some(reset.session_rev)));
    // Without a budget: the pipeline's INVALID_ARGUMENT, nothing written.
    let bare = lib_create(&lg, "bare", "a");
    let e = lg.reset_budget(&bare, &keyed("r2")).unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
    assert_eq!(lg.get_session(&bare).unwrap().rev, 1);

    let types = event_types(&env, &id);
    assert_eq!(
        types,
        [
            "created",
            "budget_set",
            "usage_recorded",
            "budget_set",
            "budget_set",
            "budget_exceeded",
            "paused",
            "budget_reset"
        ]
    );
    let reset_data = env.scalar(&format!(
        "SELECT count(*) FROM events WHERE session_id = '{id}' AND type = 'budget_reset' \
         AND data = '{{\"tokens\":80,\"api_calls\":0,\"duration_ms\":0}}'"
    ));
    assert_eq!(reset_data, 1, "the usage counted until the reset");
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// Budget changes and resets through the statement (keyed, on the
/// server), the pipeline on the server (no keys) and the pipeline on
/// SQLite, at the same times: the same answers, budgets, sessions and
/// events, a crossing, a mark cleared by raised limits and a reset
/// included.
#[test]
fn pg_budget_statements_leave_what_the_pipeline_leaves() {
    let env = TestEnv::new();
    differential(&env, 1_782_090_000_000, |lg, st| {
        let (tick, m) = (|| st.tick(), |k: &str| st.m(k));
        let id = lg
            .create_session(CreateSession::titled("budget changes"))
            .unwrap()
            .session_id
            .to_string();
        let mut seen: Vec<Value> = Vec::new();
        let mut push = |b: &logbook::Budget| {
            let mut v = serde_json::to_value(b).unwrap();
            v.as_object_mut().unwrap().remove("session_id");
            seen.push(v);
        };
        let usage = |n: &str, i: i64, a: i64, d: i64| {
            lg.record_usage(
                &id,
                RecordUsage {
                    input_tokens: Some(i),
                    api_calls: Some(a),
                    duration_ms: Some(d),
                    ..RecordUsage::default()
                },
                &m(n),
            )
            .unwrap();
        };
        let set = |n: &str, t: Option<i64>, a: Option<i64>, d: Option<i64>, p: Option<OnExceed>| {
            lg.set_budget(
                &id,
                SetBudget {
                    max_tokens: t,
                    max_api_calls: a,
                    max_duration_ms: d,
                    on_exceed: p,
                },
                &m(n),
            )
            .unwrap()
        };
        tick();
        push(&set(
            "b1",
            Some(100),
            None,
            Some(2_000),
            Some(OnExceed::Warn),
        ));
        tick();
        usage("u1", 60, 1, 900);
        tick();
        push(&set("b2", None, Some(3), None, None));
        tick();
        usage("u2", 41, 1, 100);
        tick();
        // Raised over the usage: the mark clears.
        push(&set("b3", Some(500), None, None, None));
        tick();
        push(&lg.reset_budget(&id, &m("r1")).unwrap());
        tick();
        usage("u3", 7, 1, 10);
        tick();
        push(&set("b4", None, None, None, Some(OnExceed::Pause)));
        tick();
        push(&lg.reset_budget(&id, &m("r2")).unwrap());
        assert_eq!(lg.verify(std::slice::from_ref(&id)).unwrap().events, 11);
        json!([seen, events_without_ids(lg, &id)])
    });
}

/// A budget change and a reset whose replies were lost are each applied
/// once: the transaction finds the key and answers as a replay, with the
/// budget as it stands.
#[test]
fn pg_a_budget_change_or_reset_whose_reply_was_lost_is_applied_once() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let id = lib_create(&lg, "lost budget", "a");
    let first = SetBudget {
        max_tokens: Some(100),
        ..SetBudget::default()
    };
    lg.set_budget(&id, first, &keyed("b1")).unwrap();
    lg.record_usage(&id, tokens(30), &keyed("u1")).unwrap();
    proxy.cut_after_next(b"session_budgets");
    let more = SetBudget {
        max_api_calls: Some(7),
        ..SetBudget::default()
    };
    let b = lg.set_budget(&id, more, &keyed("b2")).unwrap();
    assert_eq!(cuts(&proxy, 1), 1, "the change's reply was cut");
    assert_eq!(b.replayed.map(|r| r.rev), Some(Some(4)));
    assert_eq!(
        (b.max_tokens, b.max_api_calls, b.used.tokens),
        (Some(100), Some(7), 30)
    );
    proxy.cut_after_next(b"session_budgets");
    let r = lg.reset_budget(&id, &keyed("r1")).unwrap();
    assert_eq!(cuts(&proxy, 2), 2, "the reset's reply was cut");
    assert_eq!(r.replayed.map(|r| r.rev), Some(Some(5)));
    assert_eq!((r.used.tokens, r.session_rev), (0, 5));
    assert_eq!(
        event_types(&env, &id),
        [
            "created",
            "budget_set",
            "usage_recorded",
            "budget_set",
            "budget_reset"
        ]
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}
