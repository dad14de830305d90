//! JSON numbers are stored exactly as given or refused (docs/design.md, "Exact numbers"):
//! every JSON-valued flag, MCP arguments on the wire, and imports. The
//! boundaries are pinned: i64's two ends are kept exactly, one past either
//! end (and u64's top) is INVALID_ARGUMENT naming the field, and nothing is
//! written.

use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

const TOO_BIG: [&str; 6] = [
    "18446744073709551616",
    "-9223372036854775809",
    "9223372036854775808",
    "18446744073709551615",
    "1e400",
    "0.1000000000000000055511151231257827",
];

fn row_counts(env: &TestEnv) -> (i64, i64, i64) {
    let n = |t: &str| env.scalar(&format!("SELECT count(*) FROM {t}"));
    (n("sessions"), n("events"), n("runs"))
}

/// Runs `args` (with --json) and asserts INVALID_ARGUMENT naming `field`,
/// with no row written anywhere and the number not repeated.
#[track_caller]
fn refused(env: &TestEnv, args: &[&str], field: &str, number: &str) {
    let before = row_counts(env);
    let r = env.json(args);
    let e = assert_error(&r, "INVALID_ARGUMENT", 2);
    assert_eq!(e["details"]["field"], field, "{}", r.stdout);
    let reason = e["details"]["reason"].as_str().unwrap();
    assert!(reason.contains("(at `n`)"), "{reason}");
    assert!(
        reason.ends_with("which would not be stored exactly; send it as a string"),
        "{reason}"
    );
    let limits = "-9223372036854775808 to 9223372036854775807";
    assert!(
        !reason
            .replace(limits, "")
            .contains(number.trim_start_matches('-')),
        "{reason}"
    );
    assert_eq!(row_counts(env), before, "{args:?}");
}

#[test]
fn every_json_flag_refuses_a_number_it_would_change_and_writes_nothing() {
    let env = TestEnv::new();
    let s = env.create("numbers");
    let run = env.json(&["run", "create", &s]).data()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    env.json(&["run", "start", &run]).data();
    for n in TOO_BIG {
        let v = format!("{{\"n\":{n}}}");
        refused(
            &env,
            &["session", "create", "--title", "t", "--context", &v],
            "context",
            n,
        );
        refused(
            &env,
            &["session", "create", "--title", "t", "--metadata", &v],
            "metadata",
            n,
        );
        refused(
            &env,
            &["session", "event", &s, "--type", "x.n", "--data", &v],
            "data",
            n,
        );
        refused(
            &env,
            &["session", "checkpoint", &s, "--step", "s", "--state", &v],
            "state",
            n,
        );
        refused(&env, &["run", "create", &s, "--input", &v], "input", n);
        refused(
            &env,
            &["run", "create", &s, "--metadata", &v],
            "metadata",
            n,
        );
        refused(
            &env,
            &["run", "complete", &run, "--output", &v],
            "output",
            n,
        );
    }
    // @FILE and @- read the same text and refuse the same way.
    let file = env.dir.path().join("in.json");
    std::fs::write(&file, "{\"n\": 18446744073709551616}").unwrap();
    let at = format!("@{}", file.display());
    refused(
        &env,
        &["run", "create", &s, "--input", &at],
        "input",
        "18446744073709551616",
    );
    let mut c = env.command();
    c.arg("--db")
        .arg(&env.db)
        .args([
            "session",
            "create",
            "--title",
            "t",
            "--context",
            "@-",
            "--json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"n\":-9223372036854775809}")
        .unwrap();
    let r: Run = child.wait_with_output().unwrap().into();
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "context"
    );
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), 1);
}

/// i64's ends are kept exactly: in `show`, and to SQLite's own JSON
/// functions as INTEGERs. Floats that a 64-bit float holds pass as given.
#[test]
fn the_exact_i64_boundaries_are_kept_to_the_digit() {
    let env = TestEnv::new();
    let ctx = r#"{"max":9223372036854775807,"min":-9223372036854775808,"f":0.1,"e":1e19}"#;
    let s = env
        .json(&["session", "create", "--title", "t", "--context", ctx])
        .data();
    let id = s["session_id"].as_str().unwrap();
    let show = env.json(&["session", "show", id]);
    // Keys sorted, 1e19 spelled as serde_json spells the same float.
    assert!(
        show.stdout.contains(
            r#""context":{"e":1e+19,"f":0.1,"max":9223372036854775807,"min":-9223372036854775808}"#
        ),
        "{}",
        show.stdout
    );
    // SQLite reads the stored numbers as integers; PostgreSQL's JSON
    // keeps their digits as text (a JSON number, not a float).
    let stored = env.rows(
        pick(
            "SELECT json_extract(context, '$.max'), json_extract(context, '$.min'), \
                    json_type(context, '$.max'), json_type(context, '$.min') \
             FROM session_data WHERE session_id = $1",
            "SELECT context::json->>'max', context::json->>'min', \
                    json_typeof(context::json->'max'), json_typeof(context::json->'min') \
             FROM session_data WHERE session_id = $1",
        ),
        &[id],
    );
    if on_pg() {
        assert_eq!(
            stored[0],
            [
                json!(i64::MAX.to_string()),
                json!(i64::MIN.to_string()),
                json!("number"),
                json!("number")
            ]
        );
    } else {
        assert_eq!(
            stored[0],
            [
                json!(i64::MAX),
                json!(i64::MIN),
                json!("integer"),
                json!("integer")
            ]
        );
    }
    let run = env.json(&[
        "run",
        "create",
        id,
        "--input",
        r#"{"n":-9223372036854775808}"#,
    ]);
    assert_eq!(run.data()["input"], json!({"n": i64::MIN}));
}

/// The raw JSON-RPC lines `lines` sent to `mcp serve` after the handshake,
/// one reply read after each; returns the replies.
fn mcp_raw(env: &TestEnv, lines: &[String]) -> Vec<Value> {
    let mut child = std::process::Command::new(bin())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.dir.path())
        .arg("--db")
        .arg(&env.db)
        .args(["mcp", "serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "numbers-test", "version": "0"}}});
    writeln!(stdin, "{init}").unwrap();
    out.next().unwrap().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    let mut replies = Vec::new();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
        let reply = out.next().unwrap().unwrap();
        replies.push(serde_json::from_str(&reply).unwrap());
    }
    drop(stdin);
    child.wait().unwrap();
    replies
}

fn call(id: u32, tool: &str, args: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
    )
}

fn tool_error(reply: &Value) -> Value {
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    reply["result"]["structuredContent"].clone()
}

/// MCP arguments are parsed before a tool sees them, so the check runs on
/// the request's text: `2^64` would otherwise arrive as
/// `1.8446744073709552e19` and be stored so.
#[test]
fn mcp_arguments_refuse_a_number_the_parsed_value_would_change() {
    let env = TestEnv::new();
    let s = env.create("numbers");
    let mut lines = Vec::new();
    let mut id = 1;
    // `1e400` is left out: serde_json cannot parse it at all, so rmcp
    // drops the whole message unanswered (no value of it reaches a tool).
    for n in TOO_BIG.iter().filter(|n| **n != "1e400") {
        lines.push(call(
            id,
            "logbook_session_create",
            &format!(r#"{{"title":"t","context":{{"n":{n}}}}}"#),
        ));
        lines.push(call(
            id + 1,
            "logbook_run_create",
            &format!(r#"{{"session_id":"{s}","input":{{"n":{n}}}}}"#),
        ));
        lines.push(call(
            id + 2,
            "logbook_session_checkpoint",
            &format!(r#"{{"session_id":"{s}","step":"x","state":{{"n":{n}}}}}"#),
        ));
        id += 3;
    }
    // The boundaries pass, exactly.
    lines.push(call(
        100,
        "logbook_session_create",
        r#"{"title":"edges","metadata":{"max":9223372036854775807,"min":-9223372036854775808}}"#,
    ));
    let before = row_counts(&env);
    let replies = mcp_raw(&env, &lines);
    for (i, r) in replies[..replies.len() - 1].iter().enumerate() {
        let e = tool_error(r);
        assert_eq!(e["code"], "INVALID_ARGUMENT", "{r}");
        let want = ["context", "input", "state"][i % 3];
        assert_eq!(e["details"]["field"], want, "{r}");
        assert!(e["message"].as_str().unwrap().contains("(at `n`)"), "{r}");
    }
    let (sessions, events, runs) = row_counts(&env);
    assert_eq!(
        (sessions, events, runs),
        (before.0 + 1, before.1 + 1, before.2)
    );
    let last = replies.last().unwrap();
    assert_eq!(last["result"]["isError"], false, "{last}");
    let text = last["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(r#""metadata":{"max":9223372036854775807,"min":-9223372036854775808}"#),
        "{text}"
    );
}

/// An imported JSON value follows the same rule: the session is rejected
/// naming the field, and the others import.
#[test]
fn an_imported_number_that_would_change_rejects_its_session() {
    let env = TestEnv::new();
    let a = env.create("a");
    let exported = env.run(&["export", "--format", "jsonl"]).stdout;
    // Renamed sessions: their hashes are left out (the id is in each).
    let good: Value = crate::transfer::unhashed(serde_json::from_str(exported.trim()).unwrap());
    let mut bad = good.clone();
    bad["session_id"] = json!("ses_00000000000000b1");
    let line = bad
        .to_string()
        .replace(r#""context":{}"#, r#""context":{"n":18446744073709551616}"#);
    assert!(line.contains("18446744073709551616"));
    let mut edge = good.clone();
    edge["session_id"] = json!("ses_00000000000000b2");
    let edge_line = edge
        .to_string()
        .replace(r#""context":{}"#, r#""context":{"n":-9223372036854775808}"#);
    let file = env.dir.path().join("in.jsonl");
    std::fs::write(&file, format!("{line}\n{edge_line}\n")).unwrap();
    let r = env.json(&["import", "--format", "jsonl", file.to_str().unwrap()]);
    let d = assert_error(&r, "INVALID_ARGUMENT", 2)["details"].clone();
    assert_eq!(
        (d["imported"].clone(), d["rejected"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(d["rejections"][0]["session_id"], "ses_00000000000000b1");
    assert_eq!(d["rejections"][0]["field"], "context");
    assert!(d["rejections"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("(at `n`)"));
    let ctx = env.rows(
        "SELECT context FROM session_data WHERE session_id = 'ses_00000000000000b2'",
        &[],
    );
    assert_eq!(ctx[0][0], r#"{"n":-9223372036854775808}"#);
    let _ = a;
}

/// Library callers build values in code, where the text check cannot run:
/// an integer above `i64::MAX` (a `u64`) is refused there too, since
/// SQLite's JSON functions would read it back as an approximate REAL.
#[test]
fn library_values_with_an_integer_above_i64_max_are_refused() {
    use logbook::{CreateRun, CreateSession, ErrorCode, Ledger, LedgerOptions, Mutation};
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(LedgerOptions::at(dir.path().join("l.db"))).unwrap();
    let mut req = CreateSession::titled("t");
    req.context = Some(json!({"n": [u64::MAX]}));
    let e = ledger.create_session(req).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert_eq!(e.details()["field"], "context");
    assert!(e.to_string().contains("(at `n[0]`)"), "{e}");
    let s = ledger.create_session(CreateSession::titled("t")).unwrap();
    let id = s.session_id.to_string();
    let big = CreateRun {
        input: Some(json!({"n": 9_223_372_036_854_775_808_u64})),
        metadata: None,
    };
    let e = ledger
        .create_run(&id, big, &Mutation::default())
        .unwrap_err();
    assert_eq!(e.details()["field"], "input");
    let edge = CreateRun {
        input: Some(json!({"n": i64::MAX})),
        metadata: Some(json!({"m": i64::MIN})),
    };
    let r = ledger.create_run(&id, edge, &Mutation::default()).unwrap();
    assert_eq!(
        r.input.as_ref().unwrap().get(),
        r#"{"n":9223372036854775807}"#
    );
}
