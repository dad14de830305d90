//! `logbook mcp serve`: the MCP server over stdio (docs/design.md, "MCP"). The server
//! itself is the library's `logbook::mcp`; this only builds its options
//! and reports a database that cannot be opened on stderr.

use super::output::write_stderr;
use super::GlobalArgs;
use clap::Subcommand;
use logbook::mcp::McpServer;
use logbook::{LedgerOptions, Result};

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serve the session and run tools over MCP on stdin/stdout until stdin closes
    ///
    /// Tools: logbook_session_create, logbook_session_show,
    /// logbook_session_list, logbook_session_checkpoint,
    /// logbook_session_complete, logbook_session_fail, the read-only
    /// logbook_session_events, logbook_session_stage, _usage, _event, _pause,
    /// _resume, logbook_gate_open, the read-only logbook_events, and the run
    /// tools logbook_run_create, _start, _usage, _turn, _complete, _fail,
    /// _cancel, _timeout and the read-only _show, _list, _active. Changes are
    /// recorded with actor `mcp`; session cancel, --if-rev and gate
    /// approve/reject stay CLI-only (an agent must not decide its own gate).
    /// stdout carries only MCP messages; diagnostics go to stderr. A tool
    /// error carries its stable error code; a line that is not JSON (or holds an
    /// unpaired surrogate, or nests too deep) gets a JSON-RPC error (-32700,
    /// or -32602 with its id) and changes nothing. If the database
    /// cannot be opened at start, the reason is printed on stderr and each
    /// call tries again, returning the error as its tool error. If the
    /// database file is replaced or removed while serving (a backup moved
    /// into place), every later call fails with STORE_IO and nothing is
    /// written: restart the server once the restore is done. Exits 0 when
    /// stdin closes.
    #[command(
        after_help = "Example (an MCP client's config):\n  {\"mcpServers\": {\"logbook\": {\"command\": \"logbook\", \"args\": [\"mcp\", \"serve\"]}}}"
    )]
    Serve,
}

pub fn run(cmd: &McpCommand, g: &GlobalArgs) -> Result<()> {
    match cmd {
        McpCommand::Serve => {
            let mut opts = LedgerOptions::from_env()?;
            opts.path = Some(logbook::ledger::resolve_path(g.db.as_deref())?);
            if let Some(ms) = g.busy_timeout_ms {
                opts.busy_timeout_ms = ms;
            }
            let server = McpServer::new(opts);
            if let Err(e) = server.open_now() {
                write_stderr(&format!(
                    "logbook mcp serve: error[{}]: {e}\nlogbook mcp serve: serving anyway; each tool call retries the open\n",
                    e.code()
                ));
            }
            server.run_stdio()
        }
    }
}
