//! `logbook run …`: one Args struct and one small function per verb
//! (docs/design.md, "Runs"). Run mutations print the whole run after the
//! change as `data`.

use super::budget::parse_int;
use super::json_input::json_flag_text;
use super::output::Printer;
use super::render::{clean, preview, table};
use super::session::MutationArgs;
use super::{open, GlobalArgs};
use clap::{Args, Subcommand};
use logbook::clock::format_ms;
use logbook::{CreateRun, Result, Run, RunError, RunStatus, RunUsageDelta, Written};

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Create a pending run in a live session
    ///
    /// Event run_created (with run_id) on the session; the session's rev
    /// goes up by 1, as for every run change. Errors: INVALID_ARGUMENT
    /// (input over 4 MiB, metadata over 256 KiB, not JSON objects),
    /// SESSION_NOT_FOUND, SESSION_INVALID_TRANSITION (terminal session),
    /// SESSION_CONFLICT, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook run create ses_1a2b3c4d5e6f7081 --input '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'"
    )]
    Create(CreateArgs),
    /// Start a pending run (pending → running); at most one running run per session
    ///
    /// Errors: RUN_NOT_FOUND, RUN_INVALID_TRANSITION (not pending, or the
    /// session has a running run: details.running_run_id),
    /// SESSION_INVALID_TRANSITION, SESSION_CONFLICT, STORE_BUSY.
    #[command(after_help = "Example:\n  logbook run start run_0f1e2d3c4b5a6978")]
    Start(RunIdArgs),
    /// Add token usage to a running run (and to its session's usage)
    ///
    /// Each amount is an integer from 0 to 2^53-1; a run or session total
    /// that would pass 2^53-1 is refused (INVALID_ARGUMENT). A budget
    /// crossed by this write applies its policy.
    ///
    /// Errors: INVALID_ARGUMENT, RUN_NOT_FOUND, RUN_INVALID_TRANSITION (not
    /// running), SESSION_INVALID_TRANSITION (the session
    /// ended), SESSION_CONFLICT, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook run usage run_0f1e2d3c4b5a6978 --input-tokens 100 --output-tokens 50 --api-calls 1"
    )]
    Usage(UsageArgs),
    /// Count one more turn of a running run
    ///
    /// Errors: INVALID_ARGUMENT, RUN_NOT_FOUND, RUN_INVALID_TRANSITION (not
    /// running), SESSION_INVALID_TRANSITION (the session
    /// ended), SESSION_CONFLICT, STORE_BUSY.
    #[command(after_help = "Example:\n  logbook run turn run_0f1e2d3c4b5a6978")]
    Turn(RunIdArgs),
    /// Complete a running run, optionally with an output
    ///
    /// Errors: INVALID_ARGUMENT (output over 4 MiB, not a JSON object),
    /// RUN_NOT_FOUND, RUN_INVALID_TRANSITION (not running), SESSION_INVALID_TRANSITION (the session
    /// ended), SESSION_CONFLICT,
    /// STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook run complete run_0f1e2d3c4b5a6978 --output '{\"content\":\"Hello!\",\"stop_reason\":\"end_turn\"}'"
    )]
    Complete(CompleteArgs),
    /// Fail a pending or running run with an error code and message
    ///
    /// Errors: INVALID_ARGUMENT, RUN_NOT_FOUND, RUN_INVALID_TRANSITION (already
    /// ended), SESSION_INVALID_TRANSITION (the session
    /// ended), SESSION_CONFLICT, STORE_BUSY.
    #[command(
        after_help = "Example:\n  logbook run fail run_0f1e2d3c4b5a6978 --code provider_timeout --message \"Timed out\""
    )]
    Fail(FailArgs),
    /// Cancel a pending or running run
    ///
    /// Errors: INVALID_ARGUMENT, RUN_NOT_FOUND, RUN_INVALID_TRANSITION (already
    /// ended), SESSION_INVALID_TRANSITION (the session
    /// ended), SESSION_CONFLICT, STORE_BUSY.
    #[command(after_help = "Example:\n  logbook run cancel run_0f1e2d3c4b5a6978")]
    Cancel(RunIdArgs),
    /// Mark a pending or running run as timed out
    ///
    /// Errors: INVALID_ARGUMENT, RUN_NOT_FOUND, RUN_INVALID_TRANSITION (already
    /// ended), SESSION_INVALID_TRANSITION (the session
    /// ended), SESSION_CONFLICT, STORE_BUSY.
    #[command(after_help = "Example:\n  logbook run timeout run_0f1e2d3c4b5a6978")]
    Timeout(RunIdArgs),
    /// Show one run
    ///
    /// Errors: INVALID_ARGUMENT (malformed id), RUN_NOT_FOUND.
    #[command(after_help = "Example:\n  logbook run show run_0f1e2d3c4b5a6978 --json")]
    Show(ShowArgs),
    /// List a session's runs in creation order
    ///
    /// Errors: INVALID_ARGUMENT (malformed id, unknown status), SESSION_NOT_FOUND.
    #[command(after_help = "Example:\n  logbook run list ses_1a2b3c4d5e6f7081 --status completed")]
    List(ListArgs),
    /// Print the session's running run (null when none)
    ///
    /// Errors: INVALID_ARGUMENT (malformed id), SESSION_NOT_FOUND.
    #[command(after_help = "Example:\n  logbook run active ses_1a2b3c4d5e6f7081 --json")]
    Active(SessionArg),
}

#[derive(Debug, Args)]
pub struct RunIdArgs {
    /// Run id (run_ + 16 hex)
    run: String,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Run id (run_ + 16 hex)
    run: String,
}

#[derive(Debug, Args)]
pub struct SessionArg {
    /// Session id (ses_ + 16 hex)
    session: String,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Session id
    session: String,
    /// Input: a JSON object, @FILE or @- (stdin); at most 4 MiB compact, numbers exact
    /// within 64 bits
    #[arg(long, value_name = "JSON")]
    input: Option<String>,
    /// Metadata: a JSON object, @FILE or @-; at most 256 KiB compact, numbers exact
    /// within 64 bits
    #[arg(long, value_name = "JSON")]
    metadata: Option<String>,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Run id
    run: String,
    /// Input tokens to add
    #[arg(long, value_name = "N", value_parser = parse_int, allow_negative_numbers = true)]
    input_tokens: Option<i64>,
    /// Output tokens to add
    #[arg(long, value_name = "N", value_parser = parse_int, allow_negative_numbers = true)]
    output_tokens: Option<i64>,
    /// API calls to add
    #[arg(long, value_name = "N", value_parser = parse_int, allow_negative_numbers = true)]
    api_calls: Option<i64>,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// Run id
    run: String,
    /// Output: a JSON object, @FILE or @-; at most 4 MiB compact, numbers exact
    /// within 64 bits
    #[arg(long, value_name = "JSON")]
    output: Option<String>,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct FailArgs {
    /// Run id
    run: String,
    /// Error code, 1–128 characters, e.g. provider_timeout (a value such as
    /// `-x` is attached: `--code=-x`)
    #[arg(long, allow_negative_numbers = true)]
    code: String,
    /// Error message, 1–4096 characters (a value such as `-x` is attached:
    /// `--message=-x`)
    #[arg(long, allow_negative_numbers = true)]
    message: String,
    #[command(flatten)]
    m: MutationArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Session id
    session: String,
    /// Status filter (can be repeated: any of them)
    #[arg(long = "status", value_name = "S", value_parser = parse_status)]
    statuses: Vec<RunStatus>,
}

fn parse_status(s: &str) -> std::result::Result<RunStatus, String> {
    s.parse()
}

/// Parses a run JSON flag (the library checks object-ness and the 4 MiB
/// cap; `json_text` refuses a number that would not be stored exactly).
fn json_arg(field: &str, v: Option<&str>) -> Result<Option<serde_json::Value>> {
    json_flag_text(field, v)?
        .map(|t| logbook::validate::json_text(field, &t))
        .transpose()
}

pub fn run(cmd: &RunCommand, g: &GlobalArgs, out: &Printer) -> Result<()> {
    let print = |r: Written<Run>| out.written(&r, render_run);
    match cmd {
        RunCommand::Create(a) => {
            let req = CreateRun {
                input: json_arg("input", a.input.as_deref())?,
                metadata: json_arg("metadata", a.metadata.as_deref())?,
            };
            print(open(g)?.create_run(&a.session, req, &a.m.to_mutation())?);
        }
        RunCommand::Start(a) => print(open(g)?.start_run(&a.run, &a.m.to_mutation())?),
        RunCommand::Usage(a) => {
            let req = RunUsageDelta {
                input_tokens: a.input_tokens,
                output_tokens: a.output_tokens,
                api_calls: a.api_calls,
            };
            print(open(g)?.record_run_usage(&a.run, req, &a.m.to_mutation())?);
        }
        RunCommand::Turn(a) => print(open(g)?.increment_turn(&a.run, &a.m.to_mutation())?),
        RunCommand::Complete(a) => {
            let output = json_arg("output", a.output.as_deref())?;
            print(open(g)?.complete_run(&a.run, output, &a.m.to_mutation())?);
        }
        RunCommand::Fail(a) => {
            let e = RunError {
                code: a.code.clone(),
                message: a.message.clone(),
            };
            print(open(g)?.fail_run(&a.run, e, &a.m.to_mutation())?);
        }
        RunCommand::Cancel(a) => print(open(g)?.cancel_run(&a.run, &a.m.to_mutation())?),
        RunCommand::Timeout(a) => print(open(g)?.timeout_run(&a.run, &a.m.to_mutation())?),
        RunCommand::Show(a) => print(Written::applied(open(g)?.get_run(&a.run)?)),
        RunCommand::List(a) => {
            let runs = open(g)?.list_runs(&a.session, &a.statuses)?;
            out.success(&runs, |r| render_list(r));
        }
        RunCommand::Active(a) => {
            let r = open(g)?.active_run(&a.session)?;
            out.success(&r, |r| match r {
                Some(r) => render_run(r),
                None => "no running run\n".to_owned(),
            });
        }
    }
    Ok(())
}

fn kv(out: &mut String, key: &str, value: &str) {
    out.push_str(&format!("{key:<11}{value}\n"));
}

fn render_run(r: &Run) -> String {
    let mut out = String::new();
    kv(&mut out, "run", r.run_id.as_str());
    kv(&mut out, "session", &r.session_id);
    kv(&mut out, "status", r.status.as_str());
    kv(
        &mut out,
        "usage",
        &format!(
            "{} in, {} out, {} api calls",
            r.usage.input_tokens, r.usage.output_tokens, r.usage.api_calls
        ),
    );
    kv(&mut out, "turns", &r.turn_count.to_string());
    kv(&mut out, "created", &format_ms(r.created_at_ms));
    if let Some(t) = r.started_at_ms {
        kv(&mut out, "started", &format_ms(t));
    }
    if let Some(t) = r.ended_at_ms {
        kv(&mut out, "ended", &format_ms(t));
    }
    if let Some(e) = &r.error {
        kv(
            &mut out,
            "error",
            &format!("{}: {}", clean(&e.code), preview(&e.message, 80)),
        );
    }
    if let Some(i) = &r.input {
        kv(&mut out, "input", &preview(i.get(), 80));
    }
    if let Some(o) = &r.output {
        kv(&mut out, "output", &preview(o.get(), 80));
    }
    out
}

fn render_list(runs: &[Run]) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.run_id.to_string(),
                r.status.as_str().to_owned(),
                (r.usage.input_tokens + r.usage.output_tokens).to_string(),
                r.turn_count.to_string(),
                format_ms(r.created_at_ms),
            ]
        })
        .collect();
    table(
        &["RUN", "STATUS", "TOKENS", "TURNS", "CREATED"],
        &rows,
        &[2, 3],
    )
}
