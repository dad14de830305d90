//! `logbook verify` (and the global event feed): the timeline across sessions.

use super::output::Printer;
use super::{open, GlobalArgs};
use clap::Args;
use logbook::Result;

/// `logbook verify [ID]...`
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Sessions to verify (default: every session)
    #[arg(value_name = "ID")]
    ids: Vec<String>,
}

pub fn verify(args: &VerifyArgs, global: &GlobalArgs, out: &Printer) -> Result<()> {
    let ledger = open(global)?;
    let report = ledger.verify(&args.ids)?;
    out.success(&report, |r| {
        let mut s = format!(
            "ok: {} session(s), {} event(s); every hash chain holds\n",
            r.sessions, r.events
        );
        for h in &r.heads {
            s.push_str(&format!(
                "{}  events {}  head {}\n",
                h.session_id, h.events, h.head_hash
            ));
        }
        s
    });
    Ok(())
}
