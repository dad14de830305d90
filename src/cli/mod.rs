//! The `logbook` command line: parsing and rendering only.
//!
//! Each verb turns its arguments into a library request, calls one `Ledger`
//! method and hands the result to the printer. Behaviour lives in the library.

mod admin;
mod exit;
mod mcp;
mod output;
mod render;
mod session;
mod timeline;

use clap::{Args, Parser, Subcommand};
use logbook::{ActorType, Ledger, LedgerOptions};
use std::path::PathBuf;
use std::process::ExitCode;

/// logbook: an embedded, SQLite-backed ledger of agent work sessions.
///
/// Records what agents did — sessions, checkpoints, outcomes and an
/// append-only event timeline — in one SQLite file that many processes write
/// at once and operators query with plain SQL.
#[derive(Debug, Parser)]
#[command(
    name = "logbook",
    version,
    propagate_version = true,
    max_term_width = 100
)]
#[command(
    after_help = "Example:\n  logbook session create --title \"fix login bug\" --app web --json"
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command accepts.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Database file [env: LOGBOOK_DB; default: $XDG_DATA_HOME/logbook/logbook.db,
    /// else ~/.local/share/logbook/logbook.db]
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Print one JSON envelope on stdout: {"ok":true,"data":…} or
    /// {"ok":false,"error":{…}}
    #[arg(long, global = true)]
    json: bool,
    /// How long a write waits for the database lock before STORE_BUSY, in ms
    /// [env: LOGBOOK_BUSY_TIMEOUT_MS; default: 5000]
    #[arg(long, global = true, value_name = "MS", value_parser = parse_timeout)]
    busy_timeout_ms: Option<u64>,
}

fn parse_timeout(s: &str) -> Result<u64, String> {
    logbook::ledger::parse_timeout("--busy-timeout-ms", s)
        .map_err(|_| "expected an integer number of ms from 0 to 3600000".to_owned())
}

#[derive(Debug, Subcommand)]
// Parsed once per process; boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Command {
    /// Create, change and read sessions
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// Recompute every session's event hash chain and report the first break
    ///
    /// Checks that seqs run 0, 1, 2, … without gaps, that each event's
    /// prev_hash is the previous event's hash, that each hash is the SHA-256
    /// of the documented encoding (docs/schema.md, "Hash chain"), and that a
    /// session has no fewer events than its rev. Exits 0 when all hold;
    /// otherwise LEDGER_TAMPERED (exit 6) names the session, seq, and the
    /// expected and found values. Given ids, it also prints each one's head
    /// hash, to record elsewhere as an anchor.
    #[command(
        after_help = "Example:\n  logbook verify\n  logbook verify ses_1a2b3c4d5e6f7081 --json"
    )]
    Verify(timeline::VerifyArgs),
    /// Print the global event feed: every session's events by event_id
    ///
    /// Without --follow, prints one page and its next cursor; pass that
    /// cursor as --after to go on. With --follow, prints events as they
    /// commit — every one exactly once, in event_id order — until
    /// interrupted (SIGINT: exit 0), stdout closes (exit 0), or --limit
    /// events have been printed. Under --json a page is one envelope
    /// {"events":[…],"next_cursor":C}; a follow prints JSON Lines, one event
    /// object per line. Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND.
    #[command(
        after_help = "Example:\n  logbook events --after 0 --limit 50\n  logbook events --follow --type checkpoint --json"
    )]
    Events(timeline::EventsArgs),
    /// Check the database: schema, integrity, foreign keys, hash chains,
    /// journal mode, file modes, WAL size
    ///
    /// Exits 0 when every check passes. Otherwise it prints the report and
    /// fails with the first failing check's code: STORE_CORRUPT (schema,
    /// integrity, foreign keys, journal mode), LEDGER_TAMPERED (hash chain)
    /// or STORE_IO (file modes, a WAL over 128 MiB) — exit 6 — with the
    /// whole report as the error's details under --json.
    #[command(after_help = "Example:\n  logbook doctor\n  logbook doctor --json")]
    Doctor,
    /// Write a consistent copy of the database to a new file, online
    ///
    /// Uses SQLite's backup API: the copy is one snapshot, taken while other
    /// processes keep writing; it is checked, then renamed into place (mode
    /// 0600). DEST must not exist. Restore by pointing --db (or LOGBOOK_DB)
    /// at the copy, or moving it into place while no logbook runs.
    #[command(after_help = "Example:\n  logbook backup ~/backups/logbook-2026-11-29.db")]
    Backup(admin::BackupArgs),
    /// Serve the session tools to an MCP client over stdio
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
}

/// Opens the ledger with the CLI's actor and the global flags over the
/// environment.
fn open(global: &GlobalArgs) -> logbook::Result<Ledger> {
    let mut opts = LedgerOptions::from_env()?;
    opts.path = Some(logbook::ledger::resolve_path(global.db.as_deref())?);
    if let Some(ms) = global.busy_timeout_ms {
        opts.busy_timeout_ms = ms;
    }
    opts.actor = ActorType::Cli;
    Ledger::open(opts)
}

/// Parses the command line, runs the command, and returns its exit code.
pub fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json = exit::wants_json(&args);
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return exit::clap_error(&e, json),
    };
    // `mcp serve` owns stdout for protocol messages: its errors go to stderr.
    let mcp = matches!(cli.command, Command::Mcp(_));
    let out = output::Printer::new(cli.global.json && !mcp);
    let result = match &cli.command {
        Command::Session(cmd) => session::run(cmd, &cli.global, &out),
        Command::Verify(args) => timeline::verify(args, &cli.global, &out),
        Command::Events(args) => timeline::events(args, &cli.global, &out),
        Command::Doctor => admin::doctor(&cli.global, &out),
        Command::Backup(args) => admin::backup(args, &cli.global, &out),
        Command::Mcp(cmd) => mcp::run(cmd, &cli.global),
    };
    let code = match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit::report(&e, &out),
    };
    if output::output_failed() {
        return ExitCode::from(1);
    }
    code
}
