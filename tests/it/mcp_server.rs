//! The `logbook mcp serve` process: stdout carries only the protocol (a bad
//! database is a stderr diagnostic, then a tool error), stdin closed before
//! the handshake exits 0, an unknown method is not repeated; and the CASES
//! that hold for the server as for the CLI: a failed write leaves no lock
//! (C03), two servers and the CLI append gap-free across a kill (C10), an
//! idle server pins no read transaction and lets the WAL shrink (C14), a
//! request id sent twice applies once (C28).

use crate::common::*;
use crate::mcp::{
    call, connect, counts, ok, raw_session, reply_body, rt, server_command, text, tools_call,
};
use serde_json::json;
use std::process::{Command, Stdio};

#[test]
fn an_idle_server_holds_no_read_transaction_c14() {
    let env = TestEnv::new();
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let id = s["session_id"].as_str().unwrap().to_owned();
        for i in 0..50 {
            ok(&call(
                &client,
                "logbook_session_checkpoint",
                json!({"session_id": id, "step": format!("s{i}")}),
            )
            .await);
        }
        ok(&call(&client, "logbook_session_show", json!({"session_id": id})).await);
        ok(&call(&client, "logbook_session_list", json!({})).await);
        // The server now idles between calls, its process alive.
        if on_pg() {
            // Its connection sits outside any transaction.
            assert_eq!(env.pg_idle_in_transaction(), 0);
        } else {
            let c = env.sql();
            let (busy, log, done): (i64, i64, i64) = c
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .unwrap();
            assert_eq!(
                (busy, log, done),
                (0, 0, 0),
                "TRUNCATE checkpoint went through"
            );
            let mut wal = env.db.clone().into_os_string();
            wal.push("-wal");
            assert_eq!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0), 0);
        }
        // And the server still works afterwards.
        ok(&call(
            &client,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "after"}),
        )
        .await);
        client.cancel().await.unwrap();
    });
}

#[test]
fn stdout_is_only_protocol_and_a_bad_db_is_a_stderr_diagnostic_then_a_tool_error() {
    let env = TestEnv::new();
    let file = env.dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let db = file.join("ledger.db");
    let (out, stderr, code) = raw_session(
        &env,
        &db,
        &[tools_call(
            1,
            "logbook_session_create",
            json!({"title": "t"}),
        )],
    );
    assert_eq!(code, 0, "exits 0 when stdin closes; stderr: {stderr}");
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[1]["id"], 1);
    assert_eq!(out[1]["result"]["isError"], true);
    assert_eq!(reply_body(&out[1])["code"], "STORE_IO");
    assert!(stderr.contains("error[STORE_IO]"), "{stderr}");
}

#[test]
fn the_same_request_id_twice_applies_once_c28() {
    let env = TestEnv::new();
    let id = env.create("t");
    let step = tools_call(
        7,
        "logbook_session_checkpoint",
        json!({"session_id": id, "step": "s1"}),
    );
    let other = tools_call(
        7,
        "logbook_session_checkpoint",
        json!({"session_id": id, "step": "s2"}),
    );
    let (out, stderr, code) = raw_session(&env, &env.db, &[step.clone(), step, other]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(out[1], out[2], "the repeat gets the first reply");
    assert_eq!(reply_body(&out[1])["rev"], 2);
    assert_eq!(out[3]["result"]["isError"], true);
    assert_eq!(reply_body(&out[3])["code"], "INVALID_ARGUMENT");
    assert_eq!(reply_body(&out[3])["details"]["field"], "request_id");
    assert_eq!(counts(&env).1, 2, "created + one checkpoint");
}

#[test]
fn a_failed_write_leaves_no_lock_and_no_partial_change_c03() {
    let env = TestEnv::new();
    let id = env.create("t");
    env.batch(pick(BOOM_TRIGGER, BOOM_TRIGGER_PG));
    let before = env.show(&id);
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let r = call(
            &client,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "s", "note": "BOOM"}),
        )
        .await;
        assert_eq!(r.is_error, Some(true), "{}", text(&r));
        assert_eq!(env.show(&id), before);
        // Another writer gets the lock at once while the server stays up.
        assert_write_lock_free(&env);
        assert_eq!(env.json(&["session", "create", "--title", "x"]).code, 0);
        let s = ok(&call(
            &client,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "s2"}),
        )
        .await);
        assert_eq!(s["rev"], 2);
        client.cancel().await.unwrap();
    });
}

#[test]
fn two_servers_and_the_cli_append_gap_free_across_a_kill_c10() {
    let env = TestEnv::new();
    let id = env.create("t");
    let cli_loop = |tag: &'static str| {
        let db = env.db.clone();
        let home = env.dir.path().to_path_buf();
        let id = id.clone();
        std::thread::spawn(move || {
            for i in 0..20 {
                let o = Command::new(bin())
                    .env_clear()
                    .env("HOME", &home)
                    .args(["--db"])
                    .arg(&db)
                    .args([
                        "session",
                        "checkpoint",
                        &id,
                        "--step",
                        &format!("{tag}{i}"),
                        "--json",
                    ])
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
            }
        })
    };
    for round in ["a", "b"] {
        let cli = cli_loop(if round == "a" { "c" } else { "d" });
        rt().block_on(async {
            let client = connect(&env, &[]).await;
            for i in 0..20 {
                ok(&call(
                    &client,
                    "logbook_session_checkpoint",
                    json!({"session_id": id, "step": format!("{round}{i}")}),
                )
                .await);
            }
            // Dropping the transport kills the server process (kill, not a clean close).
            drop(client);
        });
        cli.join().unwrap();
    }
    let stats = env.rows(
        "SELECT count(*), min(seq), max(seq) FROM events WHERE session_id=$1",
        &[&id],
    );
    assert_eq!(stats[0], [json!(81), json!(0), json!(80)]);
    let mcp = env.rows(
        "SELECT count(*) FROM events WHERE session_id=$1 AND actor_type='mcp'",
        &[&id],
    );
    assert_eq!(mcp[0][0], 40);
}

#[test]
fn stdin_closed_before_the_handshake_exits_zero_with_empty_stdout() {
    let env = TestEnv::new();
    let o = server_command(&env, &env.db, &[])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
}

// The WAL and its size limit are SQLite's.
sqlite_only! {
/// docs/design.md, "Operator access": with an idle `mcp serve` attached, a reader holding a long
/// transaction pins the WAL while writers go on; once the reader ends, the
/// WAL drops back under `journal_size_limit` (64 MiB): the idle server holds
/// nothing that keeps it large.
#[test]
fn an_idle_server_and_a_pinning_reader_do_not_grow_the_wal_for_good() {
    use logbook::{CheckpointRequest, Ledger, LedgerOptions, Mutation, SyncMode};
    let env = TestEnv::new();
    let limit = u64::try_from(logbook::store::sqlite::open::JOURNAL_SIZE_LIMIT_BYTES).unwrap();
    let mut wal = env.db.clone().into_os_string();
    wal.push("-wal");
    let wal_len = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    rt().block_on(async {
        let client = connect(&env, &[]).await;
        let s = ok(&call(&client, "logbook_session_create", json!({"title": "t"})).await);
        let id = s["session_id"].as_str().unwrap().to_owned();
        ok(&call(&client, "logbook_session_show", json!({"session_id": id})).await);
        let writer = Ledger::open(LedgerOptions {
            sync: SyncMode::Normal,
            ..LedgerOptions::at(&env.db)
        })
        .unwrap();
        let note = "n".repeat(1024);
        let reader = env.sql();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        let mut n = 0;
        while wal_len() <= limit && n < 80_000 {
            let req = CheckpointRequest {
                step: Some(format!("k{n}")),
                note: Some(note.clone()),
                ..Default::default()
            };
            writer.checkpoint(&id, req, &Mutation::default()).unwrap();
            n += 1;
        }
        let pinned = wal_len();
        assert!(pinned > limit, "the reader should pin the WAL: {pinned}");
        reader.execute_batch("COMMIT").unwrap();
        for k in 0..100 {
            let req = CheckpointRequest {
                step: Some(format!("after{k}")),
                ..Default::default()
            };
            writer.checkpoint(&id, req, &Mutation::default()).unwrap();
        }
        let after = wal_len();
        assert!(
            after <= limit,
            "-wal is {after} bytes after the reader left (was {pinned})"
        );
        // The idle server still answers, and sees every write.
        let shown = ok(&call(&client, "logbook_session_show", json!({"session_id": id})).await);
        assert_eq!(shown["session"]["rev"], 1 + n + 100);
        client.cancel().await.unwrap();
    });
}
}

/// An unknown JSON-RPC method gets -32601 with a fixed message: rmcp's
/// default repeated the method name, which could hold a secret (found by
/// adversarial testing).
#[test]
fn an_unknown_method_is_not_repeated_in_the_error() {
    let env = TestEnv::new();
    let db = env.path().to_path_buf();
    let (out, stderr, code) = raw_session(
        &env,
        &db,
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "sk-abcdefghijklmnopqrstuvwxyz", "params": {}}),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        out[1],
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "method not found"}})
    );
    assert!(!stderr.contains("abcdefghijklm"));
}
