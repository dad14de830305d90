//! Exact numbers in MCP arguments (docs/design.md, "Exact numbers").
//!
//! rmcp parses each JSON-RPC message into serde_json values, where an
//! integer beyond 64 bits or a decimal with more precision than a 64-bit
//! float has already become a rounded float: by the time a tool runs, the
//! text that would show it is gone. So `mcp serve` reads stdin through
//! [`Scanned`], which hands every byte on unchanged and, at the end of each
//! line (one JSON-RPC message), checks the `arguments` of a `tools/call`
//! with [`exact_numbers`], the same check the CLI's JSON flags pass. A
//! refusal is kept by request id in [`Refusals`], and that call returns it
//! as its INVALID_ARGUMENT tool error instead of running.
//!
//! The bytes reach rmcp only through this reader, so a line is always
//! checked before rmcp can decode it.

use crate::error::Error;
use crate::validate::exact_numbers;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// Longest line checked: rmcp's own cap on one message
/// (`rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH`, 16 MiB); rmcp
/// drops a longer line without decoding it.
const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// Refusals kept at once: a client that sends many refused calls whose
/// replies it never waits for cannot grow memory without bound.
const MAX_KEPT: usize = 1024;

/// The refusals found in calls not yet run: (request id as JSON, field,
/// reason).
#[derive(Debug, Default, Clone)]
pub(crate) struct Refusals(Arc<Mutex<VecDeque<(String, String, String)>>>);

impl Refusals {
    fn push(&self, id: String, e: Error) {
        if let Error::InvalidArgument { field, reason } = e {
            let mut q = super::lock(&self.0);
            if q.len() >= MAX_KEPT {
                q.pop_front();
            }
            q.push_back((id, field, reason));
        }
    }

    /// Takes the refusal found in the call with request id `id` (its
    /// serde_json text, e.g. `7` or `"a"`), if any.
    pub(crate) fn take(&self, id: &str) -> Option<Error> {
        let mut q = super::lock(&self.0);
        let i = q.iter().position(|(k, _, _)| k == id)?;
        q.remove(i)
            .map(|(_, field, reason)| Error::InvalidArgument { field, reason })
    }
}

/// A reader that checks each line it passes on (see the module docs).
pub(crate) struct Scanned<R> {
    inner: R,
    line: Vec<u8>,
    /// The current line is longer than [`MAX_LINE`]: not kept, not checked.
    over: bool,
    refusals: Refusals,
}

impl<R> Scanned<R> {
    pub(crate) fn new(inner: R, refusals: Refusals) -> Self {
        Scanned {
            inner,
            line: Vec::new(),
            over: false,
            refusals,
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        if self.over {
            return;
        }
        if self.line.len() + bytes.len() > MAX_LINE {
            self.over = true;
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn end_line(&mut self) {
        if !self.over {
            check_line(&self.line, &self.refusals);
        }
        self.line.clear();
        self.over = false;
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        while let Some(i) = bytes.iter().position(|b| *b == b'\n') {
            self.keep(&bytes[..i]);
            self.end_line();
            bytes = &bytes[i + 1..];
        }
        self.keep(bytes);
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Scanned<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let new = &buf.filled()[before..];
            if new.is_empty() {
                // End of input: a last line without its newline.
                this.end_line();
            } else {
                this.feed(new);
            }
        }
        polled
    }
}

#[derive(Deserialize)]
struct Message {
    id: Option<Box<RawValue>>,
    method: Option<String>,
    params: Option<Params>,
}

#[derive(Deserialize)]
struct Params {
    arguments: Option<BTreeMap<String, Box<RawValue>>>,
}

/// Records a refusal for a `tools/call` line (or batch) whose arguments
/// hold a number that would not be stored exactly. Anything that does not
/// parse is left to rmcp, which answers it.
fn check_line(line: &[u8], refusals: &Refusals) {
    let Ok(text) = std::str::from_utf8(line) else {
        return;
    };
    let messages: Vec<Message> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text).unwrap_or_default()
    } else {
        serde_json::from_str(text)
            .map(|m| vec![m])
            .unwrap_or_default()
    };
    for m in messages {
        let (
            Some(id),
            Some("tools/call"),
            Some(Params {
                arguments: Some(args),
            }),
        ) = (m.id, m.method.as_deref(), m.params)
        else {
            continue;
        };
        // The id as rmcp hands it to the tool call, serialized the same way.
        let Some(id) = serde_json::from_str::<rmcp::model::RequestId>(id.get())
            .ok()
            .and_then(|id| serde_json::to_string(&id).ok())
        else {
            continue;
        };
        if let Some(e) = args
            .iter()
            .find_map(|(field, raw)| exact_numbers(field, raw.get()).err())
        {
            refusals.push(id, e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn lines_pass_unchanged_and_inexact_arguments_are_kept_by_request_id() {
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"title":"x","context":{"n":18446744073709551616}}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"t","arguments":{"context":{"n":9223372036854775807}}}}"#,
            "\n",
            r#"[{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"t","arguments":{"data":{"x":[0.1000000000000000055511151231257827]}}}}]"#,
        );
        let refusals = Refusals::default();
        let mut r = Scanned::new(input.as_bytes(), refusals.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut out = Vec::new();
        rt.block_on(r.read_to_end(&mut out)).unwrap();
        assert_eq!(out, input.as_bytes());
        let e = refusals.take("7").unwrap();
        assert_eq!(e.details()["field"], "context");
        assert!(e.to_string().contains("(at `n`)"), "{e}");
        assert!(refusals.take("7").is_none());
        assert!(refusals.take("\"s\"").is_none());
        let e = refusals.take("8").unwrap();
        assert_eq!(e.details()["field"], "data");
    }
}
