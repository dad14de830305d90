//! Every error code with its exit code, the envelope shape, and an unchanged
//! database after each refusal.

use crate::common::*;

/// Runs `args` (with --json), expects `code`/`exit`, and checks that `id`
/// shows the same bytes before and after.
#[track_caller]
fn refused(env: &TestEnv, id: &str, args: &[&str], code: &str, exit: i32) -> serde_json::Value {
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
    env.sql()
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap()
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
    env.json(&["session", "checkpoint", &id, "--step", "one"])
        .data();
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
    let c = env.sql();
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
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
    c.execute_batch("ROLLBACK").unwrap();
    assert_rev_matches_events(&env, &id);
    assert_eq!(rev_and_events(&env, &id).0, 1);
    // The same through the environment variable.
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut cmd = env.command();
    cmd.env("LOGBOOK_BUSY_TIMEOUT_MS", "200").args([
        "--db",
        env.path().to_str().unwrap(),
        "session",
        "checkpoint",
        &id,
        "--step",
        "s",
        "--json",
    ]);
    assert_error(&Run::from(cmd.output().unwrap()), "STORE_BUSY", 4);
    c.execute_batch("ROLLBACK").unwrap();
}

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
        logbook::store::migrate::LATEST_VERSION
    );
    assert_eq!(std::fs::read(env.path()).unwrap(), before);
    let history: i64 = env
        .sql()
        .query_row("SELECT count(*) FROM refinery_schema_history", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(history, logbook::store::migrate::LATEST_VERSION);
}

/// Issue 13 §9: a newer schema recorded only in refinery's history (a newer
/// logbook or refinery's own tooling migrated the file, `user_version`
/// lags) is refused like a newer `user_version`, by writes and reads alike,
/// and the file is left byte-identical.
#[test]
fn newer_schema_in_refinery_history_only_exit_6_untouched() {
    let env = TestEnv::new();
    let id = env.create("t");
    let next = logbook::store::migrate::LATEST_VERSION + 1;
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
            logbook::store::migrate::LATEST_VERSION
        );
    }
    assert_eq!(std::fs::read(env.path()).unwrap(), before);
}

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

#[test]
fn help_and_version_exit_0() {
    let env = TestEnv::new();
    let r = env.run(&["--help"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("session"));
    let r = env.run(&["session", "checkpoint", "--help"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("Example:"));
    // A version request at any level names the program, and honours --json.
    for args in [vec!["-V"], vec!["session", "create", "--title", "x", "-V"]] {
        let r = env.run(&args);
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, concat!("logbook ", env!("CARGO_PKG_VERSION"), "\n")),
            "{args:?}"
        );
        let r = env.json(&args);
        assert_eq!(r.code, 0);
        assert_eq!(
            r.data(),
            serde_json::json!({"version": env!("CARGO_PKG_VERSION")})
        );
    }
    assert!(!env.path().exists());
    let r = env.run(&["--version"]);
    assert_eq!(
        (r.code, r.stdout.trim()),
        (0, concat!("logbook ", env!("CARGO_PKG_VERSION")))
    );
}

/// An unknown command is named (when it is a plain word) with clap's
/// suggestion; found by a fresh-user walkthrough, where every unknown
/// command was reported as "argument".
#[test]
fn an_unknown_command_is_named_with_a_suggestion() {
    let env = TestEnv::new();
    let cases: [(&[&str], &str); 4] = [
        (
            &["sesion", "list"],
            "unknown command `sesion`; did you mean `session`?",
        ),
        (&["session", "bogus"], "unknown command `bogus`"),
        // A flag where a command belongs is named too (it used to read just
        // "unknown command"); a token that is neither word nor flag is not.
        (
            &["help", "-V"],
            "unknown command `-V`: a command name was expected here, not a flag",
        ),
        (&["help", "Tok3n"], "unknown command"),
    ];
    for (args, message) in cases {
        let e = assert_error(&env.json(args), "INVALID_ARGUMENT", 2);
        assert_eq!(e["message"], message, "{args:?}");
        assert_eq!(e["details"]["field"], "command", "{args:?}");
    }
    // Token shapes made of lowercase words and dashes are never repeated
    // (found by adversarial testing: these were echoed as "words").
    for args in [
        vec!["sk-abcdefghijklmnopqrstuvwxyz"],
        vec!["session", "xoxb-abcdefghijklmnop"],
        vec!["help", "--glpat-abcdefghijklmnopqrst"],
        vec!["help", "-sk-abcdefghijklmnopqrstuvwxyz"],
    ] {
        let r = env.json(&args);
        let e = assert_error(&r, "INVALID_ARGUMENT", 2);
        assert_eq!(e["message"], "unknown command", "{args:?}");
        assert!(!r.stdout.contains("abcdefghijklm"), "{args:?}");
        assert!(!r.stderr.contains("abcdefghijklm"), "{args:?}");
    }
    assert!(!env.path().exists());
}

/// clap's usage errors keep their meaning when re-worded: a mistyped flag
/// names the similar one, a repeated flag says so, and a real conflict names
/// both flags (found by adversarial testing: all three said less or the
/// wrong thing). Each changes nothing.
#[test]
fn usage_errors_name_the_similar_repeated_and_conflicting_flags() {
    let env = TestEnv::new();
    let id = env.create("t");
    let cases: [(Vec<&str>, &str, &str); 4] = [
        (
            vec!["session", "checkpoint", &id, "--step", "s", "--nte", "x"],
            "--nte",
            "unexpected argument `--nte`; did you mean `--note`? (if it is a value that begins with `-`, attach it to its flag with `=`, e.g. `--note=-rf`)",
        ),
        (
            vec!["session", "checkpoint", &id, "--step", "a", "--step", "b"],
            "--step <STEP>",
            "`--step <STEP>` was given more than once",
        ),
        (
            vec!["session", "budget", &id, "--check", "--max-tokens", "5"],
            "--check",
            "`--check` cannot be used with `--max-tokens <N>`",
        ),
        // An empty positional: no `=` hint, which fits flags only.
        (vec!["backup", ""], "<DEST>", "`<DEST>` must not be empty"),
    ];
    for (args, field, message) in cases {
        let err = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        assert_eq!(err["message"], message, "{args:?}");
        assert_eq!(err["details"]["field"], field, "{args:?}");
        assert_eq!(err["details"]["reason"], message, "{args:?}");
    }
    // The human form carries the same message.
    let r = env.run(&["session", "checkpoint", &id, "--step", "a", "--step", "b"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .starts_with("error[INVALID_ARGUMENT]: `--step <STEP>` was given more than once\n"),
        "{}",
        r.stderr
    );
}

/// Free text is never empty, whichever way it is given (an empty `--note=`
/// recorded a checkpoint that said nothing, though a checkpoint needs a step,
/// a note or a reference: found by adversarial testing); and a value that
/// looks like a negative number is a value, not a flag (SPEC §5), also for
/// `run fail`.
#[test]
fn empty_free_text_is_refused_and_negative_looking_values_are_values() {
    let env = TestEnv::new();
    let id = env.create("t");
    let cases: [(Vec<&str>, &str); 6] = [
        (vec!["session", "checkpoint", &id, "--note="], "note"),
        (vec!["session", "checkpoint", &id, "--note", ""], "note"),
        (
            vec!["session", "checkpoint", &id, "--step", "s", "--note="],
            "note",
        ),
        (vec!["session", "checkpoint", &id, "--step="], "step"),
        (vec!["session", "create", "--title", "x", "--goal="], "goal"),
        (
            vec!["session", "event", &id, "--type", "x.build", "--detail="],
            "detail",
        ),
    ];
    for (args, field) in cases {
        let err = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        assert_eq!(err["details"]["field"], field, "{args:?}");
        assert_eq!(err["details"]["reason"], "must not be empty", "{args:?}");
    }
    let d = env
        .json(&["session", "checkpoint", &id, "--note", "-5"])
        .data();
    assert_eq!(d["checkpoint"]["note"], "-5");
    let run = env.json(&["run", "create", &id]).data()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let d = env
        .json(&["run", "fail", &run, "--code", "-1", "--message", "-5"])
        .data();
    assert_eq!(
        d["error"],
        serde_json::json!({"code": "-1", "message": "-5"})
    );
}

/// Issue 13 §8: a title (or step) that is only whitespace names nothing and
/// is refused like an empty one, on create and on fork; nothing is written.
#[test]
fn blank_titles_and_steps_are_refused() {
    let env = TestEnv::new();
    let id = env.create("t");
    env.json(&["session", "checkpoint", &id, "--step", "s", "--state", "{}"])
        .data();
    for (args, field) in [
        (vec!["session", "create", "--title", "   "], "title"),
        (vec!["session", "create", "--title", "\u{3000}"], "title"),
        (
            vec!["session", "fork", &id, "--checkpoint", "1", "--title", " "],
            "title",
        ),
        (vec!["session", "checkpoint", &id, "--step", "  "], "step"),
    ] {
        let err = refused(&env, &id, &args, "INVALID_ARGUMENT", 2);
        assert_eq!(err["details"]["field"], field, "{args:?}");
        assert_eq!(
            err["details"]["reason"], "must not be only whitespace",
            "{args:?}"
        );
    }
}
