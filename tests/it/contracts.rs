//! The wire contracts as reviewed data (docs/design.md, "Contracts"): the whole
//! `--help` tree, and one envelope of each shape from the real CLI and the
//! real MCP server, each pinned by a golden file. The error-code table,
//! `docs/errors.md` and the library errors' envelopes are in
//! `contracts_errors.rs`.
//!
//! A change to any of them fails here until the golden file is updated:
//! `UPDATE_GOLDEN=1 cargo test --test it contracts` (outside CI only; see
//! `golden.rs`), then review `git diff tests/golden docs/errors.md`.

use crate::common::*;
use crate::golden::{assert_golden, scrub};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

// ---------------------------------------------------------------------------
// The help tree

/// The subcommands a `--help` text lists under `Commands:` (clap's layout:
/// two spaces, the name, then its summary), without `help`.
fn subcommands(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line == "Commands:" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.trim().is_empty() {
            break;
        }
        // A summary wrapped onto its next line is indented further.
        if line.starts_with("  ") && !line[2..].starts_with(' ') {
            let name = line.split_whitespace().next().unwrap_or_default();
            if name != "help" {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// Appends `logbook <path> --help` and, depth first, each subcommand's.
fn walk(env: &TestEnv, path: &mut Vec<String>, out: &mut String, count: &mut usize) {
    let r: Run = env
        .command()
        .args(path.iter())
        .arg("--help")
        .output()
        .unwrap()
        .into();
    let shown = if path.is_empty() {
        "logbook --help".to_owned()
    } else {
        format!("logbook {} --help", path.join(" "))
    };
    assert_eq!(r.code, 0, "{shown}: {}", r.stderr);
    assert_eq!(r.stderr, "", "{shown}");
    out.push_str(&format!("==> {shown} <==\n{}\n", r.stdout));
    *count += 1;
    for name in subcommands(&r.stdout) {
        path.push(name);
        walk(env, path, out, count);
        path.pop();
    }
}

#[test]
fn help_tree_is_pinned() {
    let env = TestEnv::new();
    let mut out = String::new();
    let mut count = 0;
    walk(&env, &mut Vec::new(), &mut out, &mut count);
    // The walk found the tree, not just the root: every top-level command
    // and the subcommands of the command groups.
    assert!(count > 40, "only {count} help texts");
    assert!(out.contains("==> logbook session create --help <=="));
    assert!(out.contains("==> logbook run start --help <=="));
    assert!(out.contains("==> logbook mcp serve --help <=="));
    assert_golden("tests/golden/help.txt", &out);
}

#[test]
fn subcommands_reads_clap_commands_section() {
    let help = "Usage: logbook [OPTIONS] <COMMAND>\n\nCommands:\n  session      Create, change and read\n               sessions\n  verify       Recompute\n  help         Print this message\n\nOptions:\n  --json  Print\n";
    assert_eq!(subcommands(help), ["session", "verify"]);
}

// ---------------------------------------------------------------------------
// Envelopes of the real CLI

/// Appends one CLI call on `env`'s database: its arguments, exit code,
/// stdout and stderr, with `env`'s folder shown as `<tmp>`.
fn record(out: &mut String, env: &TestEnv, label: &str, args: &[&str]) -> Run {
    let r = env.run(args);
    let mut s = format!(
        "==> {label}: logbook {} [exit {}]\n",
        args.join(" "),
        r.code
    );
    if !r.stdout.is_empty() {
        s.push_str(&format!("stdout: {}", r.stdout));
    }
    if !r.stderr.is_empty() {
        s.push_str(&format!("stderr:\n{}", r.stderr));
    }
    s.push('\n');
    out.push_str(&s.replace(&env.dir.path().display().to_string(), "<tmp>"));
    r
}

#[test]
fn cli_envelopes_are_pinned() {
    let env = TestEnv::new();
    let mut out = String::new();
    let created = record(
        &mut out,
        &env,
        "success",
        &[
            "session", "create", "--title", "ship it", "--app", "web", "--json",
        ],
    );
    let id = created.data()["session_id"].as_str().unwrap().to_owned();
    let checkpoint = [
        "session",
        "checkpoint",
        &id,
        "--step",
        "build",
        "--idempotency-key",
        "k1",
        "--json",
    ];
    record(&mut out, &env, "success, first attempt", &checkpoint);
    let again = record(&mut out, &env, "success, replayed", &checkpoint);
    assert_eq!(again.json()["replayed"]["seq"], 1, "{}", again.stdout);
    let human = [
        "session",
        "checkpoint",
        &id,
        "--step",
        "build",
        "--idempotency-key",
        "k1",
    ];
    let text = env.run(&human);
    assert_eq!(text.code, 0);
    let last = text.stdout.lines().last().unwrap_or_default();
    out.push_str(&format!("==> replayed, human: last line\n{last}\n\n"));
    record(&mut out, &env, "version", &["--version", "--json"]);
    let missing = "ses_0123456789abcdef";
    record(
        &mut out,
        &env,
        "SESSION_NOT_FOUND",
        &["session", "show", missing, "--json"],
    );
    record(
        &mut out,
        &env,
        "SESSION_NOT_FOUND, human",
        &["session", "show", missing],
    );
    let stale = [
        "session",
        "checkpoint",
        &id,
        "--step",
        "ship",
        "--if-rev",
        "1",
    ];
    let mut stale_json = stale.to_vec();
    stale_json.push("--json");
    record(&mut out, &env, "SESSION_CONFLICT", &stale_json);
    record(&mut out, &env, "SESSION_CONFLICT, human", &stale);
    record(
        &mut out,
        &env,
        "SESSION_INVALID_TRANSITION",
        &["session", "resume", &id, "--json"],
    );
    record(
        &mut out,
        &env,
        "INVALID_ARGUMENT from the library",
        &["session", "create", "--title", "", "--json"],
    );
    record(
        &mut out,
        &env,
        "INVALID_ARGUMENT, clap usage error",
        &["session", "create", "--json"],
    );
    record(
        &mut out,
        &env,
        "INVALID_ARGUMENT, clap unknown command",
        &["session", "bogus", "--json"],
    );
    let bad = env.dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"oops\":1}\n").unwrap();
    let bad = bad.display().to_string();
    record(
        &mut out,
        &env,
        "INVALID_ARGUMENT, import report",
        &["import", "--format", "jsonl", &bad, "--json"],
    );
    record(
        &mut out,
        &env,
        "INVALID_ARGUMENT, import report, human",
        &["import", "--format", "jsonl", &bad],
    );
    // A fresh folder: its database file does not exist.
    let empty = TestEnv::new();
    if on_pg() {
        // A fresh server database holds no ledger: the same envelope, its
        // message naming the URL (without the password), not a file.
        let e = assert_error(&empty.json(&["verify"]), "STORE_IO", 6);
        assert_eq!(e["details"], serde_json::json!({}));
        let msg = e["message"].as_str().unwrap();
        let pg = empty.pg.as_ref().unwrap();
        assert!(msg.contains(&pg.name), "{msg}");
        let userinfo = pg
            .url
            .split_once("://")
            .unwrap()
            .1
            .split_once('@')
            .unwrap()
            .0;
        let password = userinfo.split_once(':').unwrap().1;
        assert!(!msg.contains(password), "the message holds the password");
        // Every other envelope is the golden file's, byte for byte.
        let version = format!("\"{}\"", env!("CARGO_PKG_VERSION"));
        let out = scrub(&out).replace(&version, "\"<version>\"");
        let golden = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/golden/envelopes/cli.txt"
        ))
        .unwrap();
        let cut = golden.find("==> STORE_IO: logbook verify --json").unwrap();
        assert_eq!(out, golden[..cut]);
        return;
    }
    record(&mut out, &empty, "STORE_IO", &["verify", "--json"]);
    let version = format!("\"{}\"", env!("CARGO_PKG_VERSION"));
    let out = scrub(&out).replace(&version, "\"<version>\"");
    assert_golden("tests/golden/envelopes/cli.txt", &out);
}

// ---------------------------------------------------------------------------
// Results of the real MCP server

/// `logbook mcp serve` on raw stdio, after the handshake.
struct Raw {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Raw {
    fn start(env: &TestEnv) -> Raw {
        let mut child = crate::mcp::server_command(env, &env.db, &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut raw = Raw {
            child,
            stdin,
            lines,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "golden", "version": "0"}}});
        raw.send(&init.to_string());
        // A notification has no reply.
        raw.write(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        raw
    }

    fn write(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends one line and returns the reply line, as the server wrote it.
    fn send(&mut self, line: &str) -> String {
        self.write(line);
        self.lines.next().expect("a reply line").unwrap()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mcp_results_are_pinned() {
    let env = TestEnv::new();
    let mut raw = Raw::start(&env);
    let call = |id: i64, name: &str, args: serde_json::Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": args}})
        .to_string()
    };
    let create = json!({"title": "ship it", "idempotency_key": "k1"});
    let mut out = String::new();
    for (label, line) in [
        ("success", call(1, "logbook_session_create", create.clone())),
        (
            "success, replayed",
            call(2, "logbook_session_create", create),
        ),
        (
            "SESSION_NOT_FOUND",
            call(
                3,
                "logbook_session_show",
                json!({"session_id": "ses_0123456789abcdef"}),
            ),
        ),
        (
            "INVALID_ARGUMENT",
            call(4, "logbook_session_create", json!({"title": ""})),
        ),
        ("unknown tool", call(5, "logbook_nope", json!({}))),
        ("not JSON", "{oops".to_owned()),
    ] {
        let reply = raw.send(&line);
        out.push_str(&format!("==> {label}\n{reply}\n\n"));
    }
    drop(raw);
    assert_golden("tests/golden/envelopes/mcp.txt", &scrub(&out));
}
