//! What a one-statement write returns (docs/postgres.md, "One round trip
//! per write"): the session as it now stands, the columns of
//! `sessions::session_select` in its order, read from the statement's own
//! rows (`p`, the UPDATE's RETURNING; `ev`, its event; `sd` and `sw`, its
//! side's rows), and what a lease or budget verb returns beside it.

/// The select list of the session a write returns (the columns of
/// `sessions::session_select`, in its order) from `p`, the UPDATE's
/// RETURNING, `d` its data, `r` its references, and the checkpoint's event
/// from `$cp`.
macro_rules! session_columns {
    ($cp:literal) => {
        concat!(
            "SELECT p.session_id, p.status, p.title, p.app, p.agent_id, \
             p.route, p.stage, p.parent_session_id, p.tags, p.actor_type, p.actor_id, \
             p.actor_authenticated, p.rev, p.checkpoint_seq, p.final_result, p.end_reason, \
             p.input_tokens, p.output_tokens, p.api_calls, p.duration_ms, p.created_at_ms, \
             p.updated_at_ms, p.ended_at_ms, p.insert_seq, d.insert_seq IS NOT NULL, d.goal, \
             d.context, d.metadata, ",
            $cp,
            ".at_ms, (",
            $cp,
            ".data::json -> 'step')::text, ",
            $cp,
            ".detail, r.kinds, r.ids "
        )
    };
}

/// What follows [`SELECT_AFTER_UPDATE`]'s select list: the session's data,
/// its checkpoint's event (this statement's own, `ev`, or an older one)
/// and its references.
macro_rules! after_update_from {
    () => {
        "     FROM p LEFT JOIN session_data d ON d.insert_seq = p.insert_seq \
     LEFT JOIN LATERAL (SELECT ev.at_ms, ev.data, ev.detail FROM ev WHERE ev.seq = p.checkpoint_seq \
       UNION ALL SELECT o.at_ms, o.data, o.detail FROM events o \
       WHERE o.session_id = p.session_id AND o.seq = p.checkpoint_seq LIMIT 1) c ON true \
     LEFT JOIN LATERAL (SELECT \
       array_agg(x.kind ORDER BY x.kind, x.ordinal, x.ref_id) AS kinds, \
       array_agg(x.ref_id ORDER BY x.kind, x.ordinal, x.ref_id) AS ids \
       FROM session_refs x WHERE x.session_id = p.session_id) r ON true"
    };
}

/// The whole session (the columns of `sessions::session_select`, in its
/// order) from `p`, the UPDATE's RETURNING: its data, its checkpoint's
/// event (this statement's own, `ev`, or an older one) and its references.
pub(super) const SELECT_AFTER_UPDATE: &str = concat!(session_columns!("c"), after_update_from!());

/// [`SELECT_AFTER_UPDATE`] for `lock`, followed by the lease row the
/// statement found (`sd`; NULLs where there was none): columns
/// `lease_token_sha256`, `lease_pid`, `lease_hostname`,
/// `lease_expires_at_ms`. A token other than the one sent is the lease it
/// took over.
pub(super) const SELECT_AFTER_TAKING: &str = concat!(
    session_columns!("c"),
    ", sd.token_sha256 AS lease_token_sha256, sd.pid AS lease_pid, \
     sd.hostname AS lease_hostname, sd.expires_at_ms AS lease_expires_at_ms",
    after_update_from!(),
    " LEFT JOIN sd ON true"
);

/// [`SELECT_AFTER_UPDATE`] for a budget verb, followed by the budget the
/// statement wrote (`sw`): columns `budget_max_tokens`,
/// `budget_max_api_calls`, `budget_max_duration_ms`, `budget_on_exceed`,
/// `budget_base_tokens`, `budget_base_api_calls`,
/// `budget_base_duration_ms`, `budget_exceeded_at_ms`.
pub(super) const SELECT_AFTER_BUDGET: &str = concat!(
    session_columns!("c"),
    ", sw.max_tokens AS budget_max_tokens, sw.max_api_calls AS budget_max_api_calls, \
     sw.max_duration_ms AS budget_max_duration_ms, sw.on_exceed AS budget_on_exceed, \
     sw.base_tokens AS budget_base_tokens, sw.base_api_calls AS budget_base_api_calls, \
     sw.base_duration_ms AS budget_base_duration_ms, \
     sw.exceeded_at_ms AS budget_exceeded_at_ms",
    after_update_from!(),
    " LEFT JOIN sw ON true"
);

/// [`SELECT_AFTER_UPDATE`] for a checkpoint that links references: the
/// references this statement inserted (`sw`, which the statement's
/// snapshot does not show) with those already linked.
pub(super) const SELECT_AFTER_LINKING: &str = concat!(
    session_columns!("ev"),
    "     FROM p CROSS JOIN ev LEFT JOIN session_data d ON d.insert_seq = p.insert_seq \
     LEFT JOIN LATERAL (SELECT \
       array_agg(x.kind ORDER BY x.kind, x.ordinal, x.ref_id) AS kinds, \
       array_agg(x.ref_id ORDER BY x.kind, x.ordinal, x.ref_id) AS ids \
       FROM (SELECT o.kind, o.ordinal, o.ref_id FROM session_refs o \
         WHERE o.session_id = p.session_id \
         UNION ALL SELECT sw.kind, sw.ordinal, sw.ref_id FROM sw) x) r ON true"
);
