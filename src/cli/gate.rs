//! `logbook gate open|approve|reject|list` (docs/design.md, "Gates").

use super::output::Printer;
use super::render::{preview, table};
use super::session::{print_session, MutationArgs};
use super::{open, GlobalArgs};
use clap::{Args, Subcommand};
use logbook::clock::format_ms;
use logbook::{GateKind, GateList, Result};

#[derive(Debug, Subcommand)]
pub enum GateCommand {
    /// Open a gate on an active session
    ///
    /// auto: approved at once (event gate_approved), the session stays
    /// active. user-approval, step-confirm: events gate_opened then paused,
    /// the session pauses with the gate pending; `session resume` is refused with
    /// GATE_PENDING until the gate is approved or rejected. Errors:
    /// INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION (not
    /// active), SESSION_CONFLICT, LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook gate open ses_1a2b3c4d5e6f7081 --gate deploy-approval --kind user-approval"
    )]
    Open(OpenArgs),
    /// Approve a pending gate: the session resumes (event gate_approved)
    ///
    /// Events gate_approved (detail: the note), then resumed. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, GATE_NOT_FOUND (exit 3),
    /// GATE_ALREADY_DECIDED (exit 5), SESSION_INVALID_TRANSITION,
    /// SESSION_CONFLICT, LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook gate approve ses_1a2b3c4d5e6f7081 --gate deploy-approval"
    )]
    Approve(ApproveArgs),
    /// Reject a pending gate: the session fails, or is cancelled with --abort
    ///
    /// Events gate_rejected (data.outcome: failed | cancelled), then failed
    /// or cancelled (detail: the reason); the reason becomes the session's
    /// end_reason. Errors: INVALID_ARGUMENT,
    /// SESSION_NOT_FOUND, GATE_NOT_FOUND, GATE_ALREADY_DECIDED (exit 5),
    /// SESSION_CONFLICT, LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook gate reject ses_1a2b3c4d5e6f7081 --gate deploy-approval --reason \"too risky\" --abort"
    )]
    Reject(RejectArgs),
    /// List a session's gates, oldest first
    ///
    /// Errors: INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    #[command(after_help = "Example:\n  logbook gate list ses_1a2b3c4d5e6f7081")]
    List(ListArgs),
}

fn parse_kind(s: &str) -> std::result::Result<GateKind, String> {
    s.parse()
}

#[derive(Debug, Args)]
pub struct OpenArgs {
    /// Session id
    id: String,
    /// Gate name, 1–128 characters
    #[arg(long = "gate", value_name = "NAME")]
    name: String,
    /// auto, user-approval or step-confirm
    #[arg(long, value_name = "KIND", value_parser = parse_kind)]
    kind: GateKind,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// Session id
    id: String,
    /// Gate name
    #[arg(long = "gate", value_name = "NAME")]
    name: String,
    /// A note with the approval, up to 4096 characters, not only whitespace
    #[arg(long, allow_negative_numbers = true)]
    note: Option<String>,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct RejectArgs {
    /// Session id
    id: String,
    /// Gate name
    #[arg(long = "gate", value_name = "NAME")]
    name: String,
    /// Why, 1–4096 characters, not only whitespace
    #[arg(long, allow_negative_numbers = true)]
    reason: String,
    /// Cancel the session instead of failing it
    #[arg(long)]
    abort: bool,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Session id
    id: String,
}

pub fn run(cmd: &GateCommand, g: &GlobalArgs, out: &Printer) -> Result<()> {
    match cmd {
        GateCommand::Open(a) => {
            let s = open(g)?.open_gate(&a.id, &a.name, a.kind, &a.m.to_mutation())?;
            print_session(out, &s);
        }
        GateCommand::Approve(a) => {
            let s = open(g)?.approve_gate(&a.id, &a.name, a.note.clone(), &a.m.to_mutation())?;
            print_session(out, &s);
        }
        GateCommand::Reject(a) => {
            let s = open(g)?.reject_gate(&a.id, &a.name, &a.reason, a.abort, &a.m.to_mutation())?;
            print_session(out, &s);
        }
        GateCommand::List(a) => {
            let l = open(g)?.list_gates(&a.id)?;
            out.success(&l, render_gates);
        }
    }
    Ok(())
}

fn render_gates(l: &GateList) -> String {
    let rows: Vec<Vec<String>> = l
        .gates
        .iter()
        .map(|g| {
            vec![
                preview(&g.name, 32),
                g.round.to_string(),
                g.kind.as_str().to_owned(),
                g.status.as_str().to_owned(),
                format_ms(g.opened_at_ms),
                g.decided_at_ms.map_or_else(|| "-".into(), format_ms),
                g.reason
                    .as_deref()
                    .map_or_else(|| "-".into(), |r| preview(r, 40)),
            ]
        })
        .collect();
    table(
        &[
            "GATE", "ROUND", "KIND", "STATUS", "OPENED", "DECIDED", "REASON",
        ],
        &rows,
        &[1],
    )
}
