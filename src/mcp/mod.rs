//! `logbook mcp serve`: the Model Context Protocol adapter over [`Ledger`]
//! (docs/design.md, "MCP"; as in Phelix's format), built on the official Rust SDK
//! (`rmcp`).
//!
//! It holds no SQL and no rules: each tool checks the JSON type of its
//! arguments against its declared fields ([`args`]), calls one `Ledger`
//! method, and returns what that returned. Everything else — caps,
//! characters, redaction, the state machine, idempotency keys — is the
//! library's, exactly as for the CLI.
//!
//! # Wire format
//!
//! - Tools: [`tools::TOOLS`] — `logbook_session_create`, `_show`, `_list`,
//!   `_checkpoint`, `_complete`, `_fail`; ([`record`]) the read-only
//!   `logbook_session_events`, `logbook_session_stage`, `_usage`, `_event`,
//!   `_start` (of a pending session), `_pause`, `_resume` and
//!   `logbook_gate_open`; the read-only
//!   `logbook_events`; and the run tools ([`runs`]): `logbook_run_create`,
//!   `_start`, `_usage`, `_turn`, `_complete`, `_fail`, `_cancel`,
//!   `_timeout`, and the read-only `_show`, `_list`, `_active`. Gate
//!   approve and reject are not tools: an agent must not decide its own
//!   gate.
//!   Each has a closed JSON schema (`additionalProperties: false`).
//! - Success: a result with one text block holding the JSON the CLI prints
//!   under `--json` in `data` (keys in the CLI's order), and the same value
//!   as `structuredContent` — wrapped in an object where the CLI's `data`
//!   is not one (`logbook_run_list`: `{"runs"}`, `logbook_run_active`:
//!   `{"run"}`).
//! - Failure: `isError: true`, a text block and `structuredContent` holding
//!   `{"code","message","retryable","details"}` — the CLI envelope's `error`
//!   (the codes of docs/errors.md). Messages never echo a rejected value.
//! - A number in the arguments that would not be stored exactly (an
//!   integer outside 64 bits, a decimal finer than a 64-bit float) is
//!   INVALID_ARGUMENT naming the argument, found on the request's text as
//!   `mcp serve` reads it (module `numbers`); served on another transport, only
//!   integers above `i64::MAX` are caught (the text is gone).
//! - An unknown tool name is a JSON-RPC error (-32602), as MCP specifies,
//!   with the same object as its `data`.
//! - A line that is not JSON, or holds an unpaired surrogate escape, or
//!   nests too deep, is a JSON-RPC error (-32700 with `id: null`, or
//!   -32602 with its id) from the line layer in front of rmcp ([`wire`]),
//!   with the same kind of object as its `data`; it changes nothing. So is
//!   a message of the wrong shape (module `frame`: -32600, or -32602 for a
//!   `tools/call` without `params`, without a string `name` or with
//!   `arguments` that is not an object) and one holding a key twice,
//!   anywhere (never read last-wins). Every error reply carries `id`,
//!   `null` when the request's id cannot be read.
//! - The actor of every change is `mcp`, set here and never read from input;
//!   `actor`, `if_rev` and every other undeclared field are INVALID_ARGUMENT.
//!
//! # Retries
//!
//! A mutation given an `idempotency_key` applies once however often it is
//! sent (docs/design.md, "CLI"). Without one, a `tools/call` whose JSON-RPC request id was
//! already answered in this connection (MCP forbids reusing an id, so a
//! repeat is a client's retry) returns the first reply again and applies
//! nothing (CASES C28 (c)); the same id with other arguments is
//! INVALID_ARGUMENT. The server remembers its last [`REPLAY_CAPACITY`]
//! successful mutations for this.
//!
//! # Database
//!
//! The `Ledger` is opened when the server starts; if that fails, each call
//! tries again and reports the open error as its tool error. One `Ledger`
//! sits behind a `std::sync::Mutex`, locked only for the length of one
//! synchronous library call (never across an `.await`). Between calls it
//! holds no transaction, so the WAL can always checkpoint (CASES C14).

pub mod args;
mod frame;
mod numbers;
pub mod record;
pub mod runs;
pub mod tools;
pub mod wire;

use crate::envelope::{Envelope, ReplayedMember};
use crate::error::{Error, Result};
use crate::ledger::{Ledger, LedgerOptions};
use crate::model::ActorType;
use args::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, Implementation, ListToolsResult, PaginatedRequestParams, RequestId,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::ErrorData as McpError;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::io::DuplexStream;
use tools::{Reply, ToolSpec};

/// How many successful mutations the server remembers by request id, to
/// answer a repeated `tools/call` without applying it again: 1024.
pub const REPLAY_CAPACITY: usize = 1024;

/// A tool error's body: the CLI envelope's `error` (docs/design.md, "Errors" and "CLI"),
/// `{"code","message","retryable","details"}` — the library's one
/// [`ErrorBody`](crate::envelope::ErrorBody).
pub type ToolError<'a> = crate::envelope::ErrorBody<'a>;

#[derive(Debug)]
struct Replay {
    id: String,
    fingerprint: String,
    result: CallToolResult,
}

/// The MCP server: the tool table over one lazily (re)opened [`Ledger`].
///
/// Serve it on stdio with [`McpServer::run_stdio`], or on any rmcp transport
/// with `rmcp::ServiceExt::serve`.
#[derive(Debug, Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    opts: LedgerOptions,
    ledger: Mutex<Option<Ledger>>,
    replays: Mutex<VecDeque<Replay>>,
    /// Calls refused on their text (a number that would not be stored
    /// exactly), found as stdin was read: see `numbers`.
    refusals: numbers::Refusals,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a library call cannot leave a transaction open (the
    // transaction guards roll back on drop); go on with the handle.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl McpServer {
    /// A server over the database `opts` names. The actor is forced to
    /// `mcp`, whatever `opts.actor` says. Nothing is opened yet.
    pub fn new(mut opts: LedgerOptions) -> Self {
        opts.actor = ActorType::Mcp;
        McpServer {
            inner: Arc::new(Inner {
                opts,
                ledger: Mutex::new(None),
                replays: Mutex::new(VecDeque::new()),
                refusals: numbers::Refusals::default(),
            }),
        }
    }

    /// Opens the database now, if it is not open yet.
    ///
    /// # Errors
    /// What [`Ledger::open`] returns: STORE_IO, STORE_CORRUPT,
    /// STORE_VERSION_TOO_NEW, STORE_BUSY, INVALID_ARGUMENT.
    pub fn open_now(&self) -> Result<()> {
        let mut guard = lock(&self.inner.ledger);
        if guard.is_none() {
            *guard = Some(Ledger::open(self.inner.opts.clone())?);
        }
        Ok(())
    }

    /// The tools `tools/list` returns, in table order.
    pub fn tools() -> Vec<Tool> {
        tools::TOOLS.iter().map(tool).collect()
    }

    /// Runs one tool call synchronously and returns its MCP result:
    /// `isError: false` with the `data` JSON, or `isError: true` with a
    /// [`ToolError`].
    ///
    /// # Errors
    /// A JSON-RPC invalid-params error for a tool name that is not in the
    /// table.
    pub fn call(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let Some(spec) = tools::find(name) else {
            let e = Error::invalid("name", "no tool has this name; see tools/list");
            return Err(McpError::invalid_params(
                "unknown tool",
                serde_json::to_value(ToolError::from(&e)).ok(),
            ));
        };
        Ok(match self.run(spec, arguments) {
            Ok(reply) => tool_result(&reply.envelope()),
            Err(e) => failure(&e),
        })
    }

    fn run(&self, spec: &ToolSpec, arguments: Option<Map<String, Value>>) -> Result<Reply> {
        let args = Args::check(spec.fields, arguments)?;
        let mut guard = lock(&self.inner.ledger);
        let ledger = match guard.take() {
            Some(l) => l,
            None => Ledger::open(self.inner.opts.clone())?,
        };
        let out = (spec.run)(&ledger, &args);
        *guard = Some(ledger);
        out
    }

    /// [`McpServer::call`], answering a repeated request id of a mutation
    /// from memory (see the module docs, "Retries").
    fn call_once(
        &self,
        id: &RequestId,
        name: &str,
        arguments: Option<Map<String, Value>>,
    ) -> std::result::Result<CallToolResult, McpError> {
        let mutates = tools::find(name).is_some_and(|t| !t.read_only);
        if !mutates {
            return self.call(name, arguments);
        }
        let id = serde_json::to_string(id).unwrap_or_default();
        let fingerprint = format!(
            "{name}\n{}",
            serde_json::to_string(&arguments).unwrap_or_default()
        );
        if let Some(r) = lock(&self.inner.replays).iter().find(|r| r.id == id) {
            return Ok(if r.fingerprint == fingerprint {
                r.result.clone()
            } else {
                failure(&Error::invalid(
                    "request_id",
                    "this JSON-RPC request id was already used for another call in this connection",
                ))
            });
        }
        let result = self.call(name, arguments)?;
        if result.is_error != Some(true) {
            let mut replays = lock(&self.inner.replays);
            if replays.len() >= REPLAY_CAPACITY {
                replays.pop_front();
            }
            replays.push_back(Replay {
                id,
                fingerprint,
                result: result.clone(),
            });
        }
        Ok(result)
    }

    /// Serves MCP on stdin/stdout until stdin closes (also before any
    /// handshake: `Ok`), on a current-thread tokio runtime. stdout carries
    /// only protocol messages; this function prints nothing else anywhere.
    ///
    /// stdin is read by the line layer of [`wire`], which answers a line
    /// that is not JSON (or holds an unpaired surrogate, or nests too deep)
    /// itself and hands every other line to rmcp through a pipe; rmcp's
    /// replies come back through another pipe, and one task writes both to
    /// stdout, whole lines at a time.
    ///
    /// # Errors
    /// INTERNAL when the runtime cannot start, the handshake fails other
    /// than by stdin closing, or the service ends in an error.
    pub fn run_stdio(self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::internal(format!("cannot start the runtime: {e}")))?;
        // The ledger is dropped after the runtime, never inside it (a
        // PostgreSQL client cannot be dropped inside a tokio runtime).
        let keep = self.clone();
        let out = rt.block_on(async move {
            // stdin is read through the number check (see `numbers`),
            // then the line check (see `wire`).
            let (stdin, stdout) = rmcp::transport::stdio_pipes();
            let stdin = numbers::Scanned::new(stdin, self.inner.refusals.clone());
            // Each duplex is used one way; dropping one end is the other's
            // end of input.
            let (rmcp_in, to_rmcp) = tokio::io::duplex(PIPE_BYTES);
            let (from_rmcp, rmcp_out) = tokio::io::duplex(PIPE_BYTES);
            let (lines, queue) = tokio::sync::mpsc::channel(QUEUE_LINES);
            let writer = tokio::spawn(wire::write_out(queue, stdout));
            let forward = tokio::spawn(wire::forward_replies(from_rmcp, lines.clone()));
            let reader = tokio::spawn(wire::read_in(stdin, to_rmcp, lines));
            let served = self.serve_on((rmcp_in, rmcp_out)).await;
            // rmcp has ended and dropped its pipes. Stop reading stdin (it
            // may still be open when rmcp ended on an error), then let the
            // writer finish what is queued.
            reader.abort();
            let _ = reader.await;
            let _ = forward.await;
            let _ = writer.await;
            served
        });
        // Everything is written; a blocking stdin read cannot hold the exit.
        rt.shutdown_background();
        drop(keep);
        out
    }

    async fn serve_on(self, transport: (DuplexStream, DuplexStream)) -> Result<()> {
        use rmcp::ServiceExt;
        let service = match self.serve(transport).await {
            Ok(service) => service,
            // stdin closed before the handshake: nothing to serve.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
            Err(e) => {
                return Err(Error::internal(format!("the MCP handshake failed: {e}")));
            }
        };
        service
            .waiting()
            .await
            .map_err(|e| Error::internal(format!("the MCP service failed: {e}")))?;
        Ok(())
    }
}

/// The buffer of each pipe between the line layer and rmcp: 64 KiB.
const PIPE_BYTES: usize = 64 * 1024;

/// How many outgoing messages may wait for stdout before their senders
/// wait: 64.
const QUEUE_LINES: usize = 64;

fn tool(spec: &ToolSpec) -> Tool {
    let annotations = ToolAnnotations::with_title(spec.title)
        .read_only(spec.read_only)
        .destructive(false)
        .idempotent(spec.read_only)
        .open_world(false);
    Tool::new(
        spec.name,
        spec.description,
        Arc::new(args::input_schema(spec.fields)),
    )
    .with_title(spec.title)
    .with_annotations(annotations)
}

/// The MCP result of an envelope (see [`crate::envelope`], "Wire format").
///
/// Success: the data as text and as `structuredContent`; for an idempotent
/// replay also `_meta.replayed` and a second text block
/// `{"replayed":{"rev":R,"seq":S}}`, so that a model reading only the text
/// learns it too (docs/design.md, "CLI"). Failure: `isError: true`, the error body as
/// text and as `structuredContent`.
fn tool_result(envelope: &Envelope<'_, RawValue>) -> CallToolResult {
    match envelope {
        Envelope::Success { data, replayed } => {
            let mut r = CallToolResult::success(Vec::new());
            r.structured_content = serde_json::from_str(data.get()).ok();
            r.content = vec![ContentBlock::text(data.get())];
            if let Some(replayed) = replayed {
                let member = ReplayedMember {
                    replayed: *replayed,
                };
                if let Ok(text) = serde_json::to_string(&member) {
                    r.content.push(ContentBlock::text(text));
                }
                if let Ok(Value::Object(m)) = serde_json::to_value(member) {
                    r.meta = Some(rmcp::model::MetaObject::from(m));
                }
            }
            r
        }
        Envelope::Failure(body) => {
            let text = serde_json::to_string(body).unwrap_or_else(|_| {
                format!(
                    r#"{{"code":"{}","message":"","retryable":false,"details":{{}}}}"#,
                    body.code
                )
            });
            let mut r = CallToolResult::error(Vec::new());
            r.structured_content = serde_json::to_value(body).ok();
            r.content = vec![ContentBlock::text(text)];
            r
        }
    }
}

/// The failure result of a library error.
fn failure(e: &Error) -> CallToolResult {
    tool_result(&Envelope::error(e))
}

impl rmcp::ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("logbook", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "logbook records agent work sessions. Create a session (one created pending \
                 begins with logbook_session_start), checkpoint its steps, record stages, usage and your own x. events, then complete or fail it. Open a \
                 gate when a person must decide; approving or rejecting it is theirs, not yours. Tool errors carry a stable `code`, the same as the CLI's JSON errors (listed in the README).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::find(name).map(tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, McpError> {
        // A number of the call's text that the parsed arguments no longer
        // show exactly: refused before anything runs.
        let id = serde_json::to_string(&context.id).unwrap_or_default();
        if let Some(e) = self.inner.refusals.take(&id) {
            if tools::find(&request.name).is_some() {
                return Ok(CallToolResponse::from(failure(&e)));
            }
        }
        // The call blocks this (current-thread) runtime as before, but runs
        // on a plain thread: a store with a blocking client of its own (the
        // PostgreSQL one starts a runtime per call) cannot run inside a
        // tokio runtime.
        let name = request.name;
        let arguments = request.arguments;
        let id = &context.id;
        std::thread::scope(|s| {
            s.spawn(|| self.call_once(id, &name, arguments))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
        .map(CallToolResponse::from)
    }

    /// An unknown JSON-RPC method: -32601 with a fixed message. rmcp's
    /// default puts the method name in the message, and a name could hold a
    /// secret (found by adversarial testing: `sk-…` came back verbatim).
    ///
    /// rmcp hands a `tools/call` here too when its params do not fit (no
    /// `name`, `arguments` not an object): that is -32602, as the line
    /// layer answers it on stdio ([`wire`]), for any other transport.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CustomResult, McpError> {
        if request.method == "tools/call" {
            let e = Error::invalid(
                "params",
                "tools/call needs `params`: an object with the tool's `name` and its `arguments`",
            );
            return Err(McpError::invalid_params(
                "invalid params",
                serde_json::to_value(ToolError::from(&e)).ok(),
            ));
        }
        Err(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            "method not found",
            None,
        ))
    }
}
