//! A new session with its first checkpoint as one statement on a server
//! (docs/postgres.md, "One round trip per write"): one round trip; the
//! rows a create and a checkpoint in one transaction leave (on the server
//! and on SQLite), its references included; a lost reply is resolved by
//! the new session's id.

use crate::common::*;
use crate::pg_one_statement::{cuts, events_without_ids, keyed, server_port, via};
use crate::proxy::Proxy;
use logbook::clock::Clock;
use logbook::ledger::CreateSession;
use logbook::{CheckpointRequest, Ledger, LedgerOptions};
use serde_json::Value;
use std::path::Path;

const T0: i64 = 1_782_050_000_000;

/// A create with a first checkpoint: a step, a note and, with `state`, a
/// snapshot; with `plan`, linked references (two kinds, one id given
/// twice, which is linked once).
fn create_first(state: bool, plan: bool, key: Option<&str>) -> CreateSession {
    CreateSession {
        app: Some("diff".into()),
        stage: Some("build".into()),
        tags: vec!["b".into(), "a".into()],
        goal: Some("same rows".into()),
        context: Some(serde_json::json!({"k": [1, "ç"]})),
        idempotency_key: key.map(str::to_owned),
        checkpoint: Some(CheckpointRequest {
            state: state.then(|| serde_json::json!({"bytes": "00ff", "n": [1, 2.5, null]})),
            payload: state.then(|| vec![0, 1, 0xfe, 0xff, 0]),
            plan_ids: if plan {
                vec!["PLAN-2".into(), "PLAN-1".into(), "PLAN-2".into()]
            } else {
                Vec::new()
            },
            operation_ids: if plan {
                vec!["op-9".into()]
            } else {
                Vec::new()
            },
            ..cp("first step", Some("first note"))
        }),
        ..CreateSession::titled("created with a checkpoint")
    }
}

/// What a session looks like from outside, without its id: the session,
/// its events (no ids), its snapshot, and `verify`'s count (every hash is
/// the one the library computes, or `verify` fails).
fn seen(lg: &Ledger, id: &str, state: bool) -> Value {
    let mut s = serde_json::to_value(lg.get_session(id).unwrap()).unwrap();
    s.as_object_mut().unwrap().remove("session_id");
    let events = events_without_ids(lg, id);
    let snap = state.then(|| {
        let sn = lg.snapshot(id, None).unwrap();
        serde_json::json!([
            sn.seq,
            sn.step,
            sn.stage,
            sn.at_ms,
            sn.size_bytes,
            sn.state,
            sn.payload.map(hex::encode)
        ])
    });
    let verified = lg.verify(&[id.to_owned()]).unwrap().events;
    serde_json::json!({"session": s, "events": events, "snapshot": snap, "verified": verified})
}

/// The same create with its first checkpoint through the statement on the
/// server, without a key and with one, and through the transaction on
/// SQLite, at the same time: the same session, events and snapshot; what
/// the statement returned is the session read back, references
/// included.
#[test]
fn pg_a_create_with_its_first_checkpoint_leaves_the_rows_sqlite_leaves() {
    for (state, plan) in [(true, false), (false, false), (true, true)] {
        let (clock, _) = Clock::fixed(T0);
        let open = |path: &Path| {
            Ledger::open(LedgerOptions {
                clock: clock.clone(),
                ..LedgerOptions::at(path)
            })
            .unwrap()
        };
        let (one, keyed) = (TestEnv::new(), TestEnv::new());
        let dir = tempfile::tempdir().unwrap();
        let mut all = Vec::new();
        for (lg, key) in [
            (open(&one.db), None),
            (open(&keyed.db), Some("first")),
            (open(&dir.path().join("l.db")), None),
        ] {
            let w = lg.create_session(create_first(state, plan, key)).unwrap();
            assert!(w.replayed.is_none());
            assert_eq!(
                (w.value.rev, w.value.checkpoint.as_ref().map(|c| c.seq)),
                (2, Some(1))
            );
            let id = w.session_id.to_string();
            assert_eq!(
                serde_json::to_value(&w.value).unwrap(),
                serde_json::to_value(lg.get_session(&id).unwrap()).unwrap(),
                "returned as read back (state {state}, plan {plan}, key {key:?})"
            );
            all.push(seen(&lg, &id, state));
        }
        assert_eq!(all[0]["verified"], 2);
        assert_eq!(
            all[0], all[1],
            "without a key vs with one (state {state}, plan {plan})"
        );
        assert_eq!(
            all[0], all[2],
            "server vs SQLite (state {state}, plan {plan})"
        );
    }
}

/// One round trip for a create with its first checkpoint (with or
/// without a state, with or without references).
#[test]
fn pg_a_create_with_its_first_checkpoint_is_one_round_trip() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "")));
    let count = |req: CreateSession| {
        let before = proxy.bursts();
        let w = lg.create_session(req).unwrap();
        assert_eq!(w.value.rev, 2);
        proxy.bursts() - before
    };
    // The first of each statement prepares it (one round trip more).
    count(create_first(true, false, None));
    assert_eq!(count(create_first(true, false, None)), 1, "with a state");
    assert_eq!(
        count(create_first(false, false, None)),
        1,
        "without a state"
    );
    assert_eq!(count(create_first(true, true, None)), 1, "with references");
}

/// The statement's reply is lost: it is sent again with the same id,
/// which finds the session and reads it back, created once with one
/// checkpoint and one snapshot.
#[test]
fn pg_a_lost_reply_to_a_create_with_its_first_checkpoint_creates_it_once() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    // No statement cache: the statement's text is in the burst that runs it.
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let before = env.scalar("SELECT count(*) FROM sessions");
    proxy.cut_after_next(b"logbook_event_hash");
    let w = lg.create_session(create_first(true, false, None)).unwrap();
    assert_eq!(cuts(&proxy, 1), 1, "the statement's reply was cut");
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), before + 1);
    let id = w.session_id.to_string();
    assert_eq!(
        (w.value.rev, w.value.checkpoint.as_ref().map(|c| c.seq)),
        (2, Some(1))
    );
    assert_eq!(event_types(&env, &id), ["created", "checkpoint"]);
    assert_eq!(
        env.scalar(&format!(
            "SELECT count(*) FROM session_snapshots WHERE session_id = '{id}'"
        )),
        1
    );
    assert_eq!(
        lg.snapshot(&id, None).unwrap().state,
        serde_json::json!({"bytes": "00ff", "n": [1, 2.5, null]})
    );
}

/// The server-side hash is called with its exact argument types, so an
/// overload in a schema later in the search_path (here one whose `seq` is
/// an `integer`, a closer match for an untyped `0`) cannot take the call:
/// plain creates, creates with a first checkpoint, keyed checkpoints and
/// events written under that search_path all verify.
#[test]
fn pg_an_overload_later_in_the_search_path_cannot_take_the_hash() {
    let env = TestEnv::new();
    env.create("migrated");
    let mut c = env.pg_client();
    let db: String = c
        .query_one("SELECT quote_ident(current_database())", &[])
        .unwrap()
        .get(0);
    c.batch_execute(&format!(
        "CREATE SCHEMA other; \
         CREATE FUNCTION other.logbook_event_hash(prev bytea, session_id text, seq integer, \
           type text, at_ms bigint, actor_type text, detail text, data text, run_id text) \
           RETURNS bytea LANGUAGE sql AS $$ SELECT decode(repeat('ab', 32), 'hex') $$; \
         CREATE FUNCTION other.logbook_event_hash(prev bytea, session_id text, seq bigint, \
           type text, at_ms bigint, actor_type text, detail text, data text, run_id integer) \
           RETURNS bytea LANGUAGE sql AS $$ SELECT decode(repeat('cd', 32), 'hex') $$; \
         ALTER DATABASE {db} SET search_path = \"$user\", public, other"
    ))
    .unwrap();
    let lg = open_ledger(&env.db);
    let plain = lg
        .create_session(CreateSession::titled("plain"))
        .unwrap()
        .session_id
        .to_string();
    let first = lg
        .create_session(create_first(true, false, None))
        .unwrap()
        .session_id
        .to_string();
    lg.checkpoint(&first, cp("second", None), &keyed("k1"))
        .unwrap();
    lg.append_event(
        &plain,
        logbook::ledger::AppendEvent {
            event_type: "x.tool".into(),
            detail: None,
            data: None,
        },
        &keyed("e1"),
    )
    .unwrap();
    assert_eq!(
        event_types(&env, &first),
        ["created", "checkpoint", "checkpoint"]
    );
    let report = lg.verify(&[plain, first]).unwrap();
    assert_eq!(report.events, 5);
}
