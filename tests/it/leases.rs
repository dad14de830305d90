//! `logbook session lock|unlock` and `--lease` (docs/design.md, "Leases"; Amber's
//! session lock).

use crate::common::*;
use serde_json::Value;
use std::process::{Command, Stdio};

fn lock(env: &TestEnv, id: &str, extra: &[&str]) -> Value {
    let mut a = vec!["session", "lock", id];
    a.extend_from_slice(extra);
    env.json(&a).data()
}

fn me() -> String {
    std::process::id().to_string()
}

#[test]
fn lock_prints_the_token_once_and_stores_only_its_hash() {
    let env = TestEnv::new();
    let s = env.create("a");
    let l = lock(&env, &s, &["--owner-pid", &me(), "--ttl-ms", "60000"]);
    let token = l["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("lease_") && token.len() == 70, "{token}");
    assert_eq!(l["pid"].as_i64(), Some(i64::from(std::process::id())));
    assert_eq!(l["hostname"].as_str().unwrap(), logbook::ledger::hostname());
    assert_eq!(
        l["expires_at_ms"].as_i64().unwrap() - l["acquired_at_ms"].as_i64().unwrap(),
        60_000
    );
    assert_eq!(l["session"]["rev"], 2);
    assert_eq!(event_types(&env, &s), ["created", "lease_acquired"]);
    // The token comes first in the output (fixed key order).
    let r = env.json(&[
        "session",
        "lock",
        &s,
        "--lease",
        &token,
        "--owner-pid",
        &me(),
    ]);
    assert!(
        r.stdout.starts_with(&format!(
            "{{\"ok\":true,\"data\":{{\"token\":\"{token}\",\"session_id\":"
        )),
        "{}",
        r.stdout
    );
    // Only the SHA-256 reaches the database.
    use sha2::Digest;
    let stored = env.rows("SELECT token_sha256 FROM session_leases", &[]);
    assert_eq!(
        stored,
        [[serde_json::json!(hex::encode(sha2::Sha256::digest(
            token.as_bytes()
        )))]]
    );
    assert!(!env
        .db_bytes()
        .windows(20)
        .any(|w| w == &token.as_bytes()[6..26]));
    let v = env.json(&["session", "show", &s]).data();
    assert_eq!(v["lease"]["live"], true);
    assert!(!env
        .run(&["session", "show", &s, "--json"])
        .stdout
        .contains(&token));
    assert_rev_matches_events(&env, &s);
}

#[test]
fn a_live_lease_blocks_writers_without_its_token() {
    let env = TestEnv::new();
    let s = env.create("a");
    let token = lock(&env, &s, &["--owner-pid", &me()])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = env.show(&s);
    for args in [
        vec!["session", "checkpoint", &s, "--step", "x"],
        vec!["session", "pause", &s],
        vec!["session", "cancel", &s, "--reason", "r"],
        vec!["session", "event", &s, "--type", "x.y"],
        vec!["session", "stage", &s, "start", "a"],
        vec!["gate", "open", &s, "--gate", "g", "--kind", "auto"],
        vec!["session", "lock", &s],
    ] {
        let e = assert_error(&env.json(&args), "LEASE_HELD", 4);
        assert_eq!(
            e["details"]["pid"].as_i64(),
            Some(i64::from(std::process::id())),
            "{args:?}"
        );
        assert!(e["details"]["expires_at_ms"].is_i64());
    }
    // A wrong token is LEASE_HELD too; a malformed one INVALID_ARGUMENT,
    // never echoed.
    let wrong = format!("lease_{}", "0".repeat(64));
    assert_error(
        &env.json(&[
            "session",
            "checkpoint",
            &s,
            "--step",
            "x",
            "--lease",
            &wrong,
        ]),
        "LEASE_HELD",
        4,
    );
    let r = env.json(&[
        "session",
        "checkpoint",
        &s,
        "--step",
        "x",
        "--lease",
        "lease_SECRETISH",
    ]);
    assert_error(&r, "INVALID_ARGUMENT", 2);
    assert!(!r.stdout.contains("SECRETISH"));
    assert_error(
        &env.json(&["session", "unlock", &s, "--token", &wrong]),
        "LEASE_HELD",
        4,
    );
    assert_eq!(env.show(&s), before);

    // The holder writes with its token.
    let d = env
        .json(&[
            "session",
            "checkpoint",
            &s,
            "--step",
            "mine",
            "--lease",
            &token,
        ])
        .data();
    assert_eq!(d["rev"], 3);
    // Renewal keeps the token and moves the expiry.
    let r = lock(
        &env,
        &s,
        &[
            "--owner-pid",
            &me(),
            "--lease",
            &token,
            "--ttl-ms",
            "120000",
        ],
    );
    assert_eq!(
        (r["token"].as_str(), r["renewed"].as_bool()),
        (Some(token.as_str()), Some(true))
    );
    // Release, then anyone writes again; the old token is gone.
    let d = env
        .json(&["session", "unlock", &s, "--token", &token])
        .data();
    assert_eq!(d["rev"], 5);
    assert_eq!(
        event_types(&env, &s),
        [
            "created",
            "lease_acquired",
            "checkpoint",
            "lease_acquired",
            "lease_released"
        ]
    );
    assert_error(
        &env.json(&["session", "unlock", &s, "--token", &token]),
        "LEASE_NOT_FOUND",
        3,
    );
    assert_error(
        &env.json(&[
            "session",
            "checkpoint",
            &s,
            "--step",
            "x",
            "--lease",
            &token,
        ]),
        "LEASE_NOT_FOUND",
        3,
    );
    env.checkpoint(&s, "free");
    assert_eq!(
        env.json(&["session", "show", &s]).data()["lease"],
        Value::Null
    );
    assert_rev_matches_events(&env, &s);
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// A real OS process takes the lease (it is the parent of the `logbook
/// session lock` it runs, so it is the owner), is SIGKILLed, and another
/// process takes the lease over.
#[test]
fn a_lease_whose_owner_was_killed_is_taken_over() {
    let env = TestEnv::new();
    let s = env.create("a");
    let out = env.dir.path().join("lock.json");
    let mut owner = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" --db \"$1\" session lock \"$2\" --json > \"$3\"; exec sleep 600")
        .arg(bin())
        .arg(env.path())
        .arg(&s)
        .arg(&out)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut tries = 0;
    let lease: Value = loop {
        if let Ok(t) = std::fs::read_to_string(&out) {
            if t.ends_with('\n') {
                break serde_json::from_str(&t).unwrap();
            }
        }
        tries += 1;
        assert!(tries < 300, "the owner never locked");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(lease["ok"], true, "{lease}");
    assert_eq!(lease["data"]["pid"].as_i64(), Some(i64::from(owner.id())));

    // While the owner lives: LEASE_HELD, retryable.
    let before = env.show(&s);
    let e = assert_error(&env.json(&["session", "lock", &s]), "LEASE_HELD", 4);
    assert_eq!(e["retryable"], true);
    assert_error(
        &env.json(&["session", "checkpoint", &s, "--step", "x"]),
        "LEASE_HELD",
        4,
    );
    assert_eq!(env.show(&s), before);
    assert_eq!(
        env.json(&["session", "show", &s]).data()["lease"]["live"],
        true
    );

    owner.kill().unwrap(); // SIGKILL
    owner.wait().unwrap();
    assert_eq!(
        env.json(&["session", "show", &s]).data()["lease"]["live"],
        false
    );

    let t = lock(&env, &s, &["--owner-pid", &me()]);
    assert_eq!(
        t["taken_over_from"]["pid"].as_i64(),
        Some(i64::from(owner.id()))
    );
    assert_eq!(t["taken_over_from"]["reason"], "owner_gone");
    assert_ne!(t["token"], lease["data"]["token"]);
    let last = env.json(&["session", "show", &s]).data()["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["type"], "lease_taken_over");
    assert_eq!(last["data"]["previous"]["reason"], "owner_gone");
    // The dead owner's token no longer works: the new owner holds the lease.
    let old = lease["data"]["token"].as_str().unwrap();
    assert_error(
        &env.json(&["session", "checkpoint", &s, "--step", "x", "--lease", old]),
        "LEASE_HELD",
        4,
    );
    assert_rev_matches_events(&env, &s);
    assert_eq!(env.json(&["verify"]).code, 0);
}

#[test]
fn a_lease_expires_after_its_ttl() {
    let env = TestEnv::new();
    let s = env.create("a");
    // Long enough for the next command to start and connect on a loaded
    // machine (a server connection takes longer than opening a file).
    let token = lock(&env, &s, &["--owner-pid", &me(), "--ttl-ms", "2000"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_error(
        &env.json(&["session", "checkpoint", &s, "--step", "x"]),
        "LEASE_HELD",
        4,
    );
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // Expired: its own token is refused, other writers go ahead.
    assert_error(
        &env.json(&[
            "session",
            "checkpoint",
            &s,
            "--step",
            "x",
            "--lease",
            &token,
        ]),
        "LEASE_NOT_FOUND",
        3,
    );
    env.checkpoint(&s, "free");
    let t = lock(&env, &s, &["--owner-pid", &me()]);
    assert_eq!(t["taken_over_from"]["reason"], "expired");
    assert_error(
        &env.json(&["session", "lock", &s, "--ttl-ms", "0"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_error(
        &env.json(&[
            "session",
            "lock",
            &s,
            "--ttl-ms",
            "604800001",
            "--lease",
            t["token"].as_str().unwrap(),
        ]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_rev_matches_events(&env, &s);
}

#[test]
fn lock_refusals_on_missing_and_terminal_sessions() {
    let env = TestEnv::new();
    assert_error(
        &env.json(&["session", "lock", "ses_00000000000000aa"]),
        "SESSION_NOT_FOUND",
        3,
    );
    let s = env.create("a");
    env.json(&["session", "complete", &s, "--result", "ok"])
        .data();
    let before = env.show(&s);
    assert_error(
        &env.json(&["session", "lock", &s]),
        "SESSION_INVALID_TRANSITION",
        5,
    );
    assert_eq!(env.show(&s), before);
    let s2 = env.create("b");
    assert_error(
        &env.json(&["session", "lock", &s2, "--if-rev", "5"]),
        "SESSION_CONFLICT",
        4,
    );
}

// SQLite's statement cache (rusqlite).
sqlite_only! {
/// The per-mutation lease look-up stays prepared (it runs on every write).
#[test]
fn the_lease_lookup_is_never_reprepared() {
    use rusqlite::StatementStatus;
    let env = TestEnv::new();
    let ids: Vec<String> = (0..3).map(|i| env.create(&format!("t{i}"))).collect();
    lock(&env, &ids[0], &["--owner-pid", &me()]);
    let c = env.sql();
    for i in 0..6 {
        {
            let mut st = c
                .prepare_cached(logbook::store::sqlite::sql::workflow::SELECT_LEASE)
                .unwrap();
            let mut rows = st.query([&ids[i % 3]]).unwrap();
            while rows.next().unwrap().is_some() {}
        }
        c.execute_batch(
            "BEGIN IMMEDIATE; UPDATE sessions SET rev = rev + 1 WHERE insert_seq = 2; COMMIT;",
        )
        .unwrap();
    }
    let st = c
        .prepare_cached(logbook::store::sqlite::sql::workflow::SELECT_LEASE)
        .unwrap();
    assert_eq!(st.get_status(StatementStatus::RePrepare), 0);
}
}

/// Run verbs, usage and budgets are mutations too: a live lease refuses
/// them without its token (LEASE_HELD, nothing changed) and admits them
/// with it.
#[test]
fn a_live_lease_covers_runs_usage_and_budgets() {
    let env = TestEnv::new();
    let s = env.create("a");
    let run = env.json(&["run", "create", &s]).data()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = lock(&env, &s, &["--owner-pid", &me()])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let show = env.show(&s);
    let run_show = env.json(&["run", "show", &run]).stdout;
    let writes: Vec<Vec<&str>> = vec![
        vec!["run", "create", &s],
        vec!["run", "start", &run],
        vec!["run", "cancel", &run],
        vec!["session", "usage", &s, "--input-tokens", "5"],
        vec!["session", "budget", &s, "--max-tokens", "100"],
        vec!["session", "stage", &s, "start", "x"],
        vec!["gate", "open", &s, "--gate", "g", "--kind", "auto"],
    ];
    for w in &writes {
        let e = assert_error(&env.json(w), "LEASE_HELD", 4);
        assert_eq!(e["retryable"], true, "{w:?}");
    }
    assert_eq!(env.show(&s), show);
    assert_eq!(env.json(&["run", "show", &run]).stdout, run_show);
    for w in &writes {
        let mut with = w.clone();
        with.extend(["--lease", token.as_str()]);
        let r = env.json(&with);
        assert_eq!(r.code, 0, "{with:?}: {}", r.stdout);
    }
}

/// LEASE_HELD names the lease's expiry in RFC 3339, like every other human
/// time; `details.expires_at_ms` keeps the number.
#[test]
fn lease_held_prints_its_expiry_as_rfc3339() {
    let env = TestEnv::new();
    let s = env.create("a");
    let l = lock(&env, &s, &["--owner-pid", &me(), "--ttl-ms", "60000"]);
    let expires = l["expires_at_ms"].as_i64().unwrap();
    let when = logbook::clock::format_ms(expires);
    let e = assert_error(
        &env.json(&["session", "checkpoint", &s, "--step", "x"]),
        "LEASE_HELD",
        4,
    );
    assert_eq!(e["details"]["expires_at_ms"], expires);
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(" until {when}; present")),
        "{message}"
    );
    assert!(!message.contains("ms since the epoch"), "{message}");
    let r = env.run(&["session", "checkpoint", &s, "--step", "x"]);
    assert_eq!(r.code, 4);
    assert!(
        r.stderr.starts_with(&format!(
            "error[LEASE_HELD]: session {s} is leased by pid {} on {} until {when}; present its --lease token",
            me(),
            logbook::ledger::hostname()
        )),
        "{}",
        r.stderr
    );
}
