//! Shared test environment: a private temp DB, the real binary with a
//! cleared environment, and assertion helpers.

#![allow(dead_code)]

use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::engine::*;

/// The built `logbook` binary.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_logbook")
}

/// A temp folder (HOME of every command) and a fresh database of the
/// binary's backend ([`crate::BACKEND`]): a SQLite file in the folder, or a
/// new database on the PostgreSQL test server (`db` is then its URL).
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    /// The server database, dropped with the env (PostgreSQL only).
    pub pg: Option<crate::pg::PgDb>,
}

/// The backend a test binary runs its tests against: `it` runs them on
/// SQLite, `pg` (tests/pg/main.rs) the backend-neutral modules again on
/// the PostgreSQL test server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Whether this binary runs on PostgreSQL.
pub fn on_pg() -> bool {
    crate::BACKEND == Backend::Postgres
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
    /// A fresh env. In the `pg` binary without a test server, outside CI,
    /// this prints that the PostgreSQL half was skipped and ends the whole
    /// test binary with exit 0 ([`crate::pg::server_or_exit`]).
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        if on_pg() {
            let pg = crate::pg::server_or_exit();
            let db = PathBuf::from(&pg.url);
            return TestEnv {
                dir,
                db,
                pg: Some(pg),
            };
        }
        let db = dir.path().join("ledger.db");
        TestEnv { dir, db, pg: None }
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
    /// SQLite only: a test that needs it is `sqlite_only!` (or reads with
    /// [`TestEnv::scalar`] / [`TestEnv::pg_client`]).
    #[track_caller]
    pub fn sql(&self) -> rusqlite::Connection {
        assert!(
            !on_pg(),
            "env.sql() opens a SQLite file: mark this test sqlite_only! or use scalar()/pg_client()"
        );
        let c = rusqlite::Connection::open(&self.db).expect("open");
        c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
        c
    }

    pub fn path(&self) -> &Path {
        &self.db
    }

    /// `logbook --db DB ARGS… --json`, not yet run (for [`race`], extra
    /// environment, or a child process).
    pub fn cli(&self, args: &[&str]) -> Command {
        let mut c = self.command();
        c.arg("--db").arg(&self.db).args(args).arg("--json");
        c
    }

    /// `sh -c SCRIPT` with the same cleared environment as
    /// [`TestEnv::command`].
    pub fn sh(&self, script: &str) -> Command {
        let mut c = Command::new("sh");
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("TZ", "UTC")
            .stdin(Stdio::null())
            .arg("-c")
            .arg(script);
        c
    }

    /// `session checkpoint ID --step STEP --json`; its `.data` (panics on
    /// failure).
    #[track_caller]
    pub fn checkpoint(&self, id: &str, step: &str) -> Value {
        self.json(&["session", "checkpoint", id, "--step", step])
            .data()
    }

    /// A library [`Ledger`] on the DB, with the default options.
    pub fn ledger(&self) -> Ledger {
        open_ledger(&self.db)
    }
}

/// A fresh database of the binary's backend and a library [`Ledger`] on
/// it (default options): keep the env alive as long as the ledger.
pub fn fresh_ledger() -> (TestEnv, Ledger) {
    let env = TestEnv::new();
    let lg = env.ledger();
    (env, lg)
}

/// A library [`Ledger`] on `path`, with the default options.
pub fn open_ledger(path: &Path) -> Ledger {
    Ledger::open(LedgerOptions::at(path)).expect("open ledger")
}

/// Creates an active session through the library; returns its id.
pub fn lib_create(lg: &Ledger, title: &str, app: &str) -> String {
    lg.create_session(CreateSession {
        app: Some(app.to_owned()),
        ..CreateSession::titled(title)
    })
    .expect("create")
    .session_id
    .to_string()
}

/// A library checkpoint request: `step` and an optional `note`.
pub fn cp(step: &str, note: Option<&str>) -> CheckpointRequest {
    CheckpointRequest {
        step: Some(step.to_owned()),
        note: note.map(str::to_owned),
        ..CheckpointRequest::default()
    }
}

/// A library mutation guarded by `if_rev`.
pub fn at_rev(rev: i64) -> Mutation {
    Mutation {
        if_rev: Some(rev),
        ..Mutation::default()
    }
}

/// The wall clock in Unix epoch milliseconds.
pub fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// `session_id` of a session value.
pub fn id_of(v: &Value) -> String {
    v["session_id"].as_str().expect("session_id").to_owned()
}

/// The ids of a `session list` page's `.data`, in order.
pub fn listed(data: &Value) -> Vec<String> {
    data["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(id_of)
        .collect()
}

/// A companion of the DB file: `-wal`, `-shm` or `-journal` appended.
pub fn companion(db: &Path, suffix: &str) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Permission bits (with setuid, setgid and sticky) of a file or folder.
pub fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Whether `needle` occurs in `hay`.
pub fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A 1 KiB note, numbered `i`.
pub fn kib_note(i: usize) -> String {
    let mut s = format!("note {i:06} ");
    while s.len() < 1024 {
        s.push_str("lorem ipsum ");
    }
    s.truncate(1024);
    s
}

/// Secret-shaped strings (an OpenAI-style and a GitHub token) for redaction
/// and never-echoed checks.
pub const SK: &str = "sk-EXAMPLE0000EXAMPLE0000";
pub const GHP: &str = "ghp_EXAMPLE0EXAMPLE0EXAMPLE0EXAMPLE00000";

/// Asserts the command did not panic: no exit 101, nothing on stderr that a
/// panic or a failed print writes.
#[track_caller]
pub fn assert_no_panic(r: &Run) {
    assert_ne!(r.code, 101, "exit 101 (panic):\n{}", r.stderr);
    for bad in ["panicked", "char boundary", "failed printing"] {
        assert!(
            !r.stderr.contains(bad),
            "stderr shows {bad:?}:\n{}",
            r.stderr
        );
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
        "SESSION_CONFLICT" | "STORE_BUSY" | "STORE_UNAVAILABLE" | "LEASE_HELD" | "INTERRUPTED"
    );
    assert_eq!(j["error"]["retryable"], retryable);
    let keys: Vec<&String> = j["error"].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(r.stdout.ends_with('\n') && r.stdout.matches('\n').count() == 1);
    j["error"].clone()
}

/// `(rev, number of events, last seq)` of a session, read with plain SQL.
pub fn rev_and_events(env: &TestEnv, id: &str) -> (i64, i64, i64) {
    let rows = env.rows(
        "SELECT s.rev, (SELECT count(*) FROM events e WHERE e.session_id = s.session_id),
                (SELECT max(seq) FROM events e WHERE e.session_id = s.session_id)
         FROM sessions s WHERE s.session_id = $1",
        &[id],
    );
    let int = |v: &Value| v.as_i64().unwrap();
    (int(&rows[0][0]), int(&rows[0][1]), int(&rows[0][2]))
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
    env.rows(
        "SELECT type FROM events WHERE session_id = $1 ORDER BY seq",
        &[id],
    )
    .into_iter()
    .map(|r| r[0].as_str().unwrap().to_owned())
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
