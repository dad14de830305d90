//! The rows of retention (docs/design.md, "Retention"): what a purge's
//! filter selects, the candidates it reads, its records (`purges`,
//! `purge_ends`, tombstones) and its progress. Plain data, shared by every
//! backend; [`super::rows`] re-exports them.

/// What a purge's filter selects in SQL (the ledger adds `--keep-last` and
/// the live-descendant rule): ended sessions of the chosen statuses, ended
/// before a time, of one app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeScan {
    /// Whether `completed`, `failed`, `cancelled` sessions are chosen.
    pub statuses: [bool; 3],
    /// Only sessions with `ended_at_ms` below this (ms since the epoch;
    /// `i64::MAX` for no bound).
    pub ended_before_ms: i64,
    /// Only this app's sessions.
    pub app: Option<String>,
    /// Only these sessions: a JSON array of ids (`None`: any).
    pub sessions: Option<String>,
}

/// One session a purge may remove, with what its tombstone records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeCandidate {
    /// `ses_…`.
    pub session_id: String,
    /// The session row's insertion key (the incarnation).
    pub insert_seq: i64,
    /// Title.
    pub title: String,
    /// Ended status.
    pub status: String,
    /// App.
    pub app: Option<String>,
    /// Parent session.
    pub parent_session_id: Option<String>,
    /// Created, ms since the epoch.
    pub created_at_ms: i64,
    /// Ended, ms since the epoch.
    pub ended_at_ms: Option<i64>,
    /// Its events.
    pub events: i64,
    /// Its newest event's id.
    pub last_event_id: Option<i64>,
    /// Its newest event's hash (32 bytes).
    pub last_hash: Option<Vec<u8>>,
    /// Bytes of its text values: events' detail and data (plus 64 bytes of
    /// hashes each), its goal, context and metadata, snapshots' state,
    /// runs' input, output and metadata.
    pub bytes: i64,
}

/// A purged session's tombstone (table `tombstones`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    /// What the session was.
    pub session: PurgeCandidate,
    /// The purge that removed it.
    pub purge_id: i64,
    /// When, ms since the epoch.
    pub purged_at_ms: i64,
}

/// A new row of `purges`.
#[derive(Debug, Clone, Copy)]
pub struct NewPurge<'a> {
    /// When it starts, ms since the epoch.
    pub at_ms: i64,
    /// `cli`, `mcp` or `lib`.
    pub actor_type: &'a str,
    /// The actor's id, if any.
    pub actor_id: Option<&'a str>,
    /// The filter as given (a JSON object).
    pub filter: &'a str,
    /// Sessions, events and bytes it chose.
    pub sessions: i64,
    /// Events of those sessions.
    pub events: i64,
    /// Bytes of their text values.
    pub bytes: i64,
}

/// A whole `purges` row (export and import of the audit trail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRow {
    /// Its id in this ledger.
    pub purge_id: i64,
    /// When it started, ms since the epoch.
    pub at_ms: i64,
    /// `cli`, `mcp`, `lib` or `sql`.
    pub actor_type: String,
    /// Who ran it.
    pub actor_id: Option<String>,
    /// The filter (a JSON object's text).
    pub filter: String,
    /// Sessions it chose.
    pub sessions: i64,
    /// Their events.
    pub events: i64,
    /// Their bytes.
    pub bytes: i64,
}

/// A `purge_ends` row as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeEndRow {
    /// When, ms since the epoch.
    pub at_ms: i64,
    /// `done` or `superseded`.
    pub outcome: String,
    /// Sessions it chose and did not purge.
    pub skipped: i64,
}

/// A purge with its progress (view `v_purges`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeProgress {
    /// The purge.
    pub purge_id: i64,
    /// Sessions it chose when it started.
    pub sessions_chosen: i64,
    /// Sessions tombstoned under it so far.
    pub sessions_purged: i64,
    /// Their events.
    pub events_purged: i64,
    /// Their bytes.
    pub bytes_purged: i64,
}

/// Direct children of one parent that one purge removed (a row of
/// [`purged_children`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgedChildRow {
    /// The parent (`tombstones.parent_session_id`).
    pub parent_session_id: String,
    /// The purge that removed them.
    pub purge_id: i64,
    /// How many children (session ids).
    pub sessions: i64,
    /// When the last of them was purged, ms since the epoch.
    pub purged_at_ms: i64,
}

/// A session as a purge finds it inside its write transaction, just
/// before the tombstone: what it is now, whether it has gained a live
/// descendant, and whether a tombstone of this incarnation exists already
/// (one written before V8 by raw SQL without its deletes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRecheck {
    /// The session now.
    pub candidate: PurgeCandidate,
    /// A descendant is pending, active or paused.
    pub live_descendant: bool,
    /// A tombstone of this incarnation exists.
    pub stray_tombstone: bool,
}

/// How a purge ended (table `purge_ends`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeEnd {
    /// The purge.
    pub purge_id: i64,
    /// When, ms since the epoch.
    pub at_ms: i64,
    /// `done` (it ran to its end) or `superseded` (unfinished, and its
    /// filter chooses nothing any more: other purges removed the rest).
    pub outcome: &'static str,
    /// Sessions it chose but did not purge.
    pub skipped: i64,
}
