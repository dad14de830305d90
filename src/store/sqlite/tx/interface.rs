//! `impl Tx for SqliteTx`: each method of the store interface over the
//! statements of [`super::super::sql`].

use super::{db, exec, is_constraint, session_update, SqliteTx};
use crate::error::{LatestEvent, Result};
use crate::model::{Event, Run, Session, Usage};
use crate::store::rows::{
    BudgetRow, ChainRow, ChildRow, GateFull, GateRow, KeyHit, LeaseRow, ListQuery, NewEvent,
    NewGate, NewPurge, PurgeCandidate, PurgeEnd, PurgeEndRow, PurgeProgress, PurgeRecheck,
    PurgeRow, PurgeScan, PurgedChildRow, SessionRows, SessionState, SnapshotRecord, SnapshotRow,
    StoredEvent, StoredRef, Tombstone, WorkflowRows,
};
use crate::store::sqlite::sql::{
    budgets as sb, chain as sc, events as ev, feed, list, retention as rt, runs as sr,
    sessions as ss, transfer as st, workflow as ws,
};
use crate::store::{
    BudgetLimits, FeedPos, FeedScan, RunChange, SessionChange, SessionGuard, SessionRow,
    SessionsPage, Tx,
};
use rusqlite::{params, OptionalExtension};

impl Tx for SqliteTx<'_> {
    fn find_session(&mut self, id: &str) -> Result<Option<Session>> {
        ss::find_session(self.conn, id).map_err(db)
    }

    fn session_exists(&mut self, id: &str) -> Result<bool> {
        ss::session_exists(self.conn, id).map_err(db)
    }

    fn lock_session_key(&mut self, id: &str) -> Result<bool> {
        // The write transaction holds the whole file.
        ss::session_exists(self.conn, id).map_err(db)
    }

    fn select_status_rev(&mut self, id: &str) -> Result<Option<(String, i64)>> {
        ss::select_status_rev(self.conn, id).map_err(db)
    }

    fn select_session_state(&mut self, id: &str) -> Result<Option<SessionState>> {
        sb::select_session_state(self.conn, id).map_err(db)
    }

    fn newest_created_at_ms(&mut self) -> Result<Option<i64>> {
        self.conn
            .prepare_cached(ss::SELECT_MAX_CREATED)
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(db)
    }

    fn insert_session(&mut self, row: &SessionRow<'_>) -> Result<Option<i64>> {
        match ss::insert_session(self.conn, row) {
            Ok(seq) => Ok(Some(seq)),
            Err(e)
                if is_constraint(&e)
                    && !ss::session_exists(self.conn, row.session_id).map_err(db)? =>
            {
                Err(db(e))
            }
            Err(e) if is_constraint(&e) => Ok(None),
            Err(e) => Err(db(e)),
        }
    }

    fn update_session(
        &mut self,
        id: &str,
        guard: SessionGuard<'_>,
        change: &SessionChange<'_>,
    ) -> Result<bool> {
        let (sql, p) = session_update(id, guard, change);
        exec(self.conn, &sql, rusqlite::params_from_iter(p.iter())).map(|n| n == 1)
    }

    fn update_context(&mut self, id: &str, context: &str) -> Result<()> {
        ws::update_context(self.conn, id, context)
            .map(|_| ())
            .map_err(db)
    }

    fn count_refs(&mut self, id: &str, kind: &str) -> Result<i64> {
        self.conn
            .prepare_cached(ss::COUNT_REFS)
            .and_then(|mut st| st.query_row(params![id, kind], |r| r.get(0)))
            .map_err(db)
    }

    fn ref_exists(&mut self, id: &str, kind: &str, ref_id: &str) -> Result<bool> {
        self.conn
            .prepare_cached(ss::REF_EXISTS)
            .and_then(|mut st| st.exists(params![id, kind, ref_id]))
            .map_err(db)
    }

    fn insert_ref(
        &mut self,
        id: &str,
        kind: &str,
        ref_id: &str,
        ordinal: i64,
        linked_seq: i64,
    ) -> Result<()> {
        exec(
            self.conn,
            ss::INSERT_REF,
            params![id, kind, ref_id, ordinal, linked_seq],
        )
        .map(|_| ())
    }

    fn select_children(&mut self, id: &str) -> Result<Vec<ChildRow>> {
        ws::select_children(self.conn, id).map_err(db)
    }

    fn list_sessions(&mut self, q: &ListQuery) -> Result<SessionsPage> {
        list::select_page(self.conn, q).map_err(db)
    }

    fn insert_event(&mut self, e: &NewEvent<'_>) -> Result<(i64, i64)> {
        ev::insert_event(self.conn, e).map_err(db)
    }

    fn select_events(&mut self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<Event>> {
        ev::select_events(self.conn, id, after_seq, limit).map_err(db)
    }

    fn latest_event(&mut self, id: &str) -> Result<Option<LatestEvent>> {
        ev::latest_event(self.conn, id).map_err(db)
    }

    fn find_key(&mut self, key: &str, id: &str) -> Result<Option<KeyHit>> {
        ev::find_by_key(self.conn, key, id).map_err(db)
    }

    fn find_created_by_key(&mut self, key: &str) -> Result<Option<(String, String)>> {
        ev::find_created_by_key(self.conn, key).map_err(db)
    }

    fn scan_feed(
        &mut self,
        after: FeedPos,
        limit: usize,
        max_scan: usize,
        keep: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<FeedScan> {
        let (events, last, at_end) =
            feed::scan_all(self.conn, after.event_id, limit, max_scan, keep).map_err(db)?;
        let events = events
            .into_iter()
            .map(|e| (FeedPos::event(e.event_id), e))
            .collect();
        Ok((events, FeedPos::event(last), at_end))
    }

    fn scan_feed_session(
        &mut self,
        id: &str,
        after: FeedPos,
        limit: usize,
        keep: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<Vec<(FeedPos, Event)>> {
        let events = feed::scan_session(self.conn, id, after.event_id, limit, keep).map_err(db)?;
        Ok(events
            .into_iter()
            .map(|e| (FeedPos::event(e.event_id), e))
            .collect())
    }

    fn feed_horizon(&mut self) -> Result<FeedPos> {
        feed::newest_event_id(self.conn)
            .map(FeedPos::event)
            .map_err(db)
    }

    fn feed_pos_of_event(&mut self, event_id: i64) -> Result<Option<FeedPos>> {
        Ok(Some(FeedPos::event(event_id)))
    }

    fn insert_snapshot(
        &mut self,
        id: &str,
        seq: i64,
        step: Option<&str>,
        state: &str,
        payload: Option<&[u8]>,
    ) -> Result<()> {
        ws::insert_snapshot(self.conn, id, seq, step, state, payload).map_err(db)
    }

    fn select_snapshots(&mut self, id: &str) -> Result<Vec<SnapshotRow>> {
        ws::select_snapshots(self.conn, id).map_err(db)
    }

    fn find_snapshot(&mut self, id: &str, seq: Option<i64>) -> Result<Option<SnapshotRow>> {
        ws::find_snapshot(self.conn, id, seq).map_err(db)
    }

    fn snapshot_record(&mut self, id: &str, seq: i64) -> Result<Option<SnapshotRecord>> {
        ws::snapshot_record(self.conn, id, seq).map_err(db)
    }

    fn select_gates(&mut self, id: &str) -> Result<Vec<GateFull>> {
        ws::select_gates(self.conn, id).map_err(db)
    }

    fn find_latest_gate(&mut self, id: &str, name: &str) -> Result<Option<GateRow>> {
        ws::find_latest_gate(self.conn, id, name).map_err(db)
    }

    fn find_pending_gate(&mut self, id: &str) -> Result<Option<GateFull>> {
        ws::find_pending_gate(self.conn, id).map_err(db)
    }

    fn insert_gate(&mut self, g: &NewGate<'_>) -> Result<()> {
        ws::insert_gate(self.conn, g).map_err(db)
    }

    fn decide_gate(
        &mut self,
        gate_id: i64,
        status: &str,
        seq: i64,
        at_ms: i64,
        reason: Option<&str>,
        outcome: Option<&str>,
    ) -> Result<()> {
        ws::decide_gate(self.conn, gate_id, status, seq, at_ms, reason, outcome).map_err(db)
    }

    fn find_lease(&mut self, id: &str) -> Result<Option<LeaseRow>> {
        ws::find_lease(self.conn, id).map_err(db)
    }

    fn upsert_lease(&mut self, id: &str, l: &LeaseRow) -> Result<()> {
        ws::upsert_lease(self.conn, id, l).map_err(db)
    }

    fn delete_lease(&mut self, id: &str) -> Result<()> {
        ws::delete_lease(self.conn, id).map_err(db)
    }

    fn select_budget(&mut self, id: &str) -> Result<Option<BudgetRow>> {
        sb::select_budget(self.conn, id).map_err(db)
    }

    fn upsert_budget(&mut self, id: &str, b: &BudgetLimits, new: bool, at_ms: i64) -> Result<()> {
        let sql = if new {
            sb::INSERT_BUDGET
        } else {
            sb::UPDATE_BUDGET_LIMITS
        };
        exec(
            self.conn,
            sql,
            params![
                id,
                b.max_tokens,
                b.max_api_calls,
                b.max_duration_ms,
                b.on_exceed.as_str(),
                b.exceeded_at_ms,
                at_ms
            ],
        )
        .map(|_| ())
    }

    fn mark_budget_exceeded(&mut self, id: &str, at_ms: i64) -> Result<()> {
        exec(self.conn, sb::UPDATE_BUDGET_EXCEEDED, params![id, at_ms]).map(|_| ())
    }

    fn reset_budget(&mut self, id: &str, base: &Usage, at_ms: i64) -> Result<()> {
        exec(
            self.conn,
            sb::UPDATE_BUDGET_RESET,
            params![
                id,
                base.input_tokens + base.output_tokens,
                base.api_calls,
                base.duration_ms,
                at_ms
            ],
        )
        .map(|_| ())
    }

    fn insert_run(
        &mut self,
        run_id: &str,
        session_id: &str,
        input: Option<&str>,
        metadata: &str,
        at_ms: i64,
    ) -> Result<bool> {
        match sr::insert_run(self.conn, run_id, session_id, input, metadata, at_ms) {
            Ok(()) => Ok(true),
            Err(e) if is_constraint(&e) && st::run_exists(self.conn, run_id).map_err(db)? => {
                Ok(false)
            }
            Err(e) => Err(db(e)),
        }
    }

    fn find_run(&mut self, run_id: &str) -> Result<Option<Run>> {
        sr::find_run(self.conn, run_id).map_err(db)
    }

    fn find_running_run(&mut self, session_id: &str) -> Result<Option<Run>> {
        sr::find_running_run(self.conn, session_id).map_err(db)
    }

    fn select_runs(&mut self, session_id: &str) -> Result<Vec<Run>> {
        sr::select_runs(self.conn, session_id).map_err(db)
    }

    fn select_open_run_ids(&mut self, session_id: &str) -> Result<Vec<String>> {
        sr::select_open_run_ids(self.conn, session_id).map_err(db)
    }

    fn update_run(&mut self, run_id: &str, change: RunChange<'_>, at_ms: i64) -> Result<usize> {
        let c = self.conn;
        match change {
            RunChange::Start => exec(c, sr::UPDATE_RUN_START, params![run_id, at_ms]),
            RunChange::Usage {
                input_tokens,
                output_tokens,
                api_calls,
            } => exec(
                c,
                sr::UPDATE_RUN_USAGE,
                params![run_id, at_ms, input_tokens, output_tokens, api_calls],
            ),
            RunChange::Turn => exec(c, sr::UPDATE_RUN_TURN, params![run_id, at_ms]),
            RunChange::Complete(output) => {
                exec(c, sr::UPDATE_RUN_COMPLETE, params![run_id, at_ms, output])
            }
            RunChange::Fail { code, message } => exec(
                c,
                sr::UPDATE_RUN_FAIL,
                params![run_id, at_ms, code, message],
            ),
            RunChange::Cancel => exec(c, sr::UPDATE_RUN_CANCEL, params![run_id, at_ms]),
            RunChange::Timeout => exec(c, sr::UPDATE_RUN_TIMEOUT, params![run_id, at_ms]),
            RunChange::SessionEnded { code, message } => exec(
                c,
                sr::UPDATE_RUN_SESSION_ENDED,
                params![run_id, at_ms, code, message],
            ),
        }
    }

    fn walk_chain(
        &mut self,
        session: Option<&str>,
        f: &mut dyn FnMut(ChainRow) -> bool,
    ) -> Result<()> {
        sc::walk(self.conn, session, f).map_err(db)
    }

    fn sessions_page(&mut self, after: &str, limit: usize) -> Result<Vec<(String, i64)>> {
        sc::sessions_page(self.conn, after, limit).map_err(db)
    }

    fn first_orphan_event(&mut self) -> Result<Option<(String, i64)>> {
        sc::first_orphan(self.conn).map_err(db)
    }

    fn snapshot_links(&mut self, id: &str) -> Result<Vec<crate::store::rows::SnapshotLink>> {
        sc::snapshot_links(self.conn, id).map_err(db)
    }

    fn first_missing_snapshot(&mut self, id: &str) -> Result<Option<i64>> {
        sc::first_missing_snapshot(self.conn, id).map_err(db)
    }

    fn find_session_export(&mut self, id: &str) -> Result<Option<(Session, Option<i64>)>> {
        let found = self
            .conn
            .prepare_cached(ss::SELECT_SESSION)
            .and_then(|mut s| s.query_row(params![id], ss::map_session).optional())
            .map_err(db)?;
        let Some((mut session, insert_seq, checkpoint_seq)) = found else {
            return Ok(None);
        };
        ss::complete_session(self.conn, &mut session, insert_seq, checkpoint_seq).map_err(db)?;
        Ok(Some((session, checkpoint_seq)))
    }

    fn select_refs_full(&mut self, id: &str) -> Result<Vec<StoredRef>> {
        st::select_refs(self.conn, id).map_err(db)
    }

    fn select_events_full(&mut self, id: &str) -> Result<Vec<StoredEvent>> {
        st::select_events_full(self.conn, id).map_err(db)
    }

    fn select_workflow(&mut self, id: &str) -> Result<WorkflowRows> {
        st::select_workflow(self.conn, id).map_err(db)
    }

    fn find_insert_seq(&mut self, id: &str) -> Result<Option<i64>> {
        st::find_insert_seq(self.conn, id).map_err(db)
    }

    fn max_insert_seq(&mut self) -> Result<i64> {
        st::max_insert_seq(self.conn).map_err(db)
    }

    fn run_exists(&mut self, run_id: &str) -> Result<bool> {
        st::run_exists(self.conn, run_id).map_err(db)
    }

    fn insert_session_rows(&mut self, s: &SessionRows) -> Result<bool> {
        match st::insert_session_rows(self.conn, s) {
            Ok(()) => Ok(true),
            Err(e) if is_constraint(&e) => Ok(false),
            Err(e) => Err(db(e)),
        }
    }

    fn savepoint(&mut self) -> Result<()> {
        st::exec(self.conn, st::SAVEPOINT).map_err(db)
    }

    fn release_savepoint(&mut self) -> Result<()> {
        st::exec(self.conn, st::RELEASE).map_err(db)
    }

    fn rollback_to_savepoint(&mut self) -> Result<()> {
        st::exec(self.conn, st::ROLLBACK_TO).map_err(db)
    }

    fn purge_candidates(
        &mut self,
        f: &PurgeScan,
        after: i64,
        limit: usize,
    ) -> Result<Vec<PurgeCandidate>> {
        rt::candidates(self.conn, f, after, limit).map_err(db)
    }

    fn purge_candidate(&mut self, id: &str) -> Result<Option<PurgeCandidate>> {
        rt::candidate(self.conn, id).map_err(db)
    }

    fn keep_last_cutoffs(
        &mut self,
        f: &PurgeScan,
        n: i64,
    ) -> Result<Vec<(Option<String>, i64, i64)>> {
        rt::keep_last_cutoffs(self.conn, f, n).map_err(db)
    }

    fn live_ancestors(&mut self) -> Result<Vec<String>> {
        rt::live_ancestors(self.conn).map_err(db)
    }

    fn open_purges(&mut self, filter: &str) -> Result<Vec<PurgeProgress>> {
        rt::open_purges(self.conn, filter).map_err(db)
    }

    fn purge_progress(&mut self, purge_id: i64) -> Result<Option<PurgeProgress>> {
        rt::purge_progress(self.conn, purge_id).map_err(db)
    }

    fn insert_purge(&mut self, p: &NewPurge<'_>) -> Result<i64> {
        rt::insert_purge(self.conn, p).map_err(db)
    }

    fn purge_session(&mut self, t: &Tombstone) -> Result<()> {
        rt::purge_session(self.conn, t).map_err(db)
    }

    fn purge_recheck(&mut self, id: &str) -> Result<Option<PurgeRecheck>> {
        rt::recheck(self.conn, id).map_err(db)
    }

    fn insert_purge_end(&mut self, e: &PurgeEnd) -> Result<()> {
        rt::insert_purge_end(self.conn, e).map_err(db)
    }

    fn open_purges_any(&mut self) -> Result<Vec<(i64, String)>> {
        rt::open_purges_any(self.conn).map_err(db)
    }

    fn stray_tombstones(&mut self, limit: i64) -> Result<Vec<String>> {
        rt::stray_tombstones(self.conn, limit).map_err(db)
    }

    fn purge_rows_page(
        &mut self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(PurgeRow, Option<PurgeEndRow>)>> {
        rt::purge_rows_page(self.conn, after, limit).map_err(db)
    }

    fn purge_row(&mut self, purge_id: i64) -> Result<Option<(PurgeRow, Option<PurgeEndRow>)>> {
        rt::purge_row(self.conn, purge_id).map_err(db)
    }

    fn find_purge_like(&mut self, p: &NewPurge<'_>) -> Result<Option<i64>> {
        rt::find_purge_like(self.conn, p).map_err(db)
    }

    fn purge_tombstones(&mut self, purge_id: i64) -> Result<Vec<Tombstone>> {
        rt::purge_tombstones(self.conn, purge_id).map_err(db)
    }

    fn tombstone_at(&mut self, id: &str, insert_seq: i64) -> Result<Option<Tombstone>> {
        rt::tombstone_at(self.conn, id, insert_seq).map_err(db)
    }

    fn declare_writer(&mut self, _actor: &str) -> Result<()> {
        // Every connection logbook opens defines `logbook_writer()`
        // (sqlite/open.rs), which the triggers look for.
        Ok(())
    }

    fn find_tombstone(&mut self, id: &str) -> Result<Option<Tombstone>> {
        rt::find_tombstone(self.conn, id).map_err(db)
    }

    fn tombstones_page(&mut self, after: (&str, i64), limit: usize) -> Result<Vec<Tombstone>> {
        rt::tombstones_page(self.conn, after, limit).map_err(db)
    }

    fn purged_children(&mut self, parents: &[String]) -> Result<Vec<PurgedChildRow>> {
        rt::purged_children(self.conn, &crate::store::rows::ids_json(parents)?).map_err(db)
    }
}
