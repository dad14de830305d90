//! The PostgreSQL benchmark behind BENCHMARKS.md, "PostgreSQL".
//!
//! Run: `bash .ci/pg cargo bench --bench pg` (a throwaway server; about 4
//! minutes on 2 cores after the build). Without LOGBOOK_TEST_PG it prints one
//! line and exits 0. The bench creates and drops databases of its own on
//! that server. `LOGBOOK_BENCH_ONLY=writers,runs,verbs,notify,follow,idle,list` runs a
//! subset; `LOGBOOK_BENCH_ROUNDS` (default 3) and `LOGBOOK_BENCH_SECS`
//! (default 2, each trial's measured phase) trade time for noise;
//! `LOGBOOK_BENCH_SESSIONS` (default 1,000,000) sizes the list dataset;
//! `LOGBOOK_BENCH_VENV` names an existing venv for LangGraph (default
//! target/pg-bench-venv, created with `python3 -m venv` + pip when missing);
//! `LOGBOOK_BENCH_FOLLOWER=PATH` runs the follow and idle sections' follower
//! from another build of the binary (a before/after).
//!
//! Every client is its own process, started before the trial; it connects,
//! does 3 warm-up operations, prints `ready`, and waits for one byte on stdin:
//! the parent sends the bytes once every client is ready (the common start).
//! A client then runs for the measured phase and reports its wall-clock start
//! and end and each operation's latency; a trial's rate is all operations
//! over (last end − first start), and p50/p99 are over all its operations.
//! The server URL travels in the environment, never on a command line.

#[path = "pg/idle.rs"]
mod idle;
#[path = "pg/list.rs"]
mod list;
#[path = "pg/runs.rs"]
mod runs;
#[path = "pg/verbs.rs"]
mod verbs;

use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LG_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/pg_langgraph.py");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--writer") {
        writer(&args[2..]);
        return;
    }
    let Ok(base) = std::env::var("LOGBOOK_TEST_PG") else {
        println!("pg bench: skipped, LOGBOOK_TEST_PG is not set (run: bash .ci/pg cargo bench --bench pg)");
        return;
    };
    let cfg = Config {
        base,
        rounds: env_num("LOGBOOK_BENCH_ROUNDS", 3),
        secs: env_num("LOGBOOK_BENCH_SECS", 2.0),
    };
    let mut admin = postgres::Client::connect(&cfg.base, postgres::NoTls).unwrap();
    let version: String = admin.query_one("SHOW server_version", &[]).unwrap().get(0);
    println!("# logbook PostgreSQL benchmark\n");
    println!(
        "machine: {} cores; PostgreSQL {version} on 127.0.0.1 (fsync and synchronous_commit on); {} rounds, {} s measured per trial\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cfg.rounds,
        cfg.secs
    );
    let only = std::env::var("LOGBOOK_BENCH_ONLY").unwrap_or_default();
    let want = |name: &str| only.is_empty() || only.split(',').any(|o| o == name);
    if want("writers") {
        writers_section(&cfg, &mut admin);
    }
    if want("runs") {
        runs::section(&cfg, &mut admin);
    }
    if want("verbs") {
        verbs::section(&cfg, &mut admin);
    }
    if want("notify") {
        notify_section(&cfg, &mut admin);
    }
    if want("follow") {
        follow_section(&cfg, &mut admin);
    }
    if want("idle") {
        idle::section(&cfg, &mut admin);
    }
    if want("list") {
        list::section(&cfg, &mut admin);
    }
}

/// The run's settings.
pub struct Config {
    /// The superuser URL to database `postgres` (LOGBOOK_TEST_PG).
    pub base: String,
    pub rounds: usize,
    pub secs: f64,
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The URL of database `db` on the server of `base`.
pub fn db_url(base: &str, db: &str) -> String {
    let (head, query) = base
        .split_once('?')
        .map_or((base, None), |(h, q)| (h, Some(q)));
    let head = head.rsplit_once('/').map_or(head, |(h, _)| h);
    match query {
        Some(q) => format!("{head}/{db}?{q}"),
        None => format!("{head}/{db}"),
    }
}

/// A fresh database named `name` (dropped first if a previous run left it).
pub fn fresh_db(admin: &mut postgres::Client, name: &str) {
    drop_db(admin, name);
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
}

pub fn drop_db(admin: &mut postgres::Client, name: &str) {
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
}

pub fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

pub fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    pct(&mut v, 0.5)
}

// ------------------------------------------------------------ the clients

/// Child mode: `--writer MODE DB SECONDS [stamps]` (MODE `checkpoint` or
/// `create`; the server from LOGBOOK_TEST_PG, database DB). Prints
/// `ready SESSION`, waits for a byte on stdin, runs for SECONDS, then prints
/// `START_NS END_NS OPS ERRORS`, a line of latencies (µs), and with `stamps`
/// one `STEP ACK_NS` line per checkpoint (the wall clock when it returned).
fn writer(a: &[String]) {
    let base = std::env::var("LOGBOOK_TEST_PG").unwrap();
    let l = Ledger::open(LedgerOptions::at(db_url(&base, &a[1]))).unwrap();
    if a[0].starts_with("usage") {
        return runs::writer(&l, a);
    }
    let (checkpoint, keyed) = match a[0].as_str() {
        "checkpoint" => (true, false),
        "checkpoint-keyed" => (true, true),
        "create" => (false, false),
        m => panic!("unknown writer mode {m}"),
    };
    let secs: f64 = a[2].parse().unwrap();
    let stamps = a.get(3).map(String::as_str) == Some("stamps");
    let id = l
        .create_session(CreateSession::titled("pg bench writer"))
        .unwrap()
        .value
        .session_id
        .to_string();
    let op = |step: String| -> logbook::Result<()> {
        if checkpoint {
            let req = CheckpointRequest {
                step: Some(step),
                ..Default::default()
            };
            let m = Mutation {
                idempotency_key: keyed
                    .then(|| format!("{id}-{}", req.step.as_deref().unwrap_or(""))),
                ..Mutation::default()
            };
            l.checkpoint(&id, req, &m).map(drop)
        } else {
            l.create_session(CreateSession::titled(step)).map(drop)
        }
    };
    for i in 0..3 {
        op(format!("warm{i}")).unwrap();
    }
    println!("ready {id}");
    std::io::stdout().flush().unwrap();
    let mut go = [0u8; 1];
    std::io::stdin().read_exact(&mut go).unwrap();
    measure(secs, stamps, op);
}

/// A writer's measured phase: `op` until `secs` have passed, then its report
/// on stdout (module docs).
fn measure(secs: f64, stamps: bool, mut op: impl FnMut(String) -> logbook::Result<()>) {
    let mut lat = Vec::new();
    let mut acks = Vec::new();
    let mut errors = 0usize;
    let start = wall_ns();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    for i in 0.. {
        let t = Instant::now();
        if let Err(e) = op(format!("m{i}")) {
            errors += 1;
            if errors == 1 {
                eprintln!("pg bench writer: {e}");
            }
        }
        if stamps {
            acks.push(wall_ns());
        }
        let now = Instant::now();
        lat.push((now - t).as_secs_f64() * 1e6);
        if now >= deadline {
            break;
        }
    }
    let end = wall_ns();
    let mut out = format!("{start} {end} {} {errors}\n", lat.len());
    let lats: Vec<String> = lat.iter().map(|x| format!("{x:.0}")).collect();
    out.push_str(&lats.join(" "));
    out.push('\n');
    for (i, ns) in acks.iter().enumerate() {
        out.push_str(&format!("m{i} {ns}\n"));
    }
    std::io::stdout().write_all(out.as_bytes()).unwrap();
}

/// What a trial's clients run.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Checkpoint,
    /// A checkpoint with an idempotency key: one statement on a server.
    KeyedCheckpoint,
    Create,
    LangGraph,
    /// `record_run_usage` on a running run, with an idempotency key.
    KeyedUsage,
    /// The same without a key: the transaction.
    Usage,
}

/// One trial's outcome.
#[derive(Default)]
struct Trial {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    ops: usize,
    errors: usize,
    /// Per client: its session id and (step, ack ns) stamps.
    acks: Vec<(String, Vec<(String, i64)>)>,
}

fn client(kind: Kind, db: &str, cfg: &Config, stamps: bool, venv: &VenvPy) -> Command {
    let secs = cfg.secs.to_string();
    let mut c = if kind == Kind::LangGraph {
        let mut c = Command::new(&venv.0);
        c.args([LG_SCRIPT, "worker", &secs])
            .env("LOGBOOK_BENCH_LG_URL", db_url(&cfg.base, db));
        c
    } else {
        let mut c = Command::new(std::env::current_exe().unwrap());
        let mode = match kind {
            Kind::Checkpoint => "checkpoint",
            Kind::KeyedCheckpoint => "checkpoint-keyed",
            Kind::KeyedUsage => "usage-keyed",
            Kind::Usage => "usage",
            _ => "create",
        };
        c.args(["--writer", mode, db, &secs]);
        if stamps {
            c.arg("stamps");
        }
        c
    };
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    c
}

/// Starts `n` clients, waits until all are ready, releases them together and
/// collects their reports.
fn run_trial(n: usize, mk: impl Fn() -> Command) -> Trial {
    let mut kids: Vec<(Child, BufReader<std::process::ChildStdout>)> = (0..n)
        .map(|_| {
            let mut c = mk().spawn().unwrap();
            let out = BufReader::new(c.stdout.take().unwrap());
            (c, out)
        })
        .collect();
    let mut ids = Vec::new();
    for (_, out) in &mut kids {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready"), "a client failed to start");
        ids.push(line.split_whitespace().nth(1).unwrap_or("").to_owned());
    }
    for (c, _) in &mut kids {
        let stdin = c.stdin.as_mut().unwrap();
        stdin.write_all(b"g").unwrap();
        stdin.flush().unwrap();
    }
    let (mut first, mut last) = (i64::MAX, 0i64);
    let mut t = Trial::default();
    let mut lat = Vec::new();
    for ((mut c, mut out), id) in kids.into_iter().zip(ids) {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        assert!(c.wait().unwrap().success(), "a client failed");
        let mut lines = s.lines();
        let f: Vec<i64> = lines
            .next()
            .unwrap()
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        first = first.min(f[0]);
        last = last.max(f[1]);
        t.ops += f[2] as usize;
        t.errors += f[3] as usize;
        lat.extend(
            lines
                .next()
                .unwrap()
                .split_whitespace()
                .map(|x| x.parse::<f64>().unwrap()),
        );
        let acks = lines
            .map(|l| {
                let (step, ns) = l.split_once(' ').unwrap();
                (step.to_owned(), ns.parse().unwrap())
            })
            .collect();
        t.acks.push((id, acks));
    }
    t.rate = t.ops as f64 / ((last - first) as f64 / 1e9);
    t.p50_ms = pct(&mut lat, 0.5) / 1e3;
    t.p99_ms = pct(&mut lat, 0.99) / 1e3;
    t
}

/// The venv's python, with langgraph-checkpoint-postgres and psycopg.
struct VenvPy(PathBuf);

fn venv() -> VenvPy {
    let dir = std::env::var_os("LOGBOOK_BENCH_VENV").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/pg-bench-venv")),
        PathBuf::from,
    );
    let py = dir.join("bin/python");
    let ok = |py: &PathBuf| {
        Command::new(py)
            .args(["-c", "import langgraph.checkpoint.postgres, psycopg"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(&py) {
        eprintln!(
            "pg bench: creating {} (pip install langgraph-checkpoint-postgres psycopg[binary])",
            dir.display()
        );
        let st = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "python3 -m venv failed");
        let st = Command::new(dir.join("bin/pip"))
            .args([
                "install",
                "-q",
                "langgraph-checkpoint-postgres",
                "psycopg[binary]",
            ])
            .status()
            .unwrap();
        assert!(st.success() && ok(&py), "pip install failed");
    }
    VenvPy(py)
}

fn lg_versions(py: &VenvPy) -> String {
    let out = Command::new(&py.0)
        .args(["-c", "import importlib.metadata as m; print(' '.join(p + ' ' + m.version(p) for p in ('langgraph-checkpoint-postgres', 'langgraph-checkpoint', 'psycopg')))"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

// --------------------------------------------------------------- writers

/// Fresh databases `lb` (migrated by a first `Ledger`) and `lg` (LangGraph's
/// tables set up) for a section whose clients write beside LangGraph's;
/// the venv's python.
fn writer_dbs(cfg: &Config, admin: &mut postgres::Client, lb: &str, lg: &str) -> VenvPy {
    let py = venv();
    fresh_db(admin, lb);
    fresh_db(admin, lg);
    drop(Ledger::open(LedgerOptions::at(db_url(&cfg.base, lb))).unwrap());
    let st = Command::new(&py.0)
        .args([LG_SCRIPT, "setup"])
        .env("LOGBOOK_BENCH_LG_URL", db_url(&cfg.base, lg))
        .status()
        .unwrap();
    assert!(st.success(), "LangGraph setup failed");
    py
}

fn writers_section(cfg: &Config, admin: &mut postgres::Client) {
    let (lb, lg) = ("lbbench_writers", "lbbench_langgraph");
    let py = writer_dbs(cfg, admin, lb, lg);
    let procs = [1usize, 8, 32];
    let kinds = [
        Kind::Checkpoint,
        Kind::LangGraph,
        Kind::KeyedCheckpoint,
        Kind::Create,
    ];
    let mut res: HashMap<(Kind, usize), Vec<Trial>> = HashMap::new();
    for round in 0..cfg.rounds {
        for &n in &procs {
            // Rotate the order each round: logbook and LangGraph alternate
            // which goes first (A/B, B/A, …).
            for k in 0..kinds.len() {
                let kind = kinds[(k + round) % kinds.len()];
                let db = if kind == Kind::LangGraph { lg } else { lb };
                let t = run_trial(n, || client(kind, db, cfg, false, &py));
                res.entry((kind, n)).or_default().push(t);
            }
        }
    }
    let med = |kind: Kind, n: usize, f: fn(&Trial) -> f64| {
        median(res[&(kind, n)].iter().map(f).collect())
    };
    let errors: usize = res.values().flatten().map(|t| t.errors).sum();
    println!("## Writer throughput: 1, 8 and 32 client processes\n");
    println!("Each process: one client on its own connection (logbook: one `Ledger` handle, its own session; LangGraph: `PostgresSaver` on one psycopg connection as `from_conn_string` opens it, its own thread_id). {} rounds, trials interleaved (the order rotates each round), median of the rounds; p50/p99 over every operation of a trial, median over the rounds. LangGraph: {}. Errors: {errors}.\n", cfg.rounds, lg_versions(&py));
    println!("| processes | logbook checkpoint (key) ops/s | p50 ms | p99 ms | logbook checkpoint (no key) ops/s | p50 ms | p99 ms | logbook create_session ops/s | p50 ms | p99 ms | LangGraph put ops/s | p50 ms | p99 ms | checkpoint (key) / put | checkpoint (no key) / put | create_session / put |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in &procs {
        let (k, c, s, g) = (
            med(Kind::KeyedCheckpoint, n, |t| t.rate),
            med(Kind::Checkpoint, n, |t| t.rate),
            med(Kind::Create, n, |t| t.rate),
            med(Kind::LangGraph, n, |t| t.rate),
        );
        println!(
            "| {n} | {k:.0} | {:.2} | {:.2} | {c:.0} | {:.2} | {:.2} | {s:.0} | {:.2} | {:.2} | {g:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            med(Kind::KeyedCheckpoint, n, |t| t.p50_ms),
            med(Kind::KeyedCheckpoint, n, |t| t.p99_ms),
            med(Kind::Checkpoint, n, |t| t.p50_ms),
            med(Kind::Checkpoint, n, |t| t.p99_ms),
            med(Kind::Create, n, |t| t.p50_ms),
            med(Kind::Create, n, |t| t.p99_ms),
            med(Kind::LangGraph, n, |t| t.p50_ms),
            med(Kind::LangGraph, n, |t| t.p99_ms),
            k / g,
            c / g,
            s / g
        );
    }
    println!();
    for (kind, name) in [
        (Kind::KeyedCheckpoint, "logbook checkpoint (key)"),
        (Kind::Checkpoint, "logbook checkpoint (no key)"),
        (Kind::Create, "logbook create_session"),
        (Kind::LangGraph, "LangGraph put"),
    ] {
        let r = |n| med(kind, n, |t| t.rate);
        let rounds: Vec<String> = procs
            .iter()
            .map(|&n| {
                let v: Vec<String> = res[&(kind, n)]
                    .iter()
                    .map(|t| format!("{:.0}", t.rate))
                    .collect();
                format!("{n}: {}", v.join(", "))
            })
            .collect();
        println!(
            "- {name}: 8 vs 1 {:.2}, 32 vs 1 {:.2} (each round's ops/s — {})",
            r(8) / r(1),
            r(32) / r(1),
            rounds.join("; ")
        );
    }
    println!();
    drop_db(admin, lb);
    drop_db(admin, lg);
}

// ---------------------------------------------------------------- NOTIFY

/// The trigger V2 once had (removed: see the commit that removed it).
const NOTIFY_TRIGGER: &str = "CREATE FUNCTION logbook_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.pg_notify('logbook_events', TG_TABLE_SCHEMA); RETURN NULL; END $$; CREATE TRIGGER events_notify AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION logbook_events_notify();";

fn notify_section(cfg: &Config, admin: &mut postgres::Client) {
    let db = "lbbench_notify";
    fresh_db(admin, db);
    let url = db_url(&cfg.base, db);
    drop(Ledger::open(LedgerOptions::at(&url)).unwrap());
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let py = VenvPy(PathBuf::new());
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..cfg.rounds {
        for step in 0..2 {
            let notify = (step + round) % 2 == 1;
            if notify {
                c.batch_execute(NOTIFY_TRIGGER).unwrap();
            }
            let t = run_trial(8, || client(Kind::Checkpoint, db, cfg, false, &py));
            if notify {
                c.batch_execute(
                    "DROP TRIGGER events_notify ON events; DROP FUNCTION logbook_events_notify()",
                )
                .unwrap();
                with.push(t);
            } else {
                without.push(t);
            }
        }
    }
    drop(c);
    let m = |v: &[Trial], f: fn(&Trial) -> f64| median(v.iter().map(f).collect());
    let (a, b) = (m(&without, |t| t.rate), m(&with, |t| t.rate));
    let errors: usize = with.iter().chain(&without).map(|t| t.errors).sum();
    println!("## NOTIFY's cost on writers: 8 checkpoint processes\n");
    println!("The same 8-process checkpoint trial with and without the removed `events_notify` trigger (AFTER INSERT ON events FOR EACH STATEMENT, `pg_notify('logbook_events', schema)`) created on the bench database; {} rounds, the order alternating, median. Errors: {errors}.\n", cfg.rounds);
    println!("| | ops/s | p50 ms | p99 ms | ratio |\n|---|---|---|---|---|");
    println!(
        "| without the trigger (current) | {a:.0} | {:.2} | {:.2} | 1.00 |",
        m(&without, |t| t.p50_ms),
        m(&without, |t| t.p99_ms)
    );
    println!(
        "| with the NOTIFY trigger | {b:.0} | {:.2} | {:.2} | {:.2} |",
        m(&with, |t| t.p50_ms),
        m(&with, |t| t.p99_ms),
        b / a
    );
    let each = |v: &[Trial]| {
        v.iter()
            .map(|t| format!("{:.0}", t.rate))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "\nEach round's ops/s: without {}; with {}\n",
        each(&without),
        each(&with)
    );
    drop_db(admin, db);
}

// ---------------------------------------------------------------- follow

fn follow_section(cfg: &Config, admin: &mut postgres::Client) {
    let db = "lbbench_follow";
    fresh_db(admin, db);
    let url = db_url(&cfg.base, db);
    drop(Ledger::open(LedgerOptions::at(&url)).unwrap());
    // The follower reads from the start of the feed; only the measured
    // checkpoints (steps m0, m1, …) are timed.
    // LOGBOOK_BENCH_FOLLOWER: another build of the binary (benches/pg/idle.rs).
    let bin = std::env::var("LOGBOOK_BENCH_FOLLOWER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_logbook").to_owned());
    let mut follower = Command::new(&bin)
        .args(["events", "--follow", "--json"])
        .env("LOGBOOK_DB", &url)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = follower.stdout.take().unwrap();
    let seen: Arc<Mutex<HashMap<(String, String), i64>>> = Arc::default();
    let dup = Arc::new(Mutex::new(0usize));
    let reader = {
        let (seen, dup) = (seen.clone(), dup.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let at = wall_ns();
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                let step = v["data"]["step"].as_str().unwrap_or_default();
                if v["type"] != "checkpoint" || !step.starts_with('m') {
                    continue;
                }
                let key = (
                    v["session_id"].as_str().unwrap().to_owned(),
                    step.to_owned(),
                );
                if seen.lock().unwrap().insert(key, at).is_some() {
                    *dup.lock().unwrap() += 1;
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let py = VenvPy(PathBuf::new());
    let t = run_trial(8, || client(Kind::Checkpoint, db, cfg, true, &py));
    let expected: usize = t.acks.iter().map(|(_, a)| a.len()).sum();
    let waited = Instant::now();
    while seen.lock().unwrap().len() < expected && waited.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = follower.kill();
    let _ = follower.wait();
    reader.join().unwrap();
    let seen = seen.lock().unwrap();
    let mut lat = Vec::new();
    let mut missing = 0usize;
    for (id, acks) in &t.acks {
        for (step, ack) in acks {
            match seen.get(&(id.clone(), step.clone())) {
                Some(at) => lat.push((at - ack) as f64 / 1e6),
                None => missing += 1,
            }
        }
    }
    let dup = *dup.lock().unwrap();
    println!("## Follow latency beside 8 writer processes\n");
    println!("`logbook events --follow --json` ({bin}; a separate process; it probes the feed every 5 ms while events are written, backing off to 20 ms when none are) while 8 writer processes checkpoint their own sessions as fast as they can for {} s ({:.0} commits/s in all, {} errors). Latency: from a writer's `checkpoint()` returning (its wall clock) to the follower's line arriving on the bench's pipe; {expected} checkpoints, {} received, {missing} missing, {dup} duplicated.\n", cfg.secs, t.rate, t.errors, lat.len());
    println!(
        "| p50 | p99 | max |\n|---|---|---|\n| {:.2} ms | {:.2} ms | {:.2} ms |\n",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0)
    );
    drop_db(admin, db);
}
