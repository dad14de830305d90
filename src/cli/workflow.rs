//! `logbook session checkpoints|restore|fork|tree|lock|unlock` (docs/design.md, "Hierarchies",
//! "Snapshots" and "Leases"): one Args struct and one small function per verb.

use super::output::Printer;
use super::render::{clean, preview, table};
use super::session::{print_session, MutationArgs};
use super::{open, GlobalArgs};
use clap::{Args, Subcommand};
use logbook::clock::format_ms;
use logbook::ledger::{Lease, SessionTree, SnapshotList};
use logbook::{ForkRequest, LockRequest, Mutation, Result};

#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// List a session's checkpoint snapshots: seq, step, time, size
    ///
    /// Snapshots are stored by `session checkpoint … --state JSON`.
    /// Errors: SESSION_NOT_FOUND.
    #[command(after_help = "Example:\n  logbook session checkpoints ses_1a2b3c4d5e6f7081")]
    Checkpoints(WfIdArg),
    /// Restore stage and context from a checkpoint snapshot
    ///
    /// Sets the session's context to the snapshot's state and its stage to
    /// the stage it had then; event checkpoint_restored. Status and usage are
    /// unchanged: usage is never rewound. Active or paused sessions only.
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, CHECKPOINT_NOT_FOUND
    /// (exit 3), SESSION_INVALID_TRANSITION, SESSION_CONFLICT, LEASE_HELD,
    /// STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session restore ses_1a2b3c4d5e6f7081 --checkpoint 4 --if-rev 9"
    )]
    Restore(RestoreArgs),
    /// Fork a child session from a checkpoint snapshot (default: the newest)
    ///
    /// The child is active, its parent is the source, its context and stage
    /// come from the snapshot, and title, goal, app, agent, route, tags and
    /// metadata from the source (--title overrides the title). Event forked on
    /// both (a terminal source is frozen: only the child records it). Prints
    /// the child. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND,
    /// CHECKPOINT_NOT_FOUND, SESSION_CONFLICT, LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session fork ses_1a2b3c4d5e6f7081 --checkpoint 4 --title \"retry with v2\""
    )]
    Fork(ForkArgs),
    /// Show a session and all its descendants with their status
    ///
    /// Depth first, children in creation order, at most 10,000 sessions.
    /// Each node counts its direct children that purges removed, by purge
    /// (`purged_children`; a line after the table names each such session);
    /// a root whose parent was purged names it (`parent_purged`).
    ///
    /// Errors: INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    #[command(after_help = "Example:\n  logbook session tree ses_1a2b3c4d5e6f7081")]
    Tree(WfIdArg),
    /// Take the session's lease (the session lock): prints its token once
    ///
    /// While the lease is live (not expired, and its owner process exists
    /// when it is on this host), every mutation of the session without
    /// --lease TOKEN is refused with LEASE_HELD (exit 4, retryable), and so
    /// is another lock. An expired lease, or one whose owner process is gone,
    /// is taken over. The owner is the process that ran this command (its
    /// parent), or --owner-pid. Pass --lease TOKEN to renew your own lease.
    /// Only the token's SHA-256 is stored.
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (ended), LEASE_HELD, SESSION_CONFLICT (--if-rev), STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session lock ses_1a2b3c4d5e6f7081 --ttl-ms 60000 --json"
    )]
    Lock(LockArgs),
    /// Release the session's lease
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, LEASE_HELD (another live
    /// owner holds it), LEASE_NOT_FOUND (no lease with this token: it expired
    /// and was taken over, or was released), STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session unlock ses_1a2b3c4d5e6f7081 --token \"$TOKEN\""
    )]
    Unlock(UnlockArgs),
}

#[derive(Debug, Args)]
pub struct WfIdArg {
    /// Session id (ses_ + 16 hex)
    id: String,
}

fn parse_seq(s: &str) -> std::result::Result<i64, String> {
    s.parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| "expected a checkpoint seq: an integer of 0 or more".to_owned())
}

fn parse_positive(s: &str) -> std::result::Result<i64, String> {
    s.parse::<i64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| "expected an integer of 1 or more".to_owned())
}

fn parse_pid(s: &str) -> std::result::Result<u32, String> {
    s.parse::<u32>()
        .ok()
        .filter(|n| *n >= 1 && i32::try_from(*n).is_ok())
        .ok_or_else(|| "expected a process id of 1 or more".to_owned())
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// Session id
    id: String,
    /// The snapshot's checkpoint seq (see `session checkpoints`)
    #[arg(long, value_name = "SEQ", value_parser = parse_seq)]
    checkpoint: i64,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// Source session id
    id: String,
    /// The snapshot's checkpoint seq [default: the newest snapshot]
    #[arg(long, value_name = "SEQ", value_parser = parse_seq)]
    checkpoint: Option<i64>,
    /// The child's title, 1–200 characters [default: the source's]
    #[arg(long, allow_negative_numbers = true)]
    title: Option<String>,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// Session id
    id: String,
    /// Time to live in ms, 1–604800000 [default: 300000]
    #[arg(long, value_name = "N", value_parser = parse_positive, allow_negative_numbers = true)]
    ttl_ms: Option<i64>,
    /// The process whose life keeps the lease [default: the parent of this command]
    #[arg(long, value_name = "PID", value_parser = parse_pid)]
    owner_pid: Option<u32>,
    /// Apply only if the session is still at this revision (else SESSION_CONFLICT, exit 4)
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    if_rev: Option<i64>,
    /// Renew this lease (your token): same token, new expiry
    #[arg(long, value_name = "TOKEN")]
    lease: Option<String>,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// Session id
    id: String,
    /// The token `session lock` printed
    #[arg(long, value_name = "TOKEN")]
    token: String,
    /// Apply only if the session is still at this revision (else SESSION_CONFLICT, exit 4)
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    if_rev: Option<i64>,
    /// A retry with the same key applies nothing again, answers as the command does (the
    /// session, run or budget as it is now), and says it was a replay ("replayed":{"rev","seq"}
    /// of the first attempt in the envelope)
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
}

pub fn run(cmd: &WorkflowCommand, g: &GlobalArgs, out: &Printer) -> Result<()> {
    match cmd {
        WorkflowCommand::Checkpoints(a) => {
            let l = open(g)?.list_snapshots(&a.id)?;
            out.success(&l, render_snapshots);
        }
        WorkflowCommand::Restore(a) => {
            let s = open(g)?.restore(&a.id, a.checkpoint, &a.m.to_mutation())?;
            print_session(out, &s);
        }
        WorkflowCommand::Fork(a) => {
            let req = ForkRequest {
                checkpoint: a.checkpoint,
                title: a.title.clone(),
            };
            let s = open(g)?.fork(&a.id, &req, &a.m.to_mutation())?;
            print_session(out, &s);
        }
        WorkflowCommand::Tree(a) => {
            let t = open(g)?.session_tree(&a.id)?;
            out.success(&t, render_tree);
        }
        WorkflowCommand::Lock(a) => {
            let req = LockRequest {
                ttl_ms: a.ttl_ms,
                // The agent that ran `logbook` owns the lease, not this
                // short-lived process.
                owner_pid: Some(a.owner_pid.unwrap_or_else(|| {
                    u32::try_from(nix::unistd::getppid().as_raw()).unwrap_or(1)
                })),
            };
            let m = Mutation {
                if_rev: a.if_rev,
                lease: a.lease.clone(),
                ..Mutation::default()
            };
            let l = open(g)?.lock(&a.id, &req, &m)?;
            out.success(&l, render_lease);
        }
        WorkflowCommand::Unlock(a) => {
            let m = Mutation {
                if_rev: a.if_rev,
                idempotency_key: a.idempotency_key.clone(),
                lease: None,
            };
            let s = open(g)?.unlock(&a.id, &a.token, &m)?;
            print_session(out, &s);
        }
    }
    Ok(())
}

fn render_snapshots(l: &SnapshotList) -> String {
    let rows: Vec<Vec<String>> = l
        .checkpoints
        .iter()
        .map(|c| {
            vec![
                c.seq.to_string(),
                format_ms(c.at_ms),
                c.size_bytes.to_string(),
                c.stage
                    .as_deref()
                    .map_or_else(|| "-".into(), |s| preview(s, 24)),
                c.step
                    .as_deref()
                    .map_or_else(|| "-".into(), |s| preview(s, 40)),
            ]
        })
        .collect();
    table(&["SEQ", "AT", "BYTES", "STAGE", "STEP"], &rows, &[0, 2])
}

/// The tree as a table: each session indented two spaces per level below
/// the root.
fn render_tree(t: &SessionTree) -> String {
    let rows: Vec<Vec<String>> = t
        .nodes
        .iter()
        .map(|n| {
            vec![
                format!(
                    "{}{}",
                    "  ".repeat(usize::try_from(n.depth).unwrap_or(0)),
                    n.session_id
                ),
                clean(&n.status),
                preview(&n.title, 60),
            ]
        })
        .collect();
    let mut out = String::new();
    if let Some(p) = &t.parent_purged {
        out.push_str(&format!(
            "parent {} was purged (purge {}, {}): {}\n",
            p.session_id,
            p.purge_id,
            format_ms(p.purged_at_ms),
            preview(&p.title, 60)
        ));
    }
    out.push_str(&table(&["SESSION", "STATUS", "TITLE"], &rows, &[]));
    for n in t.nodes.iter().filter(|n| n.purged_children.total > 0) {
        out.push_str(&format!(
            "{} purged {}\n",
            n.session_id,
            super::render::purged_children(&n.purged_children)
        ));
    }
    if t.truncated {
        out.push_str(&format!(
            "… truncated at {} sessions\n",
            logbook::ledger::TREE_MAX_NODES
        ));
    }
    out
}

fn render_lease(l: &Lease) -> String {
    let mut out = String::new();
    let mut kv = |k: &str, v: &str| out.push_str(&format!("{k:<14}{v}\n"));
    kv("token", &l.token);
    kv("session_id", &l.session_id);
    kv("pid", &l.pid.to_string());
    kv("hostname", &clean(&l.hostname));
    kv("acquired_at", &format_ms(l.acquired_at_ms));
    kv("expires_at", &format_ms(l.expires_at_ms));
    if l.renewed {
        kv("renewed", "yes");
    }
    if let Some(p) = &l.taken_over_from {
        kv(
            "taken_over",
            &format!(
                "from pid {} on {} ({})",
                p.pid,
                clean(&p.hostname),
                p.reason
            ),
        );
    }
    kv("rev", &l.session.rev.to_string());
    out.push_str("\nthe token is shown once: keep it to pass as --lease and to unlock\n");
    out
}
