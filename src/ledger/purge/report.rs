//! What `purge` reports (docs/design.md, "Retention"): the plan of a dry run, a purge's
//! progress, what a run did, and what happened to the space.

use crate::store::rows::PurgeProgress;
use serde::Serialize;

/// One session a purge chooses (or removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PurgedSession {
    /// `ses_…`.
    pub session_id: String,
    /// Title.
    pub title: String,
    /// Ended status.
    pub status: String,
    /// App.
    pub app: Option<String>,
    /// Ended, ms since the epoch.
    pub ended_at_ms: Option<i64>,
    /// Its events.
    pub events: i64,
    /// Bytes of its text values.
    pub bytes: i64,
}

/// What a purge chooses: `purge --dry-run`'s report, and the first part of
/// a real purge's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PurgePlan {
    /// The filter as recorded in `purges.filter` (canonical JSON); in the
    /// JSON output, that object itself:
    /// `{"ended_before_ms":…,"app":…,"statuses":[…],"keep_last":…}`.
    #[serde(serialize_with = "json_object")]
    pub filter: String,
    /// Sessions chosen.
    pub sessions: u64,
    /// Their events.
    pub events: u64,
    /// Bytes of their text values (events' detail and data, goal, context,
    /// metadata, snapshots, runs): an estimate of what the purge frees.
    pub bytes: u64,
    /// Sessions the filter matched but that stay: they have a live
    /// descendant.
    pub kept_live_descendant: u64,
    /// Sessions the filter matched but that stay: the newest `keep_last`
    /// of their app.
    pub kept_newest: u64,
    /// The first [`PURGE_SAMPLE`] sessions chosen, oldest first.
    pub first: Vec<PurgedSession>,
    /// An unfinished purge with this filter that a real run goes on with.
    pub resumes: Option<PurgeProgressInfo>,
    /// Every chosen session's id, in the order the purge takes them
    /// (oldest row first): filled by [`Ledger::purge_plan`] (a dry run);
    /// null in a purge's report, which names the first ones only.
    ///
    /// [`Ledger::purge_plan`]: crate::Ledger::purge_plan
    pub session_ids: Option<Vec<String>>,
}

/// Serializes a string of JSON as that JSON (the canonical filter as an
/// object, not a string holding it).
fn json_object<S: serde::Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
    let raw = serde_json::value::RawValue::from_string(text.to_owned())
        .map_err(serde::ser::Error::custom)?;
    raw.serialize(s)
}

/// A purge's progress (`v_purges`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PurgeProgressInfo {
    /// The purge.
    pub purge_id: i64,
    /// Sessions it chose when it started.
    pub sessions_chosen: i64,
    /// Sessions purged under it so far.
    pub sessions_purged: i64,
    /// Their events.
    pub events_purged: i64,
    /// Their bytes.
    pub bytes_purged: i64,
}

impl From<PurgeProgress> for PurgeProgressInfo {
    fn from(p: PurgeProgress) -> Self {
        PurgeProgressInfo {
            purge_id: p.purge_id,
            sessions_chosen: p.sessions_chosen,
            sessions_purged: p.sessions_purged,
            events_purged: p.events_purged,
            bytes_purged: p.bytes_purged,
        }
    }
}

/// What a purge did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PurgeReport {
    /// The plan it ran.
    pub plan: PurgePlan,
    /// Its id (`purges.purge_id`); null when it chose nothing.
    pub purge_id: Option<i64>,
    /// Whether it went on with an unfinished purge of the same filter.
    pub resumed: bool,
    /// Sessions this run purged.
    pub sessions: u64,
    /// Their events.
    pub events: u64,
    /// Write transactions it ran (batches).
    pub batches: u64,
    /// The longest batch's hold of the write lock, ms: from inside its
    /// transaction (lock taken, BEGIN done) to its COMMIT returning.
    pub longest_batch_ms: f64,
    /// The purge's totals over every run of it.
    pub total: Option<PurgeProgressInfo>,
    /// Sessions it chose but did not purge, by reason (never an error).
    pub skipped: PurgeSkips,
    /// Unfinished purges this run closed as superseded: their filters
    /// choose nothing any more (other purges removed the rest).
    pub superseded: Vec<i64>,
    /// The export written first, if asked.
    pub export: Option<crate::transfer::ExportReport>,
    /// What happened to the space (SQLite); null on a server.
    pub space: Option<SpaceReport>,
}

/// Sessions a purge chose but did not purge, by reason. Each is checked
/// again inside the batch that would remove it, under the write lock (on
/// PostgreSQL with its row held FOR UPDATE).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PurgeSkips {
    /// Gone before its batch: another purge removed it meanwhile (or it
    /// was not there any more when the export read it).
    pub gone: u64,
    /// It gained a live descendant since the plan (a session created or
    /// forked under it).
    pub live_descendant: u64,
    /// A tombstone of this very incarnation exists beside it: written by
    /// raw SQL without its deletes before schema V8; `doctor` reports it
    /// (check `tombstones`).
    pub stray_tombstone: u64,
}

impl PurgeSkips {
    /// All skipped sessions.
    pub fn total(&self) -> u64 {
        self.gone + self.live_descendant + self.stray_tombstone
    }
}

/// Space on SQLite after a purge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpaceReport {
    /// `PRAGMA auto_vacuum`: `none`, `full` or `incremental`.
    pub auto_vacuum: String,
    /// Free pages the purge left in the file, before they were returned.
    pub free_pages_before: i64,
    /// Free pages after: 0 once returned; with `auto_vacuum` none they stay
    /// until a one-time `VACUUM`.
    pub free_pages_after: i64,
    /// Bytes per page.
    pub page_size: i64,
    /// Bytes returned to the file system.
    pub bytes_returned: i64,
    /// The longest space-reclaiming transaction, ms.
    pub longest_vacuum_ms: f64,
    /// Set when the file needs a one-time `VACUUM` to give space back.
    pub vacuum_needed: Option<String>,
}
