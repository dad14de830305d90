//! Facts of a server alone (docs/design.md, "Backends"): doctor's server checks,
//! backup refused, a connection closed under a long-lived handle, a COMMIT
//! whose reply is lost, clients killed in the middle of a transaction, and
//! (run alone by .ci/run, as it restarts the server) writes across an
//! immediate server restart.

use crate::common::*;
use crate::proxy::Proxy;
use logbook::Mutation;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The test server's port.
fn server_port() -> u16 {
    std::env::var("LOGBOOK_TEST_PG_PORT")
        .expect("LOGBOOK_TEST_PG_PORT (set by .ci/pg)")
        .parse()
        .unwrap()
}

/// The env's URL with its port swapped for the proxy's, without TLS.
fn via(env: &TestEnv, proxy: &Proxy) -> String {
    let url = env.db.to_str().unwrap();
    let from = format!("127.0.0.1:{}/", server_port());
    assert!(
        url.contains(&from),
        "the test URL names 127.0.0.1 and the port"
    );
    // Plain text, so that the proxy can see the protocol's messages.
    let url = url.replacen(&from, &format!("127.0.0.1:{}/", proxy.port), 1);
    assert!(!url.contains('?'));
    format!("{url}?sslmode=disable")
}

fn check_names(d: &Value) -> Vec<String> {
    d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn pg_doctor_checks_schema_triggers_chain_and_server() {
    let env = TestEnv::new();
    let id = env.create("d");
    env.checkpoint(&id, "s1");
    let d = env.json(&["doctor"]).data();
    assert_eq!(
        check_names(&d),
        ["schema", "triggers", "hash_chain", "tombstones", "server"]
    );
    // The human summary names no WAL file: a server has none of the ledger's.
    let r = env.run(&["doctor"]);
    assert_eq!(r.code, 0);
    let last = r.stdout.lines().last().unwrap_or_default().to_owned();
    assert!(
        last.starts_with("1 session(s), 2 event(s); database "),
        "{last}"
    );
    assert!(!last.contains("WAL"), "{last}");
    assert_eq!(d["healthy"], true);
    assert_eq!(
        (d["sessions"].as_i64(), d["events"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(d["schema_version"], logbook::store::LATEST_VERSION);
    assert_eq!(
        d["checks"][1]["detail"],
        "48 trigger(s) present and enabled"
    );
    assert!(d["path"].as_str().unwrap().starts_with("postgres://"));
    assert!(
        !env.shows_password(&d),
        "the report never shows the password"
    );

    // A trigger switched off (which SQLite cannot do) is a problem, named.
    let mut c = env.pg_client();
    c.batch_execute("ALTER TABLE events DISABLE TRIGGER events_no_update")
        .unwrap();
    let e = assert_error(&env.json(&["doctor"]), "STORE_CORRUPT", 6);
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("disabled: events.events_no_update"), "{msg}");
    c.batch_execute("ALTER TABLE events ENABLE TRIGGER events_no_update")
        .unwrap();
    // A dropped one too.
    c.batch_execute("DROP TRIGGER sessions_no_truncate ON sessions")
        .unwrap();
    let e = assert_error(&env.json(&["doctor"]), "STORE_CORRUPT", 6);
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("missing: sessions.sessions_no_truncate"),
        "{msg}"
    );
}

impl TestEnv {
    /// Whether a report shows the server's password.
    fn shows_password(&self, d: &Value) -> bool {
        let url = self.db.to_str().unwrap();
        let pw = url
            .split_once("://")
            .and_then(|(_, r)| r.split_once('@'))
            .and_then(|(ui, _)| ui.split_once(':'))
            .map(|(_, p)| p.to_owned())
            .unwrap_or_default();
        !pw.is_empty() && d.to_string().contains(&pw)
    }
}

#[test]
fn pg_backup_is_refused_and_points_to_pg_dump() {
    let env = TestEnv::new();
    env.create("b");
    let dest = env.dir.path().join("copy.db");
    let e = assert_error(
        &env.json(&["backup", dest.to_str().unwrap()]),
        "INVALID_ARGUMENT",
        2,
    );
    assert!(e["message"].as_str().unwrap().contains("pg_dump"), "{e}");
    assert!(!dest.exists());
}

#[test]
fn pg_a_setting_the_server_refuses_in_the_url_is_invalid_argument() {
    let env = TestEnv::new();
    let url = env.db.to_str().unwrap().to_owned();
    let sep = if url.contains('?') { '&' } else { '?' };
    for bad in [
        "options=-c%20statement_timeout%3Dabc",
        "options=-c%20no_such_setting%3D1",
    ] {
        let mut c = env.command();
        c.args([
            "--db",
            &format!("{url}{sep}{bad}"),
            "session",
            "list",
            "--json",
        ]);
        let r: Run = c.output().unwrap().into();
        let e = assert_error(&r, "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], "db", "{bad}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains("refused a setting"),
            "{e}"
        );
    }
}

#[test]
fn pg_sql_names_a_cast_that_works_for_a_type_it_does_not_print() {
    let env = TestEnv::new();
    env.create("t");
    for q in [
        "SELECT now()",
        "SELECT tx_id FROM events LIMIT 1",
        "SELECT pg_sleep(0)",
    ] {
        let e = assert_error(&env.json(&["sql", q]), "INVALID_ARGUMENT", 2);
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("cast that expression to text"), "{q}: {msg}");
        assert!(!msg.contains("::bigint"), "{q}: {msg}");
    }
    for q in [
        "SELECT now()::text",
        "SELECT tx_id::text FROM events LIMIT 1",
    ] {
        assert_eq!(env.json(&["sql", q]).code, 0, "{q}");
    }
}

#[test]
fn pg_a_long_lived_ledger_reconnects_after_its_connection_is_closed() {
    let env = TestEnv::new();
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy)));
    let id = lib_create(&lg, "idle", "a");
    // The connection is closed while the handle is idle (a proxy's or the
    // server's idle timeout): the next write reconnects and succeeds.
    proxy.cut_all();
    let w = lg
        .checkpoint(&id, cp("s1", None), &Mutation::default())
        .unwrap();
    assert_eq!(w.value.rev, 2);
    // A read, the same.
    proxy.cut_all();
    assert_eq!(lg.get_session(&id).unwrap().rev, 2);
    // The server ending the backend itself (pg_terminate_backend), the same.
    let killed = env.scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
    );
    assert!(killed >= 1, "the handle's connection was open");
    let w = lg
        .checkpoint(&id, cp("s2", None), &Mutation::default())
        .unwrap();
    assert_eq!(w.value.rev, 3);
    assert_eq!(
        event_types(&env, &id),
        ["created", "checkpoint", "checkpoint"]
    );
}

#[test]
fn pg_a_lost_commit_reply_is_unavailable_unknown_and_the_key_makes_the_retry_safe() {
    let env = TestEnv::new();
    let id = env.create("k");
    let proxy = Proxy::start(server_port());
    let url = via(&env, &proxy);
    // A budget change that puts usage over a limit is a transaction (the
    // crossing: docs/postgres.md, "One round trip per write"), so it has a
    // COMMIT to lose.
    let first = logbook::SetBudget {
        max_tokens: Some(1000),
        on_exceed: Some(logbook::OnExceed::Warn),
        ..logbook::SetBudget::default()
    };
    let lg = env.ledger();
    lg.set_budget(&id, first, &Mutation::default()).unwrap();
    let used = logbook::RecordUsage {
        input_tokens: Some(10),
        ..logbook::RecordUsage::default()
    };
    lg.record_usage(&id, used, &Mutation::default()).unwrap();
    drop(lg);
    let args = [
        "--db",
        &url,
        "session",
        "budget",
        &id,
        "--max-tokens",
        "5",
        "--idempotency-key",
        "k-1",
        "--json",
    ];
    proxy.cut_after_next_commit();
    let r: Run = env.command().args(args).output().unwrap().into();
    let e = assert_error(&r, "STORE_UNAVAILABLE", 4);
    assert_eq!(e["details"]["outcome"], "unknown", "{e}");
    // The proxy forwarded the COMMIT after closing the client's side, and
    // counts it once the server had time to apply it.
    let t = Instant::now();
    while proxy.commits_cut() == 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(proxy.commits_cut(), 1);
    // The server did commit it.
    let committed = [
        "created",
        "budget_set",
        "usage_recorded",
        "budget_set",
        "budget_exceeded",
    ];
    assert_eq!(event_types(&env, &id), committed);
    // The caller retries with the same key: a replay, nothing applied again.
    let r: Run = env.command().args(args).output().unwrap().into();
    let j = r.json();
    assert_eq!(j["ok"], true, "{}", r.stdout);
    assert_eq!(j["data"]["session_rev"], 4, "{}", r.stdout);
    assert_eq!(j["data"]["max_tokens"], 5, "{}", r.stdout);
    assert_eq!(j["data"]["exceeded"], true, "{}", r.stdout);
    assert_eq!(j["replayed"]["rev"], 4, "{}", r.stdout);
    assert_eq!(event_types(&env, &id), committed);
    // A lost connection before COMMIT is retried in place: applied once.
    let lg = open_ledger(Path::new(&url));
    proxy.cut_all();
    let w = lg
        .checkpoint(&id, cp("s2", None), &Mutation::default())
        .unwrap();
    assert_eq!(w.value.rev, 5);
    let mut after = committed.to_vec();
    after.push("checkpoint");
    assert_eq!(event_types(&env, &id), after);
}

#[test]
fn pg_writers_killed_mid_transaction_leave_no_lock_and_no_partial_write() {
    let env = TestEnv::new();
    let id = env.create("kill");
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..12 {
        let mut kids: Vec<std::process::Child> = (0..4)
            .map(|k| {
                env.cli(&[
                    "session",
                    "checkpoint",
                    &id,
                    "--step",
                    &format!("r{round}-{k}"),
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
            })
            .collect();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(5 + rng % 60));
        for k in &mut kids {
            let _ = k.kill(); // SIGKILL: mid-connect, mid-transaction or done
            let _ = k.wait();
        }
    }
    // No killed client's transaction holds the session: the next write
    // gets it well within its busy timeout, and what committed is whole.
    let t = Instant::now();
    let d = env.checkpoint(&id, "after");
    assert!(t.elapsed() < Duration::from_secs(5));
    let rev = assert_rev_matches_events(&env, &id);
    assert_eq!(d["rev"], rev);
    let v = env.json(&["verify"]).data();
    assert_eq!(v["sessions"], 1);
    assert_eq!(v["events"], rev);
}

/// Restarts the test server with `pg_ctl restart -m immediate` (a crash:
/// no shutdown checkpoint, open transactions lost), as `.ci/pg` says.
fn restart_server_immediately() {
    let ctl = std::env::var("LOGBOOK_TEST_PG_CTL").expect("LOGBOOK_TEST_PG_CTL");
    let data = std::env::var("LOGBOOK_TEST_PGDATA").expect("LOGBOOK_TEST_PGDATA");
    let mut c = if is_root() {
        let user = std::env::var("LOGBOOK_TEST_PG_OSUSER").expect("LOGBOOK_TEST_PG_OSUSER");
        let mut c = Command::new("runuser");
        c.args(["-u", &user, "--", &ctl]);
        c
    } else {
        Command::new(&ctl)
    };
    // The server's log goes to a file in its folder: a restarted server
    // keeps the streams it was given, and would hold a pipe open forever.
    let log = format!("{data}/restart.log");
    let out = c
        .args(["-D", &data, "-l", &log, "-w", "restart", "-m", "immediate"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(out.success(), "pg_ctl restart failed: {out:?} (log: {log})");
}

#[test]
#[ignore = "restarts the test server: .ci/run runs it alone (cargo test --test pg -- --ignored pg_restart)"]
fn pg_restart_mid_load_keeps_every_acknowledged_write() {
    let env = TestEnv::new();
    let ids: Vec<String> = (0..4).map(|i| env.create(&format!("w{i}"))).collect();
    let start = Instant::now();
    let writers: Vec<_> = ids
        .iter()
        .map(|id| {
            let cmds: Vec<Command> = (0..40)
                .map(|i| {
                    let mut c = env.cli(&["session", "checkpoint", id, "--step", &format!("s{i}")]);
                    c.args(["--busy-timeout-ms", "30000"]);
                    c
                })
                .collect();
            std::thread::spawn(move || {
                cmds.into_iter()
                    .map(|mut c| Run::from(c.output().unwrap()))
                    .collect::<Vec<Run>>()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    restart_server_immediately();
    let restarted_at = start.elapsed();
    let results: Vec<Vec<Run>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let mut summary = (0, 0, 0);
    for (id, runs) in ids.iter().zip(&results) {
        let mut acked = Vec::new();
        let mut unknown = 0;
        for r in runs {
            let j = r.json();
            if j["ok"] == true {
                acked.push(j["data"]["rev"].as_i64().unwrap());
                summary.0 += 1;
                continue;
            }
            // Every failure is coded and says whether it may have applied.
            let e = assert_error(r, "STORE_UNAVAILABLE", 4);
            match e["details"]["outcome"].as_str() {
                Some("unknown") => {
                    unknown += 1;
                    summary.1 += 1;
                }
                Some("not_applied") => summary.2 += 1,
                other => panic!("outcome {other:?}: {e}"),
            }
        }
        // Each acknowledged write is there, once, in order.
        let rev = assert_rev_matches_events(&env, id);
        let mut sorted = acked.clone();
        sorted.dedup();
        assert_eq!(sorted, acked, "acknowledged revs grow");
        assert!(acked.last().is_some_and(|&r| r <= rev));
        let checkpoints = (rev - 1) as usize;
        assert!(
            checkpoints >= acked.len() && checkpoints <= acked.len() + unknown,
            "{checkpoints} checkpoints, {} acknowledged, {unknown} unknown",
            acked.len()
        );
    }
    let v = env.json(&["verify"]).data();
    assert_eq!(v["sessions"], 4);
    // The restart must have met the load, or the test proved nothing.
    let done_before = summary.0 + summary.1 + summary.2;
    assert_eq!(done_before, 160);
    eprintln!(
        "restart at {restarted_at:?}: {} acknowledged, {} unknown, {} not applied; each acknowledged write kept",
        summary.0, summary.1, summary.2
    );
}

/// The roles docs/postgres.md sets up, as its SQL says: the owner migrates;
/// an agent role writes through logbook without owning anything; an
/// operators' role granted only the views reads them and nothing else.
#[test]
fn pg_roles_agent_writes_and_operator_reads_only_the_views() {
    let env = TestEnv::new();
    let id = env.create("owned"); // the owner creates and migrates
    let pg = env.pg.as_ref().unwrap();
    let mut c = env.pg_client();
    let agent = format!("{}_agent", pg.name);
    let operator = format!("{}_operator", pg.name);
    // The names are ours (fixed prefix, hex): nothing to quote.
    c.batch_execute(&format!(
        "CREATE ROLE {agent} LOGIN PASSWORD 'agent-pw';
         GRANT USAGE ON SCHEMA public TO {agent};
         GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {agent};
         GRANT DELETE ON session_leases TO {agent};
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {agent};
         CREATE ROLE {operator} LOGIN PASSWORD 'operator-pw';
         GRANT USAGE ON SCHEMA public TO {operator};
         GRANT SELECT ON v_sessions, v_events, v_daily, v_runs, v_purges TO {operator};"
    ))
    .unwrap();
    let as_role = |role: &str, pw: &str| crate::pg::with_user(&pg.url, role, pw);
    let agent_url = as_role(&agent, "agent-pw");
    let op_url = as_role(&operator, "operator-pw");
    let lb = |url: &str, args: &[&str]| -> Run {
        env.command()
            .arg("--db")
            .arg(url)
            .args(args)
            .arg("--json")
            .output()
            .unwrap()
            .into()
    };
    // The agent records work and ends it; a lease is taken and released.
    let r = lb(&agent_url, &["session", "checkpoint", &id, "--step", "s1"]);
    assert_eq!(r.json()["data"]["rev"], 2, "{}", r.stdout);
    let lock = lb(&agent_url, &["session", "lock", &id]).data();
    let token = lock["token"].as_str().unwrap().to_owned();
    lb(&agent_url, &["session", "unlock", &id, "--token", &token]).data();
    let other = lb(&agent_url, &["session", "create", "--title", "by agent"]).data();
    assert_eq!(other["rev"], 1);
    assert_eq!(lb(&agent_url, &["verify"]).data()["sessions"], 2);
    // The agent cannot remove what the triggers would not let anyone remove,
    // and holds no right to try.
    let mut a = postgres::Client::connect(&agent_url, postgres::NoTls).unwrap();
    let e = a.batch_execute("TRUNCATE events").unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{e}");

    // The operator reads the views…
    let mut o = postgres::Client::connect(&op_url, postgres::NoTls).unwrap();
    let n: i64 = o
        .query_one("SELECT count(*) FROM v_sessions", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    let n: i64 = o
        .query_one("SELECT count(*) FROM v_events", &[])
        .unwrap()
        .get(0);
    assert!(n >= 4, "{n}");
    let n: i64 = o
        .query_one("SELECT count(*) FROM v_purges", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // …and nothing else: every table is refused, reads and writes.
    for sql in [
        "SELECT count(*) FROM tombstones",
        "SELECT count(*) FROM sessions",
        "SELECT count(*) FROM events",
        "SELECT count(*) FROM session_data",
        "UPDATE sessions SET title = 'x'",
    ] {
        let e = o.batch_execute(sql).unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{sql}: {e}");
    }
    // logbook itself needs the tables: as the operator it says so, coded.
    let e = assert_error(&lb(&op_url, &["session", "list"]), "STORE_IO", 6);
    assert!(
        e["message"].as_str().unwrap().contains("permission denied"),
        "{e}"
    );
    c.batch_execute(&format!(
        "DROP OWNED BY {agent}; DROP OWNED BY {operator}; DROP ROLE {agent}; DROP ROLE {operator};"
    ))
    .ok();
}

/// A purge refused for lack of privilege (the agent role may not delete)
/// leaves no purge record, and its message says which role a purge needs.
#[test]
fn pg_a_purge_without_the_privilege_records_nothing_and_names_the_role() {
    let env = TestEnv::new();
    let id = env.create("owned");
    env.json(&["session", "complete", &id, "--result", "ok"])
        .data();
    let pg = env.pg.as_ref().unwrap();
    let mut c = env.pg_client();
    let agent = format!("{}_agent", pg.name);
    c.batch_execute(&format!(
        "CREATE ROLE {agent} LOGIN PASSWORD 'agent-pw';
         GRANT USAGE ON SCHEMA public TO {agent};
         GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {agent};
         GRANT DELETE ON session_leases TO {agent};
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {agent};"
    ))
    .unwrap();
    let url = crate::pg::with_user(&pg.url, &agent, "agent-pw");
    let r: Run = env
        .command()
        .args(["--db", &url, "purge", "--app", "a", "--yes", "--json"])
        .output()
        .unwrap()
        .into();
    let e = assert_error(&r, "STORE_IO", 6);
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("permission denied"), "{msg}");
    assert!(msg.contains("a purge needs a role"), "{msg}");
    assert_eq!(env.scalar("SELECT count(*) FROM purges"), 0);
    assert_eq!(env.scalar("SELECT count(*) FROM tombstones"), 0);
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), 1);
    c.batch_execute(&format!("DROP OWNED BY {agent}; DROP ROLE {agent};"))
        .ok();
}

/// An idle follower backs off: one probe (one round trip, a prepared
/// statement) every 20 ms at most once nothing moves, where it sent two
/// round trips every 5 ms (≈ 3% of a core doing nothing). It still sees
/// the next event, and resumes probing every 5 ms as events come.
#[test]
fn pg_an_idle_follower_backs_off_to_one_probe_every_20_ms() {
    let env = TestEnv::new();
    let s = env.create("a");
    let proxy = Proxy::start(server_port());
    let url = via(&env, &proxy);
    let mut follower = env
        .command()
        .args(["--db", &url, "events", "--follow", "--json", "--from-now"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Started and idle: count its round trips over 2 s.
    std::thread::sleep(Duration::from_millis(1000));
    let before = proxy.bursts();
    std::thread::sleep(Duration::from_millis(2000));
    let idle = proxy.bursts() - before;
    assert!(
        (1..=130).contains(&idle),
        "an idle follower made {idle} round trips in 2 s (at most 100 at 20 ms, plus a few)"
    );
    env.checkpoint(&s, "after the quiet");
    let line = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["data"]["step"].as_str()),
        (Some("checkpoint"), Some("after the quiet"))
    );
    let _ = follower.kill();
    let _ = follower.wait();
}
