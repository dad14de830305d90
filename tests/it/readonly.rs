//! `logbook sql` and `--read-only` (docs/design.md, "Operator access").

use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Runs logbook on `db` with `args` and `--json` as user `nobody` (65534),
/// with an empty environment.
fn as_nobody(db: &Path, args: &[&str]) -> Run {
    Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .arg("--json")
        .env_clear()
        .env("HOME", "/nonexistent")
        .output()
        .unwrap()
        .into()
}

/// A database with two sessions, closed (no -wal, -shm or -lock left).
fn closed_db() -> (TestEnv, String) {
    let env = TestEnv::new();
    let s = env.create("alpha");
    env.json(&["session", "checkpoint", &s, "--step", "one"]);
    env.create_with(&["--title", "beta, \"quoted\"", "--app", "b"]);
    for suffix in ["-wal", "-shm", "-lock"] {
        let _ = std::fs::remove_file(companion(env.path(), suffix));
    }
    (env, s)
}

/// What the database holds: the file's bytes, or every row on a server.
fn stored(env: &TestEnv) -> Vec<u8> {
    if on_pg() {
        env.db_bytes()
    } else {
        std::fs::read(env.path()).unwrap()
    }
}

#[test]
fn sql_prints_a_table_json_and_csv() {
    let (env, _) = closed_db();
    let q = pick(
        "SELECT title, rev, NULL AS empty, x'00ff' AS bytes FROM sessions ORDER BY insert_seq",
        "SELECT title, rev, NULL AS empty, '\\x00ff'::bytea AS bytes FROM sessions ORDER BY insert_seq",
    );
    let d = env.json(&["sql", q]).data();
    assert_eq!(
        d,
        json!({"columns": ["title", "rev", "empty", "bytes"],
               "rows": [["alpha", 2, null, "00ff"], ["beta, \"quoted\"", 1, null, "00ff"]]})
    );
    let r = env.run(&["sql", q, "--csv"]);
    assert_eq!(r.code, 0);
    assert_eq!(
        r.stdout,
        "title,rev,empty,bytes\nalpha,2,,00ff\n\"beta, \"\"quoted\"\"\",1,,00ff\n"
    );
    let r = env.run(&["sql", "SELECT count(*) AS n FROM events"]);
    assert_eq!(r.stdout, "n\n3\n(1 row)\n");
    let e = assert_error(&env.json(&["sql", q, "--csv"]), "INVALID_ARGUMENT", 2);
    assert_eq!(e["details"]["field"], "csv");
}

#[test]
fn sql_refuses_every_write_and_changes_nothing() {
    let (env, s) = closed_db();
    let before = stored(&env);
    let show = env.show(&s);
    for q in [
        "DELETE FROM events",
        "UPDATE sessions SET title = 'x'",
        "INSERT INTO sessions (session_id) VALUES ('x')",
        "DROP TABLE events",
        "CREATE TABLE t (x)",
        "DROP TRIGGER events_no_delete",
        "PRAGMA user_version = 7",
        "PRAGMA journal_mode = DELETE",
        "VACUUM",
        "SELECT 1; DELETE FROM events",
        "ATTACH 'other.db' AS o",
        "BEGIN IMMEDIATE",
        "",
        "SELEC 1",
        "SELECT * FROM no_such_table",
        // A READ ONLY transaction on a server lets these through.
        "COPY (SELECT 1) TO PROGRAM 'true'",
        "/* a comment */ COPY events TO STDOUT",
        "LOCK TABLE events",
        "COMMIT",
        "LISTEN x",
        "PREPARE p AS SELECT 1",
        "DO $$ BEGIN END $$",
        "CALL nothing()",
    ] {
        let e = assert_error(&env.json(&["sql", q]), "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], "sql", "{q}");
        // The engine's reason, never the statement itself.
        if q.len() > 3 {
            let message = e["message"].as_str().unwrap();
            assert!(!message.contains(q), "{q}: {message}");
        }
    }
    for q in [
        "/* a comment */ SELECT 1",
        "-- a comment\nSELECT 1",
        "WITH x AS (SELECT 1) SELECT * FROM x",
    ] {
        let r = env.json(&["sql", q]);
        assert_eq!(r.code, 0, "{q}: {}", r.stdout);
    }
    if !on_pg() {
        assert!(!env.path().parent().unwrap().join("other.db").exists());
        // SQLite's own words for it ("too many attached databases - max 0")
        // say nothing of why.
        let e = assert_error(
            &env.json(&["sql", "ATTACH 'other.db' AS o"]),
            "INVALID_ARGUMENT",
            2,
        );
        assert_eq!(
            e["details"]["reason"],
            "must not ATTACH a database: logbook sql reads this ledger only"
        );
    }
    assert_eq!(stored(&env), before);
    assert_eq!(env.show(&s), show);
}

#[test]
fn read_only_reads_never_write_and_writes_are_refused() {
    let (env, s) = closed_db();
    let before = stored(&env);
    for args in [
        vec!["--read-only", "session", "list"],
        vec!["--read-only", "session", "show", &s],
        vec!["--read-only", "session", "events", &s],
        vec!["--read-only", "events"],
        vec!["--read-only", "verify"],
    ] {
        let r = env.json(&args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stdout);
    }
    let e = assert_error(
        &env.json(&["--read-only", "session", "checkpoint", &s, "--step", "x"]),
        "STORE_IO",
        6,
    );
    assert!(e["message"].as_str().unwrap().contains("read-only"));
    assert_error(
        &env.json(&["--read-only", "session", "create", "--title", "t"]),
        "STORE_IO",
        6,
    );
    assert_eq!(stored(&env), before);
    if on_pg() {
        // A missing database is not created.
        let pg = env.pg.as_ref().unwrap();
        let name = format!("{}_nope", pg.name);
        let mut c = env.command();
        c.args(["--read-only", "--db"])
            .arg(crate::pg::with_database(&pg.url, &name))
            .args(["session", "list", "--json"]);
        let r: Run = c.output().unwrap().into();
        assert_error(&r, "STORE_IO", 6);
        let found = env.rows(
            "SELECT count(*) FROM pg_database WHERE datname = $1",
            &[&name],
        );
        assert_eq!(found[0][0], 0);
        return;
    }
    // Not even the writer lock file was created.
    assert!(!companion(env.path(), "-lock").exists());
    // A missing database is not created.
    let missing = env.path().parent().unwrap().join("nope.db");
    let mut c = env.command();
    c.args(["--read-only", "--db"])
        .arg(&missing)
        .args(["session", "list", "--json"]);
    let r: Run = c.output().unwrap().into();
    assert_error(&r, "STORE_IO", 6);
    assert!(!missing.exists());
}

// An older SQLite file, file permissions and SQLite's companion files.
sqlite_only! {
#[test]
fn read_only_does_not_migrate_an_older_schema() {
    let env = TestEnv::new();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v1.db"),
        env.path(),
    )
    .unwrap();
    let before = std::fs::read(env.path()).unwrap();
    let e = assert_error(
        &env.json(&["--read-only", "session", "list"]),
        "STORE_IO",
        6,
    );
    assert!(
        e["message"].as_str().unwrap().contains("needs migrating"),
        "{e}"
    );
    assert_error(&env.json(&["sql", "SELECT 1"]), "STORE_IO", 6);
    assert_eq!(std::fs::read(env.path()).unwrap(), before);
}

/// As a user who may only read the file and its folder (uid nobody, via
/// setpriv), `--read-only` and `sql` work; without `--read-only` the
/// command fails with a coded error instead of half-working.
#[test]
fn read_only_works_for_a_user_who_may_only_read() {
    if !precondition(
        is_root() && Path::new("/usr/bin/setpriv").exists(),
        "needs root and /usr/bin/setpriv to act as another user",
    ) {
        return;
    }
    let (env, s) = closed_db();
    let shared = tempfile::Builder::new()
        .prefix("logbook-ro")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = shared.path().join("ledger.db");
    std::fs::copy(env.path(), &db).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = std::fs::read(&db).unwrap();
    let as_nobody = |args: &[&str]| as_nobody(&db, args);
    let r = as_nobody(&["--read-only", "session", "show", &s]);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(r.data()["session"]["rev"], 2);
    let r = as_nobody(&["sql", "SELECT count(*) AS n FROM sessions"]);
    assert_eq!(r.data()["rows"], json!([[2]]));
    let r = as_nobody(&["session", "checkpoint", &s, "--step", "x"]);
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(r.code, 6, "{}", r.stdout);
    assert_eq!(std::fs::read(&db).unwrap(), before);
    let names: Vec<String> = std::fs::read_dir(shared.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["ledger.db".to_owned()]);
}

/// Reading a 0400 database with --read-only (found by adversarial testing):
/// SQLite creates the -wal/-shm with the file's mode; logbook gives them
/// owner write, so once the file is writable again writers work.
#[test]
fn a_read_only_read_leaves_companions_that_writers_can_use() {
    if !precondition(
        is_root() && Path::new("/usr/bin/setpriv").exists(),
        "needs root and /usr/bin/setpriv to act as another user",
    ) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("logbook-ro-companions")
        .tempdir_in("/tmp")
        .unwrap();
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    let db = dir.path().join("ledger.db");
    let as_nobody = |args: &[&str]| as_nobody(&db, args);
    assert_eq!(as_nobody(&["session", "create", "--title", "x"]).code, 0);
    for suffix in ["-wal", "-shm", "-lock"] {
        let _ = std::fs::remove_file(companion(&db, suffix));
    }
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o400)).unwrap();
    let r = as_nobody(&["--read-only", "session", "list"]);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    for suffix in ["-wal", "-shm"] {
        let p = companion(&db, suffix);
        if let Ok(m) = std::fs::metadata(&p) {
            assert_eq!(m.permissions().mode() & 0o777, 0o600, "{}", p.display());
        }
    }
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = as_nobody(&["session", "create", "--title", "after"]);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(r.data()["title"], "after");
}
}

#[test]
fn completions_print_a_script_for_each_shell() {
    let env = TestEnv::new();
    for (shell, marker) in [
        ("bash", "_logbook()"),
        ("zsh", "#compdef logbook"),
        ("fish", "complete -c logbook"),
    ] {
        let r = env.run(&["completions", shell]);
        assert_eq!(r.code, 0, "{shell}");
        assert!(r.stdout.contains(marker), "{shell}");
        assert!(r.stdout.contains("checkpoint"), "{shell}");
    }
    assert_error(&env.json(&["completions", "tcsh"]), "INVALID_ARGUMENT", 2);
    // Under --json the script comes in the envelope, byte for byte.
    let plain = env.run(&["completions", "bash"]).stdout;
    let r = env.json(&["completions", "bash"]);
    assert_eq!(r.code, 0);
    assert_eq!(
        r.data(),
        serde_json::json!({"shell": "bash", "script": plain})
    );
    // Nothing was created for a command that needs no database.
    assert!(!env.path().exists());
}

/// Every command and command group's `--help` ends with an example
/// (docs/design.md, "CLI"), and opens with the summary its parent lists for it (an
/// argument struct's own doc comment must never stand in for the command's:
/// found by adversarial testing of deferred clap arguments). Walks the tree
/// from `logbook --help`.
#[test]
fn every_help_text_has_an_example() {
    let env = TestEnv::new();
    let mut todo: Vec<(Vec<String>, String)> = vec![(vec![], String::new())];
    let mut seen = 0;
    while let Some((path, summary)) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let r = env.run(&args);
        assert_eq!(r.code, 0, "{path:?}");
        assert!(
            r.stdout.contains("Example"),
            "`logbook {}` has no example",
            path.join(" ")
        );
        let first = r.stdout.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&summary),
            "`logbook {} --help` opens with {first:?}, its parent lists {summary:?}",
            path.join(" ")
        );
        // Every example line is a whole command, continues one ending in
        // `\`, or is a JSON config (`mcp serve`): a line wrapped at the help
        // width cannot be copied (found by a fresh-user walkthrough: `gate
        // reject`'s `--abort` sat alone).
        let example = r.stdout.split("Example").nth(1).unwrap_or_default();
        let mut continued = false;
        for line in example.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            assert!(
                continued || line.starts_with("  logbook ") || line.starts_with("  {\""),
                "`logbook {} --help`: example line {line:?} is not a command",
                path.join(" ")
            );
            continued = line.ends_with('\\');
        }
        seen += 1;
        let mut in_commands = false;
        for line in r.stdout.lines() {
            if line.starts_with("Commands:") {
                in_commands = true;
                continue;
            }
            if in_commands {
                // A command line: two spaces, the name, then its summary.
                let Some(rest) = line.strip_prefix("  ") else {
                    break;
                };
                if rest.starts_with(' ') {
                    continue; // a wrapped summary
                }
                let name = rest.split_whitespace().next().unwrap_or_default();
                if !name.is_empty() && name != "help" {
                    let mut next = path.clone();
                    next.push(name.to_owned());
                    let listed = rest[name.len()..].trim().to_owned();
                    assert!(!listed.is_empty(), "{next:?} has no summary");
                    todo.push((next, listed));
                }
            }
        }
    }
    assert!(seen > 40, "walked only {seen} help texts");
}

/// A result too large is refused, not cut short; a statement that runs too
/// long is interrupted with a coded error (found by adversarial testing:
/// a recursive CTE could exhaust memory or run forever).
#[test]
fn sql_refuses_huge_results_and_interrupts_runaway_statements() {
    let (env, _) = closed_db();
    let rows = |n: u64| {
        format!("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) SELECT x FROM c")
    };
    let ok = env.json(&["sql", &rows(100_000)]).data();
    assert_eq!(ok["rows"].as_array().unwrap().len(), 100_000);
    let e = assert_error(&env.json(&["sql", &rows(100_001)]), "INVALID_ARGUMENT", 2);
    assert!(
        e["message"].as_str().unwrap().contains("100,000 rows"),
        "{e}"
    );
    let forever =
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c";
    let e = assert_error(
        &env.json(&["sql", forever, "--timeout-ms", "300"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert!(
        e["message"].as_str().unwrap().contains("interrupted"),
        "{e}"
    );
    let e = assert_error(
        &env.json(&["sql", "SELECT 1", "--timeout-ms", "0"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(e["details"]["field"], "timeout_ms");
}
