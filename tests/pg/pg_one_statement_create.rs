//! A create with an idempotency key or a parent as one statement on a
//! server (docs/postgres.md, "One round trip per write"; the key's lock,
//! docs/schema.md, "The create key on the server (V12)"): one round trip;
//! the rows SQLite's create leaves, key included; creates racing with one
//! key from many processes make one session; what the statement cannot
//! take (a used key, a missing parent) gets the pipeline's answer; a lost
//! reply is resolved by the new id, also when another create took the key
//! meanwhile.

use crate::common::*;
use crate::pg_one_statement::{
    cuts, events_without_ids, lock_waiters, round_trips, server_port, through_proxy, via,
};
use crate::proxy::Proxy;
use logbook::clock::Clock;
use logbook::ledger::CreateSession;
use logbook::{CheckpointRequest, Ledger, LedgerOptions};
use serde_json::{json, Value};
use std::path::Path;

const T0: i64 = 1_782_060_000_000;

/// A create under `parent` with `key` and, with `first`, its first
/// checkpoint (a snapshot with a payload).
fn keyed_create(key: &str, parent: Option<&str>, first: bool) -> CreateSession {
    CreateSession {
        app: Some("diff".into()),
        tags: vec!["b".into(), "a".into()],
        goal: Some("keyed".into()),
        context: Some(json!({"k": [1, "ç", "\"q\\"]})),
        parent_session_id: parent.map(str::to_owned),
        idempotency_key: Some(key.to_owned()),
        checkpoint: first.then(|| CheckpointRequest {
            state: Some(json!({"n": [1, 2.5, null]})),
            payload: Some(vec![0, 0xff, b'\\', 0]),
            ..cp("first", Some("note"))
        }),
        ..CreateSession::titled("keyed child")
    }
}

/// The idempotency key rows of the server's ledger (`env`) or SQLite's
/// (`sqlite`): SHA-256 of the key, request digest (of a session without a
/// parent: a parent's random id is part of the request), rev, the seq of
/// the event each names and whether that event is its session's; by key.
fn key_rows(env: Option<&TestEnv>, sqlite: Option<&Path>) -> Vec<Value> {
    const SQL: &str = "SELECT k.key_sha256, \
         CASE WHEN s.parent_session_id IS NULL THEN k.request_digest ELSE '' END, k.rev, e.seq, \
         e.session_id = s.session_id FROM idempotency_keys k \
         JOIN events e ON e.event_id = k.event_id JOIN sessions s ON s.session_id = k.session_id \
         ORDER BY k.key_sha256";
    if let Some(env) = env {
        off_runtime(|| {
            env.pg_client()
                .query(SQL, &[])
                .unwrap()
                .iter()
                .map(|r| {
                    json!([
                        r.get::<_, String>(0),
                        r.get::<_, String>(1),
                        r.get::<_, Option<i64>>(2),
                        r.get::<_, i64>(3),
                        r.get::<_, bool>(4)
                    ])
                })
                .collect()
        })
    } else {
        let c = rusqlite::Connection::open(sqlite.unwrap()).unwrap();
        let mut st = c.prepare(SQL).unwrap();
        st.query_map([], |r| {
            Ok(json!([
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, bool>(4)?
            ]))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }
}

/// The session `id` as seen from outside, without ids: the session, its
/// events, and `verify`'s count.
fn seen(lg: &Ledger, id: &str) -> Value {
    let mut s = serde_json::to_value(lg.get_session(id).unwrap()).unwrap();
    let o = s.as_object_mut().unwrap();
    o.remove("session_id");
    o.remove("parent_session_id");
    let verified = lg.verify(&[id.to_owned()]).unwrap().events;
    json!({"session": s, "events": events_without_ids(lg, id), "verified": verified})
}

/// One round trip for a create with a key, with a parent, with both and
/// with a first checkpoint besides; a replay of a keyed create finds the
/// key used and answers from the pipeline with the first session.
#[test]
fn pg_a_keyed_or_child_create_is_one_round_trip() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let parent = lib_create(&lg, "parent", "a");
    // The first of each statement prepares it (one round trip more).
    lg.create_session(keyed_create("warm", None, false))
        .unwrap();
    lg.create_session(keyed_create("warm-first", None, true))
        .unwrap();
    let count = |req: CreateSession| {
        let mut made = None;
        let n = round_trips(&proxy, || made = Some(lg.create_session(req).unwrap()));
        (n, made.unwrap())
    };
    let (n, keyed) = count(keyed_create("k1", None, false));
    assert_eq!((n, keyed.replayed.is_none()), (1, true), "keyed create");
    let (n, child) = count(CreateSession {
        parent_session_id: Some(parent.clone()),
        ..CreateSession::titled("child")
    });
    assert_eq!(n, 1, "child create");
    assert_eq!(child.value.parent_session_id.as_deref(), Some(&*parent));
    let (n, both) = count(keyed_create("k2", Some(&parent), true));
    assert_eq!(n, 1, "keyed child with its first checkpoint");
    assert_eq!(
        (
            both.value.rev,
            both.value.checkpoint.as_ref().map(|c| c.seq)
        ),
        (2, Some(1))
    );
    let (n, again) = count(keyed_create("k1", None, false));
    assert!(n >= 3, "a replay takes the pipeline: {n} round trips");
    assert_eq!(again.session_id, keyed.session_id);
    assert_eq!(
        serde_json::to_value(again.replayed).unwrap(),
        json!({"rev": 1, "seq": 0})
    );
    assert_eq!(
        env.scalar("SELECT count(*) FROM sessions WHERE title = 'keyed child'"),
        4
    );
}

/// The same keyed creates (a parent, a keyed child, a keyed child with its
/// first checkpoint, a keyed session without a parent, then their replays) on the server through the
/// statement and on SQLite through its transaction, at the same times: the
/// same sessions, events, hashes and key rows (digest, rev, the `created`
/// event), and the same replays.
#[test]
fn pg_a_keyed_create_leaves_the_rows_sqlite_leaves() {
    let (clock, _) = Clock::fixed(T0);
    let open = |path: &Path| {
        Ledger::open(LedgerOptions {
            clock: clock.clone(),
            ..LedgerOptions::at(path)
        })
        .unwrap()
    };
    let env = TestEnv::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("l.db");
    let mut all = Vec::new();
    for lg in [open(&env.db), open(&file)] {
        let parent = lib_create(&lg, "parent", "a");
        let mut out = Vec::new();
        for (key, parent, first) in [
            ("child", Some(&*parent), false),
            ("child-with-first", Some(&*parent), true),
            ("no-parent", None, false),
        ] {
            let w = lg.create_session(keyed_create(key, parent, first)).unwrap();
            assert!(w.replayed.is_none());
            let id = w.session_id.to_string();
            assert_eq!(
                serde_json::to_value(&w.value).unwrap(),
                serde_json::to_value(lg.get_session(&id).unwrap()).unwrap(),
                "returned as read back"
            );
            assert_eq!(w.value.parent_session_id.as_deref(), parent);
            let again = lg.create_session(keyed_create(key, parent, first)).unwrap();
            assert_eq!(again.session_id, w.session_id);
            out.push(json!([seen(&lg, &id), again.replayed]));
        }
        all.push(out);
    }
    assert_eq!(all[0][1][0]["verified"], 2);
    assert_eq!(all[0], all[1], "server statement vs SQLite");
    let (pg_keys, sqlite_keys) = (key_rows(Some(&env), None), key_rows(None, Some(&file)));
    assert_eq!(pg_keys.len(), 3);
    assert_eq!(pg_keys, sqlite_keys, "key rows");
    assert!(pg_keys
        .iter()
        .all(|k| k[2] == 1 && k[3] == 0 && k[4] == true));
}

/// Processes creating with one key at the same moment, through the CLI,
/// for several keys: each key makes one session; every process answers
/// with it, exactly one as applied and the others as replays.
#[test]
fn pg_creates_racing_with_one_key_make_one_session() {
    let env = TestEnv::new();
    env.create("migrated");
    for round in 0..4 {
        let key = format!("race-{round}");
        let start = std::time::Instant::now() + std::time::Duration::from_millis(300);
        let runs: Vec<Run> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..6)
                .map(|_| {
                    let (env, key) = (&env, &key);
                    s.spawn(move || {
                        std::thread::sleep(
                            start.saturating_duration_since(std::time::Instant::now()),
                        );
                        env.json(&[
                            "session",
                            "create",
                            "--title",
                            "raced",
                            "--app",
                            "race",
                            "--idempotency-key",
                            key,
                        ])
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut ids = std::collections::BTreeSet::new();
        let mut applied = 0;
        for r in &runs {
            assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
            let v = r.json();
            ids.insert(id_of(&v["data"]));
            if v.get("replayed").is_none() {
                applied += 1;
            }
        }
        assert_eq!(ids.len(), 1, "round {round}: {ids:?}");
        assert_eq!(applied, 1, "round {round}: one applied, the rest replays");
    }
    assert_eq!(
        env.scalar("SELECT count(*) FROM sessions WHERE app = 'race'"),
        4
    );
    assert_eq!(
        env.scalar(
            "SELECT count(*) FROM idempotency_keys k JOIN sessions s \
             ON s.session_id = k.session_id WHERE s.app = 'race'"
        ),
        4
    );
    env.json(&["verify"]).data();
}

/// What the statement cannot take gets the pipeline's answer, with nothing
/// written: a key a create used with other arguments (INVALID_ARGUMENT), a
/// parent that is not there (SESSION_NOT_FOUND).
#[test]
fn pg_a_create_the_statement_cannot_take_gets_the_pipelines_answer() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let used = lg
        .create_session(keyed_create("used", None, false))
        .unwrap();
    let before = env.scalar("SELECT count(*) FROM sessions");
    let e = lg
        .create_session(CreateSession {
            title: "other arguments".into(),
            ..keyed_create("used", None, false)
        })
        .unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT", "{e}");
    assert_eq!(e.details()["field"], "idempotency_key", "{e}");
    assert_eq!(
        e.details()["reason"],
        format!(
            "was already used to create {} with different arguments",
            used.session_id
        ),
        "{e}"
    );
    let missing = "ses_00000000000000aa";
    for key in [None, Some("orphan")] {
        let e = lg
            .create_session(CreateSession {
                parent_session_id: Some(missing.into()),
                idempotency_key: key.map(str::to_owned),
                ..CreateSession::titled("orphan")
            })
            .unwrap_err();
        assert_eq!(e.code().as_str(), "SESSION_NOT_FOUND", "{e}");
        assert_eq!(e.details()["session_id"], missing, "{e}");
    }
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), before);
    assert_eq!(env.scalar("SELECT count(*) FROM idempotency_keys"), 1);
}

/// A keyed create whose reply is lost: sent again with the same id, it
/// finds its session and answers with it; created once, its key once.
#[test]
fn pg_a_lost_reply_to_a_keyed_create_creates_it_once() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    // No statement cache: the statement's text is in the burst that runs it.
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let before = env.scalar("SELECT count(*) FROM sessions");
    proxy.cut_after_next(b"logbook_create_key_free");
    let w = lg.create_session(keyed_create("lost", None, true)).unwrap();
    assert_eq!(cuts(&proxy, 1), 1, "the statement's reply was cut");
    assert!(w.replayed.is_none());
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), before + 1);
    let id = w.session_id.to_string();
    assert_eq!(event_types(&env, &id), ["created", "checkpoint"]);
    assert_eq!(env.scalar("SELECT count(*) FROM idempotency_keys"), 1);
}

/// A keyed create whose reply is lost while another process's create with
/// the same key holds the key: the lost statement and its retry both wait
/// for the key's lock behind it, find the key used and apply nothing; the
/// retry does not find its own id, so the answer is the pipeline's replay
/// of the other create. One session carries the key.
#[test]
fn pg_a_lost_keyed_create_behind_another_with_its_key_answers_with_the_other() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let before = env.scalar("SELECT count(*) FROM sessions");
    // Hold the key's lock (as a create in its transaction would).
    let sha = logbook::store::codec::key_sha256("contended");
    let mut holder = env.pg_client();
    off_runtime(|| {
        holder.batch_execute("BEGIN").unwrap();
        holder
            .execute(
                "SELECT pg_advisory_xact_lock(1279738443, hashtext($1))",
                &[&sha],
            )
            .unwrap();
    });
    let db = env.db.clone();
    let other = std::thread::spawn(move || {
        open_ledger(&db)
            .create_session(keyed_create("contended", None, false))
            .unwrap()
    });
    lock_waiters(&env, 1);
    proxy.cut_after_next(b"logbook_create_key_free");
    let ours =
        std::thread::spawn(move || lg.create_session(keyed_create("contended", None, false)));
    // The other create, the lost statement and its retry all wait.
    lock_waiters(&env, 3);
    assert_eq!(cuts(&proxy, 1), 1, "the statement's reply was cut");
    off_runtime(|| holder.batch_execute("COMMIT").unwrap());
    let other = other.join().unwrap();
    let ours = ours.join().unwrap().unwrap();
    assert!(other.replayed.is_none());
    assert_eq!(ours.session_id, other.session_id);
    assert_eq!(
        serde_json::to_value(ours.replayed).unwrap(),
        json!({"rev": 1, "seq": 0})
    );
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), before + 1);
    assert_eq!(env.scalar("SELECT count(*) FROM idempotency_keys"), 1);
}

/// The look-up of a create's key (the transaction's; the V12 function
/// reads the same way) finds the key's rows by the primary key and each
/// one's event by its id, whatever the statistics say: with a join, a
/// planner without fresh statistics scanned every `created` event per
/// create (≈ 30 ms a create on a bench's ledger).
#[test]
fn pg_a_create_key_is_looked_up_by_index_without_statistics() {
    let env = TestEnv::new();
    let lg = env.ledger();
    for i in 0..200 {
        lg.create_session(keyed_create(&format!("k{i}"), None, false))
            .unwrap();
    }
    let plan: Vec<String> = off_runtime(|| {
        let mut c = env.pg_client();
        let sql = format!(
            "EXPLAIN {}",
            logbook::store::postgres::sql::events::SELECT_CREATED_BY_KEY
        );
        c.query(&sql, &[&logbook::store::codec::key_sha256("k7")])
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect()
    });
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan on events"), "{plan}");
    assert!(plan.contains("events_pkey"), "{plan}");
    assert!(plan.contains("idempotency_keys_pkey"), "{plan}");
}
