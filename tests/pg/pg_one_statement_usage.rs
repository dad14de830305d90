//! `session usage` and `session stage` as one statement on a server
//! (docs/postgres.md, "One round trip per write"): keyed, each is one
//! round trip; they leave the rows the write pipeline leaves, on the server
//! and on SQLite; usage on a session with a budget, a sum past 2^53−1 and a
//! stage on a session that is not active get the pipeline's answer.

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
