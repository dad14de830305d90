//! `impl Tx for PgTx`: each method of the store interface over the
//! statements of [`super::super::sql`].

use super::super::sql::Param;
use super::super::sql::{
    chain as pc, events as pe, feed as pf, list as pl, retention as prt, runs as pr,
    sessions as ps, transfer as pt, workflow as pw,
};
use super::PgTx;
use crate::error::LatestEvent;
use crate::error::Result;
use crate::model::{Event, Run, Session, Usage};
use crate::store::rows::{
    BudgetRow, ChainRow, ChildRow, GateFull, GateRow, KeyHit, LeaseRow, ListQuery, NewEvent,
    NewGate, SessionRows, SessionState, SnapshotRow, StoredEvent, StoredRef, WorkflowRows,
};
use crate::store::rows::{
    NewPurge, PurgeCandidate, PurgeEnd, PurgeEndRow, PurgeProgress, PurgeRecheck, PurgeRow,
    PurgeScan, PurgedChildRow, Tombstone,
};
use crate::store::{
    rows::SnapshotLink, rows::SnapshotRecord, BudgetLimits, FeedPos, FeedScan, FeedStart,
    RunChange, SessionChange, SessionGuard, SessionRow, SessionsPage, Tx,
};
use postgres::types::Type;

impl PgTx<'_> {
    /// Whether a statement keyed by one text value returns a row.
    fn exists(&mut self, sql: &str, key: &str) -> Result<bool> {
        Ok(self.row(sql, &[(&key, Type::TEXT)])?.is_some())
    }

    /// The BIGINT of the first column of a statement keyed by one text
    /// value (or of none), if it returns a row.
    fn int_of(&mut self, sql: &str, key: Option<&str>) -> Result<Option<Option<i64>>> {
        let row = match key {
            Some(k) => self.row(sql, &[(&k, Type::TEXT)])?,
            None => self.row(sql, &[])?,
        };
        row.map(|r| super::super::sql::col(&r, 0)).transpose()
    }

    /// Runs one of the fixed savepoint statements.
    fn savepoint_stmt(&mut self, sql: &str) -> Result<()> {
        self.exec(sql, &[]).map(|_| ())
    }
}

impl Tx for PgTx<'_> {
    fn find_session(&mut self, id: &str) -> Result<Option<Session>> {
        Ok(ps::find_session(self, id)?.map(|(s, _)| s))
    }

    fn session_exists(&mut self, id: &str) -> Result<bool> {
        self.exists(ps::SESSION_EXISTS, id)
    }

    fn show_rows(&mut self, id: &str) -> Result<Option<crate::store::ShowRows>> {
        super::super::sql::show::show_rows(self, id)
    }

    fn lock_session_key(&mut self, id: &str) -> Result<bool> {
        self.exists(ps::SESSION_KEY_SHARE, id)
    }

    fn select_status_rev(&mut self, id: &str) -> Result<Option<(String, i64)>> {
        ps::select_status_rev(self, id)
    }

    fn select_session_state(&mut self, id: &str) -> Result<Option<SessionState>> {
        ps::select_session_state(self, id)
    }

    fn newest_created_at_ms(&mut self) -> Result<Option<i64>> {
        Ok(self.int_of(ps::SELECT_MAX_CREATED, None)?.flatten())
    }

    fn insert_session(&mut self, row: &SessionRow<'_>) -> Result<Option<i64>> {
        ps::insert_session(self, row)
    }

    fn update_session(
        &mut self,
        id: &str,
        guard: SessionGuard<'_>,
        change: &SessionChange<'_>,
    ) -> Result<bool> {
        ps::update_session(self, id, guard, change)
    }

    fn update_context(&mut self, id: &str, context: &str) -> Result<()> {
        self.exec(
            pw::UPDATE_CONTEXT,
            &[(&id, Type::TEXT), (&context, Type::TEXT)],
        )
        .map(|_| ())
    }

    fn count_refs(&mut self, id: &str, kind: &str) -> Result<i64> {
        let r = self.one(ps::COUNT_REFS, &[(&id, Type::TEXT), (&kind, Type::TEXT)])?;
        super::super::sql::col(&r, 0)
    }

    fn ref_exists(&mut self, id: &str, kind: &str, ref_id: &str) -> Result<bool> {
        let p: [Param<'_>; 3] = [
            (&id, Type::TEXT),
            (&kind, Type::TEXT),
            (&ref_id, Type::TEXT),
        ];
        Ok(self.row(ps::REF_EXISTS, &p)?.is_some())
    }

    fn insert_ref(
        &mut self,
        id: &str,
        kind: &str,
        ref_id: &str,
        ordinal: i64,
        linked_seq: i64,
    ) -> Result<()> {
        let p: [Param<'_>; 5] = [
            (&id, Type::TEXT),
            (&kind, Type::TEXT),
            (&ref_id, Type::TEXT),
            (&ordinal, Type::INT8),
            (&linked_seq, Type::INT8),
        ];
        self.exec(ps::INSERT_REF, &p).map(|_| ())
    }

    fn select_children(&mut self, id: &str) -> Result<Vec<ChildRow>> {
        ps::select_children(self, id)
    }

    fn list_sessions(&mut self, q: &ListQuery) -> Result<SessionsPage> {
        pl::select_page(self, q)
    }

    fn insert_event(&mut self, e: &NewEvent<'_>) -> Result<(i64, i64)> {
        pe::insert_event(self, e)
    }

    fn select_events(&mut self, id: &str, after_seq: i64, limit: i64) -> Result<Vec<Event>> {
        pe::select_events(self, id, after_seq, limit)
    }

    fn latest_event(&mut self, id: &str) -> Result<Option<LatestEvent>> {
        pe::latest_event(self, id)
    }

    fn find_key(&mut self, key: &str, id: &str) -> Result<Option<KeyHit>> {
        pe::find_key(self, key, id)
    }

    fn find_created_by_key(&mut self, key: &str) -> Result<Option<(String, String)>> {
        pe::find_created_by_key(self, key)
    }

    fn scan_feed(
        &mut self,
        after: FeedPos,
        limit: usize,
        max_scan: usize,
        keep: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<FeedScan> {
        pf::scan_all(self, after, limit, max_scan, keep)
    }

    fn scan_feed_session(
        &mut self,
        id: &str,
        after: FeedPos,
        limit: usize,
        keep: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<Vec<(FeedPos, Event)>> {
        pf::scan_session(self, id, after, limit, keep)
    }

    fn feed_horizon(&mut self) -> Result<FeedPos> {
        pf::horizon(self)
    }

    fn feed_start(&mut self) -> Result<FeedStart> {
        pf::start(self)
    }

    fn feed_pos_of_event(&mut self, event_id: i64) -> Result<Option<FeedPos>> {
        pf::pos_of_event(self, event_id)
    }

    fn insert_snapshot(
        &mut self,
        id: &str,
        seq: i64,
        step: Option<&str>,
        state: &str,
        payload: Option<&[u8]>,
    ) -> Result<()> {
        pw::insert_snapshot(self, id, seq, step, state, payload)
    }

    fn select_snapshots(&mut self, id: &str) -> Result<Vec<SnapshotRow>> {
        pw::select_snapshots(self, id)
    }

    fn find_snapshot(&mut self, id: &str, seq: Option<i64>) -> Result<Option<SnapshotRow>> {
        pw::find_snapshot(self, id, seq)
    }

    fn snapshot_record(&mut self, id: &str, seq: i64) -> Result<Option<SnapshotRecord>> {
        pw::snapshot_record(self, id, seq)
    }

    fn select_gates(&mut self, id: &str) -> Result<Vec<GateFull>> {
        pw::select_gates(self, id)
    }

    fn find_latest_gate(&mut self, id: &str, name: &str) -> Result<Option<GateRow>> {
        pw::find_latest_gate(self, id, name)
    }

    fn find_pending_gate(&mut self, id: &str) -> Result<Option<GateFull>> {
        pw::find_pending_gate(self, id)
    }

    fn insert_gate(&mut self, g: &NewGate<'_>) -> Result<()> {
        pw::insert_gate(self, g)
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
        pw::decide_gate(self, gate_id, status, seq, at_ms, reason, outcome)
    }

    fn find_lease(&mut self, id: &str) -> Result<Option<LeaseRow>> {
        pw::find_lease(self, id)
    }

    fn upsert_lease(&mut self, id: &str, l: &LeaseRow) -> Result<()> {
        pw::upsert_lease(self, id, l)
    }

    fn delete_lease(&mut self, id: &str) -> Result<()> {
        self.exec(pw::DELETE_LEASE, &[(&id, Type::TEXT)])
            .map(|_| ())
    }

    fn select_budget(&mut self, id: &str) -> Result<Option<BudgetRow>> {
        pw::select_budget(self, id)
    }

    fn upsert_budget(&mut self, id: &str, b: &BudgetLimits, new: bool, at_ms: i64) -> Result<()> {
        pw::upsert_budget(self, id, b, new, at_ms)
    }

    fn mark_budget_exceeded(&mut self, id: &str, at_ms: i64) -> Result<()> {
        self.exec(
            pw::UPDATE_BUDGET_EXCEEDED,
            &[(&id, Type::TEXT), (&at_ms, Type::INT8)],
        )
        .map(|_| ())
    }

    fn reset_budget(&mut self, id: &str, base: &Usage, at_ms: i64) -> Result<()> {
        pw::reset_budget(self, id, base, at_ms)
    }

    fn insert_run(
        &mut self,
        run_id: &str,
        session_id: &str,
        input: Option<&str>,
        metadata: &str,
        at_ms: i64,
    ) -> Result<bool> {
        pr::insert_run(self, run_id, session_id, input, metadata, at_ms)
    }

    fn find_run(&mut self, run_id: &str) -> Result<Option<Run>> {
        Ok(pr::select(self, pr::SELECT_RUN, run_id)?.into_iter().next())
    }

    fn find_running_run(&mut self, session_id: &str) -> Result<Option<Run>> {
        Ok(pr::select(self, pr::SELECT_RUNNING_RUN, session_id)?
            .into_iter()
            .next())
    }

    fn select_runs(&mut self, session_id: &str) -> Result<Vec<Run>> {
        pr::select(self, pr::SELECT_RUNS_OF_SESSION, session_id)
    }

    fn select_open_run_ids(&mut self, session_id: &str) -> Result<Vec<String>> {
        pr::select_open_run_ids(self, session_id)
    }

    fn update_run(&mut self, run_id: &str, change: RunChange<'_>, at_ms: i64) -> Result<usize> {
        pr::update_run(self, run_id, change, at_ms)
    }

    fn walk_chain(
        &mut self,
        session: Option<&str>,
        f: &mut dyn FnMut(ChainRow) -> bool,
    ) -> Result<()> {
        pc::walk(self, session, f)
    }

    fn sessions_page(&mut self, after: &str, limit: usize) -> Result<Vec<(String, i64)>> {
        pc::sessions_page(self, after, limit)
    }

    fn first_orphan_event(&mut self) -> Result<Option<(String, i64)>> {
        pc::first_orphan(self)
    }

    fn snapshot_links(&mut self, id: &str) -> Result<Vec<SnapshotLink>> {
        pc::snapshot_links(self, id)
    }

    fn first_missing_snapshot(&mut self, id: &str) -> Result<Option<i64>> {
        pc::first_missing_snapshot(self, id)
    }

    fn find_session_export(&mut self, id: &str) -> Result<Option<(Session, Option<i64>)>> {
        ps::find_session(self, id)
    }

    fn select_refs_full(&mut self, id: &str) -> Result<Vec<StoredRef>> {
        pt::select_refs(self, id)
    }

    fn select_events_full(&mut self, id: &str) -> Result<Vec<StoredEvent>> {
        pt::select_events_full(self, id)
    }

    fn select_workflow(&mut self, id: &str) -> Result<WorkflowRows> {
        pt::select_workflow(self, id)
    }

    fn find_insert_seq(&mut self, id: &str) -> Result<Option<i64>> {
        Ok(self.int_of(pt::SELECT_INSERT_SEQ, Some(id))?.flatten())
    }

    fn max_insert_seq(&mut self) -> Result<i64> {
        // Only an import batch asks; it needs the sessions table to itself
        // for the rest of its transaction (see LOCK_SESSIONS_FOR_IMPORT).
        self.exec(pt::LOCK_SESSIONS_FOR_IMPORT, &[])?;
        Ok(self
            .int_of(pt::SELECT_MAX_INSERT_SEQ, None)?
            .flatten()
            .unwrap_or(0))
    }

    fn run_exists(&mut self, run_id: &str) -> Result<bool> {
        self.exists(pt::SELECT_RUN_EXISTS, run_id)
    }

    fn insert_session_rows(&mut self, s: &SessionRows) -> Result<bool> {
        match pt::insert_session_rows(self, s) {
            Ok(inserted) => Ok(inserted),
            Err(pt::Stop::Db(e)) => self.refused(&e),
            Err(pt::Stop::Other(e)) => Err(e),
        }
    }

    fn savepoint(&mut self) -> Result<()> {
        self.savepoint_stmt(pt::SAVEPOINT)
    }

    fn release_savepoint(&mut self) -> Result<()> {
        self.savepoint_stmt(pt::RELEASE)
    }

    fn rollback_to_savepoint(&mut self) -> Result<()> {
        self.savepoint_stmt(pt::ROLLBACK_TO)?;
        // The statements after the savepoint, and their error, are undone.
        self.failure = None;
        Ok(())
    }

    fn purge_candidates(
        &mut self,
        f: &PurgeScan,
        after: i64,
        limit: usize,
    ) -> Result<Vec<PurgeCandidate>> {
        prt::candidates(self, f, after, limit)
    }

    fn purge_candidate(&mut self, id: &str) -> Result<Option<PurgeCandidate>> {
        prt::candidate(self, id)
    }

    fn keep_last_cutoffs(
        &mut self,
        f: &PurgeScan,
        n: i64,
    ) -> Result<Vec<(Option<String>, i64, i64)>> {
        prt::keep_last_cutoffs(self, f, n)
    }

    fn live_ancestors(&mut self) -> Result<Vec<String>> {
        prt::live_ancestors(self)
    }

    fn open_purges(&mut self, filter: &str) -> Result<Vec<PurgeProgress>> {
        prt::open_purges(self, filter)
    }

    fn purge_progress(&mut self, purge_id: i64) -> Result<Option<PurgeProgress>> {
        prt::purge_progress(self, purge_id)
    }

    fn insert_purge(&mut self, p: &NewPurge<'_>) -> Result<i64> {
        prt::insert_purge(self, p)
    }

    fn purge_session(&mut self, t: &Tombstone) -> Result<()> {
        prt::purge_session(self, t)
    }

    fn purge_recheck(&mut self, id: &str) -> Result<Option<PurgeRecheck>> {
        prt::recheck(self, id)
    }

    fn insert_purge_end(&mut self, e: &PurgeEnd) -> Result<()> {
        prt::insert_purge_end(self, e)
    }

    fn open_purges_any(&mut self) -> Result<Vec<(i64, String)>> {
        prt::open_purges_any(self)
    }

    fn stray_tombstones(&mut self, limit: i64) -> Result<Vec<String>> {
        prt::stray_tombstones(self, limit)
    }

    fn declare_writer(&mut self, actor: &str) -> Result<()> {
        prt::declare_writer(self, actor)
    }

    fn purge_rows_page(
        &mut self,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(PurgeRow, Option<PurgeEndRow>)>> {
        prt::purge_rows_page(self, after, limit)
    }

    fn purge_row(&mut self, purge_id: i64) -> Result<Option<(PurgeRow, Option<PurgeEndRow>)>> {
        prt::purge_row(self, purge_id)
    }

    fn find_purge_like(&mut self, p: &NewPurge<'_>) -> Result<Option<i64>> {
        prt::find_purge_like(self, p)
    }

    fn purge_tombstones(&mut self, purge_id: i64) -> Result<Vec<Tombstone>> {
        prt::purge_tombstones(self, purge_id)
    }

    fn tombstone_at(&mut self, id: &str, insert_seq: i64) -> Result<Option<Tombstone>> {
        prt::tombstone_at(self, id, insert_seq)
    }

    fn find_tombstone(&mut self, id: &str) -> Result<Option<Tombstone>> {
        prt::find_tombstone(self, id)
    }

    fn tombstones_page(&mut self, after: (&str, i64), limit: usize) -> Result<Vec<Tombstone>> {
        prt::tombstones_page(self, after, limit)
    }

    fn purged_children(&mut self, parents: &[String]) -> Result<Vec<PurgedChildRow>> {
        prt::purged_children(self, &crate::store::rows::ids_json(parents)?)
    }
}
