//! `logbook sql` and `logbook completions`.

use super::output::{write_stdout, Printer};
use super::{open_read_only, render, GlobalArgs};
use clap::Args;
use logbook::{Error, Result};

/// `logbook sql QUERY [--csv]`
#[derive(Debug, Args)]
pub struct SqlArgs {
    /// One read-only SQL statement (SELECT, WITH, EXPLAIN, read-only PRAGMA)
    #[arg(value_name = "QUERY", allow_hyphen_values = true)]
    query: String,
    /// Print CSV (RFC 4180, with a header row) instead of a table
    #[arg(long)]
    csv: bool,
    /// Interrupt the statement after this many ms [default: 30000]
    #[arg(long, value_name = "MS", value_parser = parse_timeout_ms, allow_negative_numbers = true)]
    timeout_ms: Option<u64>,
}

fn parse_timeout_ms(s: &str) -> std::result::Result<u64, String> {
    s.parse::<u64>()
        .map_err(|_| "expected an integer number of ms from 1 to 3600000".to_owned())
}

fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn sql(args: &SqlArgs, global: &GlobalArgs, out: &Printer) -> Result<()> {
    if args.csv && out.json {
        return Err(Error::invalid("csv", "choose one of --csv and --json"));
    }
    let ledger = open_read_only(global)?;
    let r = ledger.query(&args.query, args.timeout_ms)?;
    if args.csv {
        let mut w = csv::Writer::from_writer(Vec::new());
        let fail = |e: csv::Error| Error::internal(format!("cannot write CSV: {e}"));
        w.write_record(&r.columns).map_err(fail)?;
        for row in &r.rows {
            w.write_record(row.iter().map(cell)).map_err(fail)?;
        }
        let bytes = w
            .into_inner()
            .map_err(|e| Error::internal(format!("cannot write CSV: {e}")))?;
        write_stdout(&bytes);
        return Ok(());
    }
    out.success(&r, |r| {
        let rows: Vec<Vec<String>> = r
            .rows
            .iter()
            .map(|row| row.iter().map(|v| render::clean(&cell(v))).collect())
            .collect();
        // The headers are the query's own column names, as it spelled them.
        let mut s = render::Table::with_headers(r.columns.clone(), &[]).render(&rows);
        s.push_str(&format!(
            "({} row{})\n",
            r.rows.len(),
            if r.rows.len() == 1 { "" } else { "s" }
        ));
        s
    });
    Ok(())
}

/// `logbook completions SHELL`
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print a completion script for
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `completions SHELL`: the script as is, or under `--json` the envelope
/// `{"ok":true,"data":{"shell":"bash","script":"…"}}`.
pub fn completions(args: &CompletionsArgs, out: &Printer) -> Result<()> {
    use clap::CommandFactory;
    #[derive(serde::Serialize)]
    struct Script {
        shell: String,
        script: String,
    }
    let mut cmd = super::Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "logbook", &mut buf);
    let script = Script {
        shell: args.shell.to_string(),
        script: String::from_utf8_lossy(&buf).into_owned(),
    };
    out.success(&script, |s| s.script.clone());
    Ok(())
}
