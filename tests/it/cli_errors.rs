//! Every error code with its exit code, the envelope shape, and an unchanged
//! database after each refusal; a secret in rejected input is never echoed
//! (CASES C23). How arguments are read (usage errors, help, C21) is in
//! `cli_usage.rs`.

use crate::common::*;
use std::fs;

/// Runs `args` (with --json), expects `code`/`exit`, and checks that `id`
/// shows the same bytes before and after.
#[track_caller]
pub(crate) fn refused(
    env: &TestEnv,
    id: &str,
    args: &[&str],
    code: &str,
    exit: i32,
) -> serde_json::Value {
    let before = env.show(id);
    let count = session_count(env);
    let err = assert_error(&env.json(args), code, exit);
    assert_eq!(
        env.show(id),
        before,
        "session changed after a refused {args:?}"
    );
    assert_eq!(session_count(env), count);
    err
}

fn session_count(env: &TestEnv) -> i64 {
    env.scalar("SELECT count(*) FROM sessions")
}

#[test]
fn invalid_argument_exit_2() {
    let env = TestEnv::new();
    let id = env.create("t");
    let long = "a".repeat(201);
    for args in [
        vec!["session", "create", "--title", long.as_str()],
        vec!["session", "create", "--title", ""],
        vec!["session", "create", "--title", "t", "--context", "[1]"],
        vec!["session", "create", "--title", "t", "--context", "{oops"],
        vec!["session", "create", "--title", "a\u{7}b"],
        vec!["session", "create", "--title", "t", "--parent", "nope"],
        vec!["session", "checkpoint", &id],
        vec!["session", "checkpoint", &id, "--step", "s", "--if-rev", "0"],
        vec![
            "session",
            "checkpoint",
            &id,
            "--step",
            "s",
            "--if-rev",
            "abc",
        ],
        vec!["session", "checkpoint", "ses_XYZ", "--step", "s"],
        vec!["session", "event", &id, "--type", "checkpoint"],
        vec!["session", "list", "--limit", "0"],
        vec!["session", "list", "--limit", "1001"],
        vec!["session", "list", "--cursor", "garbage"],
        vec!["session", "list", "--since", "2030-01-01T00:00:00"],
        vec!["session", "list", "--status", "aborted"],
        vec!["session", "list", "--order", "sideways"],
        vec!["session", "bogus"],
        vec!["session", "create"],
    ] {
        let err = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        assert!(err["message"].as_str().unwrap().len() > 5, "{err}");
    }
}

#[test]
fn invalid_argument_names_field_and_limit() {
    let env = TestEnv::new();
    let id = env.create("t");
    let note = "n".repeat(4097);
    let err = refused(
        &env,
        &id,
        &["session", "checkpoint", &id, "--step", "s", "--note", &note],
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(err["details"]["field"], "note");
    assert_eq!(
        err["message"],
        "invalid `note`: is 4097 characters; the limit is 4096"
    );
}

#[test]
fn not_found_exit_3() {
    let env = TestEnv::new();
    let id = env.create("t");
    let ghost = "ses_0000000000000000";
    for args in [
        vec!["session", "show", ghost],
        vec!["session", "checkpoint", ghost, "--step", "s"],
        vec!["session", "complete", ghost, "--result", "r"],
        vec!["session", "events", ghost],
        vec!["session", "create", "--title", "t", "--parent", ghost],
    ] {
        let err = refused(&env, &id, &args, "SESSION_NOT_FOUND", 3);
        assert_eq!(err["details"]["session_id"], ghost);
    }
}

#[test]
fn conflict_exit_4_with_current_rev() {
    let env = TestEnv::new();
    let id = env.create("t");
    env.checkpoint(&id, "one");
    let err = refused(
        &env,
        &id,
        &[
            "session",
            "checkpoint",
            &id,
            "--step",
            "two",
            "--if-rev",
            "1",
        ],
        "SESSION_CONFLICT",
        4,
    );
    assert_eq!(err["details"]["current_rev"], 2);
    assert_eq!(err["details"]["expected_rev"], 1);
    assert_eq!(
        err["details"]["latest_event"],
        serde_json::json!({"seq":1,"type":"checkpoint","step":"one"})
    );
    for verb in [
        vec!["session", "complete", &id, "--result", "r", "--if-rev", "5"],
        vec!["session", "pause", &id, "--if-rev", "5"],
        vec!["session", "fail", &id, "--reason", "r", "--if-rev", "5"],
        vec!["session", "cancel", &id, "--reason", "r", "--if-rev", "5"],
        vec!["session", "event", &id, "--type", "x.a", "--if-rev", "5"],
    ] {
        refused(&env, &id, &verb, "SESSION_CONFLICT", 4);
    }
}

#[test]
fn invalid_transition_exit_5() {
    let env = TestEnv::new();
    let id = env.create("t");
    refused(
        &env,
        &id,
        &["session", "start", &id],
        "SESSION_INVALID_TRANSITION",
        5,
    );
    refused(
        &env,
        &id,
        &["session", "resume", &id],
        "SESSION_INVALID_TRANSITION",
        5,
    );
    env.json(&["session", "pause", &id]).data();
    refused(
        &env,
        &id,
        &["session", "checkpoint", &id, "--step", "s"],
        "SESSION_INVALID_TRANSITION",
        5,
    );
    refused(
        &env,
        &id,
        &["session", "complete", &id, "--result", "r"],
        "SESSION_INVALID_TRANSITION",
        5,
    );
    env.json(&["session", "resume", &id]).data();
    env.json(&["session", "complete", &id, "--result", "r"])
        .data();
    for args in [
        vec!["session", "complete", &id, "--result", "again"],
        vec!["session", "fail", &id, "--reason", "r"],
        vec!["session", "cancel", &id, "--reason", "r"],
        vec!["session", "pause", &id],
        vec!["session", "checkpoint", &id, "--step", "s"],
        vec!["session", "event", &id, "--type", "x.late"],
        // A stale --if-rev on a terminal session reports the transition.
        vec!["session", "checkpoint", &id, "--step", "s", "--if-rev", "1"],
    ] {
        let err = refused(&env, &id, &args, "SESSION_INVALID_TRANSITION", 5);
        assert_eq!(err["details"]["status"], "completed");
    }
}

#[test]
fn store_busy_exit_4_when_the_lock_is_held() {
    let env = TestEnv::new();
    let id = env.create("t");
    let lock = env.hold_write_lock(&id);
    let start = std::time::Instant::now();
    let r = env.json(&[
        "--busy-timeout-ms",
        "300",
        "session",
        "checkpoint",
        &id,
        "--step",
        "s",
    ]);
    let err = assert_error(&r, "STORE_BUSY", 4);
    assert_eq!(err["details"]["busy_timeout_ms"], 300);
    assert!(start.elapsed() >= std::time::Duration::from_millis(300));
    lock.release();
    assert_rev_matches_events(&env, &id);
    assert_eq!(rev_and_events(&env, &id).0, 1);
    // The same through the environment variable.
    let lock = env.hold_write_lock(&id);
    let mut cmd = env.cli(&["session", "checkpoint", &id, "--step", "s"]);
    cmd.env("LOGBOOK_BUSY_TIMEOUT_MS", "200");
    assert_error(&Run::from(cmd.output().unwrap()), "STORE_BUSY", 4);
    lock.release();
}

// A SQLite file that is not logbook's.
sqlite_only! {
#[test]
fn corrupt_and_foreign_files_exit_6_untouched() {
    let env = TestEnv::new();
    let text = env.dir.path().join("notes.txt");
    let junk = b"this is not a database, just text that is long enough to fill a header page......"
        .repeat(20);
    std::fs::write(&text, &junk).unwrap();
    let r = env
        .command()
        .args(["--db", text.to_str().unwrap(), "session", "list", "--json"])
        .output()
        .unwrap();
    assert_error(&Run::from(r), "STORE_CORRUPT", 6);
    assert_eq!(std::fs::read(&text).unwrap(), junk);

    let foreign = env.dir.path().join("other.db");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    let before = std::fs::read(&foreign).unwrap();
    let r = env
        .command()
        .args([
            "--db",
            foreign.to_str().unwrap(),
            "session",
            "list",
            "--json",
        ])
        .output()
        .unwrap();
    let err = assert_error(&Run::from(r), "STORE_CORRUPT", 6);
    assert!(err["message"]
        .as_str()
        .unwrap()
        .contains("not a logbook database"));
    assert_eq!(std::fs::read(&foreign).unwrap(), before);
}
}

// user_version and refinery's history in a SQLite file, and its bytes.
sqlite_only! {
#[test]
fn newer_schema_exit_6_untouched() {
    let env = TestEnv::new();
    env.create("t");
    {
        let c = env.sql();
        c.execute_batch("PRAGMA user_version = 99; PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
    }
    let before = std::fs::read(env.path()).unwrap();
    let err = assert_error(&env.json(&["session", "list"]), "STORE_VERSION_TOO_NEW", 6);
    assert_eq!(err["details"]["found"], 99);
    assert_eq!(
        err["details"]["supported"],
        logbook::store::LATEST_VERSION
    );
    assert_eq!(std::fs::read(env.path()).unwrap(), before);
    let history: i64 = env
        .sql()
        .query_row("SELECT count(*) FROM refinery_schema_history", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(history, logbook::store::LATEST_VERSION);
}

/// docs/design.md, "Database files": a newer schema recorded only in refinery's history (a newer
/// logbook or refinery's own tooling migrated the file, `user_version`
/// lags) is refused like a newer `user_version`, by writes and reads alike,
/// and the file is left byte-identical.
#[test]
fn newer_schema_in_refinery_history_only_exit_6_untouched() {
    let env = TestEnv::new();
    let id = env.create("t");
    let next = logbook::store::LATEST_VERSION + 1;
    {
        let c = env.sql();
        c.execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
             VALUES (?1, 'from_the_future', '2030-01-01T00:00:00Z', '1')",
            [next],
        )
        .unwrap();
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    }
    let before = std::fs::read(env.path()).unwrap();
    for args in [
        vec!["session", "create", "--title", "x"],
        vec!["session", "checkpoint", &id, "--step", "s"],
        vec!["session", "list"],
        vec!["--read-only", "session", "show", &id],
        vec!["sql", "SELECT 1"],
    ] {
        let err = assert_error(&env.json(&args), "STORE_VERSION_TOO_NEW", 6);
        assert_eq!(err["details"]["found"], next, "{args:?}");
        assert_eq!(
            err["details"]["supported"],
            logbook::store::LATEST_VERSION
        );
    }
    assert_eq!(std::fs::read(env.path()).unwrap(), before);
}
}

// A SQLite file's folder.
sqlite_only! {
#[test]
fn unwritable_location_is_store_io_exit_6() {
    let env = TestEnv::new();
    // A regular file where a folder should be.
    let blocker = env.dir.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let db = blocker.join("sub/ledger.db");
    let r = env
        .command()
        .args(["--db", db.to_str().unwrap(), "session", "list", "--json"])
        .output()
        .unwrap();
    assert_error(&Run::from(r), "STORE_IO", 6);
}
}

#[test]
fn human_errors_go_to_stderr_with_code() {
    let env = TestEnv::new();
    let r = env.run(&["session", "show", "ses_0000000000000000"]);
    assert_eq!(r.code, 3);
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.stderr,
        "error[SESSION_NOT_FOUND]: session ses_0000000000000000 not found\n"
    );
    let r = env.run(&["session", "create"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .starts_with("error[INVALID_ARGUMENT]: missing required argument"),
        "{}",
        r.stderr
    );
}

/// C23: rejected input carrying a secret is never echoed in stdout, stderr
/// or error bodies (at RUST_LOG=trace), and never reaches the DB or -wal.
#[test]
fn c23_secrets_in_rejected_input_are_never_echoed() {
    let env = TestEnv::new();
    let id = env.create("t");
    let holder = env.ledger(); // keeps the -wal in place
    let long = format!("{} {SK}", "a".repeat(4096 - SK.len()));
    assert_eq!(long.chars().count(), 4097);
    let ghp_note = format!("deploy with {GHP}");
    let sk_note = format!("key {SK}");
    let cases: [(&[&str], &str, i32); 4] = [
        (
            &["session", "checkpoint", &id, "--step", "s", "--note", &long],
            "INVALID_ARGUMENT",
            2,
        ),
        (
            &[
                "session",
                "checkpoint",
                "ses_0000000000000000",
                "--step",
                "s",
                "--note",
                &ghp_note,
            ],
            "SESSION_NOT_FOUND",
            3,
        ),
        (
            &[
                "session",
                "checkpoint",
                &id,
                "--step",
                "s",
                "--if-rev",
                "abc",
                "--note",
                &sk_note,
            ],
            "INVALID_ARGUMENT",
            2,
        ),
        (
            &["session", "checkpoint", &id, "--step", "s", "--if-rev", GHP],
            "INVALID_ARGUMENT",
            2,
        ),
    ];
    for (args, code, exit) in cases {
        for json in [true, false] {
            let mut c = env.command();
            c.env("RUST_LOG", "trace")
                .env("RUST_BACKTRACE", "1")
                .arg("--db")
                .arg(env.path())
                .args(args);
            if json {
                c.arg("--json");
            }
            let r: Run = c.output().unwrap().into();
            assert_no_panic(&r);
            if json {
                assert_error(&r, code, exit);
            } else {
                assert_eq!(r.code, exit, "{}", r.stderr);
                assert!(
                    r.stderr.starts_with(&format!("error[{code}]")),
                    "{}",
                    r.stderr
                );
            }
            for secret in [SK, GHP] {
                assert!(
                    !r.stdout.contains(secret),
                    "{code}: stdout echoes a secret: {}",
                    r.stdout
                );
                assert!(
                    !r.stderr.contains(secret),
                    "{code}: stderr echoes a secret: {}",
                    r.stderr
                );
            }
        }
    }
    assert_eq!(rev_and_events(&env, &id), (1, 1, 0));
    // A successful write with the same secrets stores them redacted.
    let both = format!("{sk_note} and {ghp_note}");
    let d = env
        .json(&["session", "checkpoint", &id, "--step", "s", "--note", &both])
        .data();
    let note = d["checkpoint"]["note"].as_str().unwrap();
    assert_eq!(note, "key [REDACTED] and deploy with [REDACTED]");
    if on_pg() {
        let bytes = env.db_bytes();
        assert!(contains_bytes(&bytes, b"deploy with [REDACTED]"));
        for secret in [SK, GHP] {
            assert!(
                !contains_bytes(&bytes, secret.as_bytes()),
                "the server holds {secret}"
            );
        }
    } else {
        let wal = companion(env.path(), "-wal");
        assert!(wal.exists());
        for p in [env.path().to_path_buf(), wal] {
            let bytes = fs::read(&p).unwrap();
            for secret in [SK, GHP] {
                assert!(
                    !contains_bytes(&bytes, secret.as_bytes()),
                    "{} holds {secret}",
                    p.display()
                );
            }
        }
    }
    drop(holder);
}

/// URLs whose user or password hold an unencoded `@` or `/`, or a `%` that
/// is not a `%XX` escape, each with the pieces of its password and the
/// reason it is refused (docs/postgres.md, "The URL").
const BAD_USERINFO: [(&str, &[&str], &str); 5] = [
    (
        "postgres://owner:Own3r-p@ss/w:rd%@127.0.0.1:5432/lb",
        &["Own3r", "w:rd", "@ss"],
        "is not a usable PostgreSQL URL: it holds more than one `@` before the query: percent-encode an `@` in the user, password or database name as %40 (e.g. postgres://user:p%40w@host/db)",
    ),
    (
        "postgres://owner:Own3r-p@ss@127.0.0.1:5432/lb",
        &["Own3r", "@ss"],
        "is not a usable PostgreSQL URL: it holds more than one `@` before the query: percent-encode an `@` in the user, password or database name as %40 (e.g. postgres://user:p%40w@host/db)",
    ),
    (
        "postgres://ow/ner:Pw0rd-9@127.0.0.1:5432/lb",
        &["Pw0rd-9", "ner:"],
        "is not a usable PostgreSQL URL: a `/` comes before the `@` that ends the user and password: percent-encode a `/` in them as %2F (e.g. postgres://user:p%2Fw@host/db)",
    ),
    (
        "postgres://owner:Pw0/rd-9@127.0.0.1:5432/lb",
        &["Pw0", "rd-9"],
        "is not a usable PostgreSQL URL: a `/` comes before the `@` that ends the user and password: percent-encode a `/` in them as %2F (e.g. postgres://user:p%2Fw@host/db)",
    ),
    (
        "postgres://owner:Pw0rd%zz-9@127.0.0.1:5432/lb",
        &["Pw0rd", "zz-9"],
        "is not a usable PostgreSQL URL: the user or password holds a `%` that is not followed by two hex digits: percent-encode a `%` as %25",
    ),
];

/// Parsed before anything is looked up: the example used to reach DNS with
/// the password's tail as the host (`ss`), and print it in the location.
#[test]
fn a_postgres_url_with_an_unencoded_at_slash_or_percent_in_its_userinfo_is_invalid_argument_and_never_shown(
) {
    let env = TestEnv::new();
    for (url, pieces, reason) in BAD_USERINFO {
        let runs = [
            env.command()
                .args(["--db", url, "session", "list", "--json"])
                .output(),
            env.command()
                .args(["--db", url, "session", "create", "--title", "t"])
                .output(),
            env.command()
                .env("LOGBOOK_DB", url)
                .args(["events", "--follow"])
                .output(),
        ];
        for (i, r) in runs.into_iter().enumerate() {
            let r = Run::from(r.unwrap());
            assert_eq!(r.code, 2, "{url} #{i}: {r:?}");
            if i == 0 {
                let e = assert_error(&r, "INVALID_ARGUMENT", 2);
                assert_eq!(e["details"]["field"], "db");
                assert_eq!(e["details"]["reason"], reason, "{url}");
                assert_eq!(e["message"], format!("invalid `db`: {reason}"));
            } else {
                assert_eq!(
                    r.stderr.lines().next(),
                    Some(format!("error[INVALID_ARGUMENT]: invalid `db`: {reason}").as_str()),
                    "{url} #{i}"
                );
            }
            for piece in pieces.iter().chain(&["127.0.0.1", "lb"]) {
                assert!(
                    !r.stdout.contains(piece) && !r.stderr.contains(piece),
                    "{url} #{i}: `{piece}` shown: {r:?}"
                );
            }
        }
    }
}

/// A JSON flag holding one key twice is refused, naming the flag and the
/// place: the value stored would have been the last copy only.
#[test]
fn a_json_flag_with_a_key_twice_is_invalid_argument_not_read_last_wins() {
    let env = TestEnv::new();
    let id = env.create("t");
    for (args, field, column) in [
        (
            vec![
                "session",
                "create",
                "--title",
                "t",
                "--context",
                r#"{"a":1,"a":2}"#,
            ],
            "context",
            10,
        ),
        (
            vec![
                "session",
                "event",
                &id,
                "--type",
                "x.t",
                "--data",
                r#"{"x":{"k":"sk-first","k":2}}"#,
            ],
            "data",
            24,
        ),
        (
            vec![
                "session",
                "checkpoint",
                &id,
                "--step",
                "s",
                "--state",
                r#"{"s":1, "s":1}"#,
            ],
            "state",
            11,
        ),
    ] {
        let e = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], field, "{args:?}");
        assert_eq!(
            e["details"]["reason"],
            format!("holds the same key twice in one object (line 1, column {column})"),
            "{args:?}"
        );
    }
}

/// A JSON flag's `@file` that cannot be read names the file (redacted, as
/// every echo) and says why in plain words; nothing is written.
#[test]
fn an_unreadable_at_file_is_named_with_its_reason() {
    let env = TestEnv::new();
    let id = env.create("t");
    let dir = env.dir.path().display().to_string();
    let missing = format!("@{dir}/missing.json");
    let secret = format!("@{dir}/sk-abcdefabcdefabcdefabcdef1234");
    let bad = env.dir.path().join("bad.json");
    fs::write(&bad, b"\xff\xfe").unwrap();
    let bad = format!("@{}", bad.display());
    let folder = format!("@{dir}");
    for (arg, message) in [
        (
            &missing,
            format!("invalid `context`: cannot read the file `{dir}/missing.json`: no such file"),
        ),
        (
            &folder,
            format!("invalid `context`: cannot read the file `{dir}`: it is a directory"),
        ),
        (
            &bad,
            format!(
                "invalid `context`: cannot read the file `{dir}/bad.json`: it is not UTF-8 text"
            ),
        ),
        (
            &secret,
            format!("invalid `context`: cannot read the file `{dir}/[REDACTED]`: no such file"),
        ),
    ] {
        let err = refused(
            &env,
            &id,
            &["session", "create", "--title", "t", "--context", arg],
            "INVALID_ARGUMENT",
            2,
        );
        assert_eq!(err["message"], message.as_str(), "{arg}");
    }
}
