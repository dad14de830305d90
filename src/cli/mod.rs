//! The `logbook` command line: parsing and rendering only.
//!
//! Each verb turns its arguments into a library request, calls one `Ledger`
//! method and hands the result to the printer. Behaviour lives in the library.

mod admin;
mod budget;
mod exit;
mod gate;
mod json_input;
mod mcp;
mod narrow;
mod output;
mod render;
mod retention;
mod run;
mod session;
mod signals;
mod sql;
mod summary;
mod timeline;
mod transfer;
mod workflow;

use clap::{Args, Parser, Subcommand};
use logbook::{ActorType, Ledger, LedgerOptions};
use std::path::PathBuf;
use std::process::ExitCode;

/// logbook: a ledger of agent work sessions, in one SQLite file or on a
/// PostgreSQL server.
///
/// Records what agents did — sessions, checkpoints, outcomes and an
/// append-only event timeline — in one SQLite file that many processes write
/// at once, or in a PostgreSQL database that agents on many hosts share;
/// operators query it with plain SQL.
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
    /// Database: a SQLite file's path, or a PostgreSQL server's
    /// postgres:// or postgresql:// URL (docs/postgres.md) [env: LOGBOOK_DB;
    /// default: $XDG_DATA_HOME/logbook/logbook.db, else
    /// ~/.local/share/logbook/logbook.db]; a file path is never a SQLite URI:
    /// a name beginning with `file:`, and `:memory:`, are INVALID_ARGUMENT
    #[arg(long, global = true, value_name = "PATH|URL")]
    db: Option<PathBuf>,
    /// Print one JSON envelope on stdout: {"ok":true,"data":…} or
    /// {"ok":false,"error":{…}}
    #[arg(long, global = true)]
    json: bool,
    /// How long a write waits for the database lock (on a server also: retries
    /// transient failures) before STORE_BUSY, in ms [env:
    /// LOGBOOK_BUSY_TIMEOUT_MS; default: 5000]
    #[arg(
        long,
        global = true,
        value_name = "MS",
        value_parser = parse_timeout,
        allow_negative_numbers = true
    )]
    busy_timeout_ms: Option<u64>,
    /// Open the database read-only: never create, migrate or write it (works
    /// on a file you may only read, and on read-only storage, where a copied
    /// -wal is read too); commands that write fail with STORE_IO
    #[arg(long, global = true)]
    read_only: bool,
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
    #[command(
        subcommand,
        after_help = "Example:\n  logbook session create --title \"fix login bug\" --app web\n  logbook session list --status active"
    )]
    Session(session::SessionCommand),
    /// Recompute every session's event hash chain and report the first break
    ///
    /// Checks that seqs run 0, 1, 2, … without gaps, that each event's
    /// prev_hash is the previous event's hash, that each hash is the SHA-256
    /// of the documented encoding (docs/schema.md, "Hash chain"), and that a
    /// session has no fewer events than its rev. Exits 0 when all hold;
    /// otherwise LEDGER_TAMPERED (exit 6) names the session, seq, and the
    /// expected and found values. Given ids, it also prints each one's head
    /// hash, to record elsewhere as an anchor. A missing database file is
    /// STORE_IO (exit 6): nothing is created.
    #[command(
        after_help = "Example:\n  logbook verify\n  logbook verify ses_1a2b3c4d5e6f7081 --json"
    )]
    Verify(timeline::VerifyArgs),
    /// Print the global event feed: every session's events in commit order
    ///
    /// Without --follow, prints one page and its next cursor; pass that
    /// cursor as --after to go on. A cursor is opaque: on SQLite an event_id,
    /// on a server `TX.EVENT_ID` (an event_id works there too). The human
    /// form is the table of `session events` with EVENT_ID and SESSION in
    /// front; --follow prints its header once, then each row as it commits.
    /// With --follow, prints events as they commit — every one exactly once,
    /// in a stable order (event_id on SQLite; on a server the committing
    /// transaction's, then event_id) — until
    /// interrupted (SIGINT: exit 0), stdout closes (exit 0), or --limit
    /// events have been printed; with --from-now, only the events written
    /// after it starts (none of the history). Under --json a page is one envelope
    /// {"events":[…],"next_cursor":C}; a follow prints JSON Lines, one event
    /// object per line. A follow stops with STORE_IO (exit 6) when the
    /// database file is replaced or removed under it (a backup moved into
    /// place). Errors: INVALID_ARGUMENT, SESSION_NOT_FOUND, STORE_IO,
    /// STORE_UNAVAILABLE.
    #[command(
        after_help = "Example:\n  logbook events --after 0 --limit 50\n  logbook events --follow --type checkpoint --json\n  logbook events --follow --from-now"
    )]
    Events(timeline::EventsArgs),
    /// Check the database: schema, integrity, foreign keys, hash chains,
    /// journal mode, file modes, WAL size, WAL match, free pages
    ///
    /// `free_pages` (always passes) shows the file's free pages and whether
    /// `purge` returns them to the file system (auto_vacuum incremental, every
    /// file made from schema version 7) or a one-time VACUUM is needed.
    ///
    /// On a PostgreSQL server the checks are schema, triggers (each one the
    /// migrations create is there and enabled: ALTER TABLE … DISABLE TRIGGER
    /// switches off invariants and foreign keys), hash chains and the
    /// server's version; a failing one is STORE_CORRUPT or LEDGER_TAMPERED.
    ///
    /// Exits 0 when every check passes. An index, view or table that is not
    /// logbook's (an operator's own, e.g. for a dashboard) is a warning: the
    /// check says `warning` and names it, and doctor still exits 0.
    /// Otherwise it prints the report and fails with the first failing
    /// check's code: STORE_CORRUPT (schema; a logbook table, index, trigger
    /// or view missing or altered, or an extra trigger or UNIQUE index,
    /// which can change or refuse logbook's writes; integrity, foreign
    /// keys, journal mode, WAL match), LEDGER_TAMPERED (hash chain) or
    /// STORE_IO (file modes, a WAL over 128 MiB) — exit 6 — with the whole
    /// report as the error's details under --json. wal_match fails (and is
    /// named first) when the file is damaged with its -wal applied but
    /// sound without it: the -wal is an earlier file's (a backup moved over
    /// the database while it was open); stop every process using the
    /// database and move the -wal and -shm aside. A missing database file
    /// is STORE_IO: nothing is created.
    #[command(after_help = "Example:\n  logbook doctor\n  logbook doctor --json")]
    Doctor,
    /// Write a consistent copy of the database to a new file, online
    ///
    /// Uses SQLite's backup API: the copy is one snapshot, taken while other
    /// processes keep writing; it is checked, then renamed into place (mode
    /// 0600). DEST must not exist. Restore by pointing --db (or LOGBOOK_DB)
    /// at the copy, or: stop every process using the database, move its -wal
    /// and -shm aside, then move the copy into place (README, "Backup and
    /// restore").
    ///
    /// SIGINT or SIGTERM during the copy drops it (no temp file is left)
    /// and exits 130 or 143 with INTERRUPTED.
    ///
    /// Errors: INVALID_ARGUMENT (DEST exists; names the database or its
    /// -wal, -shm, -journal or -lock, through .., symlinks or a hard link;
    /// or begins with file:), STORE_IO (DEST cannot be written), INTERRUPTED.
    #[command(after_help = "Example:\n  logbook backup ~/backups/logbook-2026-11-29.db")]
    Backup(admin::BackupArgs),
    /// Remove whole ended sessions for good, recorded and in short batches
    ///
    /// Chooses ended sessions (completed, failed, cancelled) by the filters
    /// (at least one): --ended-before, --app, --status (repeatable),
    /// --keep-last N per app. Live sessions (pending, active, paused) and
    /// sessions with a live descendant are never purged. A purged parent
    /// whose children remain is named by their parent_session_id and shown
    /// as purged. Each purged session leaves a tombstone (title, status,
    /// times, event count, newest event's hash) and the purge a row in
    /// `purges` (docs/schema.md, "Retention"); `v_purges` shows progress.
    ///
    /// The filter is checked first (INVALID_ARGUMENT naming it), before
    /// --yes. --dry-run prints what would go and changes nothing: the
    /// counts and the first 10 sessions, and under --json every chosen id
    /// in `session_ids` (all held in memory: about 60 bytes a session, 60 MB
    /// for a million). It refuses --export (INVALID_ARGUMENT, field
    /// `export`): a dry run writes no file. A real purge asks on a terminal,
    /// or needs --yes (always with --json); answering anything but y purges
    /// nothing, prints `nothing purged` on stderr and exits 1 (no error
    /// code: nothing failed). --export FILE first writes the chosen
    /// sessions as JSON Lines (`import` restores them), synced to disk; its
    /// errors name the field `export`. The JSON `filter` (in the plan and
    /// the report) is the filter object `purges.filter` records.
    /// Batches are short write transactions (at most 50 sessions or 1,000
    /// events), with a pause after each so writers beside it get the lock;
    /// SIGINT or SIGTERM stops between batches (exit 130 / 143),
    /// and the same command again finishes the purge, counting nothing
    /// twice. On SQLite the freed pages go back to the file system when the
    /// file has auto_vacuum=INCREMENTAL (every file created by this
    /// version); an older file needs one VACUUM, which purge explains.
    ///
    /// Errors: INVALID_ARGUMENT (no filter; a live status; --export with
    /// --dry-run, or a FILE that exists or names the database; no --yes off
    /// a terminal), STORE_IO, STORE_BUSY, INTERRUPTED.
    #[command(
        after_help = "Example:\n  logbook purge --ended-before 2026-06-01T00:00:00Z --dry-run\n  logbook purge --app ci --keep-last 100 --export ci-old.jsonl --yes"
    )]
    Purge(retention::PurgeArgs),
    /// Run one read-only SQL statement and print the result
    ///
    /// The database is opened read-only (SQLITE_OPEN_READ_ONLY and
    /// query_only, no ATTACH), so nothing can be written: a statement that
    /// would write, or more than one statement, is INVALID_ARGUMENT. Prints
    /// a table, --csv, or under --json {"columns":[…],"rows":[[…],…]}
    /// (blobs as hex). See docs/schema.md for the tables and views.
    #[command(
        after_help = "Example:\n  logbook sql \"SELECT status, count(*) FROM sessions GROUP BY status\"\n  logbook sql \"SELECT * FROM events WHERE type = 'checkpoint'\" --csv"
    )]
    Sql(sql::SqlArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    ///
    /// Errors: INVALID_ARGUMENT (another shell).
    #[command(
        after_help = "Example:\n  logbook completions bash > ~/.local/share/bash-completion/completions/logbook\n  logbook completions zsh > \"${fpath[1]}/_logbook\"\n  logbook completions fish > ~/.config/fish/completions/logbook.fish"
    )]
    Completions(sql::CompletionsArgs),
    /// Open, approve, reject and list a session's gates
    ///
    /// A gate records a decision; it authorizes nothing. `auto` gates are
    /// approved at once; `user-approval` and `step-confirm` gates pause the
    /// session until approved (it resumes) or rejected (it fails, or is
    /// cancelled with --abort).
    #[command(
        subcommand,
        after_help = "Example:\n  logbook gate open ses_1a2b3c4d5e6f7081 --gate deploy --kind user-approval\n  logbook gate approve ses_1a2b3c4d5e6f7081 --gate deploy"
    )]
    Gate(gate::GateCommand),
    /// Export sessions with all their events (jsonl or a Phelix folder)
    ///
    /// jsonl (the default, as for `import`): one line per session in
    /// session id order, every column and
    /// event with its hash; importing it into an empty database and
    /// exporting again gives the same bytes. Without --out it goes to
    /// stdout (then --json is refused: the export is the output). phelix:
    /// --out DIR gets DIR/sessions/<id>.json in the Phelix schema.
    ///
    /// SIGINT or SIGTERM stops it before the next session: the temp file is
    /// removed (--out FILE is then not written; Phelix files already
    /// written stay, each whole), the counts so far are printed (under
    /// --json as the INTERRUPTED envelope's details), and it exits 130
    /// (SIGINT) or 143 (SIGTERM). A failure part-way carries the same
    /// counts. Errors: INVALID_ARGUMENT (also an --out, or a redirected
    /// stdout, that names the database or its -wal, -shm, -journal or
    /// -lock, through .., symlinks or a hard link; nothing is written),
    /// SESSION_NOT_FOUND (a --session that does not exist; nothing is
    /// written), STORE_IO, INTERRUPTED. See docs/import-export.md.
    #[command(
        after_help = "Example:\n  logbook export --out backup.jsonl\n  logbook export --format phelix --session ses_1a2b3c4d5e6f7081 --out ./phelix"
    )]
    Export(transfer::ExportArgs),
    /// Import sessions from a jsonl export, a Phelix folder or an Amber tree
    ///
    /// Streams the input, one session at a time. A session whose id exists
    /// is skipped (so a re-import changes nothing); a bad session is
    /// rejected whole and listed with its file, line and field (so is one
    /// with a time more than 24 hours after now, and one whose status,
    /// rev, end time, final result or checkpoint disagrees with its own
    /// events, in every format). Exit 0 when nothing was
    /// rejected; otherwise INVALID_ARGUMENT (exit 2) whose
    /// details hold the full report; the good sessions are imported either
    /// way. Amber sessions get the id ses_ + the first 16 hex of
    /// SHA-256("amber:" + uuid).
    ///
    /// SIGINT or SIGTERM stops it between two batches (of at most 256
    /// sessions, each committed whole): it prints the counts of what was
    /// committed (under --json as the INTERRUPTED envelope's details) and
    /// exits 130 (SIGINT) or 143 (SIGTERM); running it again skips what was
    /// imported. A disk or lock failure part-way (STORE_IO, STORE_BUSY)
    /// carries the same counts in its details. See docs/import-export.md.
    /// Errors: INVALID_ARGUMENT (as above, an unknown format, or a SRC that
    /// is not a file or folder of that format), STORE_IO (a read of SRC or
    /// a write fails), STORE_BUSY, INTERRUPTED.
    #[command(
        after_help = "Example:\n  logbook import --format jsonl backup.jsonl\n  logbook import --format amber ~/project --json"
    )]
    Import(transfer::ImportArgs),
    /// Create, change and read runs: executions inside a session
    #[command(
        subcommand,
        after_help = "Example:\n  logbook run create ses_1a2b3c4d5e6f7081 --input '{\"prompt\":\"fix it\"}'\n  logbook run start run_0123456789abcdef"
    )]
    Run(run::RunCommand),
    /// Serve the session tools to an MCP client over stdio
    #[command(
        subcommand,
        after_help = "Example:\n  logbook mcp serve --db ~/.local/share/logbook/logbook.db"
    )]
    Mcp(mcp::McpCommand),
}

fn options(global: &GlobalArgs) -> logbook::Result<LedgerOptions> {
    let mut opts = LedgerOptions::from_env()?;
    opts.path = Some(logbook::ledger::resolve_path(global.db.as_deref())?);
    if let Some(ms) = global.busy_timeout_ms {
        opts.busy_timeout_ms = ms;
    }
    opts.actor = ActorType::Cli;
    // One command per process: SQLite's default cache (see DEFAULT_PAGE_CACHE_KIB).
    opts.page_cache_kib = logbook::store::SQLITE_DEFAULT_CACHE_KIB;
    Ok(opts)
}

/// Opens the ledger with the CLI's actor and the global flags over the
/// environment; read-only under `--read-only`.
fn open(global: &GlobalArgs) -> logbook::Result<Ledger> {
    if global.read_only {
        return open_read_only(global);
    }
    Ledger::open(options(global)?)
}

/// Opens the ledger as [`open`] does, for a long command that stops at
/// SIGINT/SIGTERM: the ledger polls `interrupt` (see `signals`).
fn open_interruptible(
    global: &GlobalArgs,
    interrupt: &logbook::Interrupt,
) -> logbook::Result<Ledger> {
    let mut opts = options(global)?;
    opts.interrupt = interrupt.clone();
    if global.read_only {
        return Ledger::open_read_only(opts);
    }
    Ledger::open(opts)
}

/// Opens the ledger read-only, whatever the flags say (`logbook sql`).
fn open_read_only(global: &GlobalArgs) -> logbook::Result<Ledger> {
    Ledger::open_read_only(options(global)?)
}

/// Opens the ledger for a command that checks it (`doctor`, `verify`):
/// never creates a missing file ([`Ledger::open_existing`]).
fn open_existing(global: &GlobalArgs) -> logbook::Result<Ledger> {
    if global.read_only {
        return open_read_only(global);
    }
    Ledger::open_existing(options(global)?)
}

/// Parses the command line, runs the command, and returns its exit code.
pub fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let json = exit::wants_json(&args);
    let cli = match narrow::parse(&args).map_or_else(|| Cli::try_parse_from(&args), Ok) {
        Ok(cli) => cli,
        Err(e) => return exit::clap_error(&e, json),
    };
    // `mcp serve` owns stdout for protocol messages: its errors go to stderr.
    let mcp = matches!(cli.command, Command::Mcp(_));
    let out = output::Printer::new(cli.global.json && !mcp);
    let result = match &cli.command {
        Command::Session(cmd) => session::run(cmd, &cli.global, &out).map(|()| None),
        Command::Verify(args) => timeline::verify(args, &cli.global, &out).map(|()| None),
        Command::Events(args) => timeline::events(args, &cli.global, &out).map(|()| None),
        Command::Doctor => admin::doctor(&cli.global, &out).map(|()| None),
        Command::Backup(args) => admin::backup(args, &cli.global, &out).map(|()| None),
        Command::Purge(args) => retention::purge(args, &cli.global, &out),
        Command::Sql(args) => sql::sql(args, &cli.global, &out).map(|()| None),
        Command::Completions(args) => sql::completions(args, &out).map(|()| None),
        Command::Gate(cmd) => gate::run(cmd, &cli.global, &out).map(|()| None),
        Command::Export(args) => transfer::export(args, &cli.global, &out).map(|()| None),
        Command::Import(args) => transfer::import(args, &cli.global, &out),
        Command::Run(cmd) => run::run(cmd, &cli.global, &out).map(|()| None),
        Command::Mcp(cmd) => mcp::run(cmd, &cli.global).map(|()| None),
    };
    let code = match result {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(code)) => code,
        Err(e) => exit::report(&e, &out),
    };
    if output::output_failed() {
        return ExitCode::from(1);
    }
    code
}
