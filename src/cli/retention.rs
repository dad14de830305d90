//! `logbook purge`: parsing, the confirmation prompt, the progress bar and
//! rendering; the purge itself is `Ledger::purge` (docs/design.md, "Retention").

use super::output::{write_stderr, Printer};
use super::{open, open_interruptible, render, GlobalArgs};
use clap::Args;
use logbook::clock::{format_ms, parse_time};
use logbook::ledger::{PurgeFilter, PurgePlan, PurgeReport, PurgeRequest};
use logbook::model::SessionStatus;
use logbook::{Error, Result};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// The exit status of a purge declined at the prompt: 1, as `grep` exits 1
/// when it finds nothing. No error is printed (nothing failed), only
/// `nothing purged` on stderr.
const DECLINED: u8 = 1;

fn parse_keep_last(s: &str) -> std::result::Result<u64, String> {
    s.parse::<u64>()
        .map_err(|_| "expected a number of sessions: an integer of 0 or more".to_owned())
}

/// `logbook purge`
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Only sessions that ended before TIME (RFC 3339 with an offset, or
    /// epoch ms)
    #[arg(long, value_name = "TIME")]
    ended_before: Option<String>,
    /// Only this app's sessions
    #[arg(long, value_name = "APP")]
    app: Option<String>,
    /// Only sessions in this ended status: completed, failed or cancelled
    /// (repeatable)
    #[arg(long = "status", value_name = "STATUS", value_parser = super::session::parse_status)]
    statuses: Vec<SessionStatus>,
    /// Keep the newest N ended sessions of each app (by end time)
    #[arg(long, value_name = "N", value_parser = parse_keep_last, allow_negative_numbers = true)]
    keep_last: Option<u64>,
    /// Only this session (repeatable)
    #[arg(long = "session", value_name = "ID")]
    sessions: Vec<String>,
    /// Print what would go (counts, bytes, the first sessions; under --json
    /// every chosen id in `session_ids`) and change nothing
    #[arg(long)]
    dry_run: bool,
    /// Purge without asking (required when stdin is not a terminal, and
    /// with --json)
    #[arg(long)]
    yes: bool,
    /// First write the chosen sessions, with all their rows, to FILE as
    /// JSON Lines (what `import` reads), flushed to disk; nothing is purged
    /// if that fails. FILE must not exist. Refused with --dry-run, which
    /// writes nothing
    #[arg(long, value_name = "FILE")]
    export: Option<PathBuf>,
}

fn filter(a: &PurgeArgs) -> Result<PurgeFilter> {
    Ok(PurgeFilter {
        ended_before_ms: a
            .ended_before
            .as_deref()
            .map(|t| parse_time("ended_before", t))
            .transpose()?,
        app: a.app.clone(),
        statuses: a.statuses.clone(),
        keep_last: a.keep_last,
        sessions: a.sessions.clone(),
    })
}

fn plan_text(p: &PurgePlan) -> String {
    let mut s = format!(
        "would purge {} session(s), {} event(s), {} byte(s) of text",
        p.sessions, p.events, p.bytes
    );
    if p.kept_live_descendant + p.kept_newest > 0 {
        s.push_str(&format!(
            "; kept: {} with a live descendant, {} among the newest per app",
            p.kept_live_descendant, p.kept_newest
        ));
    }
    s.push('\n');
    if let Some(r) = &p.resumes {
        s.push_str(&format!(
            "goes on with purge {}: {} of {} session(s) purged before it stopped\n",
            r.purge_id, r.sessions_purged, r.sessions_chosen
        ));
    }
    if !p.first.is_empty() {
        let rows: Vec<Vec<String>> = p
            .first
            .iter()
            .map(|x| {
                vec![
                    render::clean(&x.session_id),
                    render::clean(&x.status),
                    render::clean(x.app.as_deref().unwrap_or("-")),
                    x.ended_at_ms.map(format_ms).unwrap_or_else(|| "-".into()),
                    x.events.to_string(),
                    render::clean(&x.title),
                ]
            })
            .collect();
        s.push_str(&render::table(
            &["SESSION", "STATUS", "APP", "ENDED", "EVENTS", "TITLE"],
            &rows,
            &[4],
        ));
        if p.sessions > p.first.len() as u64 {
            s.push_str(&format!(
                "… and {} more (`purge --dry-run --json` lists every id)\n",
                p.sessions - p.first.len() as u64
            ));
        }
    }
    s
}

fn report_text(r: &PurgeReport) -> String {
    let Some(id) = r.purge_id else {
        return "nothing to purge\n".into();
    };
    let mut s = String::new();
    if let Some(e) = &r.export {
        s.push_str(&format!(
            "exported {} session(s), {} event(s) to {}\n",
            e.sessions,
            e.events,
            e.out.as_deref().unwrap_or("-")
        ));
    }
    s.push_str(&format!(
        "purge {id}{}: purged {} session(s), {} event(s) in {} batch(es) (longest {:.1} ms)\n",
        if r.resumed { " (resumed)" } else { "" },
        r.sessions,
        r.events,
        r.batches,
        r.longest_batch_ms
    ));
    if let Some(sp) = &r.space {
        if sp.bytes_returned > 0 {
            s.push_str(&format!(
                "returned {} byte(s) to the file system\n",
                sp.bytes_returned
            ));
        }
        if let Some(v) = &sp.vacuum_needed {
            s.push_str(&format!("note: {v}\n"));
        }
    }
    s
}

/// Asks on the terminal; true for `y` / `yes`.
fn confirm(p: &PurgePlan) -> Result<bool> {
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "{}purge {} session(s) for good? [y/N] ",
        plan_text(p),
        p.sessions
    );
    let _ = err.flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Error::StoreIo {
            context: format!("cannot read the answer: {e}"),
        })?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// Runs `purge`. `Ok(Some(1))` when the prompt was answered no: nothing
/// failed (so no error code), nothing was purged, and the exit status says
/// so.
pub fn purge(a: &PurgeArgs, g: &GlobalArgs, out: &Printer) -> Result<Option<ExitCode>> {
    let req = PurgeRequest {
        filter: filter(a)?,
        export: a.export.clone(),
    };
    // Before the database is opened, and before --yes is looked at.
    req.check(a.dry_run)?;
    if a.dry_run {
        let plan = open(g)?.purge_dry_run(&req)?;
        out.success(&plan, plan_text);
        return Ok(None);
    }
    if !a.yes {
        if !std::io::stdin().is_terminal() || out.json {
            return Err(Error::invalid(
                "yes",
                "purge deletes sessions for good: pass --yes to confirm (or --dry-run to see what would go)",
            ));
        }
        let plan = open(g)?.purge_plan(&req.filter)?;
        if plan.sessions == 0 && plan.resumes.is_none() {
            out.success(&plan, plan_text);
            return Ok(None);
        }
        if !confirm(&plan)? {
            write_stderr("nothing purged\n");
            return Ok(Some(ExitCode::from(DECLINED)));
        }
    }
    // Before any other thread starts (the progress bar's; see `signals`).
    let sig = super::signals::install();
    let ledger = open_interruptible(g, &sig.interrupt)?;
    let pb = std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} sessions purged ({eta} left)",
        ) {
            pb.set_style(style);
        }
        pb
    });
    let mut tick = |done: u64, total: u64| {
        if let Some(pb) = &pb {
            pb.set_length(total.max(done));
            pb.set_position(done);
        }
    };
    let result = ledger.purge(&req, &mut tick);
    if let Some(pb) = &pb {
        pb.finish_and_clear();
    }
    let report = result?;
    out.success(&report, report_text);
    Ok(None)
}
