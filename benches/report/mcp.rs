//! The `mcp` section of the report: tool-call round trips over one stdio
//! connection to `logbook mcp serve`, against the same operations through
//! the library in-process, in the same run.

use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation, SyncMode};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

const CALLS: usize = 2_000;

struct Conn {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: i64,
}

impl Conn {
    fn open(db: &Path) -> Conn {
        let mut child = Command::new(env!("CARGO_BIN_EXE_logbook"))
            .arg("--db")
            .arg(db)
            .args(["mcp", "serve"])
            .env("LOGBOOK_SYNC", "normal")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut c = Conn {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "0"}}),
        );
        writeln!(
            c.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        c
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let line =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut reply = String::new();
        self.stdout.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap()
    }

    /// One `tools/call`; returns the `data` JSON (panics on a tool error).
    fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert_eq!(r["result"]["isError"], false, "{r}");
        r["result"]["structuredContent"].clone()
    }
}

fn stats(mut ms: Vec<f64>, total_s: f64) -> (f64, f64, f64) {
    let p50 = super::pct(&mut ms, 0.5);
    let p99 = super::pct(&mut ms, 0.99);
    (p50, p99, ms.len() as f64 / total_s)
}

fn timed(n: usize, mut f: impl FnMut(usize)) -> (f64, f64, f64) {
    let mut ms = Vec::with_capacity(n);
    let t0 = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        f(i);
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    stats(ms, t0.elapsed().as_secs_f64())
}

pub fn section(dir: &Path) {
    // Library baseline, in-process, same sync mode and same shapes.
    let lib = Ledger::open(LedgerOptions {
        sync: SyncMode::Normal,
        ..LedgerOptions::at(dir.join("mcp-lib.db"))
    })
    .unwrap();
    let lid = lib
        .create_session(CreateSession::titled("bench"))
        .unwrap()
        .session_id
        .to_string();
    let lshow = lib
        .create_session(CreateSession::titled("show bench"))
        .unwrap()
        .session_id
        .to_string();
    for i in 0..20 {
        let req = CheckpointRequest {
            step: Some(format!("s{i}")),
            note: Some("a note".into()),
            ..Default::default()
        };
        lib.checkpoint(&lshow, req, &Mutation::default()).unwrap();
    }
    let mut conn = Conn::open(&dir.join("mcp.db"));
    let id = conn.call("logbook_session_create", json!({"title": "bench"}))["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let show = conn.call("logbook_session_create", json!({"title": "show bench"}))["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for i in 0..20 {
        conn.call(
            "logbook_session_checkpoint",
            json!({"session_id": show, "step": format!("s{i}"), "note": "a note"}),
        );
    }
    // Warm both up.
    for _ in 0..50 {
        conn.call("logbook_session_show", json!({"session_id": show}));
        lib.show_session(&lshow).unwrap();
    }
    let lib_ckpt = timed(CALLS, |i| {
        let req = CheckpointRequest {
            step: Some(format!("s{i}")),
            note: Some("a note".into()),
            ..Default::default()
        };
        lib.checkpoint(&lid, req, &Mutation::default()).unwrap();
    });
    let mcp_ckpt = timed(CALLS, |i| {
        conn.call(
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": format!("s{i}"), "note": "a note"}),
        );
    });
    let lib_show = timed(CALLS, |_| {
        lib.show_session(&lshow).unwrap();
    });
    let mcp_show = timed(CALLS, |_| {
        conn.call("logbook_session_show", json!({"session_id": show}));
    });
    drop(conn.stdin);
    let status = conn.child.wait().unwrap();
    assert!(status.success(), "mcp serve exits 0 when stdin closes");

    println!("## MCP tool calls\n");
    println!("{CALLS} sequential `tools/call` requests over one stdio connection to `logbook mcp serve` (a raw JSON-RPC line client, one request in flight), against the same operation through the library in-process in the same run; `synchronous=NORMAL` for both. `show` reads a session with 21 events.\n");
    println!("| operation | p50 ms | p99 ms | calls/s | ratio (calls/s, library = 1.00) |\n|---|---|---|---|---|");
    for (name, l, m) in [
        ("checkpoint", lib_ckpt, mcp_ckpt),
        ("show", lib_show, mcp_show),
    ] {
        println!(
            "| library `{name}` | {:.3} | {:.3} | {:.0} | 1.00 |",
            l.0, l.1, l.2
        );
        println!(
            "| `logbook_session_{name}` over MCP | {:.3} | {:.3} | {:.0} | {:.2} |",
            m.0,
            m.1,
            m.2,
            m.2 / l.2
        );
    }
    println!();
}
