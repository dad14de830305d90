//! The scripts of the differential harness (`pg_tx.rs`): sequences of
//! `Tx` calls in the order the ledger makes them (guard read, guarded
//! UPDATE, event, other rows), with fixed ids and times, each value logged
//! and the known ones asserted.

use crate::pg_tx::{Backend, Log};
use logbook::model::{ActorType, SessionStatus, Usage};
use logbook::store::rows::{LeaseRow, NewEvent, NewGate};
use logbook::store::{BudgetLimits, RunChange, SessionChange, SessionGuard, SessionRow, Tx};
use logbook::OnExceed;

pub const S1: &str = "ses_00000000000000a1";
pub const S2: &str = "ses_00000000000000a2";
pub const S3: &str = "ses_00000000000000a3";
pub const S9: &str = "ses_00000000000000f9";
pub const R1: &str = "run_00000000000000b1";
pub const R2: &str = "run_00000000000000b2";
pub const R3: &str = "run_00000000000000b3";
pub const R4: &str = "run_00000000000000b4";
pub const R5: &str = "run_00000000000000b5";
pub const R9: &str = "run_00000000000000f9";
/// 2023-11-14T22:13:20Z.
pub const T0: i64 = 1_700_000_000_000;

/// A live session row with the given id, title, tags and time.
pub fn session_row<'a>(id: &'a str, title: &'a str, tags: &'a [String], at: i64) -> SessionRow<'a> {
    SessionRow {
        session_id: id,
        status: SessionStatus::Active,
        title,
        goal: None,
        app: None,
        agent_id: None,
        route: None,
        stage: None,
        parent_session_id: None,
        tags,
        context: "{}",
        metadata: "{}",
        actor_type: ActorType::Cli,
        actor_id: None,
        rev: 1,
        checkpoint_seq: None,
        final_result: None,
        end_reason: None,
        usage: Usage::default(),
        created_at_ms: at,
        updated_at_ms: at,
        ended_at_ms: None,
    }
}

/// An event of `session` without detail, data, key or run.
pub fn event<'a>(session: &'a str, event_type: &'a str) -> NewEvent<'a> {
    NewEvent {
        session_id: session,
        event_type,
        actor_type: ActorType::Cli,
        detail: None,
        data: None,
        idempotency: None,
        run_id: None,
    }
}

/// A change at `now` with nothing else.
pub fn at(now: i64) -> SessionChange<'static> {
    SessionChange {
        now_ms: now,
        ..SessionChange::default()
    }
}

/// The ledger's mutation order: the guard read (logged), the guarded
/// UPDATE from `from` at the read rev (asserted to match), one event
/// (logged): returns its `(event_id, seq)`.
pub fn mutation(
    tx: &mut dyn Tx,
    log: &mut Log,
    id: &str,
    from: &[SessionStatus],
    change: SessionChange<'_>,
    e: NewEvent<'_>,
) -> (i64, i64) {
    let state = log.put("select_session_state", tx.select_session_state(id).unwrap());
    let rev = state.map(|s| s.rev);
    let guard = SessionGuard { from, rev };
    assert!(log.put(
        "update_session",
        tx.update_session(id, guard, &change).unwrap()
    ));
    log.put("insert_event", tx.insert_event(&e).unwrap())
}

/// S1 (tags, goal, app, agent, context, metadata), S2 (pending, created
/// with an idempotency key) and S3 (a child of S1), each with its
/// `created` event: event ids 1, 2, 3.
pub fn seed(b: &mut Backend, log: &mut Log) {
    let tags1 = vec!["beta".to_owned(), "alpha".to_owned()];
    let tags2 = vec!["beta".to_owned()];
    b.write(|tx| {
        assert_eq!(
            log.put("newest_created_at_ms", tx.newest_created_at_ms().unwrap()),
            None
        );
        let s1 = SessionRow {
            goal: Some("ship it"),
            app: Some("billing"),
            agent_id: Some("agent-1"),
            route: Some("r/1"),
            context: r#"{"k":1,"n":{"a":[1,2]}}"#,
            metadata: r#"{"m":"x"}"#,
            actor_id: Some("me"),
            ..session_row(S1, "first", &tags1, T0)
        };
        assert_eq!(
            log.put("insert_session", tx.insert_session(&s1).unwrap()),
            Some(1)
        );
        let created = NewEvent {
            detail: Some("session created"),
            ..event(S1, "created")
        };
        assert_eq!(
            log.put("insert_event", tx.insert_event(&created).unwrap()),
            (1, 0)
        );
        // A taken id: nothing inserted, and the transaction goes on.
        assert_eq!(
            log.put("insert_session taken", tx.insert_session(&s1).unwrap()),
            None
        );
        assert!(log.put("session_exists", tx.session_exists(S1).unwrap()));
        assert!(!log.put("session_exists missing", tx.session_exists(S9).unwrap()));
        assert_eq!(
            log.put("newest_created_at_ms", tx.newest_created_at_ms().unwrap()),
            Some(T0)
        );
    });
    b.write(|tx| {
        // A create with an idempotency key: the key-lock path on PostgreSQL.
        assert_eq!(
            log.put("find_created_by_key", tx.find_created_by_key("ck").unwrap()),
            None
        );
        let s2 = SessionRow {
            status: SessionStatus::Pending,
            app: Some("ops"),
            stage: Some("plan"),
            ..session_row(S2, "second", &tags2, T0 + 10)
        };
        assert_eq!(
            log.put("insert_session", tx.insert_session(&s2).unwrap()),
            Some(2)
        );
        let created = NewEvent {
            idempotency: Some(("ck", "digest-c")),
            ..event(S2, "created")
        };
        assert_eq!(
            log.put("insert_event", tx.insert_event(&created).unwrap()),
            (2, 0)
        );
        let s3 = SessionRow {
            app: Some("billing"),
            parent_session_id: Some(S1),
            ..session_row(S3, "child", &[], T0 + 20)
        };
        assert_eq!(
            log.put("insert_session", tx.insert_session(&s3).unwrap()),
            Some(3)
        );
        assert_eq!(
            log.put(
                "insert_event",
                tx.insert_event(&event(S3, "created")).unwrap()
            ),
            (3, 0)
        );
        let found = log.put("find_created_by_key", tx.find_created_by_key("ck").unwrap());
        assert_eq!(found, Some((S2.to_owned(), "digest-c".to_owned())));
    });
}

/// The snapshot `{"s":[1]}` (9 bytes) and its SHA-256, as the ledger
/// records it in the checkpoint event's data.
pub const STATE: &str = r#"{"s":[1]}"#;
pub const CHECKPOINT_DATA: &str = r#"{"step":"one","snapshot":{"size_bytes":9,"sha256":"7d2c3ba9e6b3bd4a1b34b0b0d4c07a6f3c9e8b0c6f6b8f1a1fd2f1c9a5d4e3f2"}}"#;

/// A checkpoint of S1 with a key, a snapshot and references: event 4,
/// seq 1, rev 2.
pub fn checkpoint(b: &mut Backend, log: &mut Log) {
    b.write(|tx| {
        assert_eq!(log.put("find_key", tx.find_key("k1", S1).unwrap()), None);
        let change = SessionChange {
            checkpoint_at_next_seq: true,
            stage: Some(Some("build")),
            ..at(T0 + 100)
        };
        let e = NewEvent {
            detail: Some("a note\nwith two lines"),
            data: Some(CHECKPOINT_DATA),
            idempotency: Some(("k1", "digest-1")),
            ..event(S1, "checkpoint")
        };
        let from = [SessionStatus::Pending, SessionStatus::Active];
        assert_eq!(mutation(tx, log, S1, &from, change, e), (4, 1));
        tx.insert_snapshot(S1, 1, Some("one"), STATE, None).unwrap();
        assert_eq!(log.put("count_refs", tx.count_refs(S1, "plan").unwrap()), 0);
        assert!(!log.put("ref_exists", tx.ref_exists(S1, "plan", "p1").unwrap()));
        tx.insert_ref(S1, "plan", "p1", 0, 1).unwrap();
        tx.insert_ref(S1, "plan", "p0", 1, 1).unwrap();
        tx.insert_ref(S1, "operation", "o1", 0, 1).unwrap();
        assert!(log.put("ref_exists", tx.ref_exists(S1, "plan", "p1").unwrap()));
        assert_eq!(log.put("count_refs", tx.count_refs(S1, "plan").unwrap()), 2);
        let hit = log.put("find_key", tx.find_key("k1", S1).unwrap()).unwrap();
        assert_eq!(
            (hit.seq, hit.rev, hit.digest.as_str()),
            (1, Some(2), "digest-1")
        );
        let s = log
            .put("find_session", tx.find_session(S1).unwrap())
            .unwrap();
        assert_eq!(s.plan_ids, ["p1", "p0"]);
        assert_eq!(
            s.checkpoint.map(|c| (c.seq, c.step)),
            Some((1, Some("one".into())))
        );
        let latest = log
            .put("latest_event", tx.latest_event(S1).unwrap())
            .unwrap();
        assert_eq!((latest.seq, latest.step.as_deref()), (1, Some("one")));
    });
}

/// Sessions and events: creates, the checkpoint, the refused guards, the
/// status changes, reads of events.
pub fn sessions_and_events(b: &mut Backend, log: &mut Log) {
    seed(b, log);
    checkpoint(b, log);
    b.write(|tx| {
        let active = [SessionStatus::Active];
        // A wrong rev, a wrong status, no such session: no row matches.
        let stale = SessionGuard {
            from: &active,
            rev: Some(99),
        };
        assert!(!log.put(
            "update wrong rev",
            tx.update_session(S1, stale, &at(T0)).unwrap()
        ));
        let paused = SessionGuard {
            from: &[SessionStatus::Paused],
            rev: None,
        };
        assert!(!log.put(
            "update wrong status",
            tx.update_session(S1, paused, &at(T0)).unwrap()
        ));
        let any = SessionGuard {
            from: &active,
            rev: None,
        };
        assert!(!log.put(
            "update missing",
            tx.update_session(S9, any, &at(T0)).unwrap()
        ));
        let sr = log.put("select_status_rev", tx.select_status_rev(S1).unwrap());
        assert_eq!(sr, Some(("active".to_owned(), 2)));
        assert_eq!(
            log.put(
                "select_status_rev missing",
                tx.select_status_rev(S9).unwrap()
            ),
            None
        );
        assert!(log
            .put(
                "select_session_state missing",
                tx.select_session_state(S9).unwrap()
            )
            .is_none());
    });
    b.write(|tx| {
        // Start S2 clearing its stage; complete S3 with usage; restore S1.
        let start = SessionChange {
            status: Some(SessionStatus::Active),
            stage: Some(None),
            ..at(T0 + 5)
        };
        let from = [SessionStatus::Pending];
        assert_eq!(
            mutation(tx, log, S2, &from, start, event(S2, "started")).1,
            1
        );
        let done = SessionChange {
            status: Some(SessionStatus::Completed),
            final_result: Some("done"),
            usage: Some(Usage {
                input_tokens: 1,
                output_tokens: 2,
                api_calls: 3,
                duration_ms: 4,
            }),
            ..at(T0 + 300)
        };
        let from = [SessionStatus::Active, SessionStatus::Paused];
        let e = NewEvent {
            detail: Some("done"),
            ..event(S3, "completed")
        };
        assert_eq!(mutation(tx, log, S3, &from, done, e).1, 1);
        let fail = SessionChange {
            status: Some(SessionStatus::Failed),
            end_reason: Some("broke"),
            ..at(T0 + 1)
        };
        assert!(!log.put(
            "update terminal",
            tx.update_session(
                S3,
                SessionGuard {
                    from: &from,
                    rev: None
                },
                &fail
            )
            .unwrap()
        ));
        tx.update_context(S1, r#"{"restored":true}"#).unwrap();
        for id in [S1, S2, S3] {
            log.put("find_session", tx.find_session(id).unwrap());
        }
        let s3 = tx.find_session(S3).unwrap().unwrap();
        assert_eq!(
            (s3.ended_at_ms, s3.final_result.as_deref()),
            (Some(T0 + 300), Some("done"))
        );
    });
    b.read(|tx| {
        let all = log.put(
            "select_events all",
            tx.select_events(S1, -1, i64::MAX).unwrap(),
        );
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1]);
        let page = log.put("select_events page", tx.select_events(S1, 0, 1).unwrap());
        assert_eq!(page.iter().map(|e| e.event_id).collect::<Vec<_>>(), [4]);
        assert!(log
            .put(
                "select_events past",
                tx.select_events(S1, i64::MAX - 1, 10).unwrap()
            )
            .is_empty());
        assert!(log
            .put("latest_event missing", tx.latest_event(S9).unwrap())
            .is_none());
        assert!(log
            .put("find_key other", tx.find_key("k1", S2).unwrap())
            .is_none());
        log.put("find_session", tx.find_session(S1).unwrap());
        assert!(log
            .put("find_session missing", tx.find_session(S9).unwrap())
            .is_none());
        log.put(
            "select_session_state read",
            tx.select_session_state(S1).unwrap(),
        );
    });
}

fn lease(token: char, pid: i64, host: &str, from: i64) -> LeaseRow {
    LeaseRow {
        token_sha256: token.to_string().repeat(64),
        pid,
        hostname: host.to_owned(),
        acquired_at_ms: from,
        expires_at_ms: from + 100,
        acquired_seq: 0,
    }
}

/// Runs (every change, a taken id), budgets, leases, gates, children.
pub fn workflow(b: &mut Backend, log: &mut Log) {
    seed(b, log);
    b.write(|tx| {
        let active = [SessionStatus::Active];
        let e = NewEvent {
            run_id: Some(R1),
            ..event(S1, "run_created")
        };
        mutation(tx, log, S1, &active, at(T0 + 200), e);
        assert!(log.put(
            "insert_run",
            tx.insert_run(R1, S1, Some(r#"{"in":1}"#), "{}", T0 + 200)
                .unwrap()
        ));
        // A taken run id, in this session or another: false, nothing added.
        assert!(!log.put(
            "insert_run taken",
            tx.insert_run(R1, S1, None, "{}", T0).unwrap()
        ));
        assert!(!log.put(
            "insert_run taken",
            tx.insert_run(R1, S3, None, "{}", T0).unwrap()
        ));
        assert!(log.put(
            "insert_run",
            tx.insert_run(R2, S1, None, r#"{"m":2}"#, T0 + 201).unwrap()
        ));
        let n = |tx: &mut dyn Tx, log: &mut Log, r: &str, c: RunChange<'_>, t: i64| {
            log.put("update_run", tx.update_run(r, c, t).unwrap())
        };
        assert_eq!(n(tx, log, R1, RunChange::Start, T0 + 210), 1);
        assert_eq!(n(tx, log, R1, RunChange::Start, T0 + 211), 0);
        let usage = RunChange::Usage {
            input_tokens: 5,
            output_tokens: 6,
            api_calls: 1,
        };
        assert_eq!(n(tx, log, R1, usage, T0 + 220), 1);
        assert_eq!(n(tx, log, R1, RunChange::Turn, T0 + 230), 1);
        assert_eq!(n(tx, log, R2, RunChange::Turn, T0 + 230), 0);
        log.put("find_running_run", tx.find_running_run(S1).unwrap())
            .unwrap();
        assert_eq!(log.put("select_runs", tx.select_runs(S1).unwrap()).len(), 2);
        assert_eq!(
            log.put("select_open_run_ids", tx.select_open_run_ids(S1).unwrap()),
            [R1, R2]
        );
        assert_eq!(
            n(
                tx,
                log,
                R1,
                RunChange::Complete(Some(r#"{"out":true}"#)),
                T0 + 240
            ),
            1
        );
        assert_eq!(
            n(
                tx,
                log,
                R2,
                RunChange::Fail {
                    code: "E1",
                    message: "bad"
                },
                T0 + 250
            ),
            1
        );
        for r in [R3, R4, R5] {
            assert!(tx.insert_run(r, S1, None, "{}", T0 + 260).unwrap());
        }
        assert_eq!(n(tx, log, R3, RunChange::Cancel, T0 + 270), 1);
        assert_eq!(n(tx, log, R4, RunChange::Timeout, T0 + 270), 1);
        let ended = RunChange::SessionEnded {
            code: "SESSION_ENDED",
            message: "the session was completed",
        };
        // Below the run's own latest change: ended_at_ms stays at it.
        assert_eq!(n(tx, log, R5, ended, T0 + 100), 1);
        assert_eq!(n(tx, log, R5, RunChange::Cancel, T0 + 280), 0);
        for r in [R1, R2, R3, R4, R5] {
            log.put("find_run", tx.find_run(r).unwrap()).unwrap();
        }
        assert_eq!(
            tx.find_run(R5).unwrap().unwrap().ended_at_ms,
            Some(T0 + 260)
        );
        assert!(log
            .put("find_run missing", tx.find_run(R9).unwrap())
            .is_none());
        assert!(log
            .put("find_running_run none", tx.find_running_run(S1).unwrap())
            .is_none());
        assert!(log
            .put(
                "select_open_run_ids none",
                tx.select_open_run_ids(S1).unwrap()
            )
            .is_empty());
        assert!(log.put("run_exists", tx.run_exists(R1).unwrap()));
        assert!(!log.put("run_exists missing", tx.run_exists(R9).unwrap()));
    });
    b.write(|tx| {
        assert!(log
            .put("select_budget none", tx.select_budget(S2).unwrap())
            .is_none());
        let first = BudgetLimits {
            max_tokens: Some(100),
            max_api_calls: None,
            max_duration_ms: Some(5000),
            on_exceed: OnExceed::Pause,
            exceeded_at_ms: None,
        };
        tx.upsert_budget(S2, &first, true, T0 + 300).unwrap();
        log.put("select_budget", tx.select_budget(S2).unwrap())
            .unwrap();
        let second = BudgetLimits {
            max_tokens: Some(200),
            max_api_calls: Some(3),
            max_duration_ms: None,
            on_exceed: OnExceed::Fail,
            exceeded_at_ms: Some(T0 + 301),
        };
        tx.upsert_budget(S2, &second, false, T0 + 302).unwrap();
        log.put("select_budget", tx.select_budget(S2).unwrap())
            .unwrap();
        tx.mark_budget_exceeded(S2, T0 + 303).unwrap();
        log.put("select_budget", tx.select_budget(S2).unwrap())
            .unwrap();
        let base = Usage {
            input_tokens: 10,
            output_tokens: 20,
            api_calls: 3,
            duration_ms: 400,
        };
        tx.reset_budget(S2, &base, T0 + 304).unwrap();
        let b = log
            .put("select_budget", tx.select_budget(S2).unwrap())
            .unwrap();
        assert_eq!(
            (b.base_tokens, b.base_api_calls, b.exceeded_at_ms),
            (30, 3, None)
        );
    });
    b.write(|tx| {
        assert!(log
            .put("find_lease none", tx.find_lease(S2).unwrap())
            .is_none());
        tx.upsert_lease(S2, &lease('a', 42, "h1", T0 + 400))
            .unwrap();
        assert_eq!(
            log.put("find_lease", tx.find_lease(S2).unwrap()),
            Some(lease('a', 42, "h1", T0 + 400))
        );
        let st = log
            .put("select_session_state", tx.select_session_state(S2).unwrap())
            .unwrap();
        assert_eq!(st.lease, Some(lease('a', 42, "h1", T0 + 400)));
        tx.upsert_lease(S2, &lease('b', 43, "h2", T0 + 600))
            .unwrap();
        assert_eq!(
            log.put("find_lease", tx.find_lease(S2).unwrap()),
            Some(lease('b', 43, "h2", T0 + 600))
        );
        tx.delete_lease(S2).unwrap();
        assert!(log
            .put("find_lease gone", tx.find_lease(S2).unwrap())
            .is_none());
        assert!(log
            .put("state no lease", tx.select_session_state(S2).unwrap())
            .unwrap()
            .lease
            .is_none());
    });
    b.write(|tx| {
        let active = [SessionStatus::Active];
        let (_, opened) = mutation(tx, log, S1, &active, at(T0 + 800), event(S1, "gate_opened"));
        let gate = |name, round, kind, approved| NewGate {
            session_id: S1,
            name,
            round,
            kind,
            seq: opened,
            at_ms: T0 + 800,
            approved,
        };
        tx.insert_gate(&gate("review", 1, "user-approval", false))
            .unwrap();
        log.put("find_pending_gate", tx.find_pending_gate(S1).unwrap())
            .unwrap();
        let g = log
            .put(
                "find_latest_gate",
                tx.find_latest_gate(S1, "review").unwrap(),
            )
            .unwrap();
        assert_eq!(
            (g.gate_id, g.gate.round, g.gate.status.as_str()),
            (1, 1, "pending")
        );
        assert!(log
            .put(
                "find_latest_gate none",
                tx.find_latest_gate(S1, "other").unwrap()
            )
            .is_none());
        let (_, decided) = mutation(
            tx,
            log,
            S1,
            &active,
            at(T0 + 810),
            event(S1, "gate_approved"),
        );
        tx.decide_gate(g.gate_id, "approved", decided, T0 + 810, Some("ok"), None)
            .unwrap();
        assert!(log
            .put("find_pending_gate none", tx.find_pending_gate(S1).unwrap())
            .is_none());
        tx.insert_gate(&gate("review", 2, "auto", true)).unwrap();
        tx.insert_gate(&gate("deploy", 1, "step-confirm", false))
            .unwrap();
        tx.decide_gate(3, "rejected", decided, T0 + 820, Some("no"), Some("failed"))
            .unwrap();
        assert_eq!(
            log.put("select_gates", tx.select_gates(S1).unwrap()).len(),
            3
        );
        assert!(log
            .put(
                "find_pending_gate missing",
                tx.find_pending_gate(S9).unwrap()
            )
            .is_none());
        let kids = log.put("select_children", tx.select_children(S1).unwrap());
        assert_eq!(
            kids.iter()
                .map(|c| c.session_id.as_str())
                .collect::<Vec<_>>(),
            [S3]
        );
        assert!(log
            .put("select_children none", tx.select_children(S2).unwrap())
            .is_empty());
    });
    b.read(|tx| {
        log.put("select_workflow", tx.select_workflow(S1).unwrap());
        log.put("select_workflow", tx.select_workflow(S2).unwrap());
        log.put("find_session", tx.find_session(S1).unwrap());
    });
}
