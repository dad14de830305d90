//! A new session as one statement (docs/postgres.md, "One round trip per
//! write"): its data, tags and `created` event, and its first checkpoint.

use super::super::Param;
use crate::store::codec::key_sha256;
use crate::store::{OneCheckpoint, SessionRow};
use postgres::types::Type;

/// The part of [`CREATE`] and [`CREATE_FIRST`] that inserts the session
/// (`$rev`, `$checkpoint_seq` as given), its data and its tags. Its
/// creation time is the write's, but never below the newest session's (as
/// the pipeline's create). A taken id inserts nothing; with a key ($18), a
/// key some create already used inserts nothing (`logbook_create_key_free`,
/// schema V12, takes the key's lock first, as the pipeline's create does,
/// and looks it up with a snapshot taken after the lock). A parent ($17)
/// is checked and held by the insert's trigger (`sessions_parent_exists`):
/// a missing or purged parent fails the statement.
macro_rules! create_session_rows {
    ($rev:literal, $checkpoint_seq:literal) => {
        concat!(
            "WITH s AS (INSERT INTO sessions (session_id, status, title, app, agent_id, route, \
             stage, parent_session_id, tags, actor_type, actor_id, actor_authenticated, rev, \
             checkpoint_seq, final_result, end_reason, input_tokens, output_tokens, api_calls, \
             duration_ms, created_at_ms, updated_at_ms, ended_at_ms) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $17, $8, $9, NULL, 0, ",
            $rev,
            ", ",
            $checkpoint_seq,
            ", NULL, NULL, 0, 0, 0, 0, \
             t.at, t.at, NULL FROM (SELECT GREATEST($10::bigint, \
             (SELECT max(created_at_ms) FROM sessions)) AS at) t \
             WHERE (SELECT set_config('lock_timeout', $16, true)) IS NOT NULL \
             AND NOT EXISTS (SELECT 1 FROM sessions WHERE session_id = $1) \
             AND CASE WHEN $18::text IS NULL THEN true \
               ELSE logbook_create_key_free($18::text, $16::text) END \
             ON CONFLICT (session_id) DO NOTHING RETURNING *), \
             d AS (INSERT INTO session_data (insert_seq, session_id, goal, context, metadata) \
             SELECT s.insert_seq, s.session_id, $11, $12, $13 FROM s RETURNING *), \
             t AS (INSERT INTO session_tags (tag, created_at_ms, insert_seq, session_id) \
             SELECT u.tag, s.created_at_ms, s.insert_seq, s.session_id \
             FROM s, unnest($14::text[]) WITH ORDINALITY AS u(tag, n) ORDER BY u.n), \
             h AS (SELECT s.session_id, s.created_at_ms AS at, logbook_event_hash(",
            "decode(repeat('00', 32), 'hex')",
            ", s.session_id, 0::bigint, 'created'::text, s.created_at_ms, $9, $15, NULL::text, \
             NULL::text) AS h0 FROM s), "
        )
    };
}

/// The `created` event's columns from `h` (seq 0, the genesis link).
macro_rules! created_event {
    () => {
        concat!(
            "SELECT h.session_id, 0::bigint AS seq, 'created' AS type, h.at, $9, $15, \
             NULL::text AS data, NULL::text AS run_id, ",
            "decode(repeat('00', 32), 'hex')",
            ", h.h0 FROM h"
        )
    };
}

/// The session's columns (those of `sessions::session_select`, in its
/// order) from `s` and `d`, up to its checkpoint's.
macro_rules! created_session_select {
    () => {
        "SELECT s.session_id, s.status, s.title, s.app, s.agent_id, s.route, s.stage, \
         s.parent_session_id, s.tags, s.actor_type, s.actor_id, s.actor_authenticated, s.rev, \
         s.checkpoint_seq, s.final_result, s.end_reason, s.input_tokens, s.output_tokens, \
         s.api_calls, s.duration_ms, s.created_at_ms, s.updated_at_ms, s.ended_at_ms, \
         s.insert_seq, d.insert_seq IS NOT NULL, d.goal, d.context, d.metadata, "
    };
}

/// A create's idempotency key (`$18`, its SHA-256 hex; NULL: none) with
/// `$19`, the request's digest, on the `created` event (`ev`'s row of seq
/// 0) and rev 1, as the pipeline's create records it.
macro_rules! created_key {
    () => {
        ", k AS (INSERT INTO idempotency_keys (key_sha256, session_id, event_id, \
         request_digest, rev) SELECT $18, s.session_id, ev.event_id, $19, 1 FROM s, ev \
         WHERE $18::text IS NOT NULL AND ev.seq = 0) "
    };
}

/// A new session, its data, tags and `created` event; no row when the id
/// is taken, or the key was used by a create. $1 id, $2 status, $3 title,
/// $4 app, $5 agent, $6 route, $7 stage, $8 tags JSON, $9 actor type, $10
/// now, $11 goal, $12 context, $13 metadata, $14 tags, $15 the created
/// event's detail, $16 the lock timeout (ms, as text), $17 the parent or
/// NULL, $18 the key's SHA-256 (hex) or NULL, $19 the request's digest or
/// NULL.
pub const CREATE: &str = concat!(
    create_session_rows!("1", "NULL"),
    "ev AS (INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, data, \
     run_id, prev_hash, hash) ",
    created_event!(),
    " RETURNING event_id, seq)",
    created_key!(),
    created_session_select!(),
    "NULL::bigint, NULL::text, NULL::text, NULL::text[], NULL::text[] \
     FROM s JOIN d ON d.insert_seq = s.insert_seq JOIN ev ON true"
);

/// [`CREATE`] with the session's first checkpoint (an active session):
/// the session at rev 2 with `checkpoint_seq` 1, the `created` event and
/// the `checkpoint` event (seq 1, at the creation time, linked to the
/// first's hash) inserted in seq order by one INSERT (its trigger sees the
/// first row when it checks the second), its references (each linked once,
/// the first of a repeated one kept, each kind numbered from 0 in order, as
/// the pipeline's `link_refs` numbers them on a new session), and the
/// snapshot when there is a state (the references' and the snapshot's
/// triggers see the checkpoint event, read first). $1–$19 as [`CREATE`];
/// $20 the checkpoint's note, $21 its data, $22 the snapshot's step, $23
/// its state (NULL: no snapshot), $24 the state's size in bytes, $25 its
/// payload or NULL, $26 and $27 the references' kinds and ids (empty:
/// none).
pub const CREATE_FIRST: &str = concat!(
    create_session_rows!("2", "1"),
    "ev AS (INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, data, \
     run_id, prev_hash, hash) SELECT * FROM (",
    created_event!(),
    " UNION ALL SELECT h.session_id, 1, 'checkpoint', h.at, $9, $20, $21, NULL, h.h0, \
     logbook_event_hash(h.h0, h.session_id, 1::bigint, 'checkpoint'::text, h.at, $9, $20, $21, \
     NULL::text) FROM h) e \
     ORDER BY e.seq RETURNING event_id, seq), \
     rf AS (INSERT INTO session_refs (session_id, kind, ref_id, ordinal, linked_seq) \
     SELECT s.session_id, f.kind, f.ref_id, \
     row_number() OVER (PARTITION BY f.kind ORDER BY f.n) - 1, ev.seq FROM s, ev, \
     (SELECT DISTINCT ON (u.kind, u.ref_id) u.kind, u.ref_id, u.n \
       FROM unnest($26::text[], $27::text[]) WITH ORDINALITY AS u(kind, ref_id, n) \
       ORDER BY u.kind, u.ref_id, u.n) f \
     WHERE ev.seq = 1 RETURNING kind, ordinal, ref_id), \
     sn AS (INSERT INTO session_snapshots (session_id, seq, step, stage, state, size_bytes, at_ms, \
     payload) SELECT s.session_id, ev.seq, $22, s.stage, $23, $24, s.created_at_ms, $25 FROM s, ev \
     WHERE ev.seq = 1 AND $23::text IS NOT NULL)",
    created_key!(),
    created_session_select!(),
    "s.created_at_ms, ($21::json -> 'step')::text, $20::text, \
     (SELECT array_agg(rf.kind ORDER BY rf.kind, rf.ordinal, rf.ref_id) FROM rf), \
     (SELECT array_agg(rf.ref_id ORDER BY rf.kind, rf.ordinal, rf.ref_id) FROM rf) \
     FROM s JOIN d ON d.insert_seq = s.insert_seq \
     JOIN (SELECT count(*) AS n FROM ev) e ON e.n = 2"
);

/// The owned parameters of [`CREATE`], or of [`CREATE_FIRST`] with a
/// first checkpoint.
pub struct CreateParams {
    id: String,
    status: String,
    title: String,
    app: Option<String>,
    agent: Option<String>,
    route: Option<String>,
    stage: Option<String>,
    tags_json: String,
    actor: String,
    now: i64,
    goal: Option<String>,
    context: String,
    metadata: String,
    tags: Vec<String>,
    detail: String,
    timeout: String,
    parent: Option<String>,
    key_sha256: Option<String>,
    digest: Option<String>,
    first: Option<FirstParams>,
}

/// [`CREATE_FIRST`]'s $20–$27.
struct FirstParams {
    note: Option<String>,
    data: String,
    step: Option<String>,
    state: Option<String>,
    size: Option<i64>,
    payload: Option<Vec<u8>>,
    kinds: Vec<String>,
    ids: Vec<String>,
}

impl CreateParams {
    /// The parameters for `r` (its `created_at_ms` is the write's time),
    /// its idempotency key and request digest, if any, and its first
    /// checkpoint, if any.
    pub fn new(
        r: &SessionRow<'_>,
        detail: &str,
        lock_timeout_ms: i64,
        idempotency: Option<(&str, &str)>,
        first: Option<&OneCheckpoint<'_>>,
    ) -> Self {
        CreateParams {
            id: r.session_id.to_owned(),
            status: r.status.as_str().to_owned(),
            title: r.title.to_owned(),
            app: r.app.map(str::to_owned),
            agent: r.agent_id.map(str::to_owned),
            route: r.route.map(str::to_owned),
            stage: r.stage.map(str::to_owned),
            // Strings serialize infallibly.
            tags_json: serde_json::to_string(r.tags).unwrap_or_else(|_| "[]".to_owned()),
            actor: r.actor_type.as_str().to_owned(),
            now: r.created_at_ms,
            goal: r.goal.map(str::to_owned),
            context: r.context.to_owned(),
            metadata: r.metadata.to_owned(),
            tags: r.tags.to_vec(),
            detail: detail.to_owned(),
            timeout: lock_timeout_ms.to_string(),
            parent: r.parent_session_id.map(str::to_owned),
            key_sha256: idempotency.map(|(key, _)| key_sha256(key)),
            digest: idempotency.map(|(_, digest)| digest.to_owned()),
            first: first.map(|f| FirstParams {
                note: f.note.map(str::to_owned),
                data: f.data.to_owned(),
                step: f.snapshot.and_then(|sn| sn.step.map(str::to_owned)),
                state: f.snapshot.map(|sn| sn.state.to_owned()),
                size: f
                    .snapshot
                    .map(|sn| i64::try_from(sn.state.len()).unwrap_or(i64::MAX)),
                payload: f.snapshot.and_then(|sn| sn.payload.map(<[u8]>::to_vec)),
                kinds: f.refs.0.to_vec(),
                ids: f.refs.1.to_vec(),
            }),
        }
    }

    /// The statement: [`CREATE_FIRST`] with a first checkpoint, else
    /// [`CREATE`].
    pub fn sql(&self) -> &'static str {
        if self.first.is_some() {
            CREATE_FIRST
        } else {
            CREATE
        }
    }

    /// As the driver takes them, for [`CreateParams::sql`].
    pub fn params(&self) -> Vec<Param<'_>> {
        let mut p: Vec<Param<'_>> = vec![
            (&self.id, Type::TEXT),
            (&self.status, Type::TEXT),
            (&self.title, Type::TEXT),
            (&self.app, Type::TEXT),
            (&self.agent, Type::TEXT),
            (&self.route, Type::TEXT),
            (&self.stage, Type::TEXT),
            (&self.tags_json, Type::TEXT),
            (&self.actor, Type::TEXT),
            (&self.now, Type::INT8),
            (&self.goal, Type::TEXT),
            (&self.context, Type::TEXT),
            (&self.metadata, Type::TEXT),
            (&self.tags, Type::TEXT_ARRAY),
            (&self.detail, Type::TEXT),
            (&self.timeout, Type::TEXT),
            (&self.parent, Type::TEXT),
            (&self.key_sha256, Type::TEXT),
            (&self.digest, Type::TEXT),
        ];
        if let Some(f) = &self.first {
            p.extend([
                (&f.note as &(dyn postgres::types::ToSql + Sync), Type::TEXT),
                (&f.data, Type::TEXT),
                (&f.step, Type::TEXT),
                (&f.state, Type::TEXT),
                (&f.size, Type::INT8),
                (&f.payload, Type::BYTEA),
                (&f.kinds, Type::TEXT_ARRAY),
                (&f.ids, Type::TEXT_ARRAY),
            ]);
        }
        p
    }
}
