//! The scripts of the differential harness that read (`session list`, the
//! chain walk, verify's checks, the feed) and that export and import.

use crate::pg_tx::{feed_norm, Backend, Log};
use crate::pg_tx_script::{
    at, checkpoint, event, mutation, seed, session_row, CHECKPOINT_DATA, S1, S2, S3, S9, T0,
};
use logbook::model::{ActorType, SessionStatus, Usage};
use logbook::store::rows::{
    BudgetFull, EventRow, GateFull, ListQuery, NewEvent, Order, RefRow, RunRow, SessionRows,
    SnapshotFull, WorkflowRows,
};
use logbook::store::FeedPos;

pub const S4: &str = "ses_00000000000000a4";
pub const S5: &str = "ses_00000000000000a5";
pub const S7: &str = "ses_00000000000000a7";
pub const S8: &str = "ses_00000000000000a8";
pub const SX: &str = "ses_00000000000000ee";
pub const R7: &str = "run_00000000000000c7";

/// Listing pages (both orders, every filter, cursors), the chain walk,
/// verify's reads and the feed.
pub fn listing_and_reads(b: &mut Backend, log: &mut Log) {
    seed(b, log);
    checkpoint(b, log);
    let tags = vec!["beta".to_owned(), "gamma".to_owned()];
    b.write(|tx| {
        for (i, id) in [S4, S5].into_iter().enumerate() {
            let row = logbook::store::SessionRow {
                agent_id: Some("agent-1"),
                app: Some("billing"),
                ..session_row(id, "more", &tags, T0 + 30 + 10 * i as i64)
            };
            tx.insert_session(&row).unwrap().unwrap();
            tx.insert_event(&event(id, "created")).unwrap();
        }
        // S2 updated last: the updated order differs from the created one.
        let from = [SessionStatus::Pending];
        mutation(tx, log, S2, &from, at(T0 + 900), event(S2, "x.touch"));
        // A checkpoint that records a snapshot whose row is missing.
        let e = NewEvent {
            data: Some(CHECKPOINT_DATA),
            ..event(S1, "checkpoint")
        };
        mutation(tx, log, S1, &[SessionStatus::Active], at(T0 + 950), e);
    });
    let q = |f: &dyn Fn(&mut ListQuery)| {
        let mut q = ListQuery {
            limit: 2,
            ..ListQuery::default()
        };
        f(&mut q);
        q
    };
    b.read(|tx| {
        let (page, next) = log.put("list created", tx.list_sessions(&q(&|_| {})).unwrap());
        assert_eq!(ids(&page), [S5, S4]);
        assert_eq!(next, Some((T0 + 30, 4)));
        let (page, next) = log.put(
            "list created 2",
            tx.list_sessions(&q(&|q| q.after = next)).unwrap(),
        );
        assert_eq!(ids(&page), [S3, S2]);
        let (page, _) = log.put(
            "list created 3",
            tx.list_sessions(&q(&|q| q.after = next)).unwrap(),
        );
        assert_eq!(ids(&page), [S1]);
        let (page, _) = log.put(
            "list updated",
            tx.list_sessions(&q(&|q| {
                q.order = Order::Updated;
                q.limit = 3;
            }))
            .unwrap(),
        );
        assert_eq!(ids(&page), [S1, S2, S5]);
        type Case<'a> = (&'a str, &'a dyn Fn(&mut ListQuery));
        let cases: [Case; 12] = [
            ("status", &|q| q.statuses = vec!["pending".into()]),
            ("statuses", &|q| {
                q.statuses = vec!["active".into(), "pending".into()];
                q.limit = 10;
            }),
            ("app", &|q| {
                q.app = Some("billing".into());
                q.limit = 10;
            }),
            ("agent", &|q| q.agent_id = Some("agent-1".into())),
            ("tag", &|q| q.tag = Some("beta".into())),
            ("tag after", &|q| {
                q.tag = Some("beta".into());
                q.after = Some((T0 + 30, 4));
            }),
            ("tag and status", &|q| {
                q.tag = Some("alpha".into());
                q.statuses = vec!["active".into()];
            }),
            ("tag since until", &|q| {
                q.tag = Some("beta".into());
                q.since_ms = Some(T0 + 10);
                q.until_ms = Some(T0 + 50);
            }),
            ("tag and app, updated", &|q| {
                q.order = Order::Updated;
                q.tag = Some("alpha".into());
                q.app = Some("billing".into());
            }),
            ("parent", &|q| q.parent = Some(S1.into())),
            ("since until", &|q| {
                q.since_ms = Some(T0 + 10);
                q.until_ms = Some(T0 + 40);
                q.limit = 10;
            }),
            ("updated since", &|q| {
                q.order = Order::Updated;
                q.since_ms = Some(T0 + 30);
                q.tag = Some("beta".into());
            }),
        ];
        for (name, f) in cases {
            log.put(&format!("list {name}"), tx.list_sessions(&q(f)).unwrap());
        }
        let (page, _) = tx
            .list_sessions(&q(&|q| q.tag = Some("beta".into())))
            .unwrap();
        assert_eq!(ids(&page), [S5, S4]);
    });
    b.read(|tx| {
        let mut rows = Vec::new();
        tx.walk_chain(None, &mut |r| {
            rows.push(r);
            true
        })
        .unwrap();
        assert_eq!(rows.len(), 8);
        for r in &rows {
            let prev: [u8; 32] = r.prev_hash.clone().unwrap().try_into().unwrap();
            assert_eq!(r.hash.as_deref(), Some(&r.expected_hash(&prev)[..]));
        }
        log.put("walk_chain", rows);
        let mut one = Vec::new();
        tx.walk_chain(Some(S1), &mut |r| {
            one.push(r);
            one.len() < 2
        })
        .unwrap();
        assert_eq!(log.put("walk_chain S1 stopped", one).len(), 2);
        assert_eq!(
            log.put("sessions_page", tx.sessions_page("", 2).unwrap())
                .len(),
            2
        );
        log.put("sessions_page after", tx.sessions_page(S2, 10).unwrap());
        assert!(log
            .put("first_orphan_event", tx.first_orphan_event().unwrap())
            .is_none());
        let links = log.put("snapshot_links", tx.snapshot_links(S1).unwrap());
        assert_eq!((links[0].seq, links[0].record.size_bytes), (1, Some(9)));
        assert_eq!(
            log.put(
                "first_missing_snapshot",
                tx.first_missing_snapshot(S1).unwrap()
            ),
            Some(2)
        );
        assert_eq!(
            log.put(
                "first_missing_snapshot none",
                tx.first_missing_snapshot(S2).unwrap()
            ),
            None
        );
        log.put("select_snapshots", tx.select_snapshots(S1).unwrap());
        log.put("find_snapshot", tx.find_snapshot(S1, Some(1)).unwrap())
            .unwrap();
        log.put("find_snapshot newest", tx.find_snapshot(S1, None).unwrap())
            .unwrap();
        assert!(log
            .put("find_snapshot none", tx.find_snapshot(S1, Some(2)).unwrap())
            .is_none());
    });
    feed(b, log);
}

fn ids(page: &[logbook::Session]) -> Vec<String> {
    page.iter().map(|s| s.session_id.to_string()).collect()
}

/// The feed: pages with resumption, a type filter cut short by
/// `max_scan`, one session's events; positions compared by event id.
fn feed(b: &mut Backend, log: &mut Log) {
    let pg = b.is_pg();
    b.settle();
    b.read(|tx| {
        let mut all = |_: &logbook::Event| true;
        let first = tx
            .scan_feed(FeedPos::default(), 3, 50_000, &mut all)
            .unwrap();
        log.put("scan_feed", feed_norm(pg, &first));
        let rest = tx.scan_feed(first.1, 100, 50_000, &mut all).unwrap();
        log.put("scan_feed rest", feed_norm(pg, &rest));
        assert!(rest.2 && !first.2);
        assert_eq!(first.0.len() + rest.0.len(), 8);
        let again = tx.scan_feed(rest.1, 100, 50_000, &mut all).unwrap();
        assert!(again.0.is_empty() && again.2 && again.1 == rest.1);
        let mut cps = |e: &logbook::Event| e.event_type == "checkpoint";
        let cut = tx.scan_feed(FeedPos::default(), 10, 3, &mut cps).unwrap();
        log.put("scan_feed max_scan", feed_norm(pg, &cut));
        assert_eq!((cut.0.len(), cut.1.event_id, cut.2), (0, 3, false));
        let found = tx.scan_feed(cut.1, 10, 50_000, &mut cps).unwrap();
        log.put("scan_feed filtered", feed_norm(pg, &found));
        assert_eq!(found.0.len(), 2);
        let s1 = tx
            .scan_feed_session(S1, FeedPos::default(), 10, &mut all)
            .unwrap();
        let s1_ids: Vec<i64> = s1.iter().map(|(p, _)| p.event_id).collect();
        log.put("scan_feed_session", &s1_ids);
        assert_eq!(s1_ids.len(), 3);
        let from = s1[1].0;
        let tail = tx.scan_feed_session(S1, from, 1, &mut all).unwrap();
        assert_eq!(
            log.put("scan_feed_session after", tail[0].0.event_id),
            s1_ids[2]
        );
        let pos = tx.feed_pos_of_event(4).unwrap().unwrap();
        assert_eq!(pos.event_id, 4);
        assert_eq!(pos, rest.0[0].0);
        let horizon = tx.feed_horizon().unwrap();
        let last = rest.1;
        if pg {
            // Above every committed event's transaction, event id 0; an
            // event id that names nothing has no position.
            assert!(
                horizon.tx > last.tx && horizon.event_id == 0,
                "{horizon:?} {last:?}"
            );
            assert_eq!(tx.feed_pos_of_event(9999).unwrap(), None);
        } else {
            assert_eq!(horizon, last);
            assert_eq!(
                tx.feed_pos_of_event(9999).unwrap(),
                Some(FeedPos::event(9999))
            );
        }
    });
}

/// A terminal session with every kind of row (staged: it has runs).
pub fn import_rows(id: &str, run: &str) -> SessionRows {
    let ev = |t: &str, at: i64, data: Option<&str>, run_id: Option<&str>| EventRow {
        event_type: t.to_owned(),
        at_ms: at,
        actor_type: ActorType::Mcp,
        detail: None,
        data: data.map(str::to_owned),
        run_id: run_id.map(str::to_owned),
    };
    SessionRows {
        session_id: id.to_owned(),
        status: SessionStatus::Completed,
        title: "imported".into(),
        goal: Some("g".into()),
        app: Some("imp".into()),
        agent_id: None,
        route: None,
        stage: Some("s".into()),
        parent_session_id: None,
        tags: vec!["imported".into()],
        context: r#"{"c":1}"#.into(),
        metadata: "{}".into(),
        actor_type: ActorType::Mcp,
        actor_id: None,
        rev: 4,
        checkpoint_seq: Some(1),
        refs: vec![RefRow {
            kind: "plan",
            id: "pl".into(),
            linked_seq: 1,
        }],
        final_result: Some("ok".into()),
        end_reason: None,
        usage: Usage {
            input_tokens: 3,
            output_tokens: 4,
            api_calls: 1,
            duration_ms: 9,
        },
        created_at_ms: T0 - 1000,
        updated_at_ms: T0 - 500,
        ended_at_ms: Some(T0 - 500),
        events: vec![
            ev("created", T0 - 1000, None, None),
            ev("checkpoint", T0 - 900, Some(r#"{"step":"i"}"#), None),
            ev("run_created", T0 - 800, None, Some(run)),
            ev("gate_opened", T0 - 700, None, None),
            ev("completed", T0 - 500, None, None),
        ],
        workflow: WorkflowRows {
            runs: vec![RunRow {
                run_id: run.to_owned(),
                status: "completed".into(),
                input: Some(r#"{"i":1}"#.into()),
                output: Some(r#"{"o":2}"#.into()),
                error_code: None,
                error_message: None,
                metadata: "{}".into(),
                input_tokens: 3,
                output_tokens: 4,
                api_calls: 1,
                turn_count: 2,
                created_at_ms: T0 - 800,
                updated_at_ms: T0 - 600,
                started_at_ms: Some(T0 - 790),
                ended_at_ms: Some(T0 - 600),
            }],
            budget: Some(BudgetFull {
                max_tokens: Some(10),
                max_api_calls: None,
                max_duration_ms: None,
                on_exceed: "warn".into(),
                base_tokens: 0,
                base_api_calls: 0,
                base_duration_ms: 0,
                exceeded_at_ms: None,
                updated_at_ms: T0 - 900,
            }),
            snapshots: vec![SnapshotFull {
                seq: 1,
                step: Some("i".into()),
                stage: Some("s".into()),
                state: r#"{"x":"é"}"#.into(),
                at_ms: T0 - 900,
                payload: Some(vec![0, 255, 0x80, b'{', 0]),
            }],
            gates: vec![GateFull {
                name: "g".into(),
                round: 1,
                kind: "user-approval".into(),
                status: "approved".into(),
                opened_seq: 3,
                opened_at_ms: T0 - 700,
                decided_seq: Some(4),
                decided_at_ms: Some(T0 - 500),
                reason: Some("fine".into()),
                outcome: None,
            }],
        },
    }
}

/// A session a trigger refuses: a snapshot at a seq that is no checkpoint.
pub fn refused_import() -> SessionRows {
    let mut rows = import_rows(SX, "run_00000000000000e1");
    rows.workflow.snapshots[0].seq = 0;
    rows
}

/// Export reads, then an import batch: one session in, its id again
/// refused, a trigger's and a key's refusals rolled back to their
/// savepoints, one more in.
pub fn export_and_import(b: &mut Backend, log: &mut Log) {
    seed(b, log);
    checkpoint(b, log);
    let pg = b.is_pg();
    b.read(|tx| {
        let (s, cp) = log
            .put("find_session_export", tx.find_session_export(S1).unwrap())
            .unwrap();
        assert_eq!((s.rev, cp), (2, Some(1)));
        assert!(log
            .put(
                "find_session_export none",
                tx.find_session_export(S9).unwrap()
            )
            .is_none());
        assert_eq!(
            log.put("select_refs_full", tx.select_refs_full(S1).unwrap())
                .len(),
            3
        );
        assert_eq!(
            log.put("select_events_full", tx.select_events_full(S1).unwrap())
                .len(),
            2
        );
        log.put("select_workflow", tx.select_workflow(S1).unwrap());
        assert_eq!(
            log.put("find_insert_seq", tx.find_insert_seq(S3).unwrap()),
            Some(3)
        );
        assert_eq!(
            log.put("find_insert_seq none", tx.find_insert_seq(S9).unwrap()),
            None
        );
        assert_eq!(log.put("max_insert_seq", tx.max_insert_seq().unwrap()), 3);
    });
    let good = import_rows(S7, R7);
    let mut taken_run = import_rows(S8, R7);
    taken_run.session_id = "ses_00000000000000ef".into();
    let simple = SessionRows {
        status: SessionStatus::Active,
        ended_at_ms: None,
        final_result: None,
        workflow: WorkflowRows::default(),
        ..import_rows(S8, "run_00000000000000c8")
    };
    b.write(|tx| {
        let mut batch = |name: &str, rows: &SessionRows, want: bool| {
            tx.savepoint().unwrap();
            let got = log.put(name, tx.insert_session_rows(rows).unwrap());
            assert_eq!(got, want, "{name}");
            if !got {
                tx.rollback_to_savepoint().unwrap();
            }
            tx.release_savepoint().unwrap();
        };
        batch("import", &good, true);
        batch("import taken id", &good, false);
        batch("import trigger refusal", &refused_import(), false);
        batch("import taken run id", &taken_run, false);
        batch("import simple", &simple, true);
        // The transaction is usable after each refusal.
        assert!(!log.put("session_exists refused", tx.session_exists(SX).unwrap()));
        assert!(log.put("run_exists", tx.run_exists(R7).unwrap()));
        // Ids drawn by the rolled-back inserts: SQLite hands them out
        // again, a PostgreSQL sequence does not.
        let seq = tx.find_insert_seq(S8).unwrap();
        assert_eq!(seq, Some(if pg { 7 } else { 5 }));
    });
    b.read(|tx| {
        for id in [S7, S8] {
            log.put("find_session_export", tx.find_session_export(id).unwrap())
                .unwrap();
            log.put("select_refs_full", tx.select_refs_full(id).unwrap());
            log.put("select_events_full", tx.select_events_full(id).unwrap());
            log.put("select_workflow", tx.select_workflow(id).unwrap());
        }
        let w = tx.select_workflow(S7).unwrap();
        assert_eq!(w, good.workflow);
        let mut chain = Vec::new();
        tx.walk_chain(Some(S7), &mut |r| {
            chain.push((r.seq, r.hash));
            true
        })
        .unwrap();
        log.put("walk_chain imported", chain);
        let s = tx.find_session(S7).unwrap().unwrap();
        assert_eq!(
            (s.status, s.rev, s.plan_ids.len()),
            (SessionStatus::Completed, 4, 1)
        );
    });
}
