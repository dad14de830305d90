//! `logbook session …`: one Args struct and one small function per verb.

use super::json_input::json_flag;
use super::output::Printer;
use super::{open, render, GlobalArgs};
use clap::{Args, Subcommand};
use logbook::clock::parse_time;
use logbook::{
    AppendEvent, CheckpointRequest, CreateSession, ListSessions, Mutation, Result, Session,
    SessionStatus, StageAction, StageRequest, Written,
};

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Create a session (active, or pending with --pending)
    ///
    /// Prints the new session. Errors: INVALID_ARGUMENT (caps, bad JSON),
    /// SESSION_NOT_FOUND (--parent does not exist), STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session create --title \"ship billing v3\" --app billing --tag deploy"
    )]
    Create(CreateArgs),
    /// Show a session with all its events and resolved references
    ///
    /// Also counts its direct children by status, and those that purges
    /// removed by purge (`purged_children`: their tombstones name it as
    /// parent). Plan, operation and deployment ids resolve with the commands of
    /// logbook.toml (README "Resolving references"), which is refused when
    /// another user can change it. Errors: INVALID_ARGUMENT (malformed id;
    /// a logbook.toml that does not parse, is owned by another user or is
    /// writable by group or others: field `config`), SESSION_NOT_FOUND.
    #[command(after_help = "Example:\n  logbook session show ses_1a2b3c4d5e6f7081 --json")]
    Show(IdArg),
    /// List sessions, newest created first
    ///
    /// The default order uses an immutable insertion key, so a walk with
    /// --cursor returns every session that existed when it began exactly
    /// once. With --order updated, a session updated during a walk moves to
    /// the top and may be missed by that walk. --since/--until bound the
    /// order's timestamp (created, or updated): since inclusive, until
    /// exclusive.
    ///
    /// Errors: INVALID_ARGUMENT (a bad filter or time, --limit outside
    /// 1..=1000, a cursor from another order or filter).
    #[command(
        after_help = "Example:\n  logbook session list --status active --app billing --limit 20"
    )]
    List(ListArgs),
    /// Start a pending session (pending → active)
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (not pending), SESSION_CONFLICT (--if-rev), LEASE_HELD, STORE_BUSY.
    #[command(after_help = "Example:\n  logbook session start ses_1a2b3c4d5e6f7081")]
    Start(TransitionArgs),
    /// Pause an active session (active → paused)
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (not active), SESSION_CONFLICT (--if-rev), LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session pause ses_1a2b3c4d5e6f7081 --reason \"waiting for review\""
    )]
    Pause(TransitionArgs),
    /// Resume a paused session (paused → active)
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (not paused), GATE_PENDING (a gate waits for a decision), SESSION_CONFLICT (--if-rev), LEASE_HELD, STORE_BUSY.
    #[command(after_help = "Example:\n  logbook session resume ses_1a2b3c4d5e6f7081")]
    Resume(TransitionArgs),
    /// Record a step and/or link references on an active session
    ///
    /// Needs at least one of --step, --note, --plan, --operation,
    /// --deployment or --state. A note that begins with `-` is written
    /// --note=-text. A reference id (--plan, --operation, --deployment)
    /// must not begin with `-`: a resolver would read it as an option.
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (not active), SESSION_CONFLICT (--if-rev), LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session checkpoint ses_1a2b3c4d5e6f7081 --step deploy --note \"canary at 10%\" --if-rev 3"
    )]
    Checkpoint(CheckpointArgs),
    /// Complete an active session with a result
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (not active), SESSION_CONFLICT (--if-rev), LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session complete ses_1a2b3c4d5e6f7081 --result \"shipped v3\""
    )]
    Complete(CompleteArgs),
    /// Fail a session (pending, active or paused) with a reason
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (already ended), SESSION_CONFLICT (--if-rev), LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session fail ses_1a2b3c4d5e6f7081 --reason \"canary regressed\""
    )]
    Fail(ReasonArgs),
    /// Cancel a session (pending, active or paused) with a reason
    ///
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (already ended), SESSION_CONFLICT (--if-rev), LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session cancel ses_1a2b3c4d5e6f7081 --reason \"superseded\""
    )]
    Cancel(ReasonArgs),
    /// Print a session's events in seq order
    ///
    /// A table: SEQ, AT, TYPE, ACTOR and a one-line SUMMARY of each event
    /// drawn from its data (cut at 100 characters with …); --json prints
    /// every event whole. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND.
    #[command(
        after_help = "Example:\n  logbook session events ses_1a2b3c4d5e6f7081 --after-seq 10 --limit 50"
    )]
    Events(EventsArgs),
    /// Append an agent's own event (type x.NAME) to a live session
    ///
    /// Errors: INVALID_ARGUMENT (a type that is not x.NAME, caps, bad JSON),
    /// SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION (ended), SESSION_CONFLICT (--if-rev), LEASE_HELD, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session event ses_1a2b3c4d5e6f7081 --type x.test_run --detail \"42 passed\""
    )]
    Event(EventArgs),
    /// Record a stage of an active session: start, complete, fail or retry
    ///
    /// Appends stage_started | stage_completed | stage_failed |
    /// stage_retrying with data {"stage": NAME, "attempt": N} and sets the
    /// session's stage to NAME. A failed stage does not fail the session.
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION
    /// (not active), SESSION_CONFLICT, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session stage ses_1a2b3c4d5e6f7081 start reproduce\n  logbook session stage ses_1a2b3c4d5e6f7081 retry verify --attempt 2 --reason \"flaky network\""
    )]
    Stage(StageArgs),
    #[command(flatten)]
    Workflow(super::workflow::WorkflowCommand),
    /// Set, check or reset a session's budget (tokens = input + output)
    ///
    /// With limits or --on-exceed: sets them (event budget_set; fields not
    /// given keep their value; a new budget's policy is pause). With
    /// --check, or no flags: prints the budget, usage since its last reset,
    /// what remains and whether it is exceeded (read-only). With --reset:
    /// the budget counts from now (event budget_reset; the session's usage
    /// sums stay). The write that takes usage over a limit appends
    /// budget_exceeded once and applies the policy: pause (an active
    /// session), fail, or warn. Errors: INVALID_ARGUMENT,
    /// SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION (terminal),
    /// SESSION_CONFLICT, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session budget ses_1a2b3c4d5e6f7081 --max-tokens 100000 --on-exceed pause\n  logbook session budget ses_1a2b3c4d5e6f7081 --check"
    )]
    Budget(super::budget::BudgetArgs),
    /// Add usage to a live session: tokens, API calls, duration
    ///
    /// Each amount is an integer from 0 to 2^53-1; a total that would pass
    /// 2^53-1 is refused (INVALID_ARGUMENT) and nothing is recorded. Event
    /// usage_recorded; a budget crossed by this write applies its policy.
    /// Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND,
    /// SESSION_INVALID_TRANSITION (terminal), SESSION_CONFLICT, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook session usage ses_1a2b3c4d5e6f7081 --input-tokens 1200 --output-tokens 300 --api-calls 1"
    )]
    Usage(super::budget::UsageArgs),
}

#[derive(Debug, Args)]
pub struct IdArg {
    /// Session id (ses_ + 16 hex)
    id: String,
}

/// Flags every mutation of an existing session accepts.
#[derive(Debug, Args)]
pub struct MutationArgs {
    /// Apply only if the session is still at this revision (else SESSION_CONFLICT, exit 4)
    #[arg(long, value_name = "N", value_parser = parse_rev, allow_negative_numbers = true)]
    if_rev: Option<i64>,
    /// A retry with the same key applies nothing again, answers as the command does (the
    /// session, run or budget as it is now), and says it was a replay ("replayed":{"rev","seq"}
    /// of the first attempt in the envelope)
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// Apply only while holding this lease (token from `session lock`); without it a session
    /// leased by a live owner is refused with LEASE_HELD (exit 4)
    #[arg(long, value_name = "TOKEN")]
    lease: Option<String>,
}

impl MutationArgs {
    pub(super) fn to_mutation(&self) -> Mutation {
        Mutation {
            if_rev: self.if_rev,
            idempotency_key: self.idempotency_key.clone(),
            lease: self.lease.clone(),
        }
    }
}

fn parse_rev(s: &str) -> std::result::Result<i64, String> {
    s.parse::<i64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| "expected a revision: an integer of 1 or more".to_owned())
}

fn parse_count(s: &str) -> std::result::Result<i64, String> {
    s.parse::<i64>()
        .map_err(|_| "expected an integer".to_owned())
}

pub(super) fn parse_status(s: &str) -> std::result::Result<SessionStatus, String> {
    s.parse()
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Title, 1–200 characters
    #[arg(long, allow_negative_numbers = true)]
    title: String,
    /// Application name
    #[arg(long)]
    app: Option<String>,
    /// Goal, 1–4096 characters
    #[arg(long, allow_negative_numbers = true)]
    goal: Option<String>,
    /// Agent id
    #[arg(long = "agent", value_name = "ID")]
    agent_id: Option<String>,
    /// Parent session id (must exist)
    #[arg(long, value_name = "SES")]
    parent: Option<String>,
    /// Route (workflow) name
    #[arg(long)]
    route: Option<String>,
    /// Current stage
    #[arg(long)]
    stage: Option<String>,
    /// Tag (can be repeated; at most 32)
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// Context: a JSON object, @FILE or @- (stdin); at most 256 KiB compact, numbers
    /// exact within 64 bits
    #[arg(long, value_name = "JSON")]
    context: Option<String>,
    /// Metadata: a JSON object, @FILE or @-; at most 256 KiB compact, numbers exact
    /// within 64 bits
    #[arg(long, value_name = "JSON")]
    metadata: Option<String>,
    /// Create in `pending` (start it later with `session start`)
    #[arg(long)]
    pending: bool,
    /// A retry with the same key returns the first session instead of a new one, with
    /// "replayed":{"rev":1,"seq":0} in the envelope
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Status filter (can be repeated: any of them)
    #[arg(long = "status", value_name = "S", value_parser = parse_status)]
    statuses: Vec<SessionStatus>,
    /// App filter
    #[arg(long)]
    app: Option<String>,
    /// Agent filter
    #[arg(long = "agent", value_name = "ID")]
    agent_id: Option<String>,
    /// Tag filter
    #[arg(long)]
    tag: Option<String>,
    /// Parent session filter
    #[arg(long, value_name = "SES")]
    parent: Option<String>,
    /// Only at or after TIME (RFC 3339 with offset, or epoch ms)
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Only before TIME (RFC 3339 with offset, or epoch ms)
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Sort order
    #[arg(long, value_name = "ORDER", value_parser = ["created", "updated"], default_value = "created")]
    order: String,
    /// Page size, 1–1000 [default: 20]
    #[arg(long, value_name = "N", value_parser = parse_count)]
    limit: Option<i64>,
    /// Continue after the page that returned this cursor
    #[arg(long, value_name = "C")]
    cursor: Option<String>,
}

#[derive(Debug, Args)]
pub struct TransitionArgs {
    /// Session id
    id: String,
    /// Why (free text, up to 4096 characters, not only whitespace)
    #[arg(long, allow_negative_numbers = true)]
    reason: Option<String>,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StageActionArg {
    Start,
    Complete,
    Fail,
    Retry,
}

#[derive(Debug, Args)]
pub struct StageArgs {
    /// Session id
    id: String,
    /// What happened to the stage
    #[arg(value_enum)]
    action: StageActionArg,
    /// Stage name, 1–128 characters
    #[arg(allow_hyphen_values = true)]
    name: String,
    /// Which attempt this is, 1..=1000000
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    attempt: Option<i64>,
    /// Why (free text, up to 4096 characters, not only whitespace)
    #[arg(long, allow_negative_numbers = true)]
    reason: Option<String>,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// Session id
    id: String,
    /// Step name, 1–200 characters
    #[arg(long, allow_negative_numbers = true)]
    step: Option<String>,
    /// Note, 1–4096 characters, not only whitespace
    #[arg(long, allow_negative_numbers = true)]
    note: Option<String>,
    /// Link a plan id (can be repeated)
    #[arg(long = "plan", value_name = "P")]
    plans: Vec<String>,
    /// Link an operation id (can be repeated)
    #[arg(long = "operation", value_name = "O")]
    operations: Vec<String>,
    /// Link a deployment id (can be repeated)
    #[arg(long = "deployment", value_name = "D")]
    deployments: Vec<String>,
    /// Store a snapshot: a JSON object, @FILE or @-; at most 256 KiB compact, numbers
    /// exact within 64 bits (restore and fork read it back as the context)
    #[arg(long, value_name = "JSON")]
    state: Option<String>,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// Session id
    id: String,
    /// The outcome, 1–4096 characters, not only whitespace
    #[arg(long, allow_negative_numbers = true)]
    result: String,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct ReasonArgs {
    /// Session id
    id: String,
    /// Why, 1–4096 characters, not only whitespace
    #[arg(long, allow_negative_numbers = true)]
    reason: String,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Session id
    id: String,
    /// Only events with seq greater than N (-1 or more)
    #[arg(long, value_name = "N", value_parser = parse_count, allow_negative_numbers = true)]
    after_seq: Option<i64>,
    /// Page size, 1–1000 [default: 20]
    #[arg(long, value_name = "N", value_parser = parse_count, allow_negative_numbers = true)]
    limit: Option<i64>,
}

#[derive(Debug, Args)]
pub struct EventArgs {
    /// Session id
    id: String,
    /// Event type: x. followed by [a-z0-9_.-]
    #[arg(long = "type", value_name = "x.NAME")]
    event_type: String,
    /// Short text, up to 4096 characters
    #[arg(long, allow_negative_numbers = true)]
    detail: Option<String>,
    /// A JSON object, @FILE or @-; at most 256 KiB compact, numbers exact within 64 bits
    #[arg(long, value_name = "JSON")]
    data: Option<String>,
    #[command(flatten)]
    m: MutationArgs,
}

pub(super) fn print_session(out: &Printer, s: &Written<Session>) {
    out.written(s, render::session);
}

pub fn run(cmd: &SessionCommand, g: &GlobalArgs, out: &Printer) -> Result<()> {
    match cmd {
        SessionCommand::Create(a) => create(a, g, out),
        SessionCommand::Show(a) => {
            let v = open(g)?.show_session(&a.id)?;
            out.success(&v, render::view);
            Ok(())
        }
        SessionCommand::List(a) => list(a, g, out),
        SessionCommand::Start(a) => {
            let s = open(g)?.start(&a.id, a.reason.clone(), &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Stage(a) => {
            let action = match a.action {
                StageActionArg::Start => StageAction::Start,
                StageActionArg::Complete => StageAction::Complete,
                StageActionArg::Fail => StageAction::Fail,
                StageActionArg::Retry => StageAction::Retry,
            };
            let req = StageRequest {
                action,
                name: a.name.clone(),
                attempt: a.attempt,
                reason: a.reason.clone(),
            };
            let s = open(g)?.stage(&a.id, req, &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Pause(a) => {
            let s = open(g)?.pause(&a.id, a.reason.clone(), &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Resume(a) => {
            let s = open(g)?.resume(&a.id, a.reason.clone(), &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Checkpoint(a) => {
            let req = CheckpointRequest {
                step: a.step.clone(),
                note: a.note.clone(),
                plan_ids: a.plans.clone(),
                operation_ids: a.operations.clone(),
                deployment_ids: a.deployments.clone(),
                state: json_flag("state", a.state.as_deref())?,
                payload: None,
            };
            let s = open(g)?.checkpoint(&a.id, req, &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Complete(a) => {
            let s = open(g)?.complete(&a.id, &a.result, &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Fail(a) => {
            let s = open(g)?.fail(&a.id, &a.reason, &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Cancel(a) => {
            let s = open(g)?.cancel(&a.id, &a.reason, &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Events(a) => {
            let p = open(g)?.session_events(&a.id, a.after_seq, a.limit)?;
            out.success(&p, |p| {
                let mut s = render::events(&p.events);
                if let Some(n) = p.next_after_seq {
                    s.push_str(&format!("\nnext page: --after-seq {n}\n"));
                }
                s
            });
            Ok(())
        }
        SessionCommand::Event(a) => {
            let req = AppendEvent {
                event_type: a.event_type.clone(),
                detail: a.detail.clone(),
                data: json_flag("data", a.data.as_deref())?,
            };
            let s = open(g)?.append_event(&a.id, req, &a.m.to_mutation())?;
            print_session(out, &s);
            Ok(())
        }
        SessionCommand::Workflow(c) => super::workflow::run(c, g, out),
        SessionCommand::Budget(a) => super::budget::budget(a, g, out),
        SessionCommand::Usage(a) => super::budget::usage(a, g, out),
    }
}

fn create(a: &CreateArgs, g: &GlobalArgs, out: &Printer) -> Result<()> {
    let req = CreateSession {
        title: a.title.clone(),
        goal: a.goal.clone(),
        app: a.app.clone(),
        agent_id: a.agent_id.clone(),
        route: a.route.clone(),
        stage: a.stage.clone(),
        parent_session_id: a.parent.clone(),
        tags: a.tags.clone(),
        context: json_flag("context", a.context.as_deref())?,
        metadata: json_flag("metadata", a.metadata.as_deref())?,
        pending: a.pending,
        idempotency_key: a.idempotency_key.clone(),
        checkpoint: None,
    };
    let s = open(g)?.create_session(req)?;
    print_session(out, &s);
    Ok(())
}

fn list(a: &ListArgs, g: &GlobalArgs, out: &Printer) -> Result<()> {
    let req = ListSessions {
        statuses: a.statuses.clone(),
        app: a.app.clone(),
        agent_id: a.agent_id.clone(),
        tag: a.tag.clone(),
        parent: a.parent.clone(),
        since_ms: a
            .since
            .as_deref()
            .map(|t| parse_time("since", t))
            .transpose()?,
        until_ms: a
            .until
            .as_deref()
            .map(|t| parse_time("until", t))
            .transpose()?,
        order_updated: a.order == "updated",
        limit: a.limit,
        cursor: a.cursor.clone(),
    };
    let p = open(g)?.list_sessions(&req)?;
    out.success(&p, |p| render::page(p, req.order_updated));
    Ok(())
}
