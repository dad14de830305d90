//! `logbook verify` (and the global event feed): the timeline across sessions.

use super::output::{write_stdout, Printer};
use super::{open, open_existing, render, GlobalArgs};
use clap::Args;
use logbook::{Error, ExportOutcome, ExportSession, Result};

/// `logbook verify [ID]...`
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Sessions to verify (default: every session)
    #[arg(value_name = "ID")]
    ids: Vec<String>,
    /// Also check FILE (a `purge --export` or `export` output) against this
    /// ledger, each session by outcome: matched (purged here, and the chain
    /// recomputed from the file ends in its tombstone's event count and
    /// head hash), not purged here (the session is still here), or no
    /// tombstone (neither it nor a tombstone of it is here). Exit 0 only
    /// when at least one session matched and none mismatched: a mismatch is
    /// LEDGER_TAMPERED (exit 6), a file with no match INVALID_ARGUMENT
    /// (exit 2, field `export`)
    #[arg(long, value_name = "FILE")]
    export: Option<std::path::PathBuf>,
}

pub fn verify(args: &VerifyArgs, global: &GlobalArgs, out: &Printer) -> Result<()> {
    let ledger = open_existing(global)?;
    let report = match ledger.verify_with_export(&args.ids, args.export.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            // The sessions of a file that proves nothing go to stdout as a
            // table; the error follows on stderr (under --json, in its
            // details).
            if let (Error::ExportUnproven { sessions, .. }, false) = (&e, out.json) {
                write_stdout(export_table(sessions).as_bytes());
            }
            return Err(e);
        }
    };
    out.success(&report, |r| {
        let mut s = format!(
            "ok: {} session(s), {} event(s); every hash chain holds\n",
            r.sessions, r.events
        );
        if r.purged > 0 {
            s.push_str(&format!(
                "{} purged session(s): their tombstones keep their event counts and head hashes\n",
                r.purged
            ));
        }
        if let Some(sessions) = &r.export_sessions {
            let count = |o| sessions.iter().filter(|s| s.outcome == o).count();
            s.push_str(&format!(
                "export: {} of {} session(s) match their tombstones; {} not purged here, {} with no tombstone here\n",
                count(ExportOutcome::Matched),
                sessions.len(),
                count(ExportOutcome::NotPurgedHere),
                count(ExportOutcome::NoTombstone),
            ));
            s.push_str(&export_table(sessions));
        }
        if !r.heads.is_empty() {
            let rows: Vec<Vec<String>> = r
                .heads
                .iter()
                .map(|h| {
                    vec![
                        render::clean(&h.session_id),
                        h.events.to_string(),
                        render::clean(&h.head_hash),
                    ]
                })
                .collect();
            s.push_str(&render::table(&["SESSION", "EVENTS", "HEAD"], &rows, &[1]));
        }
        s
    });
    Ok(())
}

/// The sessions of an export file, one row each: line, session, events,
/// outcome in words.
fn export_table(sessions: &[ExportSession]) -> String {
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            let outcome = match s.outcome {
                ExportOutcome::Matched => "matched",
                ExportOutcome::NotPurgedHere => "not purged here",
                ExportOutcome::NoTombstone => "no tombstone",
            };
            vec![
                s.line.to_string(),
                render::clean(&s.session_id),
                s.events.to_string(),
                outcome.to_owned(),
            ]
        })
        .collect();
    render::table(&["LINE", "SESSION", "EVENTS", "OUTCOME"], &rows, &[0, 2])
}

/// `logbook events`
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Start after this cursor (a next_cursor printed before, or an event_id;
    /// 0 = from the first event)
    #[arg(long, value_name = "CURSOR", allow_negative_numbers = true)]
    after: Option<String>,
    /// Only this session's events (repeatable)
    #[arg(long = "session", value_name = "ID")]
    sessions: Vec<String>,
    /// Only events of this type (repeatable), e.g. checkpoint, x.build
    #[arg(long = "type", value_name = "TYPE")]
    types: Vec<String>,
    /// Page size, 1..=1000 [default: 100]; with --follow, exit after N events
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    limit: Option<i64>,
    /// Keep printing events as they commit (JSON Lines under --json) until
    /// interrupted (exit 0) or stdout closes
    #[arg(long)]
    follow: bool,
    /// Start after the newest event now, instead of --after: with --follow,
    /// print only events that commit from here on; without, print no
    /// events and the cursor to resume from
    #[arg(long, conflicts_with = "after")]
    from_now: bool,
}

pub fn events(args: &EventsArgs, global: &GlobalArgs, out: &Printer) -> Result<()> {
    let ledger = open(global)?;
    let q = logbook::FeedQuery {
        after: args.after.clone(),
        sessions: args.sessions.clone(),
        types: args.types.clone(),
        limit: if args.follow { None } else { args.limit },
        from_now: args.from_now,
    };
    if !args.follow {
        let page = ledger.feed(&q)?;
        out.success(&page, |p| {
            let mut s = render::feed(&p.events);
            s.push_str(&format!("next cursor: {}\n", p.next_cursor));
            s
        });
        return Ok(());
    }
    if let Some(n) = args.limit {
        if n < 1 {
            return Err(logbook::Error::invalid("limit", "must be 1 or more"));
        }
    }
    let interrupted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let flag = std::sync::Arc::clone(&interrupted);
        // Without a handler SIGINT would kill the process (exit 130).
        let _ = ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
    }
    let mut left = args.limit;
    // Human rows line up under a header printed once: once the first page
    // has been read (an error, e.g. SESSION_NOT_FOUND, comes before it and
    // prints no header), or with the first row.
    let stream = render::feed_stream();
    let header_due = std::cell::Cell::new(!out.json);
    let header = || {
        !header_due.replace(false) || super::output::write_stdout_open(stream.header().as_bytes())
    };
    let checks = std::cell::Cell::new(0_u64);
    ledger.follow(
        &q,
        std::time::Duration::from_millis(5),
        |e| {
            let line = if out.json {
                match serde_json::to_string(e) {
                    Ok(mut s) => {
                        s.push('\n');
                        s
                    }
                    Err(_) => return std::ops::ControlFlow::Break(()),
                }
            } else {
                if !header() {
                    return std::ops::ControlFlow::Break(());
                }
                stream.row(&render::feed_row(e))
            };
            if !super::output::write_stdout_open(line.as_bytes()) {
                return std::ops::ControlFlow::Break(());
            }
            if let Some(n) = left.as_mut() {
                *n -= 1;
                if *n == 0 {
                    return std::ops::ControlFlow::Break(());
                }
            }
            std::ops::ControlFlow::Continue(())
        },
        || {
            // Every check after the first follows a page read without error.
            let n = checks.replace(checks.get() + 1);
            (n > 0 && !header())
                || interrupted.load(std::sync::atomic::Ordering::SeqCst)
                || super::output::stdout_closed()
        },
    )?;
    Ok(())
}
