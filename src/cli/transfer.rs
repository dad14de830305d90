//! `logbook export` and `logbook import`: arguments, the progress bar, and
//! the summary. The work is `Ledger::export_*` / `Ledger::import*`.

use super::exit;
use super::output::{write_stderr, write_stdout, Printer};
use super::{open_interruptible, GlobalArgs};
use clap::Args;
use logbook::store::DbFiles;
use logbook::{Error, ErrorCode, ExportFormat, ImportFormat, ImportReport, Result};
use std::io::{ErrorKind, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

/// `logbook export`
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Output format: jsonl (one session per line, every column and event;
    /// re-imports exactly) or phelix (DIR/sessions/<id>.json), as `import`
    /// reads them
    #[arg(long, value_name = "FORMAT", value_parser = parse_export_format, default_value = "jsonl")]
    format: ExportFormat,
    /// Export only this session (can be repeated; default: every session)
    #[arg(long = "session", value_name = "ID")]
    sessions: Vec<String>,
    /// Write to this file (jsonl) or folder (phelix, required) instead of
    /// stdout (`-` is stdout); files are created 0600 and new folders 0700;
    /// never the database or one of its companions, nor for jsonl an
    /// existing folder (INVALID_ARGUMENT, before anything is read)
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
}

/// `logbook import`
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Input format: jsonl (a file, or - for stdin), phelix (a data folder)
    /// or amber (a project folder, its .amber, or .amber/sessions) [default:
    /// jsonl for a file or -; a folder needs phelix or amber]
    #[arg(long, value_name = "FORMAT", value_parser = parse_import_format)]
    format: Option<ImportFormat>,
    /// The file or folder to read
    #[arg(value_name = "SRC")]
    src: PathBuf,
}

fn parse_export_format(s: &str) -> std::result::Result<ExportFormat, String> {
    s.parse()
}

fn parse_import_format(s: &str) -> std::result::Result<ImportFormat, String> {
    s.parse()
}

/// Whether an error is only a closed stdout (a reader that stopped early).
fn broken_pipe(e: &Error) -> bool {
    matches!(e.root(), Error::Io { source, .. } if source.kind() == ErrorKind::BrokenPipe)
}

fn stdio_err(e: std::io::Error) -> Error {
    Error::Io {
        context: "cannot use the standard streams".to_owned(),
        source: e,
    }
}

pub fn export(args: &ExportArgs, global: &GlobalArgs, out: &Printer) -> Result<()> {
    // Before any other thread starts (see `signals`).
    let sig = super::signals::install();
    // `--out -` is stdout, as `-` is stdin for `import`.
    let to = args.out.as_ref().filter(|p| p.as_os_str() != "-");
    if to.is_none() && args.format == ExportFormat::Jsonl && !out.json {
        // Before opening (which would write a schema into an emptied file):
        // a shell may have pointed stdout at the database itself.
        let db = logbook::ledger::resolve_path(global.db.as_deref())?;
        DbFiles::of(&db)?.refuse_open(std::io::stdout(), "stdout")?;
    }
    let ledger = open_interruptible(global, &sig.interrupt)?;
    let report = match (args.format, to) {
        (ExportFormat::Jsonl, None) => {
            if out.json {
                return Err(Error::invalid(
                    "--json",
                    "needs --out FILE: without it, or with --out -, the export itself is written to stdout",
                ));
            }
            // Unbuffered (each line is written whole before it is counted),
            // and woken by a signal even when the reader has stopped.
            let mut stdout = sig.stdout().map_err(stdio_err)?;
            return match ledger.export_jsonl(&args.sessions, &mut stdout) {
                Err(e) if broken_pipe(&e) => Ok(()),
                other => other.map(|_| ()),
            };
        }
        (ExportFormat::Jsonl, Some(path)) => ledger.export_jsonl_file(&args.sessions, path)?,
        (ExportFormat::Phelix, Some(dir)) => ledger.export_phelix(&args.sessions, dir)?,
        (ExportFormat::Phelix, None) => {
            return Err(Error::invalid(
                "--out",
                "is required with --format phelix, and must be a folder",
            ))
        }
    };
    out.success(&report, |r| {
        format!(
            "exported {} session(s), {} event(s) to {}\n",
            r.sessions,
            r.events,
            r.out.as_deref().unwrap_or("-")
        )
    });
    Ok(())
}

/// A spinner on stderr, only when stderr is a terminal.
fn progress_bar() -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new_spinner();
    pb.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(pb)
}

fn counts(r: &ImportReport) -> String {
    format!(
        "imported {}, skipped {}, rejected {}; {} event(s) written",
        r.imported, r.skipped, r.rejected, r.events
    )
}

/// Runs the import. Exit 0 when nothing was rejected; otherwise an
/// INVALID_ARGUMENT failure (exit 2) whose `details` is the whole report
/// (the sessions that were fine are imported all the same).
pub fn import(args: &ImportArgs, global: &GlobalArgs, out: &Printer) -> Result<Option<ExitCode>> {
    let format = match args.format {
        Some(f) => f,
        None if args.src.is_dir() => {
            return Err(Error::invalid(
                "--format",
                "a folder is imported with --format phelix or --format amber",
            ))
        }
        None => ImportFormat::Jsonl,
    };
    // Before any other thread starts (the spinner's; see `signals`).
    let sig = super::signals::install();
    let ledger = open_interruptible(global, &sig.interrupt)?;
    let pb = progress_bar();
    let mut tick = |r: &ImportReport| {
        // Called once per batch (at most 256 sessions).
        if let Some(pb) = &pb {
            pb.set_message(counts(r));
        }
    };
    let result = if args.src.as_os_str() == "-" {
        if format != ImportFormat::Jsonl {
            return Err(Error::invalid(
                "SRC",
                "`-` (stdin) is for --format jsonl only",
            ));
        }
        let stdin = sig.stdin().map_err(stdio_err)?;
        let stdin = Box::new(std::io::BufReader::with_capacity(256 * 1024, stdin));
        ledger.import_jsonl_stream(stdin, "-", &mut tick)
    } else {
        ledger.import(format, &args.src, &mut tick)
    };
    if let Some(pb) = &pb {
        pb.finish_and_clear();
    }
    let report = result?;
    if report.rejected == 0 {
        out.success(&report, |r| format!("{}\n", counts(r)));
        return Ok(None);
    }
    let message = format!(
        "{} session(s) rejected (nothing of them was written); {}",
        report.rejected,
        counts(&report)
    );
    if !out.json {
        write_stdout(format!("{}\n", counts(&report)).as_bytes());
        let mut s = String::new();
        for r in &report.rejections {
            let line = r.line.map(|l| format!(":{l}")).unwrap_or_default();
            let id = r
                .session_id
                .as_deref()
                .map(|i| format!(" {i}"))
                .unwrap_or_default();
            s.push_str(&format!(
                "  {}{line}{id}: `{}` {}\n",
                r.file, r.field, r.reason
            ));
        }
        if report.rejections_omitted > 0 {
            s.push_str(&format!("  … and {} more\n", report.rejections_omitted));
        }
        let code = exit::failure(
            ErrorCode::InvalidArgument,
            &message,
            serde_json::Value::Null,
            false,
        );
        write_stderr(&s);
        return Ok(Some(code));
    }
    let details = serde_json::to_value(&report)
        .map_err(|e| Error::internal(format!("cannot serialize the report: {e}")))?;
    Ok(Some(exit::failure(
        ErrorCode::InvalidArgument,
        &message,
        details,
        true,
    )))
}
