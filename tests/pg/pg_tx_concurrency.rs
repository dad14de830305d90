//! The PostgreSQL store interface under concurrent transactions (docs/design.md,
//! "Backends"): what SQLite's single writer gives for free, `PgTx` must give
//! with row locks, transaction ids and the feed's horizon.
//!
//! Each test holds a transaction open on one connection while another
//! runs, and waits (bounded, polling `pg_stat_activity`) until the second
//! is blocked on a lock before going on; no assertion is on time.

use crate::pg_tx::{Backend, Log};
use crate::pg_tx_script::{at, event, mutation, seed, session_row, S1, S2, S3, T0};
use logbook::model::SessionStatus;
use logbook::store::postgres::tx::{Failure, PgTx};
use logbook::store::rows::{LeaseRow, NewEvent};
use logbook::store::{FeedPos, SessionGuard, Tx};
use logbook::{Error, Event};

/// A seeded PostgreSQL backend and a way to open more connections to it.
fn setup() -> Option<(Backend, impl Fn() -> postgres::Client)> {
    let mut b = Backend::pg()?;
    seed(&mut b, &mut Log::default());
    let url = b.pg_db()?.url.clone();
    Some((b, move || crate::pg::connect(&url)))
}

/// Waits until `n` backends of this database wait on a lock.
fn wait_for_waiters(c: &mut postgres::Client, n: i64) {
    for _ in 0..3000 {
        let row = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .unwrap();
        if row.get::<_, i64>(0) >= n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{n} lock waiters never showed up");
}

/// Runs `f` in a write transaction of a new connection on another thread,
/// then commits (or rolls back when it returns `false` as its second
/// value).
fn in_thread<T: Send + 'static>(
    mut c: postgres::Client,
    f: impl FnOnce(&mut PgTx<'_>) -> (T, bool) + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        c.batch_execute("BEGIN").unwrap();
        let (out, commit) = f(&mut PgTx::new(&mut c, true));
        c.batch_execute(if commit { "COMMIT" } else { "ROLLBACK" })
            .unwrap();
        out
    })
}

fn lease() -> LeaseRow {
    LeaseRow {
        token_sha256: "c".repeat(64),
        pid: 7,
        hostname: "h".into(),
        acquired_at_ms: T0,
        expires_at_ms: T0 + 1000,
        acquired_seq: 1,
    }
}

/// A writer that waited for the session's row lock reads the state the
/// previous holder committed — the lease included, which a statement
/// that waited would otherwise show from its older snapshot.
#[test]
fn pg_tx_state_read_after_a_lock_wait_sees_the_committed_lease() {
    let Some((_b, connect)) = setup() else { return };
    let mut holder = connect();
    holder.batch_execute("BEGIN").unwrap();
    let mut tx = PgTx::new(&mut holder, true);
    let st = tx.select_session_state(S2).unwrap().unwrap();
    assert!(st.lease.is_none());
    let guard = SessionGuard {
        from: &[SessionStatus::Pending],
        rev: Some(st.rev),
    };
    assert!(tx.update_session(S2, guard, &at(T0 + 50)).unwrap());
    tx.insert_event(&event(S2, "lease_acquired")).unwrap();
    tx.upsert_lease(S2, &lease()).unwrap();
    let waiter = in_thread(connect(), |tx| {
        (tx.select_session_state(S2).unwrap().unwrap(), false)
    });
    wait_for_waiters(&mut connect(), 1);
    holder.batch_execute("COMMIT").unwrap();
    let seen = waiter.join().unwrap();
    assert_eq!((seen.rev, seen.updated_at_ms), (2, T0 + 50));
    assert_eq!(seen.lease, Some(lease()));
}

/// The feed reads only below the oldest running transaction: an event of
/// a transaction still open — whose id is the smallest, though its event
/// id is drawn last — holds back the events committed after it, which
/// then follow it, each exactly once, when it commits.
#[test]
fn pg_tx_feed_waits_for_an_open_writer_then_returns_each_event_once() {
    let Some((mut b, connect)) = setup() else {
        return;
    };
    let mut slow = connect();
    slow.batch_execute("BEGIN").unwrap();
    let mut w = PgTx::new(&mut slow, true);
    // The guard read takes the writer's transaction id now.
    let st = w.select_session_state(S2).unwrap().unwrap();
    let guard = SessionGuard {
        from: &[SessionStatus::Pending],
        rev: Some(st.rev),
    };
    assert!(w.update_session(S2, guard, &at(T0 + 60)).unwrap());
    let mut log = Log::default();
    b.write(|tx| {
        mutation(
            tx,
            &mut log,
            S1,
            &[SessionStatus::Active],
            at(T0 + 70),
            event(S1, "x.a"),
        )
    });
    b.write(|tx| {
        mutation(
            tx,
            &mut log,
            S3,
            &[SessionStatus::Active],
            at(T0 + 80),
            event(S3, "x.b"),
        )
    });
    // Drawn after events 4 and 5, by the oldest writer.
    assert_eq!(w.insert_event(&event(S2, "x.slow")).unwrap(), (6, 1));
    let mut all = |_: &Event| true;
    // Other tests' transactions (in their own databases) hold the horizon
    // back too: follow the feed until the three committed events are in.
    let ids = |v: &[(FeedPos, Event)]| v.iter().map(|(p, _)| p.event_id).collect::<Vec<_>>();
    let mut follow = |b: &mut Backend, from: FeedPos, want: usize| {
        let (mut seen, mut pos) = (Vec::new(), from);
        for _ in 0..6000 {
            let (page, last, _) = b.read(|tx| tx.scan_feed(pos, 100, 50_000, &mut all).unwrap());
            seen.extend(page);
            pos = last;
            if seen.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        (seen, pos)
    };
    let (first, last) = follow(&mut b, FeedPos::default(), 3);
    assert_eq!(ids(&first), [1, 2, 3]);
    assert_eq!(last, first[2].0);
    let mut every = |_: &Event| true;
    let horizon = b.read(|tx| {
        // While the oldest writer is open nothing after it shows, though
        // events 4 and 5 have committed.
        let (more, at, at_end) = tx.scan_feed(last, 100, 50_000, &mut every).unwrap();
        assert!(more.is_empty() && at == last && at_end);
        let horizon = tx.feed_horizon().unwrap();
        assert!(last < horizon && horizon.event_id == 0, "{horizon:?}");
        let s1 = tx
            .scan_feed_session(S1, FeedPos::default(), 10, &mut every)
            .unwrap();
        assert_eq!(ids(&s1), [1], "S1's committed event 4 is above the horizon");
        let pos4 = tx.feed_pos_of_event(4).unwrap().unwrap();
        assert!(pos4 > horizon, "{pos4:?} {horizon:?}");
        horizon
    });
    slow.batch_execute("COMMIT").unwrap();
    let (second, last2) = follow(&mut b, last, 3);
    // Feed order is (tx, event_id): the oldest writer's event 6 first, each
    // once across the resumed reads.
    assert_eq!(ids(&second), [6, 4, 5]);
    assert!(second.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(
        second[0].0.tx >= horizon.tx,
        "{:?} {horizon:?}",
        second[0].0
    );
    b.settle();
    let (third, last3, at_end3) =
        b.read(|tx| tx.scan_feed(last2, 100, 50_000, &mut every).unwrap());
    assert!(third.is_empty() && at_end3 && last3 == last2);
    // One session's events resume from the same positions.
    let s2 = b.read(|tx| tx.scan_feed_session(S2, last, 10, &mut every).unwrap());
    assert_eq!(ids(&s2), [6]);
}

/// Writers of one session get increasing transaction ids in the order
/// they append, so the feed's order agrees with each session's seq order:
/// also when a writer's first write is the guarded UPDATE itself (`fork`),
/// which would otherwise take its id before waiting for the row.
#[test]
fn pg_tx_feed_order_follows_seq_when_an_update_comes_first() {
    let Some((mut b, connect)) = setup() else {
        return;
    };
    let mut holder = connect();
    holder.batch_execute("BEGIN").unwrap();
    let mut tx = PgTx::new(&mut holder, true);
    // Only the lock for now: the rows the others wait for are unchanged.
    let st = tx.select_session_state(S1).unwrap().unwrap();
    // Waits for the row with no id yet.
    let locker = in_thread(connect(), |tx| {
        let st = tx.select_session_state(S1).unwrap().unwrap();
        let g = SessionGuard {
            from: &[SessionStatus::Active],
            rev: Some(st.rev),
        };
        assert!(tx.update_session(S1, g, &at(T0 + 2)).unwrap());
        (tx.insert_event(&event(S1, "x.locker")).unwrap(), true)
    });
    let mut watch = connect();
    wait_for_waiters(&mut watch, 1);
    // Its first write is the UPDATE: it must not take its id while it
    // waits, ahead of the locker's.
    let updater = in_thread(connect(), |tx| {
        let g = SessionGuard {
            from: &[SessionStatus::Active],
            rev: None,
        };
        assert!(tx.update_session(S1, g, &at(T0 + 3)).unwrap());
        (tx.insert_event(&event(S1, "x.updater")).unwrap(), true)
    });
    wait_for_waiters(&mut watch, 2);
    let active = [SessionStatus::Active];
    let g = SessionGuard {
        from: &active,
        rev: Some(st.rev),
    };
    assert!(tx.update_session(S1, g, &at(T0 + 1)).unwrap());
    tx.insert_event(&event(S1, "x.holder")).unwrap();
    holder.batch_execute("COMMIT").unwrap();
    let (a, c) = (locker.join().unwrap(), updater.join().unwrap());
    assert_eq!([a.1, c.1].iter().copied().min(), Some(2));
    b.settle();
    let mut all = |_: &Event| true;
    let events = b.read(|tx| {
        tx.scan_feed_session(S1, FeedPos::default(), 10, &mut all)
            .unwrap()
    });
    let seqs: Vec<i64> = events.iter().map(|(_, e)| e.seq).collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    eprintln!(
        "{:?}",
        events
            .iter()
            .map(|(p, e)| (p.tx, p.event_id, e.seq, e.event_type.clone()))
            .collect::<Vec<_>>()
    );
    assert!(events.windows(2).all(|w| w[0].0 < w[1].0), "{events:#?}");
    let feed = b.read(|tx| {
        tx.scan_feed(FeedPos::default(), 10, 50_000, &mut all)
            .unwrap()
    });
    let s1: Vec<i64> = feed
        .0
        .iter()
        .filter(|(_, e)| e.session_id == S1)
        .map(|(_, e)| e.seq)
        .collect();
    assert_eq!(s1, [0, 1, 2, 3]);
}

/// Two attempts of one keyed mutation racing: the second, which looked
/// for the key before the first committed, fails its key insert as a
/// retry (STORE_BUSY, `Failure::Retry`), and run again it replays.
#[test]
fn pg_tx_a_concurrent_retry_with_the_same_key_is_retried_then_replays() {
    let Some((mut b, connect)) = setup() else {
        return;
    };
    let mut first = connect();
    first.batch_execute("BEGIN").unwrap();
    let mut tx = PgTx::new(&mut first, true);
    assert!(tx.find_key("kk", S1).unwrap().is_none());
    let keyed = NewEvent {
        idempotency: Some(("kk", "d")),
        ..event(S1, "x.keyed")
    };
    mutation(
        &mut tx,
        &mut Log::default(),
        S1,
        &[SessionStatus::Active],
        at(T0 + 5),
        keyed,
    );
    let second = in_thread(connect(), |tx| {
        assert!(tx.find_key("kk", S1).unwrap().is_none());
        let st = tx.select_session_state(S1).unwrap().unwrap();
        let g = SessionGuard {
            from: &[SessionStatus::Active],
            rev: Some(st.rev),
        };
        assert!(tx.update_session(S1, g, &at(T0 + 6)).unwrap());
        let keyed = NewEvent {
            idempotency: Some(("kk", "d")),
            ..event(S1, "x.keyed")
        };
        let e = tx.insert_event(&keyed).unwrap_err();
        ((e, tx.failure()), false)
    });
    wait_for_waiters(&mut connect(), 1);
    first.batch_execute("COMMIT").unwrap();
    let (e, failure) = second.join().unwrap();
    assert!(matches!(e, Error::Busy { timeout_ms: 0 }), "{e:?}");
    assert_eq!(failure, Some(Failure::Retry));
    let hit = b.write(|tx| tx.find_key("kk", S1).unwrap()).unwrap();
    assert_eq!((hit.seq, hit.rev), (1, Some(2)));
}

/// Two creates with the same idempotency key: the second waits for the
/// first and then finds the session it created, as under SQLite's single
/// writer.
#[test]
fn pg_tx_creates_with_the_same_key_are_serialized() {
    let Some((_b, connect)) = setup() else { return };
    let new_id = "ses_00000000000000c1";
    let mut first = connect();
    first.batch_execute("BEGIN").unwrap();
    let mut tx = PgTx::new(&mut first, true);
    assert!(tx.find_created_by_key("create-2").unwrap().is_none());
    assert!(tx
        .insert_session(&session_row(new_id, "t", &[], T0 + 99))
        .unwrap()
        .is_some());
    let created = NewEvent {
        idempotency: Some(("create-2", "dg")),
        ..event(new_id, "created")
    };
    tx.insert_event(&created).unwrap();
    let second = in_thread(connect(), |tx| {
        (tx.find_created_by_key("create-2").unwrap(), false)
    });
    wait_for_waiters(&mut connect(), 1);
    first.batch_execute("COMMIT").unwrap();
    assert_eq!(
        second.join().unwrap(),
        Some((new_id.to_owned(), "dg".to_owned()))
    );
}

/// A follower that starts from now while an older writer is open (the
/// horizon held back below events already committed): it skips what had
/// committed before it started, though that lies above the horizon; it
/// wakes when the horizon passes the open writer — whose event id was
/// drawn first, so the newest event_id does not move at its COMMIT — and
/// then delivers that writer's event and every later one, once each, in
/// feed order. (Its probe asks whether an event's transaction lies
/// between the last horizon and this one; other databases' transactions
/// moving the horizon alone wake nothing.)
#[test]
fn pg_follow_from_now_skips_what_ended_before_and_wakes_when_the_horizon_passes_an_open_writer() {
    use std::sync::{mpsc, Arc, Mutex};
    use std::time::{Duration, Instant};
    let Some((mut b, connect)) = setup() else {
        return;
    };
    let url = b.pg_db().unwrap().url.clone();
    let mut slow = connect();
    slow.batch_execute("BEGIN").unwrap();
    let mut w = PgTx::new(&mut slow, true);
    let st = w.select_session_state(S2).unwrap().unwrap();
    let guard = SessionGuard {
        from: &[SessionStatus::Pending],
        rev: Some(st.rev),
    };
    assert!(w.update_session(S2, guard, &at(T0 + 60)).unwrap());
    // The oldest writer draws its event id first ...
    let (slow_id, _) = w.insert_event(&event(S2, "x.slow")).unwrap();
    // ... and a later writer commits before the follower starts.
    let mut log = Log::default();
    b.write(|tx| {
        mutation(
            tx,
            &mut log,
            S1,
            &[SessionStatus::Active],
            at(T0 + 70),
            event(S1, "x.before"),
        )
    });
    let got: Arc<Mutex<Vec<(i64, String)>>> = Arc::default();
    let (ready_tx, ready) = mpsc::channel();
    let follower = {
        let got = got.clone();
        std::thread::spawn(move || {
            let lg = logbook::Ledger::open(logbook::LedgerOptions::at(&url)).unwrap();
            let q = logbook::FeedQuery {
                from_now: true,
                ..Default::default()
            };
            let mut ready = Some(ready_tx);
            let until = Instant::now() + Duration::from_secs(60);
            lg.follow(
                &q,
                Duration::from_millis(5),
                |e| {
                    let mut g = got.lock().unwrap();
                    g.push((e.event_id, e.event_type.clone()));
                    if g.len() == 2 {
                        std::ops::ControlFlow::Break(())
                    } else {
                        std::ops::ControlFlow::Continue(())
                    }
                },
                || {
                    if let Some(r) = ready.take() {
                        r.send(()).unwrap();
                    }
                    Instant::now() > until
                },
            )
            .unwrap();
        })
    };
    ready.recv().unwrap();
    // Held back behind the open writer, whatever the follower probes.
    std::thread::sleep(Duration::from_millis(300));
    assert!(got.lock().unwrap().is_empty(), "{:?}", got.lock().unwrap());
    slow.batch_execute("COMMIT").unwrap();
    b.write(|tx| {
        mutation(
            tx,
            &mut log,
            S3,
            &[SessionStatus::Active],
            at(T0 + 80),
            event(S3, "x.after"),
        )
    });
    follower.join().unwrap();
    let got = got.lock().unwrap();
    assert_eq!(got[0], (slow_id, "x.slow".to_owned()), "{got:?}");
    assert_eq!(got[1].1, "x.after", "{got:?}");
}
