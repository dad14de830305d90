//! `logbook doctor` and `logbook backup`.

use super::output::{write_stdout, Printer};
use super::{open_existing, render, GlobalArgs};
use clap::Args;
use logbook::{Error, Ledger, Result};
use std::path::PathBuf;

/// `logbook backup DEST`
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The new file to write (never overwritten; never the database or one
    /// of its companions)
    #[arg(value_name = "DEST")]
    dest: PathBuf,
}

fn checks_table(report: &serde_json::Value) -> String {
    let rows: Vec<Vec<String>> = report["checks"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    vec![
                        c["check"].as_str().unwrap_or_default().to_owned(),
                        match (c["ok"].as_bool(), c["level"].as_str()) {
                            (Some(true), Some("warning")) => "warning",
                            (Some(true), _) => "ok",
                            _ => "PROBLEM",
                        }
                        .to_owned(),
                        render::clean(c["detail"].as_str().unwrap_or_default()),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    let mut s = render::table(&["CHECK", "RESULT", "DETAIL"], &rows, &[]);
    // A server has no WAL file of the ledger's own to report.
    let server = report["path"]
        .as_str()
        .is_some_and(logbook::store::postgres::location::is_url);
    let wal = if server {
        String::new()
    } else {
        format!(", WAL {} bytes", report["wal_bytes"])
    };
    s.push_str(&format!(
        "{} session(s), {} event(s); database {} bytes{wal}\n",
        report["sessions"], report["events"], report["db_bytes"]
    ));
    s
}

pub fn doctor(global: &GlobalArgs, out: &Printer) -> Result<()> {
    let path = logbook::ledger::resolve_path(global.db.as_deref())?;
    let before = Ledger::file_modes(&path);
    let ledger = open_existing(global)?;
    match ledger.doctor(&before) {
        Ok(r) => {
            out.success(&r, |r| {
                checks_table(&serde_json::to_value(r).unwrap_or_default())
            });
            Ok(())
        }
        Err(e @ Error::Unhealthy { .. }) => {
            if !out.json {
                if let Error::Unhealthy { report, .. } = &e {
                    write_stdout(checks_table(report).as_bytes());
                }
            }
            Err(e)
        }
        Err(e) => Err(e),
    }
}

pub fn backup(args: &BackupArgs, global: &GlobalArgs, out: &Printer) -> Result<()> {
    // Before any other thread starts (see `signals`).
    let sig = super::signals::install();
    let ledger = super::open_interruptible(global, &sig.interrupt)?;
    let r = ledger.backup(&args.dest)?;
    out.success(&r, |r| {
        format!(
            "backed up {} session(s), {} event(s) to {} ({} bytes)\n",
            r.sessions, r.events, r.dest, r.bytes
        )
    });
    Ok(())
}
