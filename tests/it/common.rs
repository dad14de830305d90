//! Shared test environment: a private temp DB, the real binary with a
//! cleared environment, and assertion helpers.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The built `logbook` binary.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_logbook")
}

/// A temp folder with a DB path inside it.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
}

/// What a command printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout parsed as one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// `.data` of a success envelope; panics on failure.
    #[track_caller]
    pub fn data(&self) -> Value {
        let j = self.json();
        assert_eq!(
            j["ok"], true,
            "expected ok:\n{}\n{}",
            self.stdout, self.stderr
        );
        assert_eq!(self.code, 0);
        j["data"].clone()
    }
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8(o.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(o.stderr).expect("stderr is UTF-8"),
        }
    }
}

impl TestEnv {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("ledger.db");
        TestEnv { dir, db }
    }

    /// A command with a cleared environment (PATH and HOME kept private).
    pub fn command(&self) -> Command {
        let mut c = Command::new(bin());
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("TZ", "UTC")
            .stdin(Stdio::null());
        c
    }

    /// Runs `logbook --db DB ARGS…`.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut c = self.command();
        c.arg("--db").arg(&self.db).args(args);
        c.output().expect("spawn logbook").into()
    }

    /// Runs with `--json` appended.
    pub fn json(&self, args: &[&str]) -> Run {
        let mut a = args.to_vec();
        a.push("--json");
        self.run(&a)
    }

    /// Creates an active session; returns its id.
    pub fn create(&self, title: &str) -> String {
        self.create_with(&["--title", title, "--app", "a"])
    }

    pub fn create_with(&self, extra: &[&str]) -> String {
        let mut a = vec!["session", "create"];
        a.extend_from_slice(extra);
        self.json(&a).data()["session_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// `session show ID --json` stdout bytes (for unchanged-DB checks).
    pub fn show(&self, id: &str) -> String {
        let r = self.json(&["session", "show", id]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    }

    /// A plain SQLite connection on the DB (bundled SQLite, no logbook code).
    pub fn sql(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(&self.db).expect("open");
        c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
        c
    }

    pub fn path(&self) -> &Path {
        &self.db
    }
}

/// Asserts a failure envelope with `code` and exit code `exit`.
#[track_caller]
pub fn assert_error(r: &Run, code: &str, exit: i32) -> Value {
    let j = r.json();
    assert_eq!(j["ok"], false, "{}", r.stdout);
    assert_eq!(j["error"]["code"], code, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.code, exit, "{}", r.stdout);
    let retryable = matches!(
        code,
        "SESSION_CONFLICT" | "STORE_BUSY" | "LEASE_HELD" | "INTERRUPTED"
    );
    assert_eq!(j["error"]["retryable"], retryable);
    let keys: Vec<&String> = j["error"].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(r.stdout.ends_with('\n') && r.stdout.matches('\n').count() == 1);
    j["error"].clone()
}

/// `(rev, number of events, last seq)` of a session, read with plain SQL.
pub fn rev_and_events(env: &TestEnv, id: &str) -> (i64, i64, i64) {
    let c = env.sql();
    c.query_row(
        "SELECT s.rev, (SELECT count(*) FROM events e WHERE e.session_id = s.session_id),
                (SELECT max(seq) FROM events e WHERE e.session_id = s.session_id)
         FROM sessions s WHERE s.session_id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .unwrap()
}

/// Asserts rev = event count = last seq + 1 (core verbs only).
#[track_caller]
pub fn assert_rev_matches_events(env: &TestEnv, id: &str) -> i64 {
    let (rev, n, last) = rev_and_events(env, id);
    assert_eq!(
        (rev, n, last + 1),
        (rev, rev, rev),
        "rev {rev}, events {n}, last seq {last}"
    );
    rev
}

/// The types of a session's events, in seq order.
pub fn event_types(env: &TestEnv, id: &str) -> Vec<String> {
    let c = env.sql();
    let mut st = c
        .prepare("SELECT type FROM events WHERE session_id = ?1 ORDER BY seq")
        .unwrap();
    st.query_map([id], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Spawns `n` shell commands held on a FIFO, releases them together, and
/// returns their outputs in spawn order.
pub fn race(dir: &Path, cmds: Vec<Command>) -> Vec<Run> {
    let fifo = dir.join(format!("go-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    // Held open read-write, the FIFO lets every child's `cat` open it at once
    // and then block reading; closing it releases them all together.
    let hold = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .expect("open fifo");
    let mut children = Vec::new();
    for c in cmds {
        let prog = c.get_program().to_owned();
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        let envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)> = c
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
            .collect();
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg("timeout 30 cat \"$0\" >/dev/null; exec \"$@\"")
            .arg(&fifo)
            .arg(prog)
            .args(args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            if let Some(v) = v {
                sh.env(k, v);
            }
        }
        children.push(sh.spawn().expect("spawn"));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(hold);
    let runs = children
        .into_iter()
        .map(|c| Run::from(c.wait_with_output().expect("wait")))
        .collect();
    let _ = std::fs::remove_file(&fifo);
    runs
}

/// Appends one event by raw SQL, as another SQLite client could: next seq,
/// the given type and raw detail bytes (stored as TEXT, valid UTF-8 or not),
/// correctly chained (prev_hash and hash as `logbook::chain` computes them).
pub fn raw_append(c: &rusqlite::Connection, session: &str, event_type: &str, detail: &[u8]) {
    let (seq, at_ms, prev): (i64, i64, Option<Vec<u8>>) = c
        .query_row(
            "SELECT coalesce(max(seq) + 1, 0), coalesce(max(at_ms), 0),
                    (SELECT hash FROM events WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1)
             FROM events WHERE session_id = ?1",
            [session],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let prev: [u8; 32] = prev.map_or(logbook::chain::GENESIS, |p| p.try_into().unwrap());
    let hash = logbook::chain::event_hash(
        &prev,
        &logbook::chain::EventFields {
            session_id: session.as_bytes(),
            seq,
            event_type: event_type.as_bytes(),
            at_ms,
            actor_type: b"cli",
            detail: Some(detail),
            data: None,
            run_id: None,
        },
    );
    c.execute(
        "INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, prev_hash, hash)
         VALUES (?1, ?2, ?3, ?4, 'cli', CAST(?5 AS TEXT), ?6, ?7)",
        rusqlite::params![
            session,
            seq,
            event_type,
            at_ms,
            detail,
            &prev[..],
            &hash[..]
        ],
    )
    .unwrap();
}

/// `EXPLAIN QUERY PLAN` detail lines of `sql`, with every parameter bound to
/// NULL.
pub fn query_plan(c: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let nulls = vec![rusqlite::types::Null; st.parameter_count()];
    st.query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Whether a test's precondition holds (`ok`). When it does not, the test
/// is skipped with a line on stderr — except under CI (`CI` set, as
/// `.ci/run` sets it), where a missing precondition fails the test instead
/// of letting it pass without asserting anything.
#[track_caller]
pub fn precondition(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "precondition missing under CI: {what}"
        );
        eprintln!("skipped: {what}");
    }
    ok
}

/// Whether this process runs as root (root-only tests act as other users).
pub fn is_root() -> bool {
    // SAFETY: getuid(2) has no preconditions and touches no memory.
    unsafe { libc::getuid() == 0 }
}
