//! Writes as one statement on a server (docs/postgres.md, "One round trip
//! per write"): a keyed mutation and a create are
//! one round trip; they leave the rows the write pipeline leaves (the same
//! session, the same events, hashes the library recomputes); whatever the
//! statement cannot decide goes to the pipeline with the pipeline's codes;
//! a reply lost on the way back is resolved (by the key, or by the new
//! session's id), never applied twice.

use crate::common::*;
use crate::proxy::Proxy;
use logbook::chain::{event_hash, EventFields, GENESIS};
use logbook::clock::Clock;
use logbook::ledger::{AppendEvent, CreateSession};
use logbook::{
    CheckpointRequest, CreateRun, GateKind, Ledger, LedgerOptions, LockRequest, Mutation,
};
use postgres::types::Type;
use serde_json::{json, Value};
use std::path::Path;

pub(crate) fn server_port() -> u16 {
    std::env::var("LOGBOOK_TEST_PG_PORT")
        .expect("LOGBOOK_TEST_PG_PORT (set by .ci/pg)")
        .parse()
        .unwrap()
}

/// The env's URL through `proxy`, plain text, with `extra` query options.
pub(crate) fn via(env: &TestEnv, proxy: &Proxy, extra: &str) -> String {
    let url = env.db.to_str().unwrap();
    let from = format!("127.0.0.1:{}/", server_port());
    assert!(url.contains(&from));
    let url = url.replacen(&from, &format!("127.0.0.1:{}/", proxy.port), 1);
    format!("{url}?sslmode=disable{extra}")
}

/// Waits (up to 10 s) until the proxy has cut `n` replies: it counts one
/// once the server had time to apply what it forwarded.
pub(crate) fn cuts(proxy: &Proxy, n: usize) -> usize {
    let t = std::time::Instant::now();
    while proxy.commits_cut() < n && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    proxy.commits_cut()
}

/// A ledger on the env's database (migrated first) through a new proxy,
/// whose bursts [`round_trips`] counts.
pub(crate) fn through_proxy(env: &TestEnv) -> (Proxy, Ledger) {
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(env, &proxy, "")));
    (proxy, lg)
}

/// How many round trips (bursts of messages to the server) `f` took.
pub(crate) fn round_trips(proxy: &Proxy, f: impl FnOnce()) -> usize {
    let before = proxy.bursts();
    f();
    proxy.bursts() - before
}

/// What a differential run gives each step: the shared fixed clock and the
/// ledger's keys.
pub(crate) struct Steps<'a> {
    now: &'a std::sync::atomic::AtomicI64,
    prefix: Option<String>,
}

impl Steps<'_> {
    /// Moves the clock one second on.
    pub(crate) fn tick(&self) {
        self.now
            .fetch_add(1000, std::sync::atomic::Ordering::SeqCst);
    }

    /// The write's mutation: keyed (`key` under this ledger's prefix), or
    /// none for the ledger without keys.
    pub(crate) fn m(&self, key: &str) -> Mutation {
        match &self.prefix {
            Some(p) => keyed(&format!("{p}-{key}")),
            None => Mutation::default(),
        }
    }
}

/// The same writes (`run`, on a fresh session of its own) through three
/// ledgers on one fixed clock starting at `t0` each time: on the server
/// with keys (one statement each), on the server without (the pipeline's
/// transaction), on SQLite with keys (the pipeline). What `run` returns
/// must be the same for all three.
pub(crate) fn differential(env: &TestEnv, t0: i64, run: impl Fn(&Ledger, &Steps<'_>) -> Value) {
    let sqlite_dir = tempfile::tempdir().unwrap();
    let (clock, now) = Clock::fixed(t0);
    let open = |path: &Path| {
        Ledger::open(LedgerOptions {
            clock: clock.clone(),
            ..LedgerOptions::at(path)
        })
        .unwrap()
    };
    let ledgers = [
        (open(&env.db), true),
        (open(&env.db), false),
        (open(&sqlite_dir.path().join("l.db")), true),
    ];
    let seen: Vec<Value> = ledgers
        .iter()
        .enumerate()
        .map(|(i, (lg, with_keys))| {
            now.store(t0, std::sync::atomic::Ordering::SeqCst);
            let steps = Steps {
                now: &now,
                prefix: with_keys.then(|| i.to_string()),
            };
            run(lg, &steps)
        })
        .collect();
    assert_eq!(
        seen[0], seen[1],
        "one statement vs the pipeline, on the server"
    );
    assert_eq!(seen[0], seen[2], "the server vs SQLite");
}

pub(crate) fn keyed(key: &str) -> Mutation {
    Mutation {
        idempotency_key: Some(key.to_owned()),
        ..Mutation::default()
    }
}

/// A session's events as JSON without their ids (`session_id`,
/// `event_id`), to compare two ledgers' timelines.
pub(crate) fn events_without_ids(lg: &Ledger, id: &str) -> Vec<Value> {
    lg.session_events(id, None, None)
        .unwrap()
        .events
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap();
            v.as_object_mut().unwrap().remove("session_id");
            v.as_object_mut().unwrap().remove("event_id");
            v
        })
        .collect()
}

fn event(ty: &str, data: &str) -> AppendEvent {
    AppendEvent {
        event_type: ty.to_owned(),
        detail: Some("tool ran".to_owned()),
        data: Some(serde_json::from_str(data).unwrap()),
    }
}

#[test]
fn pg_the_server_hashes_an_event_as_the_library_does() {
    let env = TestEnv::new();
    env.create("migrated"); // the schema is there
    let mut c = env.pg_client();
    type Case<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>, i64, i64);
    let cases: Vec<Case> = vec![
        (None, None, None, 0, 0),
        (Some(""), Some("{}"), None, 1, -1),
        (
            Some("naïve 日本 \u{1F600}"),
            Some(r#"{"a":[1,2],"b":"ç"}"#),
            Some("run_00ff00ff00ff00ff"),
            i64::MAX,
            i64::MIN,
        ),
        (
            Some("line\nbreak\ttab"),
            None,
            Some(""),
            42,
            1_782_040_000_000,
        ),
    ];
    for (n, (detail, data, run_id, seq, at_ms)) in cases.into_iter().enumerate() {
        let prev = if n % 2 == 0 { GENESIS } else { [0xA5; 32] };
        let want = event_hash(
            &prev,
            &EventFields {
                session_id: b"ses_00ff00ff00ff00ff",
                seq,
                event_type: b"x.tool",
                at_ms,
                actor_type: b"lib",
                detail: detail.map(str::as_bytes),
                data: data.map(str::as_bytes),
                run_id: run_id.map(str::as_bytes),
            },
        );
        let prev = &prev[..];
        let row = c
            .query_one(
                "SELECT logbook_event_hash($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &prev,
                    &"ses_00ff00ff00ff00ff",
                    &seq,
                    &"x.tool",
                    &at_ms,
                    &"lib",
                    &detail,
                    &data,
                    &run_id,
                ],
            )
            .unwrap();
        let got: Vec<u8> = row.get(0);
        assert_eq!(hex::encode(got), hex::encode(want), "case {n}");
    }
    // NULL and empty text hash differently, as in the library.
    let null_vs_empty = c
        .query_one(
            "SELECT logbook_hash_field(NULL) <> logbook_hash_field('')",
            &[],
        )
        .unwrap();
    assert!(null_vs_empty.get::<_, bool>(0));
    // The function names only pg_catalog's functions and operators, so a
    // search_path that puts other `sha256` and `||` first changes nothing
    // (and it carries no pinned search_path, whose switch on every call
    // cost ten times the hash: docs/schema.md).
    c.batch_execute(
        "CREATE SCHEMA shadow; \
         CREATE FUNCTION shadow.sha256(bytea) RETURNS bytea LANGUAGE sql AS 'SELECT $1'; \
         CREATE FUNCTION shadow.cat(bytea, bytea) RETURNS bytea LANGUAGE sql AS 'SELECT $1'; \
         CREATE OPERATOR shadow.|| (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = shadow.cat); \
         SET search_path = shadow, pg_catalog, public",
    )
    .unwrap();
    let fields = EventFields {
        session_id: b"ses_00ff00ff00ff00ff",
        seq: 7,
        event_type: b"checkpoint",
        at_ms: 1_782_040_000_000,
        actor_type: b"cli",
        detail: Some("ç".as_bytes()),
        data: Some(br#"{"step":"s"}"#),
        run_id: None,
    };
    let got: Vec<u8> = c
        .query_one(
            "SELECT public.logbook_event_hash(decode(repeat('00', 32), 'hex'), \
             'ses_00ff00ff00ff00ff', 7, 'checkpoint', 1782040000000, 'cli', 'ç', \
             '{\"step\":\"s\"}', NULL), \
             (SELECT proconfig IS NULL FROM pg_proc WHERE proname = 'logbook_event_hash')",
            &[],
        )
        .map(|r| {
            assert!(r.get::<_, bool>(1), "a pinned search_path");
            r.get(0)
        })
        .unwrap();
    assert_eq!(hex::encode(got), hex::encode(event_hash(&GENESIS, &fields)));
    let _ = Type::BYTEA;
}

#[test]
fn pg_a_keyed_write_and_a_plain_create_are_one_round_trip_each() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    // The first of each statement prepares it (one round trip more).
    let id = lib_create(&lg, "warm", "a");
    lg.checkpoint(&id, cp("s0", None), &keyed("k0")).unwrap();
    lg.append_event(&id, event("x.tool", "{}"), &keyed("e0"))
        .unwrap();
    lg.pause(&id, None, &keyed("p0")).unwrap();
    lg.resume(&id, None, &keyed("r0")).unwrap();

    assert_eq!(
        count(&mut || {
            lib_create(&lg, "one", "a");
        }),
        1,
        "create"
    );
    assert_eq!(
        count(&mut || {
            lg.checkpoint(&id, cp("s1", Some("n")), &keyed("k1"))
                .unwrap();
        }),
        1,
        "keyed checkpoint"
    );
    assert_eq!(
        count(&mut || {
            lg.append_event(&id, event("x.tool", r#"{"n":1}"#), &keyed("e1"))
                .unwrap();
        }),
        1,
        "keyed event"
    );
    let with_state = |step: &str| CheckpointRequest {
        state: Some(serde_json::json!({"hex": "00ff", "n": [1, 2]})),
        payload: Some(vec![0, 0xff, b'\\', 0]),
        ..cp(step, None)
    };
    lg.checkpoint(&id, with_state("w0"), &keyed("w0")).unwrap();
    assert_eq!(
        count(&mut || {
            lg.checkpoint(&id, with_state("w1"), &keyed("w1")).unwrap();
        }),
        1,
        "keyed checkpoint with a snapshot"
    );
    let newest = lg.snapshot(&id, None).unwrap();
    assert_eq!(
        newest.state,
        serde_json::json!({"hex": "00ff", "n": [1, 2]})
    );
    assert_eq!(newest.payload.as_deref(), Some(&[0, 0xff, b'\\', 0][..]));
    assert_eq!(
        count(&mut || {
            lg.pause(&id, None, &keyed("p1")).unwrap();
        }),
        1,
        "keyed pause"
    );
    // Without a key the write takes the pipeline: BEGIN proves the
    // connection before anything is sent that could apply.
    let unkeyed = count(&mut || {
        lg.resume(&id, None, &Mutation::default()).unwrap();
    });
    assert!(unkeyed >= 3, "an unkeyed write took {unkeyed} round trips");
    assert_rev_matches_events(&env, &id);
}

/// The same writes through the one-statement path (keyed, on the server),
/// through the pipeline on the server (no keys) and through the pipeline
/// on SQLite (keyed), at the same times: the same sessions, the same
/// events; and every hash is the one the library computes (`verify`).
#[test]
fn pg_one_statement_writes_leave_the_rows_the_pipeline_leaves() {
    // No session before these (a creation time is never below the newest).
    let env = TestEnv::new();
    differential(&env, 1_782_040_000_000, |lg, st| {
        let (tick, m) = (|| st.tick(), |k: &str| st.m(k));
        let created = lg
            .create_session(CreateSession {
                app: Some("diff".into()),
                tags: vec!["b".into(), "a".into(), "b".into()],
                goal: Some("same rows".into()),
                context: Some(serde_json::json!({"k": [1, "ç"]})),
                ..CreateSession::titled("differential")
            })
            .unwrap();
        let id = created.session_id.to_string();
        let mut returned = vec![serde_json::to_value(&created.value).unwrap()];
        tick();
        returned.push(
            serde_json::to_value(
                &*lg.checkpoint(&id, cp("plan", Some("first")), &m("c1"))
                    .unwrap(),
            )
            .unwrap(),
        );
        tick();
        returned.push(
            serde_json::to_value(
                &*lg.append_event(&id, event("x.tool", r#"{"ok":true,"n":[1,2]}"#), &m("e1"))
                    .unwrap(),
            )
            .unwrap(),
        );
        tick();
        lg.pause(&id, Some("lunch".into()), &m("p1")).unwrap();
        tick();
        lg.resume(&id, None, &m("r1")).unwrap();
        tick();
        returned.push(
            serde_json::to_value(&*lg.checkpoint(&id, cp("build", None), &m("c2")).unwrap())
                .unwrap(),
        );
        tick();
        let state = CheckpointRequest {
            state: Some(serde_json::json!({"k": "ç", "bytes": "00ff", "n": [1, 2.5, null]})),
            payload: Some((0..=255).collect()),
            ..cp("snap", Some("with state"))
        };
        returned
            .push(serde_json::to_value(&*lg.checkpoint(&id, state, &m("c3")).unwrap()).unwrap());
        let snap = lg.snapshot(&id, None).unwrap();
        returned.push(serde_json::json!({
            "snapshot": [snap.seq, snap.step, snap.stage, snap.at_ms, snap.size_bytes, snap.state,
                snap.payload_bytes, snap.payload.map(hex::encode)]
        }));
        tick();
        let done = lg.complete(&id, "shipped", &m("d1")).unwrap();
        returned.push(serde_json::to_value(&*done).unwrap());
        // What each write returned is the session as it is read back.
        let back = serde_json::to_value(lg.get_session(&id).unwrap()).unwrap();
        assert_eq!(returned.last().unwrap(), &back);
        // LEDGER_TAMPERED at the first hash the library computes otherwise.
        let report = lg.verify(std::slice::from_ref(&id)).unwrap();
        assert_eq!(report.events, 8);
        let events = events_without_ids(lg, &id);
        let normal = |mut v: Value| {
            v.as_object_mut().unwrap().remove("session_id");
            v
        };
        let returned: Vec<Value> = returned.into_iter().map(normal).collect();
        json!([returned, events])
    });
}

#[test]
fn pg_what_one_statement_cannot_decide_gets_the_pipelines_answer() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "rules", "a");
    // A replay: applied once, answered as a replay.
    let first = lg.checkpoint(&id, cp("s1", None), &keyed("k1")).unwrap();
    let again = lg.checkpoint(&id, cp("s1", None), &keyed("k1")).unwrap();
    assert_eq!(again.value.rev, first.value.rev);
    assert_eq!(again.replayed.map(|r| r.seq), Some(1));
    // The same key, other arguments.
    let e = lg
        .checkpoint(&id, cp("s2", None), &keyed("k1"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
    // --if-rev behind: SESSION_CONFLICT with the latest event.
    let e = lg
        .checkpoint(
            &id,
            cp("s3", None),
            &Mutation {
                if_rev: Some(1),
                ..keyed("k3")
            },
        )
        .unwrap_err();
    assert_eq!(e.code().as_str(), "SESSION_CONFLICT");
    // A transition the state machine refuses.
    let e = lg.resume(&id, None, &keyed("r0")).unwrap_err();
    assert_eq!(e.code().as_str(), "SESSION_INVALID_TRANSITION");
    // A live lease held by another token.
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
    let e = lg
        .checkpoint(&id, cp("s4", None), &keyed("k4"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "LEASE_HELD");
    lg.unlock(&id, &lease.token, &Mutation::default()).unwrap();
    // A pending gate: resume is refused.
    lg.open_gate(&id, "deploy", GateKind::UserApproval, &Mutation::default())
        .unwrap();
    let e = lg.resume(&id, None, &keyed("r1")).unwrap_err();
    assert_eq!(e.code().as_str(), "GATE_PENDING");
    lg.approve_gate(&id, "deploy", None, &Mutation::default())
        .unwrap();
    // An open run: completing ends it first, with its event.
    let run = lg
        .create_run(&id, CreateRun::default(), &Mutation::default())
        .unwrap();
    lg.complete(&id, "done", &keyed("d1")).unwrap();
    assert_eq!(
        lg.get_run(run.run_id.as_str()).unwrap().status.as_str(),
        "cancelled"
    );
    let types = event_types(&env, &id);
    let n = types.len();
    assert_eq!(&types[n - 2..], ["run_cancelled", "completed"]);
}

/// A one-statement write whose reply is lost: a keyed checkpoint is
/// resolved by its key (a replay, applied once), a plain create by the
/// session's id (read back, created once).
#[test]
fn pg_a_lost_reply_to_one_statement_is_resolved_and_applied_once() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    // No statement cache: the statement's text is in the burst that runs it.
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let id = lib_create(&lg, "lost", "a");

    proxy.cut_after_next(b"logbook_event_hash");
    let w = lg.checkpoint(&id, cp("s1", None), &keyed("k1")).unwrap();
    assert_eq!(cuts(&proxy, 1), 1, "the statement's reply was cut");
    assert_eq!(w.value.rev, 2);
    assert!(w.replayed.is_some(), "the retry found the key: a replay");
    assert_eq!(event_types(&env, &id), ["created", "checkpoint"]);

    let before = env.scalar("SELECT count(*) FROM sessions");
    proxy.cut_after_next(b"logbook_event_hash");
    let s = lg
        .create_session(CreateSession::titled("created once"))
        .unwrap();
    assert_eq!(cuts(&proxy, 2), 2);
    assert!(s.replayed.is_none());
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), before + 1);
    let sid = s.session_id.to_string();
    assert_eq!(event_types(&env, &sid), ["created"]);
    assert_eq!(lg.get_session(&sid).unwrap().title, "created once");
}

/// A one-statement write whose reply is lost, when the server then cannot
/// be reached within the busy timeout: the statement was applied, so the
/// outcome is unknown (STORE_UNAVAILABLE, `outcome: "unknown"`), never
/// "not applied"; the same write retried with its key later is a replay.
#[test]
fn pg_a_lost_reply_then_no_server_is_an_unknown_outcome() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = Ledger::open(LedgerOptions {
        busy_timeout_ms: 300,
        ..LedgerOptions::at(Path::new(&via(&env, &proxy, "&statement_cache_size=0")))
    })
    .unwrap();
    let id = lib_create(&lg, "lost", "a");
    let state = || CheckpointRequest {
        state: Some(serde_json::json!({"n": 1})),
        ..cp("s1", None)
    };
    proxy.cut_after_next(b"logbook_event_hash");
    proxy.refuse_new(true);
    let e = lg.checkpoint(&id, state(), &keyed("k1")).unwrap_err();
    assert_eq!(cuts(&proxy, 1), 1, "the statement's reply was cut");
    assert_eq!(e.code().as_str(), "STORE_UNAVAILABLE", "{e}");
    assert_eq!(e.details()["outcome"], "unknown", "{e}");
    // It was applied, once.
    assert_eq!(event_types(&env, &id), ["created", "checkpoint"]);
    proxy.refuse_new(false);
    let w = lg.checkpoint(&id, state(), &keyed("k1")).unwrap();
    assert!(w.replayed.is_some(), "the retry is a replay");
    assert_eq!(w.value.rev, 2);
    assert_eq!(event_types(&env, &id), ["created", "checkpoint"]);
}

/// A one-statement write waits for a locked session row no longer than
/// the busy timeout (its `lock_timeout`, as the pipeline's `SET LOCAL`),
/// then STORE_BUSY; once the row is free it applies.
#[test]
fn pg_a_one_statement_write_waits_for_a_locked_row_within_the_busy_timeout() {
    let env = TestEnv::new();
    let id = env.create("locked");
    let lg = Ledger::open(LedgerOptions {
        busy_timeout_ms: 400,
        ..LedgerOptions::at(&env.db)
    })
    .unwrap();
    let lock = env.hold_write_lock(&id);
    let t = std::time::Instant::now();
    let e = lg
        .checkpoint(&id, cp("s1", None), &keyed("k1"))
        .unwrap_err();
    let waited = t.elapsed();
    assert_eq!(e.code().as_str(), "STORE_BUSY");
    assert!(
        waited >= std::time::Duration::from_millis(350)
            && waited < std::time::Duration::from_secs(5),
        "waited {waited:?} for a 400 ms busy timeout"
    );
    drop(lock);
    assert_eq!(
        lg.checkpoint(&id, cp("s1", None), &keyed("k1"))
            .unwrap()
            .value
            .rev,
        2
    );
    assert_eq!(event_types(&env, &id), ["created", "checkpoint"]);
}

/// A read of one statement (`get_session`, a `list` page) is sent without
/// BEGIN and COMMIT around it: one round trip (docs/postgres.md, "One
/// round trip per write").
#[test]
fn pg_a_session_read_and_a_list_page_are_one_round_trip_each() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "")));
    let id = lib_create(&lg, "read", "reader");
    let list = logbook::ledger::ListSessions {
        app: Some("reader".into()),
        limit: Some(20),
        ..Default::default()
    };
    // Warm: each statement is prepared once per connection.
    lg.get_session(&id).unwrap();
    lg.list_sessions(&list).unwrap();
    let before = proxy.bursts();
    assert_eq!(lg.get_session(&id).unwrap().title, "read");
    assert_eq!(proxy.bursts() - before, 1, "get_session");
    let before = proxy.bursts();
    let page = lg.list_sessions(&list).unwrap();
    assert_eq!(proxy.bursts() - before, 1, "list_sessions");
    assert_eq!(page.sessions.len(), 1);
    assert_eq!(page.sessions[0].session_id.to_string(), id);
    // A session that is not there is still SESSION_NOT_FOUND.
    let e = lg.get_session("ses_00000000000000aa").unwrap_err();
    assert_eq!(e.code().as_str(), "SESSION_NOT_FOUND");
}

/// A backend terminated right after it answered a one-statement write:
/// the driver hands the FATAL notice to the statement, which had run and
/// committed. A plain create is resolved by its id (one session, read
/// back), a keyed checkpoint by its key (one event).
#[test]
fn pg_a_backend_terminated_after_its_reply_leaves_one_create_and_one_checkpoint() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let id = lib_create(&lg, "terminated", "a");
    let before = env.scalar("SELECT count(*) FROM sessions");
    proxy.fatal_after_next(b"logbook_event_hash");
    let s = lg
        .create_session(CreateSession::titled("created once"))
        .unwrap();
    assert_eq!(cuts(&proxy, 1), 1, "the FATAL followed the reply");
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), before + 1);
    assert_eq!(
        env.scalar("SELECT count(*) FROM sessions WHERE title = 'created once'"),
        1
    );
    assert_eq!(event_types(&env, &s.session_id.to_string()), ["created"]);

    proxy.fatal_after_next(b"logbook_event_hash");
    let w = lg.checkpoint(&id, cp("s1", None), &keyed("k1")).unwrap();
    assert_eq!(w.value.rev, 2);
    assert_eq!(event_types(&env, &id), ["created", "checkpoint"]);
}

/// Waits (bounded) until `n` backends of the test's database wait on a
/// lock.
pub(crate) fn lock_waiters(env: &TestEnv, n: i64) {
    for _ in 0..3000 {
        let waiting = env.scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        );
        if waiting >= n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{n} lock waiters never showed up");
}

/// Queues `first`, then `second`, on session `id`'s row behind a held lock
/// (each on a ledger of its own, on its own thread), waits until both wait,
/// releases the lock and returns what each returned: the order in which a
/// server hands the row on, made certain.
pub(crate) fn queued<A: Send + 'static, B: Send + 'static>(
    env: &TestEnv,
    id: &str,
    first: impl FnOnce(&Ledger) -> A + Send + 'static,
    second: impl FnOnce(&Ledger) -> B + Send + 'static,
) -> (A, B) {
    let on_thread = |f: Box<dyn FnOnce(&Ledger) + Send>| {
        let db = env.db.clone();
        std::thread::spawn(move || f(&Ledger::open(LedgerOptions::at(&db)).unwrap()))
    };
    let lock = env.hold_write_lock(id);
    let (a_tx, a) = std::sync::mpsc::channel();
    let t1 = on_thread(Box::new(move |lg| a_tx.send(first(lg)).unwrap()));
    lock_waiters(env, 1);
    let (b_tx, b) = std::sync::mpsc::channel();
    let t2 = on_thread(Box::new(move |lg| b_tx.send(second(lg)).unwrap()));
    lock_waiters(env, 2);
    lock.release();
    t1.join().unwrap();
    t2.join().unwrap();
    (a.recv().unwrap(), b.recv().unwrap())
}
