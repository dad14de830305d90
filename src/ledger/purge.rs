//! `purge`: removing whole ended sessions, recorded and bounded
//! (docs/design.md, "Retention").
//!
//! A purge runs in three steps. The plan reads the sessions the filter
//! chooses (ended, of the statuses given, ended before a time, of one app,
//! beyond the newest `keep_last` per app, never one with a live
//! descendant) page by page in read snapshots, so memory stays flat in the
//! number of sessions. With `export`, the chosen sessions are written to
//! the file (flushed and synced) before anything is deleted. Then each
//! batch is one short write transaction: it re-reads the next page of
//! candidates under the write lock, writes each session's tombstone and
//! deletes its rows (the store's triggers check both), until
//! [`PURGE_BATCH_EVENTS`] events or [`PURGE_BATCH_SESSIONS`] sessions.
//!
//! Resuming: a purge killed midway left its `purges` row and the
//! tombstones of its committed batches. Running the same filter again
//! adopts that purge (the newest unfinished one with exactly this filter)
//! and goes on: the sessions already purged are gone, so nothing is
//! counted twice, and the result is the uninterrupted one's.

use super::Ledger;
use crate::error::{Error, Result};
use crate::store::rows::{NewPurge, PurgeCandidate, PurgeEnd, PurgeScan, Tombstone};

mod filter;
mod report;
mod rules;
pub use filter::{PurgeFilter, PurgeRequest};
pub use report::{
    PurgePlan, PurgeProgressInfo, PurgeReport, PurgeSkips, PurgedSession, SpaceReport,
};
use rules::{Rules, Verdict};
use std::collections::HashSet;
use std::time::Instant;

/// Sessions one batch deletes at most: 50.
pub const PURGE_BATCH_SESSIONS: usize = 50;

/// Events after which a batch commits: 1,000 (with their sessions' other
/// rows, a thousand or two row deletes, each checked by a trigger).
pub const PURGE_BATCH_EVENTS: i64 = 1_000;

/// After each batch the purge waits half as long as the batch held the
/// write lock (at least 1 ms) before it asks for the lock again, so the
/// writers that queued behind the batch get it first: without the pause
/// the purge takes the lock back before a waiting process is even
/// scheduled, and a writer can wait out several batches
/// (BENCHMARKS.md, "Retention"). A purge so keeps at most two thirds of
/// the write lock's time.
pub fn purge_pause(batch: std::time::Duration) -> std::time::Duration {
    (batch / 2).max(std::time::Duration::from_millis(1))
}

/// Sessions a dry run (and the report) lists by name: the first 10.
pub const PURGE_SAMPLE: usize = 10;

/// Free pages one space-reclaiming transaction returns to the file
/// system: 1,000 (4 MB at 4 KiB pages), with [`purge_pause`] between
/// two.
pub const VACUUM_STEP_PAGES: u32 = 1_000;

/// Candidates read per page while planning.
const PLAN_PAGE: usize = 1_000;

/// What every batch of one purge shares.
struct Batches<'a> {
    scan: &'a PurgeScan,
    /// The purge's record: `Some` once written (or adopted); a new purge
    /// writes it in its first batch's transaction, so a purge that cannot
    /// delete (a role without the privilege) leaves no record.
    purge_id: Option<i64>,
    /// The record a new purge writes.
    record: NewPurge<'a>,
    export_set: Option<&'a HashSet<String>>,
}

fn summary(c: &PurgeCandidate) -> PurgedSession {
    PurgedSession {
        session_id: c.session_id.clone(),
        title: c.title.clone(),
        status: c.status.clone(),
        app: c.app.clone(),
        ended_at_ms: c.ended_at_ms,
        events: c.events,
        bytes: c.bytes,
    }
}

/// Who runs a purge, as `purges.actor_id` records it: `user@host` (the
/// OS user's name, else `uid N`).
fn who_runs_it() -> String {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |u| u.name);
    format!("{user}@{}", super::leases::hostname())
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl Ledger {
    /// What a purge with `filter` would remove, changing nothing (`purge
    /// --dry-run`; docs/design.md, "Retention"). The plan's `session_ids` holds every chosen
    /// session's id, so its memory grows with them: about 60 bytes a
    /// session (60 MB for a million).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (no filter, a live status, a bad app name); the
    /// store's.
    pub fn purge_plan(&self, filter: &PurgeFilter) -> Result<PurgePlan> {
        let mut ids = Vec::new();
        let (mut plan, _) = self.plan(filter, Some(&mut ids))?;
        plan.session_ids = Some(ids);
        Ok(plan)
    }

    /// `purge --dry-run`: [`PurgeRequest::check`] as a dry run, then
    /// [`Ledger::purge_plan`] of its filter. Changes nothing and writes no
    /// file.
    ///
    /// # Errors
    /// As [`PurgeRequest::check`] (an `export` is refused: INVALID_ARGUMENT
    /// naming `export`) and [`Ledger::purge_plan`].
    pub fn purge_dry_run(&self, req: &PurgeRequest) -> Result<PurgePlan> {
        req.check(true)?;
        self.purge_plan(&req.filter)
    }

    /// The plan, and (with `ids`) the ids of the sessions chosen.
    fn plan(
        &self,
        filter: &PurgeFilter,
        mut ids: Option<&mut Vec<String>>,
    ) -> Result<(PurgePlan, Rules)> {
        let scan = filter.scan()?;
        let canonical = filter.canonical()?;
        let mut plan = PurgePlan {
            filter: canonical.clone(),
            sessions: 0,
            events: 0,
            bytes: 0,
            kept_live_descendant: 0,
            kept_newest: 0,
            first: Vec::new(),
            resumes: None,
            session_ids: None,
        };
        let rules = self.read(|tx| Rules::read(tx, &scan, filter.keep_last))?;
        plan.resumes = self
            .read(|tx| tx.open_purges(&canonical))?
            .into_iter()
            .next()
            .map(PurgeProgressInfo::from);
        let mut after = 0i64;
        loop {
            let page = self.read(|tx| tx.purge_candidates(&scan, after, PLAN_PAGE))?;
            let Some(last) = page.last() else { break };
            after = last.insert_seq;
            for c in &page {
                match rules.verdict(c) {
                    Verdict::KeptLive => plan.kept_live_descendant += 1,
                    Verdict::KeptNewest => plan.kept_newest += 1,
                    Verdict::Purge => {
                        plan.sessions += 1;
                        plan.events += count(c.events);
                        plan.bytes += count(c.bytes);
                        if plan.first.len() < PURGE_SAMPLE {
                            plan.first.push(summary(c));
                        }
                        if let Some(ids) = ids.as_deref_mut() {
                            ids.push(c.session_id.clone());
                        }
                    }
                }
            }
            if page.len() < PLAN_PAGE {
                break;
            }
        }
        Ok((plan, rules))
    }

    /// Purges the sessions `req.filter` chooses (docs/design.md, "Retention"): the export first
    /// when asked, then batches of short write transactions, each writing
    /// tombstones and deleting their sessions' rows; then, on SQLite, the
    /// freed pages go back to the file system when the file allows it.
    /// `progress(done, total)` is called after each batch.
    ///
    /// Stops between two batches once
    /// [`LedgerOptions::interrupt`](crate::LedgerOptions::interrupt) is
    /// triggered; running the same filter again finishes the purge.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (the filter; `export` exists already or names the
    /// database); STORE_IO (the export cannot be written: nothing is
    /// purged); STORE_BUSY; an [`Error::Incomplete`] (INTERRUPTED or the
    /// store's error) once some batches committed, with the counts so far.
    pub fn purge(
        &self,
        req: &PurgeRequest,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<PurgeReport> {
        let mut chosen_ids = Vec::new();
        let want_ids = req.export.is_some();
        let (plan, mut rules) = self.plan(&req.filter, want_ids.then_some(&mut chosen_ids))?;
        let mut report = PurgeReport {
            plan: plan.clone(),
            purge_id: None,
            resumed: false,
            sessions: 0,
            events: 0,
            batches: 0,
            longest_batch_ms: 0.0,
            total: None,
            skipped: PurgeSkips::default(),
            superseded: Vec::new(),
            export: None,
            space: None,
        };
        let export_set: Option<HashSet<String>> = match &req.export {
            Some(path) => {
                if path.exists() {
                    return Err(Error::invalid(
                        "export",
                        format!(
                            "{} exists; purge --export never overwrites a file (a rerun after an interruption takes a new name: the first file holds every session the first run chose)",
                            path.display()
                        ),
                    ));
                }
                if plan.sessions > 0 {
                    // A session another purge removed since the plan is
                    // not in the file, and so not purged by this one.
                    let (written, exported) = self.export_present_jsonl_file(&chosen_ids, path)?;
                    report.skipped.gone += plan.sessions.saturating_sub(written.sessions);
                    report.export = Some(written);
                    Some(exported)
                } else {
                    Some(HashSet::new())
                }
            }
            None => None,
        };
        if plan.sessions == 0 && plan.resumes.is_none() {
            report.superseded = self.close_superseded()?;
            return Ok(report);
        }
        let scan = req.filter.scan()?;
        let now = self.now_ms();
        let actor = self.opts.actor.as_str();
        let actor_id = who_runs_it();
        if let Some(open) = &plan.resumes {
            report.resumed = true;
            report.purge_id = Some(open.purge_id);
        }
        let space_before = self.store.sqlite().map(|s| s.free_space()).transpose()?;
        let mut batches = Batches {
            scan: &scan,
            purge_id: report.purge_id,
            record: NewPurge {
                at_ms: now,
                actor_type: actor,
                actor_id: Some(&actor_id),
                filter: &plan.filter,
                sessions: i64::try_from(plan.sessions).unwrap_or(i64::MAX),
                events: i64::try_from(plan.events).unwrap_or(i64::MAX),
                bytes: i64::try_from(plan.bytes).unwrap_or(i64::MAX),
            },
            export_set: export_set.as_ref(),
        };
        if let Err(e) = self.run_batches(&mut batches, &mut rules, &mut report, progress) {
            return Err(self.purge_stopped(e, &report));
        }
        let Some(purge_id) = batches.purge_id else {
            return Err(Error::internal("a purge ran without its record"));
        };
        report.purge_id = Some(purge_id);
        // What it chose and neither purged nor skipped for another reason
        // was taken by another purge meanwhile.
        report.skipped.gone = report
            .plan
            .sessions
            .saturating_sub(report.sessions)
            .saturating_sub(report.skipped.live_descendant)
            .saturating_sub(report.skipped.stray_tombstone);
        // It ran to its end: done, whatever another purge took meanwhile.
        let total = self.read(|tx| tx.purge_progress(purge_id))?;
        let skipped = total
            .as_ref()
            .map_or(0, |t| (t.sessions_chosen - t.sessions_purged).max(0));
        let ended_at = self.now_ms();
        self.write(|tx| {
            tx.insert_purge_end(&PurgeEnd {
                purge_id,
                at_ms: ended_at,
                outcome: "done",
                skipped,
            })
        })?;
        report.total = total.map(PurgeProgressInfo::from);
        report.superseded = self.close_superseded()?;
        if let Some((mode, _, _)) = space_before {
            report.space = Some(self.reclaim(mode)?);
        }
        Ok(report)
    }

    /// Closes every unfinished purge whose filter chooses nothing any more
    /// (other purges removed the rest) as `superseded`; their ids.
    fn close_superseded(&self) -> Result<Vec<i64>> {
        let open = self.read(|tx| tx.open_purges_any())?;
        let mut closed = Vec::new();
        for (purge_id, filter) in open {
            let Some(f) = PurgeFilter::from_canonical(&filter) else {
                continue;
            };
            let (plan, _) = self.plan(&f, None)?;
            if plan.sessions > 0 {
                continue;
            }
            let now = self.now_ms();
            let ended = self.write(|tx| {
                let Some(p) = tx.purge_progress(purge_id)? else {
                    return Ok(false);
                };
                if p.sessions_purged >= p.sessions_chosen {
                    return Ok(false);
                }
                tx.insert_purge_end(&PurgeEnd {
                    purge_id,
                    at_ms: now,
                    outcome: "superseded",
                    skipped: (p.sessions_chosen - p.sessions_purged).max(0),
                })?;
                Ok(true)
            })?;
            if ended {
                closed.push(purge_id);
            }
        }
        Ok(closed)
    }

    /// The batches: each one write transaction.
    fn run_batches(
        &self,
        b: &mut Batches<'_>,
        rules: &mut Rules,
        report: &mut PurgeReport,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        let total = report.plan.sessions;
        let actor = self.opts.actor.as_str();
        let mut after = 0i64;
        loop {
            self.opts.interrupt.check()?;
            let now = self.now_ms();
            // The hold: from inside the transaction (the write lock taken,
            // BEGIN done) to COMMIT returning; the wait for the lock is not
            // part of it.
            let mut locked_at = Instant::now();
            let mut skips = PurgeSkips::default();
            let (purge_id, sessions, events, next, more) = self.store.write_purge(|tx| {
                locked_at = Instant::now();
                skips = PurgeSkips::default();
                tx.declare_writer(actor)?;
                let purge_id = match b.purge_id {
                    Some(id) => id,
                    None => tx.insert_purge(&b.record)?,
                };
                rules.refresh_live(tx)?;
                let page = tx.purge_candidates(b.scan, after, PURGE_BATCH_SESSIONS)?;
                let more = page.len() == PURGE_BATCH_SESSIONS;
                let (mut sessions, mut events, mut next) = (0u64, 0i64, after);
                for c in page {
                    next = c.insert_seq;
                    if !matches!(rules.verdict(&c), Verdict::Purge)
                        || b.export_set.is_some_and(|s| !s.contains(&c.session_id))
                    {
                        continue;
                    }
                    // Again, with the session held: a purge racing this one
                    // or a create under it is seen here, never an error.
                    let now_is = match tx.purge_recheck(&c.session_id)? {
                        Some(r) if r.candidate.insert_seq == c.insert_seq => r,
                        _ => {
                            skips.gone += 1;
                            continue;
                        }
                    };
                    if now_is.live_descendant {
                        skips.live_descendant += 1;
                        continue;
                    }
                    if now_is.stray_tombstone {
                        skips.stray_tombstone += 1;
                        continue;
                    }
                    events += now_is.candidate.events;
                    sessions += 1;
                    tx.purge_session(&Tombstone {
                        session: now_is.candidate,
                        purge_id,
                        purged_at_ms: now,
                    })?;
                    if events >= PURGE_BATCH_EVENTS {
                        return Ok((purge_id, sessions, events, next, true));
                    }
                }
                Ok((purge_id, sessions, events, next, more))
            })?;
            b.purge_id = Some(purge_id);
            report.purge_id = Some(purge_id);
            let held = locked_at.elapsed();
            let ms = held.as_secs_f64() * 1000.0;
            report.batches += 1;
            report.longest_batch_ms = report.longest_batch_ms.max(ms);
            report.sessions += sessions;
            report.events += count(events);
            report.skipped.gone += skips.gone;
            report.skipped.live_descendant += skips.live_descendant;
            report.skipped.stray_tombstone += skips.stray_tombstone;
            after = next;
            progress(report.sessions, total);
            if !more {
                return Ok(());
            }
            std::thread::sleep(purge_pause(held));
        }
    }

    /// A purge error after its record was written: INTERRUPTED or the
    /// store's, with the counts so far once a batch committed.
    fn purge_stopped(&self, e: Error, report: &PurgeReport) -> Error {
        let e = match e {
            Error::StoreIo { context } if context.contains("lacks a privilege") => Error::StoreIo {
                context: format!(
                    "{context}; a purge needs a role that may DELETE from the ledger tables, UPDATE sessions and INSERT into purges, purge_ends and tombstones: the owner, or a retention role (docs/postgres.md, \"Roles\"); nothing was purged by this batch and no purge was recorded unless one committed"
                ),
            },
            e => e,
        };
        if report.sessions == 0 {
            return e;
        }
        Error::Incomplete {
            cause: Box::new(self.opts.interrupt.or(e)),
            progress: format!(
                "{} session(s) with {} event(s) were purged before it stopped; run the same command again to finish purge {}",
                report.sessions,
                report.events,
                report.purge_id.unwrap_or_default()
            ),
            report: Box::new(serde_json::to_value(report).unwrap_or_default()),
        }
    }

    /// Returns a SQLite file's free pages to the file system in steps of
    /// [`VACUUM_STEP_PAGES`], each its own write transaction (incremental
    /// vacuum); says when the file needs a one-time `VACUUM` instead.
    fn reclaim(&self, _mode_before: i64) -> Result<SpaceReport> {
        let Some(s) = self.store.sqlite() else {
            return Err(Error::internal("reclaim on a server"));
        };
        let (mode, free_before, page_size) = s.free_space()?;
        let mut report = SpaceReport {
            auto_vacuum: match mode {
                1 => "full",
                2 => "incremental",
                _ => "none",
            }
            .into(),
            free_pages_before: free_before,
            free_pages_after: free_before,
            page_size,
            bytes_returned: 0,
            longest_vacuum_ms: 0.0,
            vacuum_needed: None,
        };
        if mode != 2 {
            if free_before > 0 && mode == 0 {
                report.vacuum_needed = Some(format!(
                    "this file was created before logbook set auto_vacuum=INCREMENTAL: its {free_before} free page(s) are reused by later writes but stay in the file; to give them back once, stop every writer and run: sqlite3 {} 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM;'",
                    s.path().display()
                ));
            }
            return Ok(report);
        }
        let mut free = free_before;
        while free > 0 {
            self.opts.interrupt.check()?;
            let (left, held) = s.incremental_vacuum(VACUUM_STEP_PAGES)?;
            report.longest_vacuum_ms = report.longest_vacuum_ms.max(held.as_secs_f64() * 1000.0);
            if left >= free {
                break;
            }
            free = left;
            if free > 0 {
                std::thread::sleep(purge_pause(held));
            }
        }
        report.free_pages_after = free;
        report.bytes_returned = (free_before - free) * page_size;
        Ok(report)
    }
}
