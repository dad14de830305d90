//! Hierarchies (docs/design.md, "Hierarchies"): `session tree` and the child counts, blocking
//! gate and lease that `show` adds.

use super::gates::to_gate;
use super::leases::{lease_info, LeaseInfo};
use super::request::parse_session_id;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::{Gate, SessionStatus};
use crate::store::ShowRows;
use crate::store::Tx;
use serde::Serialize;
use std::collections::{HashMap, HashSet};

/// Most sessions `session tree` returns: 10,000. A larger tree comes back
/// with `truncated: true` (never silently cut).
pub const TREE_MAX_NODES: usize = 10_000;

/// A session's direct children by status (`show`'s `children`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChildCounts {
    /// All direct children.
    pub total: i64,
    /// Pending children.
    pub pending: i64,
    /// Active children.
    pub active: i64,
    /// Paused children.
    pub paused: i64,
    /// Completed children.
    pub completed: i64,
    /// Failed children.
    pub failed: i64,
    /// Cancelled children.
    pub cancelled: i64,
}

/// A session's direct children that purges removed (docs/design.md, "Retention"): their
/// tombstones name it as parent. `show`'s `purged_children`, and each
/// `session tree` node's. A child counts under the purge that removed it
/// last, and not at all once a session of its id exists again (imported
/// back): it is then among the children again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PurgedChildren {
    /// Children removed, over every purge.
    pub total: i64,
    /// By purge, oldest purge (lowest id) first; empty when `total` is 0.
    pub purges: Vec<ChildrenPurge>,
}

/// The children of one session that one purge removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChildrenPurge {
    /// The purge (`purges.purge_id`).
    pub purge_id: i64,
    /// How many children it removed.
    pub sessions: i64,
    /// When it removed the last of them, ms since the epoch.
    pub purged_at_ms: i64,
}

impl PurgedChildren {
    /// Adds one purge's children.
    fn add(&mut self, purge_id: i64, sessions: i64, purged_at_ms: i64) {
        self.total += sessions;
        self.purges.push(ChildrenPurge {
            purge_id,
            sessions,
            purged_at_ms,
        });
    }
}

/// The purged children of each of `ids`, keyed by parent (one query per
/// [`PURGED_CHILDREN_CHUNK`] ids).
fn purged_children_of(tx: &mut dyn Tx, ids: &[String]) -> Result<HashMap<String, PurgedChildren>> {
    let mut by_parent: HashMap<String, PurgedChildren> = HashMap::new();
    for chunk in ids.chunks(PURGED_CHILDREN_CHUNK) {
        for r in tx.purged_children(chunk)? {
            by_parent.entry(r.parent_session_id).or_default().add(
                r.purge_id,
                r.sessions,
                r.purged_at_ms,
            );
        }
    }
    Ok(by_parent)
}

/// Parent ids per purged-children query of `session tree`.
const PURGED_CHILDREN_CHUNK: usize = 1_000;

/// One session of a tree.
#[derive(Debug, Clone, Serialize)]
pub struct TreeNode {
    /// The session.
    pub session_id: String,
    /// Its parent (null for the root when it has none).
    pub parent_session_id: Option<String>,
    /// 0 for the root, 1 for its children, …
    pub depth: u32,
    /// Its status.
    pub status: String,
    /// Its title.
    pub title: String,
    /// Creation time, ms since the Unix epoch (UTC).
    pub created_at_ms: i64,
    /// Number of direct children.
    pub child_count: i64,
    /// Its direct children that purges removed (not in `child_count`).
    pub purged_children: PurgedChildren,
}

/// `session tree`: the root and all its descendants, depth first, children
/// in creation order.
#[derive(Debug, Clone, Serialize)]
pub struct SessionTree {
    /// The root.
    pub session_id: String,
    /// The nodes, root first (pre-order).
    pub nodes: Vec<TreeNode>,
    /// Whether the tree had more than [`TREE_MAX_NODES`] sessions and only
    /// the first were returned.
    pub truncated: bool,
    /// The root's parent, when it has one and a purge removed it: its id
    /// and purge (docs/design.md, "Retention"); null otherwise.
    pub parent_purged: Option<PurgedParent>,
}

/// A purged parent named by a remaining session.
#[derive(Debug, Clone, Serialize)]
pub struct PurgedParent {
    /// The parent's id.
    pub session_id: String,
    /// Its title when it was purged.
    pub title: String,
    /// The purge that removed it.
    pub purge_id: i64,
    /// When, ms since the epoch.
    pub purged_at_ms: i64,
}

/// What `show` adds for workflows.
#[derive(Debug, Clone)]
pub(super) struct WorkflowView {
    pub(super) children: ChildCounts,
    pub(super) purged_children: PurgedChildren,
    pub(super) blocking_gate: Option<Gate>,
    pub(super) lease: Option<LeaseInfo>,
}

/// Child counts by status.
pub(super) fn child_counts(statuses: &[String]) -> ChildCounts {
    let mut c = ChildCounts::default();
    for status in statuses {
        c.total += 1;
        match status.parse::<SessionStatus>() {
            Ok(SessionStatus::Pending) => c.pending += 1,
            Ok(SessionStatus::Active) => c.active += 1,
            Ok(SessionStatus::Paused) => c.paused += 1,
            Ok(SessionStatus::Completed) => c.completed += 1,
            Ok(SessionStatus::Failed) => c.failed += 1,
            Ok(SessionStatus::Cancelled) | Err(_) => c.cancelled += 1,
        }
    }
    c
}

/// The workflow part of `show` from its rows (read in one snapshot with
/// the session, [`crate::store::Tx::show_rows`]): the children's counts,
/// the purged children, the gate the session waits on (none once it is
/// terminal) and its lease as of `now`.
pub(super) fn workflow_view(rows: &mut ShowRows, now: i64) -> WorkflowView {
    let mut purged_children = PurgedChildren::default();
    for r in &rows.purged_children {
        purged_children.add(r.purge_id, r.sessions, r.purged_at_ms);
    }
    let blocking_gate = if rows.session.status.is_terminal() {
        None
    } else {
        rows.pending_gate.take().map(to_gate)
    };
    WorkflowView {
        children: child_counts(&rows.child_statuses),
        purged_children,
        blocking_gate,
        lease: rows.lease.take().map(|l| lease_info(l, now)),
    }
}

impl Ledger {
    /// `session tree`: the session and every descendant with its status,
    /// depth first (children in creation order), at most
    /// [`TREE_MAX_NODES`] (then `truncated`). A cycle planted by raw SQL is
    /// walked once.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    ///
    /// Rule: docs/design.md, "Hierarchies".
    pub fn session_tree(&self, id: &str) -> Result<SessionTree> {
        parse_session_id(id)?;
        self.read(|tx| {
            let root = tx
                .find_session(id)?
                .ok_or_else(|| Error::SessionNotFound { id: id.to_owned() })?;
            let mut nodes: Vec<TreeNode> = Vec::new();
            let mut seen: HashSet<String> = HashSet::from([id.to_owned()]);
            // Depth first: pop a node, emit it, push its children reversed.
            let mut stack = vec![TreeNode {
                session_id: id.to_owned(),
                parent_session_id: root.parent_session_id.clone(),
                depth: 0,
                status: root.status.as_str().to_owned(),
                title: root.title.clone(),
                created_at_ms: root.created_at_ms,
                child_count: 0,
                purged_children: PurgedChildren::default(),
            }];
            let mut truncated = false;
            while let Some(mut node) = stack.pop() {
                if nodes.len() >= TREE_MAX_NODES {
                    truncated = true;
                    break;
                }
                let children = tx.select_children(&node.session_id)?;
                node.child_count = i64::try_from(children.len()).unwrap_or(i64::MAX);
                let (sid, depth) = (node.session_id.clone(), node.depth);
                nodes.push(node);
                for c in children.into_iter().rev() {
                    if !seen.insert(c.session_id.clone()) {
                        continue;
                    }
                    stack.push(TreeNode {
                        session_id: c.session_id,
                        parent_session_id: Some(sid.clone()),
                        depth: depth + 1,
                        status: c.status,
                        title: c.title,
                        created_at_ms: c.created_at_ms,
                        child_count: 0,
                        purged_children: PurgedChildren::default(),
                    });
                }
            }
            let ids: Vec<String> = nodes.iter().map(|n| n.session_id.clone()).collect();
            let mut purged = purged_children_of(tx, &ids)?;
            for n in &mut nodes {
                if let Some(p) = purged.remove(&n.session_id) {
                    n.purged_children = p;
                }
            }
            let parent_purged = match &root.parent_session_id {
                Some(p) if !tx.session_exists(p)? => tx.find_tombstone(p)?.map(|t| PurgedParent {
                    session_id: p.clone(),
                    title: t.session.title,
                    purge_id: t.purge_id,
                    purged_at_ms: t.purged_at_ms,
                }),
                _ => None,
            };
            Ok(SessionTree {
                session_id: id.to_owned(),
                nodes,
                truncated,
                parent_purged,
            })
        })
        .map_err(|e| self.fill_path(e))
    }
}
