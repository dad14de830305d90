//! The rows the store interface passes: plain data, no driver types.
//!
//! What the ledger hands to [`super::Tx`] and gets back from it, shared by
//! every backend. Model types (`Session`, `Run`, `Event`, …) live in
//! `crate::model`; these are the shapes of table rows and of the writes
//! that fill them.

use crate::chain::{self, EventFields};
use crate::model::{ActorType, OnExceed, Usage};

/// A session's state as [`SELECT_SESSION_STATE`] reads it.
#[derive(Debug, Clone)]
pub struct SessionState {
    /// Status name as stored.
    pub status: String,
    /// Current rev.
    pub rev: i64,
    /// Latest mutation time, ms.
    pub updated_at_ms: i64,
    /// Usage sums.
    pub usage: Usage,
    /// The session's lease, if it has one (live or not).
    pub lease: Option<LeaseRow>,
}

/// A budget row.
#[derive(Debug, Clone, Default)]
pub struct BudgetRow {
    /// Token limit (input + output).
    pub max_tokens: Option<i64>,
    /// API-call limit.
    pub max_api_calls: Option<i64>,
    /// Duration limit, ms.
    pub max_duration_ms: Option<i64>,
    /// The policy (`None` only for a row that breaks the CHECK).
    pub on_exceed: Option<OnExceed>,
    /// Tokens at the last reset.
    pub base_tokens: i64,
    /// API calls at the last reset.
    pub base_api_calls: i64,
    /// Duration at the last reset, ms.
    pub base_duration_ms: i64,
    /// When the crossing write committed, if the budget is marked exceeded.
    pub exceeded_at_ms: Option<i64>,
}

/// A new event row.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    /// The session.
    pub session_id: &'a str,
    /// Type name.
    pub event_type: &'a str,
    /// Writer.
    pub actor_type: ActorType,
    /// Redacted short text.
    pub detail: Option<&'a str>,
    /// Redacted compact JSON object.
    pub data: Option<&'a str>,
    /// Idempotency key and request digest.
    pub idempotency: Option<(&'a str, &'a str)>,
    /// The run the event belongs to (`run_*` events), else `None`; hashed
    /// into the chain.
    pub run_id: Option<&'a str>,
}

impl NewEvent<'_> {
    /// The event's chain hash at `seq` and `at_ms` after `prev` (docs/design.md, "Hash chain";
    /// [`chain::event_hash`]): what both backends store.
    pub fn hash(&self, prev: &[u8; 32], seq: i64, at_ms: i64) -> [u8; 32] {
        chain::event_hash(
            prev,
            &EventFields {
                session_id: self.session_id.as_bytes(),
                seq,
                event_type: self.event_type.as_bytes(),
                at_ms,
                actor_type: self.actor_type.as_str().as_bytes(),
                detail: self.detail.map(str::as_bytes),
                data: self.data.map(str::as_bytes),
                run_id: self.run_id.map(str::as_bytes),
            },
        )
    }
}

/// A used idempotency key: what its first attempt stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHit {
    /// SHA-256 (hex) of the request that came with the key.
    pub digest: String,
    /// The seq of the event the first attempt wrote.
    pub seq: i64,
    /// The session's rev after the first attempt; `None` for keys recorded
    /// before schema V6.
    pub rev: Option<i64>,
    /// The run of that event (run verbs), else `None`.
    pub run_id: Option<String>,
}

/// Sort order of a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Newest created first (immutable key; cursor walks are exact).
    #[default]
    Created,
    /// Most recently updated first.
    Updated,
}

/// A listing query, already validated.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Statuses (any of).
    pub statuses: Vec<String>,
    /// App name.
    pub app: Option<String>,
    /// Agent id.
    pub agent_id: Option<String>,
    /// Tag.
    pub tag: Option<String>,
    /// Parent session id.
    pub parent: Option<String>,
    /// Lower bound (inclusive) on the order's timestamp, ms.
    pub since_ms: Option<i64>,
    /// Upper bound (exclusive) on the order's timestamp, ms.
    pub until_ms: Option<i64>,
    /// Order.
    pub order: Order,
    /// Page size.
    pub limit: i64,
    /// Resume after this `(timestamp ms, insert_seq)` key.
    pub after: Option<(i64, i64)>,
}

/// A snapshot's listing fields.
#[derive(Debug, Clone)]
pub struct SnapshotRow {
    /// Seq of its checkpoint event.
    pub seq: i64,
    /// The checkpoint's step.
    pub step: Option<String>,
    /// The session's stage when it was taken.
    pub stage: Option<String>,
    /// Bytes of the stored state.
    pub size_bytes: i64,
    /// When, ms since the epoch.
    pub at_ms: i64,
    /// The state JSON text (empty in listings).
    pub state: String,
    /// Bytes of the binary payload (schema V11), `None` without one.
    pub payload_bytes: Option<i64>,
    /// The payload itself (`None` in listings and without one).
    pub payload: Option<Vec<u8>>,
}

/// A gate with every column but its row id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateFull {
    /// Name.
    pub name: String,
    /// Round of the name, from 1.
    pub round: i64,
    /// `auto`, `user-approval` or `step-confirm`.
    pub kind: String,
    /// `pending`, `approved` or `rejected`.
    pub status: String,
    /// Seq of the opening event.
    pub opened_seq: i64,
    /// ms since the Unix epoch.
    pub opened_at_ms: i64,
    /// Seq of the deciding event.
    pub decided_seq: Option<i64>,
    /// ms since the Unix epoch.
    pub decided_at_ms: Option<i64>,
    /// Note or reason.
    pub reason: Option<String>,
    /// `failed` or `cancelled` for a rejection.
    pub outcome: Option<String>,
}

/// A stored gate: its row id and its columns.
#[derive(Debug, Clone)]
pub struct GateRow {
    /// Row id.
    pub gate_id: i64,
    /// Every other column.
    pub gate: GateFull,
}

/// A new gate row.
#[derive(Debug, Clone)]
pub struct NewGate<'a> {
    /// Session.
    pub session_id: &'a str,
    /// Name.
    pub name: &'a str,
    /// Round.
    pub round: i64,
    /// Kind.
    pub kind: &'a str,
    /// Opening event seq.
    pub seq: i64,
    /// Opening time, ms.
    pub at_ms: i64,
    /// Inserted already approved (`auto`).
    pub approved: bool,
}

/// A lease row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// SHA-256 (hex) of the token.
    pub token_sha256: String,
    /// Owner pid.
    pub pid: i64,
    /// Owner host.
    pub hostname: String,
    /// ms since the epoch.
    pub acquired_at_ms: i64,
    /// ms since the epoch.
    pub expires_at_ms: i64,
    /// Seq of the acquiring event.
    pub acquired_seq: i64,
}

/// A child row.
#[derive(Debug, Clone)]
pub struct ChildRow {
    /// The child's id.
    pub session_id: String,
    /// Its status.
    pub status: String,
    /// Its title.
    pub title: String,
    /// ms since the epoch.
    pub created_at_ms: i64,
    /// Insertion key.
    pub insert_seq: i64,
}

/// One event as the chain sees it: raw stored bytes.
#[derive(Debug, Clone)]
pub struct ChainRow {
    /// `events.event_id`.
    pub event_id: i64,
    /// `events.session_id`, raw bytes.
    pub session_id: Vec<u8>,
    /// `events.seq`.
    pub seq: i64,
    /// `events.type`, raw bytes.
    pub event_type: Vec<u8>,
    /// `events.at_ms`.
    pub at_ms: i64,
    /// `events.actor_type`, raw bytes.
    pub actor_type: Vec<u8>,
    /// `events.detail`, raw bytes.
    pub detail: Option<Vec<u8>>,
    /// `events.data`, raw bytes.
    pub data: Option<Vec<u8>>,
    /// `events.run_id`, raw bytes.
    pub run_id: Option<Vec<u8>>,
    /// `events.prev_hash` as stored (NULL before V2's backfill).
    pub prev_hash: Option<Vec<u8>>,
    /// `events.hash` as stored.
    pub hash: Option<Vec<u8>>,
}

impl ChainRow {
    /// The hash this row should carry after a predecessor hashed `prev`.
    pub fn expected_hash(&self, prev: &[u8; 32]) -> [u8; 32] {
        chain::event_hash(
            prev,
            &EventFields {
                session_id: &self.session_id,
                seq: self.seq,
                event_type: &self.event_type,
                at_ms: self.at_ms,
                actor_type: &self.actor_type,
                detail: self.detail.as_deref(),
                data: self.data.as_deref(),
                run_id: self.run_id.as_deref(),
            },
        )
    }
}

pub use super::purge_rows::*;
pub use super::transfer_rows::*;

/// A list of ids as the JSON array parameter of [`PURGED_CHILDREN`] (and
/// of PostgreSQL's twin).
pub(crate) fn ids_json(ids: &[String]) -> crate::error::Result<String> {
    serde_json::to_string(ids)
        .map_err(|e| crate::error::Error::internal(format!("cannot encode ids: {e}")))
}

/// The result of a query: column names and rows of JSON values (NULL →
/// null, integers and reals → numbers, text → strings, blobs → lowercase
/// hex strings).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueryResult {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Each row, one value per column.
    pub rows: Vec<Vec<serde_json::Value>>,
}

/// Most rows a query may return: the result is held in memory to print it.
pub const QUERY_MAX_ROWS: usize = 100_000;

/// How long a query may run before it is interrupted, by default, ms.
pub const QUERY_TIMEOUT_MS: u64 = 30_000;

/// What a checkpoint event's data records of its snapshot
/// (`data.snapshot`: docs/design.md, "Snapshots"): each field `None` when
/// absent or of another type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// `sha256`: SHA-256 (hex) of the state's bytes.
    pub sha256: Option<String>,
    /// `size_bytes`: bytes of the state.
    pub size_bytes: Option<i64>,
    /// `payload_sha256`: SHA-256 (hex) of the payload (schema V11).
    pub payload_sha256: Option<String>,
    /// `payload_bytes`: bytes of the payload (schema V11).
    pub payload_bytes: Option<i64>,
}

impl SnapshotRecord {
    /// Checks a stored snapshot against this record: the state's SHA-256
    /// and size, and the payload's (none recorded: none stored). Returns
    /// `(expected, found)` for the first part that differs.
    pub fn check(&self, state: &[u8], payload: Option<&[u8]>) -> Option<(String, String)> {
        use sha2::{Digest, Sha256};
        let digest = |b: &[u8]| hex::encode(Sha256::digest(b));
        let len = |b: &[u8]| i64::try_from(b.len()).unwrap_or(i64::MAX);
        let have = digest(state);
        let want = self
            .sha256
            .clone()
            .unwrap_or_else(|| "no snapshot recorded at this seq".into());
        if want != have || self.size_bytes != Some(len(state)) {
            return Some((want, have));
        }
        match (payload, &self.payload_sha256) {
            (None, None) if self.payload_bytes.is_none() => None,
            (Some(p), Some(want)) if *want == digest(p) && self.payload_bytes == Some(len(p)) => {
                None
            }
            (p, want) => Some((
                want.as_ref()
                    .map_or_else(|| "no payload".into(), |w| format!("payload {w}")),
                p.map_or_else(|| "no payload".into(), |p| format!("payload {}", digest(p))),
            )),
        }
    }
}

/// One snapshot beside its checkpoint event's record.
#[derive(Debug, Clone)]
pub struct SnapshotLink {
    /// Seq of the checkpoint event.
    pub seq: i64,
    /// The state's bytes as stored.
    pub state: Vec<u8>,
    /// The payload as stored, if any.
    pub payload: Option<Vec<u8>>,
    /// What the event at `seq` records (all `None` without such an event).
    pub record: SnapshotRecord,
}
