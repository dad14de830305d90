//! The performance report behind BENCHMARKS.md: every figure is a ratio
//! against a baseline measured in the same run (the machines are noisy).
//!
//! Run: `cargo bench --bench report` (about 5 minutes on 2 cores).
//! `LOGBOOK_BENCH_SESSIONS` overrides the 1,000,000-session list dataset.

#[path = "../tests/it/walcount.rs"]
#[allow(dead_code)]
mod walcount;

use logbook::{
    CheckpointRequest, CreateSession, Ledger, LedgerOptions, ListSessions, Mutation, SessionStatus,
    SyncMode,
};
use rusqlite::{params, Connection};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--writer") {
        writer(&args[2..]);
        return;
    }
    if args.get(1).map(String::as_str) == Some("--rss-of") {
        rss_of(&args[2..]);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    println!("# logbook benchmark report\n");
    println!(
        "machine: {} cores; SQLite {}\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        rusqlite::version()
    );
    // LOGBOOK_BENCH_ONLY=cli,pages,… (names below, comma-separated) runs a subset.
    let only = std::env::var("LOGBOOK_BENCH_ONLY").unwrap_or_default();
    let sections: [(&str, &Section); 13] = [
        ("cli", &cli_section),
        ("pages", &pages_section),
        ("normal", &|d| throughput_section(d, SyncMode::Normal)),
        ("full", &|d| throughput_section(d, SyncMode::Full)),
        ("fresh", &fresh::section),
        ("writers", &writers_section),
        ("list", &list_section),
        ("chain", &chain_section),
        ("follow", &follow_section),
        ("import", &import_section),
        ("runs", &runs_section),
        ("dashboard", &dashboard_section),
        ("mcp", &mcp::section),
    ];
    for (name, section) in sections {
        if only.is_empty() || only.split(',').any(|o| o == name) {
            section(dir.path());
        }
    }
}

/// One report section, writing its scratch files under the given folder.
type Section = dyn Fn(&Path);

#[path = "report/mcp.rs"]
mod mcp;

#[path = "report/fresh.rs"]
mod fresh;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn median(mut v: Vec<f64>) -> f64 {
    pct(&mut v, 0.5)
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, max: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % max as u64) as usize
    }
}

// ---------------------------------------------------------------- pages

fn pages_section(dir: &Path) {
    let p = walcount::measure(&dir.join("pages.db"), 10_000, 200, 1_000);
    println!("## WAL pages written per operation\n");
    println!("`wal_autocheckpoint=0`, frames counted from the `-wal` size over 1,000 ops on 10,000 sessions.\n");
    println!("| operation | pages/op |\n|---|---|");
    println!("| checkpoint | {:.2} |", p.checkpoint);
    println!(
        "| checkpoint, session with a 64 KiB context | {:.2} |",
        p.checkpoint_wide
    );
    println!("| create | {:.2} |", p.create);
    println!("| complete | {:.2} |", p.complete);
    let naive = naive_pages(&dir.join("naive-pages.db"));
    println!("| naive checkpoint (baseline) | {naive:.2} |\n");
    checkpoint_breakdown(&dir.join("breakdown.db"));
}

/// Which B-tree each WAL frame of 1,000 checkpoints belongs to: frame page
/// numbers from the `-wal` headers, mapped through SQLite's `dbstat`.
fn checkpoint_breakdown(path: &Path) {
    let l = Ledger::open(LedgerOptions {
        sync: SyncMode::Normal,
        wal_autocheckpoint_pages: Some(0),
        ..LedgerOptions::at(path)
    })
    .unwrap();
    let ids: Vec<String> = (0..10_000)
        .map(|i| {
            let req = CreateSession {
                app: Some(format!("app{}", i % 7)),
                tags: vec!["t".into()],
                ..CreateSession::titled(format!("session {i}"))
            };
            l.create_session(req).unwrap().session_id.to_string()
        })
        .collect();
    let c = Connection::open(path).unwrap();
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let mut rng = Lcg(7);
    for i in 0..1000 {
        let req = CheckpointRequest {
            step: Some(format!("step {i}")),
            note: Some("a short note".into()),
            ..Default::default()
        };
        l.checkpoint(&ids[rng.next(ids.len())], req, &Mutation::default())
            .unwrap();
    }
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let bytes = std::fs::read(wal).unwrap();
    let names: std::collections::HashMap<i64, String> = c
        .prepare("SELECT pageno, name FROM dbstat")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut counts: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    let mut off = 32;
    while off + 24 <= bytes.len() {
        let page = i64::from(u32::from_be_bytes([
            bytes[off],
            bytes[off + 1],
            bytes[off + 2],
            bytes[off + 3],
        ]));
        let name = match names.get(&page) {
            Some(n) if page == 1 => format!("page 1 ({n}, file header)"),
            Some(n) => n.clone(),
            None => "free or new pages".to_owned(),
        };
        *counts.entry(name).or_default() += 1;
        off += 24 + 4096;
    }
    println!("Checkpoint frames by B-tree (1,000 checkpoints):\n");
    println!("| B-tree | pages/op |\n|---|---|");
    let mut rows: Vec<(String, usize)> = counts.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    for (name, n) in rows {
        println!("| {name} | {:.2} |", n as f64 / 1000.0);
    }
    println!();
}

// ------------------------------------------------------- naive baseline

const NAIVE_SCHEMA: &str = "
CREATE TABLE sessions (id TEXT PRIMARY KEY, status TEXT NOT NULL, app TEXT, title TEXT,
  rev INTEGER NOT NULL, updated INTEGER NOT NULL, context TEXT, checkpoint TEXT);
CREATE INDEX sessions_status_updated ON sessions (status, updated);
CREATE INDEX sessions_app_updated ON sessions (app, updated);
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
  seq INTEGER NOT NULL, type TEXT NOT NULL, at INTEGER NOT NULL, data TEXT,
  UNIQUE (session_id, seq));";

fn naive_open(path: &Path, sync: SyncMode, autockpt: u32) -> Connection {
    let c = Connection::open(path).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(
        None,
        "synchronous",
        if sync == SyncMode::Full {
            "FULL"
        } else {
            "NORMAL"
        },
    )
    .unwrap();
    c.pragma_update(None, "wal_autocheckpoint", autockpt)
        .unwrap();
    c.execute_batch(NAIVE_SCHEMA).unwrap();
    c.execute_batch("BEGIN").unwrap();
    for i in 0..10_000 {
        let id = format!("ses_{i:016x}");
        c.execute(
            "INSERT INTO sessions VALUES (?1, 'active', ?2, ?3, 1, ?4, '{}', NULL)",
            params![id, format!("app{}", i % 7), format!("session {i}"), i],
        )
        .unwrap();
        c.execute(
            "INSERT INTO events (session_id, seq, type, at) VALUES (?1, 0, 'created', ?2)",
            params![id, i],
        )
        .unwrap();
    }
    c.execute_batch("COMMIT").unwrap();
    c
}

fn naive_checkpoint(c: &Connection, id: &str, i: usize) {
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let now = i as i64 + 1_000_000;
    let rev: i64 = c
        .prepare_cached("UPDATE sessions SET rev = rev + 1, updated = ?2, checkpoint = ?3 WHERE id = ?1 AND status = 'active' RETURNING rev")
        .unwrap()
        .query_row(params![id, now, format!("step {i}: a short note")], |r| r.get(0))
        .unwrap();
    c.prepare_cached("INSERT INTO events (session_id, seq, type, at, data) VALUES (?1, ?2, 'checkpoint', ?3, ?4)")
        .unwrap()
        .execute(params![id, rev - 1, now, format!("{{\"step\":\"step {i}\",\"note\":\"a short note\"}}")])
        .unwrap();
    c.execute_batch("COMMIT").unwrap();
}

fn naive_pages(path: &Path) -> f64 {
    let c = naive_open(path, SyncMode::Normal, 0);
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let mut rng = Lcg(7);
    for i in 0..1000 {
        naive_checkpoint(&c, &format!("ses_{:016x}", rng.next(10_000)), i);
    }
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    (std::fs::metadata(wal).unwrap().len() - 32) as f64 / 4120.0 / 1000.0
}

// ------------------------------------------------------------ throughput

fn lib_open(path: &Path, sync: SyncMode) -> (Ledger, Vec<String>) {
    let l = Ledger::open(fresh::lib_options(path, sync)).unwrap();
    let mut ids = Vec::new();
    for i in 0..10_000 {
        let req = CreateSession {
            app: Some(format!("app{}", i % 7)),
            ..CreateSession::titled(format!("session {i}"))
        };
        ids.push(l.create_session(req).unwrap().session_id.to_string());
    }
    (l, ids)
}

fn throughput_section(dir: &Path, sync: SyncMode) {
    let name = if sync == SyncMode::Full {
        "FULL"
    } else {
        "NORMAL"
    };
    let naive = naive_open(&dir.join(format!("naive-{name}.db")), sync, 1000);
    let (lib, ids) = lib_open(&dir.join(format!("lib-{name}.db")), sync);
    let ops = if sync == SyncMode::Full { 1_000 } else { 4_000 };
    let mut rng = Lcg(11);
    let (mut naive_rates, mut lib_rates, mut lat) = (Vec::new(), Vec::new(), Vec::new());
    let mut n = 0;
    for _trial in 0..5 {
        let t = Instant::now();
        for _ in 0..ops {
            n += 1;
            naive_checkpoint(&naive, &format!("ses_{:016x}", rng.next(10_000)), n);
        }
        naive_rates.push(ops as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..ops {
            n += 1;
            let id = &ids[rng.next(ids.len())];
            let t0 = Instant::now();
            let req = CheckpointRequest {
                step: Some(format!("step {n}")),
                note: Some("a short note".into()),
                ..Default::default()
            };
            lib.checkpoint(id, req, &Mutation::default()).unwrap();
            lat.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        lib_rates.push(ops as f64 / t.elapsed().as_secs_f64());
    }
    let (nr, lr) = (median(naive_rates), median(lib_rates));
    println!("## Checkpoint throughput, synchronous={name}\n");
    println!("One writer, 10,000 sessions, random session per op; 5 interleaved trials of {ops} ops, median.\n");
    println!("| | ops/s | ratio to naive |\n|---|---|---|");
    println!("| naive baseline (UPDATE + INSERT, AUTOINCREMENT, two (x, updated) indexes) | {nr:.0} | 1.00 |");
    println!("| logbook `Ledger::checkpoint` (validation, redaction, whole session returned) | {lr:.0} | {:.2} |", lr / nr);
    println!(
        "\nlogbook latency: p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs\n",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0)
    );
}

// ------------------------------------------------------ writer processes

/// Child mode: `--writer DB SESSION OPS START_AT_MS`; prints
/// `start_ns end_ns p99_us max_us errors`.
fn writer(a: &[String]) {
    let l = Ledger::open(LedgerOptions {
        sync: SyncMode::Normal,
        ..LedgerOptions::at(&a[0])
    })
    .unwrap();
    let ops: usize = a[2].parse().unwrap();
    let start_at: i64 = a[3].parse().unwrap();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64
    };
    while now() < start_at * 1_000_000 {
        std::thread::sleep(Duration::from_micros(200));
    }
    let start = now();
    let mut lat = Vec::with_capacity(ops);
    let mut errors = 0;
    // With "stamps": also each op's step and the wall-clock ns its commit
    // returned (the follow-latency section joins them with the follower).
    let stamps = a.get(4).map(String::as_str) == Some("stamps");
    let mut committed = Vec::new();
    for i in 0..ops {
        let t0 = Instant::now();
        let req = CheckpointRequest {
            step: Some(format!("w{i}")),
            ..Default::default()
        };
        if l.checkpoint(&a[1], req, &Mutation::default()).is_err() {
            errors += 1;
        }
        if stamps {
            committed.push(now());
        }
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let end = now();
    println!(
        "{start} {end} {:.0} {:.0} {errors}",
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0)
    );
    for (i, ns) in committed.iter().enumerate() {
        println!("w{i} {ns}");
    }
}

fn run_writers(db: &Path, ids: &[String], ops: usize) -> (f64, f64, f64, usize) {
    let start_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 1500;
    let children: Vec<_> = ids
        .iter()
        .map(|id| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--writer",
                    db.to_str().unwrap(),
                    id,
                    &ops.to_string(),
                    &start_at.to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut s0, mut e1, mut p99, mut worst, mut errors) = (i64::MAX, 0i64, 0f64, 0f64, 0usize);
    let mut p99s = Vec::new();
    for c in children {
        let out = String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap();
        let f: Vec<&str> = out.split_whitespace().collect();
        s0 = s0.min(f[0].parse().unwrap());
        e1 = e1.max(f[1].parse().unwrap());
        p99s.push(f[2].parse::<f64>().unwrap());
        worst = worst.max(f[3].parse().unwrap());
        errors += f[4].parse::<usize>().unwrap();
    }
    p99 = p99.max(pct(&mut p99s, 0.5));
    let rate = (ids.len() * ops) as f64 / ((e1 - s0) as f64 / 1e9);
    (rate, p99, worst, errors)
}

fn writers_section(dir: &Path) {
    let db = dir.join("writers.db");
    let (l, _) = (Ledger::open(LedgerOptions::at(&db)).unwrap(), ());
    let ids: Vec<String> = (0..32)
        .map(|i| {
            l.create_session(CreateSession::titled(format!("w{i}")))
                .unwrap()
                .session_id
                .to_string()
        })
        .collect();
    drop(l);
    let mut singles = Vec::new();
    let mut many = Vec::new();
    // The order alternates: a run that follows another starts with its WAL
    // and dirty pages, which slows whichever goes second.
    for round in 0..6 {
        if round % 2 == 0 {
            singles.push(run_writers(&db, &ids[..1], 8_000));
            many.push(run_writers(&db, &ids, 400));
        } else {
            many.push(run_writers(&db, &ids, 400));
            singles.push(run_writers(&db, &ids[..1], 8_000));
        }
    }
    let single = median(singles.iter().map(|r| r.0).collect());
    let agg = median(many.iter().map(|r| r.0).collect());
    let p99 = median(many.iter().map(|r| r.1).collect());
    let worst = many.iter().map(|r| r.2).fold(0.0, f64::max);
    let errors: usize = many.iter().chain(singles.iter()).map(|r| r.3).sum();
    println!("## 32 writer processes on one file, synchronous=NORMAL\n");
    println!("Each process: one `Ledger`, checkpoints on its own session; 6 interleaved rounds (alternating which goes first), median. The single-writer rate is one such process alone, measured in the same run.\n");
    println!("| | ops/s | ratio |\n|---|---|---|");
    println!("| 1 writer process | {single:.0} | 1.00 |");
    println!(
        "| 32 writer processes, aggregate | {agg:.0} | {:.2} |",
        agg / single
    );
    println!("\n32 writers: median per-process p99 {p99:.0} µs; worst single wait {:.1} ms; errors escaping: {errors}\n", worst / 1000.0);
}

// ------------------------------------------------------------------ list

fn generate(path: &Path, n: i64) {
    drop(
        Ledger::open(LedgerOptions {
            sync: SyncMode::Normal,
            ..LedgerOptions::at(path)
        })
        .unwrap(),
    );
    let c = Connection::open(path).unwrap();
    c.pragma_update(None, "synchronous", "OFF").unwrap();
    c.execute_batch("BEGIN").unwrap();
    c.execute(
        "WITH RECURSIVE x(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM x WHERE i < ?1)
         INSERT INTO sessions (insert_seq, session_id, status, title, app, agent_id, tags, actor_type, rev, created_at_ms, updated_at_ms, ended_at_ms)
         SELECT i, printf('ses_%08x%08x', i, (i * 2654435761) % 4294967296),
                CASE WHEN i % 10 < 6 THEN 'active' WHEN i % 10 = 6 THEN 'paused' WHEN i % 10 = 7 THEN 'completed' WHEN i % 10 = 8 THEN 'failed' ELSE 'cancelled' END,
                'session ' || i, 'app' || (i % 50), 'agent' || (i % 200), CASE WHEN i % 10 = 0 THEN '[\"t\"]' ELSE '[]' END, 'lib', 1,
                1700000000000 + i * 10, 1700000000000 + i * 10 + (i % 1000),
                CASE WHEN i % 10 >= 7 THEN 1700000000000 + i * 10 ELSE NULL END
         FROM x",
        [n],
    )
    .unwrap();
    c.execute_batch(
        "INSERT INTO session_data (insert_seq, session_id) SELECT insert_seq, session_id FROM sessions;
         INSERT INTO session_tags (tag, created_at_ms, insert_seq, session_id) SELECT 't', created_at_ms, insert_seq, session_id FROM sessions WHERE tags <> '[]';
         INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, prev_hash, hash) SELECT session_id, 0, 'created', created_at_ms, 'lib', 'session created', zeroblob(32), randomblob(32) FROM sessions;
         COMMIT; PRAGMA wal_checkpoint(TRUNCATE);",
    )
    .unwrap();
}

fn time_list(l: &Ledger, q: &ListSessions, reps: usize) -> Vec<f64> {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            let p = l.list_sessions(q).unwrap();
            std::hint::black_box(p);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

fn list_section(dir: &Path) {
    let n: i64 = std::env::var("LOGBOOK_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let db = dir.join("list.db");
    let t = Instant::now();
    generate(&db, n);
    let gen = t.elapsed();
    let l = Ledger::open(LedgerOptions::at(&db)).unwrap();
    println!("## `session list` on {n} sessions\n");
    println!("(dataset generated in {:.1} s; limit 20; 1,000 repetitions each; library calls, whole sessions returned)\n", gen.as_secs_f64());
    println!("| query | p50 µs | p99 µs |\n|---|---|---|");
    let cases: Vec<(&str, ListSessions)> = vec![
        ("no filter", ListSessions::default()),
        (
            "--status active",
            ListSessions {
                statuses: vec![SessionStatus::Active],
                ..Default::default()
            },
        ),
        (
            "--status active --app app7 (a pair with no rows)",
            ListSessions {
                statuses: vec![SessionStatus::Active],
                app: Some("app7".into()),
                ..Default::default()
            },
        ),
        (
            "--agent agent42",
            ListSessions {
                agent_id: Some("agent42".into()),
                ..Default::default()
            },
        ),
        (
            "--tag t",
            ListSessions {
                tag: Some("t".into()),
                ..Default::default()
            },
        ),
        (
            "--order updated",
            ListSessions {
                order_updated: true,
                ..Default::default()
            },
        ),
        (
            "--order updated --status active",
            ListSessions {
                order_updated: true,
                statuses: vec![SessionStatus::Active],
                ..Default::default()
            },
        ),
    ];
    for (name, q) in cases {
        let mut v = time_list(&l, &q, 1000);
        println!(
            "| {name} | {:.0} | {:.0} |",
            pct(&mut v, 0.5),
            pct(&mut v, 0.99)
        );
    }
    // A cursor walk: page 1 against page 500, same filter.
    let q = ListSessions {
        statuses: vec![SessionStatus::Active],
        ..Default::default()
    };
    let mut cursor = None;
    for _ in 0..499 {
        cursor = l
            .list_sessions(&ListSessions {
                cursor: cursor.clone(),
                ..q.clone()
            })
            .unwrap()
            .next_cursor;
    }
    let deep = ListSessions {
        cursor,
        ..q.clone()
    };
    let (mut p1, mut p500) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        p1.extend(time_list(&l, &q, 200));
        p500.extend(time_list(&l, &deep, 200));
    }
    let (m1, m500) = (pct(&mut p1, 0.5), pct(&mut p500, 0.5));
    println!("\nCursor walk, `--status active`: page 1 p50 {m1:.0} µs, page 500 p50 {m500:.0} µs (ratio {:.2})\n", m500 / m1);
}

// ------------------------------------------------------------------- CLI

fn peak_rss_kib_of_children() -> i64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a rusage struct into the pointer we own.
    unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, ru.as_mut_ptr());
        ru.assume_init().ru_maxrss
    }
}

fn time_cmd(mut c: Command) -> f64 {
    let t = Instant::now();
    let out = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(out.success());
    t.elapsed().as_secs_f64() * 1e3
}

fn cli_section(dir: &Path) {
    let bin = env!("CARGO_BIN_EXE_logbook");
    let db: PathBuf = dir.join("cli.db");
    let lb = |args: &[&str]| {
        let mut c = Command::new(bin);
        c.arg("--db").arg(&db).args(args);
        c
    };
    let out = lb(&[
        "session",
        "create",
        "--title",
        "cli bench",
        "--app",
        "a",
        "--json",
    ])
    .output()
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["data"]["session_id"].as_str().unwrap().to_owned();
    for i in 0..20 {
        lb(&[
            "session",
            "checkpoint",
            &id,
            "--step",
            &format!("s{i}"),
            "--note",
            "a note",
        ])
        .output()
        .unwrap();
    }
    for _ in 0..3 {
        lb(&["session", "list", "--json"]).output().unwrap();
        lb(&["session", "show", &id, "--json"]).output().unwrap();
    }
    let rss = peak_rss_kib_of_children();
    let sql = format!(
        "SELECT * FROM sessions WHERE session_id = '{id}'; SELECT * FROM events WHERE session_id = '{id}' ORDER BY seq;"
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        ours.push(time_cmd(lb(&["session", "show", &id, "--json"])));
        let mut c = Command::new("sqlite3");
        c.arg("-json").arg(&db).arg(&sql);
        theirs.push(time_cmd(c));
    }
    let (o, t) = (median(ours), median(theirs));
    println!("## Whole-process CLI\n");
    println!("`logbook session show ID --json` (20 events) against `sqlite3 -json DB \"SELECT … WHERE session_id=…\"` (session row and its events), 200 alternating runs each, median.\n");
    println!("| command | ms | ratio |\n|---|---|---|");
    println!("| sqlite3 -json | {t:.2} | 1.00 |");
    println!("| logbook session show --json | {o:.2} | {:.2} |", o / t);
    println!(
        "\nPeak RSS of any logbook command above (create, checkpoint, list, show): {:.1} MiB\n",
        rss as f64 / 1024.0
    );
}

// ------------------------------------------------------------ hash chain

/// The library's checkpoint transaction, statement for statement (its own
/// SQL constants), on a schema at V1 (no chain) or V2 (chain): the only
/// difference is the chain's work — the previous hash read, SHA-256, 64
/// more bytes per row, the trigger's link check.
fn chain_db(path: &Path, chained: bool) -> (Connection, Vec<String>) {
    let c = Connection::open(path).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "synchronous", "NORMAL").unwrap();
    // Checkpoints run between trials (chain_section), not inside them.
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    c.pragma_update(
        None,
        "cache_size",
        -i64::from(logbook::ledger::DEFAULT_PAGE_CACHE_KIB),
    )
    .unwrap();
    c.execute_batch(include_str!("../migrations/sqlite/V1__core_ledger.sql"))
        .unwrap();
    if chained {
        c.execute_batch(include_str!(
            "../migrations/sqlite/V2__event_hash_chain.sql"
        ))
        .unwrap();
    }
    c.execute_batch("BEGIN").unwrap();
    let mut ids = Vec::new();
    for i in 0..10_000i64 {
        let id = format!("ses_{i:016x}");
        c.execute(
            "INSERT INTO sessions (session_id, status, title, app, actor_type, rev, created_at_ms, updated_at_ms) \
             VALUES (?1, 'active', ?2, ?3, 'lib', 1, ?4, ?4)",
            params![id, format!("session {i}"), format!("app{}", i % 7), i],
        )
        .unwrap();
        chain_insert(&c, &id, "created", None, chained);
        ids.push(id);
    }
    c.execute_batch("COMMIT").unwrap();
    (c, ids)
}

fn chain_insert(c: &Connection, id: &str, typ: &str, data: Option<&str>, chained: bool) {
    use logbook::store::sqlite::sql::events as ev;
    if chained {
        let e = ev::NewEvent {
            session_id: id,
            event_type: typ,
            actor_type: logbook::ActorType::Lib,
            detail: Some("a short note"),
            data,
            idempotency: None,
            run_id: None,
        };
        ev::insert_event(c, &e).unwrap();
    } else {
        // V1's statements: no hash column, no previous-hash subquery.
        let (seq, at): (i64, i64) = c
            .prepare_cached(
                "SELECT (SELECT coalesce(max(e.seq) + 1, 0) FROM events e \
                 WHERE e.session_id = s.session_id), s.updated_at_ms FROM sessions s WHERE s.session_id = ?1",
            )
            .unwrap()
            .query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        c.prepare_cached(
            "INSERT INTO events (session_id, seq, type, at_ms, actor_type, detail, data, run_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .unwrap()
        .execute(params![
            id,
            seq,
            typ,
            at,
            "lib",
            "a short note",
            data,
            Option::<&str>::None
        ])
        .unwrap();
    }
}

fn chain_checkpoint(c: &Connection, id: &str, n: usize, chained: bool) {
    c.prepare_cached("BEGIN IMMEDIATE")
        .unwrap()
        .execute([])
        .unwrap();
    // The checkpoint's guarded UPDATE, as the write kernel builds it.
    let guard = logbook::store::SessionGuard {
        from: logbook::model::Verb::Checkpoint.allowed_from(),
        rev: None,
    };
    let change = logbook::store::SessionChange {
        now_ms: 2_000_000_000_000i64 + n as i64,
        checkpoint_at_next_seq: true,
        ..Default::default()
    };
    let (sql, p) = logbook::store::sqlite::tx::session_update(id, guard, &change);
    let changed = c
        .prepare_cached(&sql)
        .unwrap()
        .execute(rusqlite::params_from_iter(p.iter()))
        .unwrap();
    assert_eq!(changed, 1);
    let data = format!("{{\"step\":\"step {n}\"}}");
    chain_insert(c, id, "checkpoint", Some(&data), chained);
    c.prepare_cached("COMMIT").unwrap().execute([]).unwrap();
}

fn chain_section(dir: &Path) {
    let (plain, ids) = chain_db(&dir.join("chain-v1.db"), false);
    let (chained, _) = chain_db(&dir.join("chain-v2.db"), true);
    let ops = 4_000;
    let mut rng = Lcg(23);
    let (mut v1, mut v2) = (Vec::new(), Vec::new());
    let mut n = 0;
    for _trial in 0..7 {
        for (conn, rates, on) in [(&plain, &mut v1, false), (&chained, &mut v2, true)] {
            let t = Instant::now();
            for _ in 0..ops {
                n += 1;
                chain_checkpoint(conn, &ids[rng.next(ids.len())], n, on);
            }
            rates.push(ops as f64 / t.elapsed().as_secs_f64());
            // Outside the timing: a tens-of-ms autocheckpoint landing in one
            // trial and not in the next would swamp a µs-level difference.
            // RESTART keeps the WAL file's size, so no trial pays for growing it.
            conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
                .unwrap();
        }
    }
    let (r1, r2) = (median(v1), median(v2));
    // The same work through the whole library, for scale.
    let (lib, lib_ids) = lib_open(&dir.join("chain-lib.db"), SyncMode::Normal);
    let t = Instant::now();
    for i in 0..ops {
        let req = CheckpointRequest {
            step: Some(format!("step {i}")),
            note: Some("a short note".into()),
            ..Default::default()
        };
        lib.checkpoint(&lib_ids[rng.next(lib_ids.len())], req, &Mutation::default())
            .unwrap();
    }
    let lib_rate = ops as f64 / t.elapsed().as_secs_f64();
    let extra_us = (1.0 / r2 - 1.0 / r1) * 1e6;
    println!("## Hash chain overhead on the checkpoint path, synchronous=NORMAL\n");
    println!("The checkpoint transaction with the library's own statements and page cache size, on a V1 schema (no chain) and a V2 schema (chain); 10,000 sessions, random session per op; 7 interleaved trials of {ops} ops, median; the WAL is checkpointed between trials, outside the timing.\n");
    println!("| | ops/s | ratio |\n|---|---|---|");
    println!("| checkpoint transaction, no chain (V1) | {r1:.0} | 1.00 |");
    println!(
        "| checkpoint transaction with the chain (V2) | {r2:.0} | {:.3} |",
        r2 / r1
    );
    println!(
        "\nOverhead: {:.1}% of the bare transaction ({extra_us:.1} µs per op); {:.1}% of a whole `Ledger::checkpoint` ({lib_rate:.0} ops/s here).\n",
        (r1 / r2 - 1.0) * 100.0,
        extra_us / (1e6 / lib_rate) * 100.0
    );
}

// ------------------------------------------------------------ follow

fn follow_section(dir: &Path) {
    use std::collections::HashMap;
    use std::io::BufRead;
    let db = dir.join("follow.db");
    let l = Ledger::open(LedgerOptions::at(&db)).unwrap();
    let ids: Vec<String> = (0..8)
        .map(|i| {
            l.create_session(CreateSession::titled(format!("f{i}")))
                .unwrap()
                .session_id
                .to_string()
        })
        .collect();
    let after = "8";
    drop(l);
    let mut follower = Command::new(env!("CARGO_BIN_EXE_logbook"))
        .args([
            "--db",
            db.to_str().unwrap(),
            "events",
            "--follow",
            "--json",
            "--after",
            after,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = follower.stdout.take().unwrap();
    let ops = 400usize;
    let total = ops * ids.len();
    let reader = std::thread::spawn(move || {
        let mut seen: HashMap<(String, String), i64> = HashMap::new();
        let mut lines = 0usize;
        for line in std::io::BufReader::new(out).lines() {
            let at = wall_ns();
            lines += 1;
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            let key = (
                v["session_id"].as_str().unwrap().to_owned(),
                v["data"]["step"].as_str().unwrap_or_default().to_owned(),
            );
            assert!(seen.insert(key, at).is_none(), "an event was printed twice");
            if seen.len() == total {
                break;
            }
        }
        assert_eq!(lines, total);
        seen
    });
    let start_at = wall_ns() / 1_000_000 + 1500;
    let children: Vec<_> = ids
        .iter()
        .map(|id| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--writer",
                    db.to_str().unwrap(),
                    id,
                    &ops.to_string(),
                    &start_at.to_string(),
                    "stamps",
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut commits: Vec<((String, String), i64)> = Vec::new();
    let mut span = (i64::MAX, 0i64);
    for (c, id) in children.into_iter().zip(&ids) {
        let out = String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap();
        let mut lines = out.lines();
        let f: Vec<i64> = lines
            .next()
            .unwrap()
            .split_whitespace()
            .take(2)
            .map(|x| x.parse().unwrap())
            .collect();
        span = (span.0.min(f[0]), span.1.max(f[1]));
        for l in lines {
            let (step, ns) = l.split_once(' ').unwrap();
            commits.push(((id.clone(), step.to_owned()), ns.parse().unwrap()));
        }
    }
    let seen = reader.join().unwrap();
    let _ = follower.kill();
    let _ = follower.wait();
    let mut lat: Vec<f64> = commits
        .iter()
        .map(|(k, c)| (seen[k] - c) as f64 / 1e6)
        .collect();
    let rate = total as f64 / ((span.1 - span.0) as f64 / 1e9);
    println!("## Follow latency under 8 writer processes\n");
    println!("`logbook events --follow --json` (a separate process, polling `PRAGMA data_version` every 5 ms) while 8 writer processes commit {ops} checkpoints each as fast as they can ({rate:.0} commits/s in all, synchronous=NORMAL). Latency: from the writer's commit returning to the follower's line arriving on a pipe; {total} events, all seen exactly once.\n");
    println!(
        "| p50 | p99 | max |\n|---|---|---|\n| {:.2} ms | {:.2} ms | {:.2} ms |\n",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0)
    );
}

fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

// ---------------------------------------------------------------- import

/// `--rss-of CMD ARGS…`: runs one command and prints its wall time (ms)
/// and peak RSS (KiB), so each measurement has a fresh RUSAGE_CHILDREN.
fn rss_of(a: &[String]) {
    let t = Instant::now();
    let st = Command::new(&a[0])
        .args(&a[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "{a:?}");
    println!(
        "{} {}",
        t.elapsed().as_secs_f64() * 1e3,
        peak_rss_kib_of_children()
    );
}

/// Wall ms and peak RSS KiB of `logbook ARGS…`, measured in a fresh child.
fn measure(args: &[&str]) -> (f64, f64) {
    let me = std::env::current_exe().unwrap();
    let out = Command::new(me)
        .arg("--rss-of")
        .arg(env!("CARGO_BIN_EXE_logbook"))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut it = text.split_whitespace().map(|x| x.parse::<f64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// An Amber tree of `n` sessions × `events` timeline lines.
fn amber_tree(root: &Path, n: usize, events: usize) {
    for i in 0..n {
        let uuid = format!("00000000-0000-4000-8000-{i:012x}");
        let dir = root.join(".amber/sessions").join(&uuid);
        std::fs::create_dir_all(&dir).unwrap();
        let manifest = serde_json::json!({
            "sessionId": uuid, "goal": format!("fix bug {i}\nwith details"),
            "route": "bugfix-quick", "state": "completed", "currentStage": "verify",
            "createdAt": "2026-06-21T10:00:00Z", "usage": {"tokens": 15000, "durationMs": 1800, "apiCalls": 42},
            "mode": "interactive"
        });
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
        let mut tl = String::new();
        for e in 0..events {
            let t = match e {
                0 => "session_created",
                1 => "session_started",
                _ if e + 1 == events => "session_completed",
                _ if e % 2 == 0 => "stage_started",
                _ => "stage_completed",
            };
            tl.push_str(&format!(
                "{{\"type\":\"{t}\",\"timestamp\":\"2026-06-21T10:{:02}:{:02}Z\",\"stage\":\"s{}\"}}\n",
                e / 60,
                e % 60,
                e / 2
            ));
        }
        std::fs::write(dir.join("timeline.jsonl"), tl).unwrap();
    }
}

fn import_section(dir: &Path) {
    const EVENTS: usize = 20;
    println!("## Import: time and peak RSS against input size\n");
    println!("Generated Amber trees ({EVENTS} timeline events per session) imported with `logbook import --format amber` into an empty DB (synchronous=FULL), then that DB's `export --format jsonl` imported into another empty DB; each run in a fresh process, peak RSS from `getrusage(RUSAGE_CHILDREN)`.\n");
    println!("| input | sessions | events | wall s | sessions/s | peak RSS MiB |\n|---|---|---|---|---|---|");
    for n in [1_000usize, 10_000] {
        let root = dir.join(format!("amber-{n}"));
        amber_tree(&root, n, EVENTS);
        let db = dir.join(format!("import-amber-{n}.db"));
        let (ms, kib) = measure(&[
            "--db",
            db.to_str().unwrap(),
            "import",
            "--format",
            "amber",
            root.to_str().unwrap(),
        ]);
        let row = |what: &str, ms: f64, kib: f64| {
            println!(
                "| {what} | {n} | {} | {:.2} | {:.0} | {:.1} |",
                n * EVENTS,
                ms / 1e3,
                n as f64 / (ms / 1e3),
                kib / 1024.0
            );
        };
        row("amber", ms, kib);
        let file = dir.join(format!("export-{n}.jsonl"));
        let (ems, ekib) = measure(&[
            "--db",
            db.to_str().unwrap(),
            "export",
            "--format",
            "jsonl",
            "--out",
            file.to_str().unwrap(),
        ]);
        let db2 = dir.join(format!("import-jsonl-{n}.db"));
        let (jms, jkib) = measure(&[
            "--db",
            db2.to_str().unwrap(),
            "import",
            "--format",
            "jsonl",
            file.to_str().unwrap(),
        ]);
        let mib = std::fs::metadata(&file).unwrap().len() as f64 / (1024.0 * 1024.0);
        row(&format!("jsonl ({mib:.1} MiB)"), jms, jkib);
        row("export jsonl", ems, ekib);
        let _ = std::fs::remove_dir_all(&root);
    }
    println!();
}

// ------------------------------------------------------------------ runs

/// One run lifecycle through the library: create → start → 10 usage
/// updates → complete (13 mutations, each one transaction).
fn lib_lifecycle(l: &Ledger, session: &str) {
    use logbook::{CreateRun, RunUsageDelta};
    let m = Mutation::default();
    let input = serde_json::json!({"messages": [{"role": "user", "content": "Hello"}]});
    let req = CreateRun {
        input: Some(input),
        metadata: None,
    };
    let run = l.create_run(session, req, &m).unwrap().run_id.to_string();
    l.start_run(&run, &m).unwrap();
    for _ in 0..10 {
        let d = RunUsageDelta {
            input_tokens: Some(120),
            output_tokens: Some(40),
            api_calls: Some(1),
        };
        l.record_run_usage(&run, d, &m).unwrap();
    }
    let out = serde_json::json!({"content": "Hello!", "stop_reason": "end_turn"});
    l.complete_run(&run, Some(out), &m).unwrap();
}

fn cli_lifecycle(lb: &dyn Fn(&[&str]) -> Command, session: &str) {
    let out = lb(&["run", "create", session, "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = v["data"]["run_id"].as_str().unwrap().to_owned();
    assert!(lb(&["run", "start", &run])
        .output()
        .unwrap()
        .status
        .success());
    for _ in 0..10 {
        let args = [
            "run",
            "usage",
            &run,
            "--input-tokens",
            "120",
            "--output-tokens",
            "40",
            "--api-calls",
            "1",
        ];
        assert!(lb(&args).output().unwrap().status.success());
    }
    assert!(lb(&["run", "complete", &run])
        .output()
        .unwrap()
        .status
        .success());
}

fn runs_section(dir: &Path) {
    // Library, synchronous=FULL (the default): interleaved trials of
    // checkpoints and run lifecycles on the same handle and file.
    let l = Ledger::open(LedgerOptions::at(dir.join("runs-lib.db"))).unwrap();
    let sessions: Vec<String> = (0..100)
        .map(|i| {
            let req = CreateSession::titled(format!("runs {i}"));
            l.create_session(req).unwrap().session_id.to_string()
        })
        .collect();
    let (mut cp_rates, mut life_rates) = (Vec::new(), Vec::new());
    let mut n = 0;
    for _trial in 0..5 {
        let t = Instant::now();
        for k in 0..260 {
            n += 1;
            let req = CheckpointRequest {
                step: Some(format!("step {n}")),
                note: Some("a short note".into()),
                ..Default::default()
            };
            l.checkpoint(&sessions[k % 100], req, &Mutation::default())
                .unwrap();
        }
        cp_rates.push(260.0 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for k in 0..20 {
            lib_lifecycle(&l, &sessions[k % 100]);
        }
        life_rates.push(20.0 / t.elapsed().as_secs_f64());
    }
    let (cp, life) = (median(cp_rates), median(life_rates));

    // CLI: one process per command.
    let bin = env!("CARGO_BIN_EXE_logbook");
    let db: PathBuf = dir.join("runs-cli.db");
    let lb = |args: &[&str]| {
        let mut c = Command::new(bin);
        c.arg("--db")
            .arg(&db)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        c
    };
    let out = lb(&["session", "create", "--title", "runs cli", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = v["data"]["session_id"].as_str().unwrap().to_owned();
    let (mut ccp, mut clife) = (Vec::new(), Vec::new());
    for _trial in 0..3 {
        let t = Instant::now();
        for i in 0..39 {
            let step = format!("s{i}");
            assert!(lb(&["session", "checkpoint", &s, "--step", &step])
                .output()
                .unwrap()
                .status
                .success());
        }
        ccp.push(39.0 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..3 {
            cli_lifecycle(&lb, &s);
        }
        clife.push(3.0 / t.elapsed().as_secs_f64());
    }
    let (ccp, clife) = (median(ccp), median(clife));
    println!("## Runs\n");
    println!("A run lifecycle is create → start → 10 usage updates → complete: 13 mutations, each one `BEGIN IMMEDIATE` transaction that changes the run, bumps the session's rev and appends one chained `run_*` event. Measured against checkpoints (the core mutation) on the same file in the same run, synchronous=FULL; library: 5 interleaved trials (260 checkpoints, 20 lifecycles), CLI: 3 interleaved trials (39 checkpoint processes, 3 lifecycles = 39 processes), medians.\n");
    println!("| path | lifecycles/s | mutations/s | checkpoints/s | mutation rate / checkpoint rate |\n|---|---|---|---|---|");
    println!(
        "| library (`Ledger`) | {life:.1} | {:.0} | {cp:.0} | {:.2} |",
        life * 13.0,
        life * 13.0 / cp
    );
    println!(
        "| CLI (one process per command) | {clife:.2} | {:.1} | {ccp:.1} | {:.2} |\n",
        clife * 13.0,
        clife * 13.0 / ccp
    );
}

// ------------------------------------------------------------- dashboard

/// `v_sessions` dashboard queries from a plain SQLite connection (as a
/// dashboard reads the file), on the generated 1,000,000 sessions: idle,
/// then while 8 writer processes commit checkpoints.
fn dashboard_section(dir: &Path) {
    let n: i64 = std::env::var("LOGBOOK_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let db = dir.join("dashboard.db");
    generate(&db, n);
    let ids: Vec<String> = {
        let c = Connection::open(&db).unwrap();
        let mut st = c
            .prepare("SELECT session_id FROM sessions WHERE status = 'active' ORDER BY insert_seq DESC LIMIT 8")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let queries = [
        ("active, most recently updated first", "SELECT session_id, title, app, updated_at, last_event_type, event_count, total_tokens FROM v_sessions WHERE +status = 'active' ORDER BY updated_at_ms DESC, insert_seq DESC LIMIT 20"),
        ("status + app, newest created first", "SELECT session_id, title, updated_at, last_event_type, event_count FROM v_sessions WHERE status = 'active' AND app = 'app1' ORDER BY created_at_ms DESC, insert_seq DESC LIMIT 20"),
    ];
    let reader =
        Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    reader.busy_timeout(Duration::from_secs(5)).unwrap();
    let time_one = |q: &str| -> f64 {
        let t = Instant::now();
        let mut st = reader.prepare_cached(q).unwrap();
        let rows = st.query_map([], |_| Ok(())).unwrap().count();
        assert_eq!(rows, 20);
        t.elapsed().as_secs_f64() * 1e3
    };
    let mut idle: Vec<Vec<f64>> = queries
        .iter()
        .map(|(_, q)| (0..500).map(|_| time_one(q)).collect())
        .collect();
    // Now with 8 writer processes committing as fast as they can.
    let start_at = wall_ns() / 1_000_000 + 1000;
    let children: Vec<_> = ids
        .iter()
        .map(|id| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--writer",
                    db.to_str().unwrap(),
                    id,
                    "3000",
                    &start_at.to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    while wall_ns() / 1_000_000 < start_at + 100 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut busy: Vec<Vec<f64>> = vec![Vec::new(); queries.len()];
    for _ in 0..500 {
        for (i, (_, q)) in queries.iter().enumerate() {
            busy[i].push(time_one(q));
        }
    }
    let mut commits = 0usize;
    let mut errors = 0usize;
    for c in children {
        let out = String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap();
        let f: Vec<&str> = out.split_whitespace().collect();
        commits += 3000;
        errors += f[4].parse::<usize>().unwrap();
    }
    println!("## Dashboard queries on `v_sessions`, {n} sessions, beside 8 writers\n");
    println!("A plain read-only SQLite connection runs each query 500 times idle, then 500 times while 8 writer processes commit {commits} checkpoints (synchronous=NORMAL; {errors} writer errors).\n");
    println!("| query | idle p50 | idle p99 | with writers p50 | with writers p99 | p99 ratio |\n|---|---|---|---|---|---|");
    for (i, (name, _)) in queries.iter().enumerate() {
        let (ip50, ip99) = (pct(&mut idle[i], 0.5), pct(&mut idle[i], 0.99));
        let (bp50, bp99) = (pct(&mut busy[i], 0.5), pct(&mut busy[i], 0.99));
        println!(
            "| {name} | {ip50:.3} ms | {ip99:.3} ms | {bp50:.3} ms | {bp99:.3} ms | {:.2} |",
            bp99 / ip99
        );
    }
    println!();
}
