//! An idle follower on a server (BENCHMARKS.md, "PostgreSQL", "An idle
//! follower"): the CPU a `logbook events --follow` process and its server
//! backend use while nothing is written, then how late it prints each of 20
//! events written one at a time after a quiet spell (400–800 ms, a fixed
//! sequence). `LOGBOOK_BENCH_FOLLOWER=PATH` measures another build of the
//! binary the same way (e.g. the previous commit's, for a before/after).

use super::{db_url, drop_db, fresh_db, pct, wall_ns, Config};
use logbook::{CheckpointRequest, CreateSession, FeedQuery, Ledger, LedgerOptions, Mutation};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// CPU time of process `pid` so far (user + system), in seconds.
fn cpu_s(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line.
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY-free: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

pub fn section(cfg: &Config, admin: &mut postgres::Client) {
    let db = "lbbench_idle";
    fresh_db(admin, db);
    let url = db_url(&cfg.base, db);
    let (id, cursor) = {
        let lg = Ledger::open(LedgerOptions::at(&url)).unwrap();
        let s = lg.create_session(CreateSession::titled("idle")).unwrap();
        let page = lg.feed(&FeedQuery::default()).unwrap();
        (s.value.session_id.to_string(), page.next_cursor)
    };
    let bin = std::env::var("LOGBOOK_BENCH_FOLLOWER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_logbook").to_owned());
    let mut follower = Command::new(&bin)
        .args(["events", "--follow", "--json", "--after", &cursor])
        .env("LOGBOOK_DB", &url)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send((wall_ns(), line)).is_err() {
                break;
            }
        }
    });
    // Settled: connected, its first read done, backed off.
    std::thread::sleep(Duration::from_secs(2));
    let backend: i32 = admin
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&db],
        )
        .unwrap()
        .get(0);
    let pid = i32::try_from(follower.id()).unwrap();
    let idle_s = cfg.secs * 5.0;
    let (f0, b0) = (cpu_s(pid), cpu_s(backend));
    std::thread::sleep(Duration::from_secs_f64(idle_s));
    let (f1, b1) = (cpu_s(pid), cpu_s(backend));
    let pct_of = |a: f64, b: f64| (b - a) * 100.0 / idle_s;
    let (fcpu, bcpu) = (pct_of(f0, f1), pct_of(b0, b1));

    let lg = Ledger::open(LedgerOptions::at(&url)).unwrap();
    let mut lat = Vec::new();
    for i in 0..20u64 {
        std::thread::sleep(Duration::from_millis(400 + (i * 137) % 400));
        let step = format!("q{i}");
        let req = CheckpointRequest {
            step: Some(step.clone()),
            ..Default::default()
        };
        lg.checkpoint(&id, req, &Mutation::default()).unwrap();
        let ack = wall_ns();
        let (at, line) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(line.contains(&format!("\"step\":\"{step}\"")), "{line}");
        lat.push((at - ack) as f64 / 1e6);
    }
    drop(lg);
    let _ = follower.kill();
    let _ = follower.wait();
    reader.join().unwrap();
    println!("## An idle follower\n");
    println!(
        "`logbook events --follow --json` ({bin}) on a database where nothing is written: CPU over {idle_s} s after 2 s of settling, as a share of one core (from /proc), for the follower and its server backend; then 20 checkpoints written one at a time after a quiet spell of 400–800 ms each, latency from `checkpoint()` returning to the follower's line arriving on the bench's pipe.\n"
    );
    println!(
        "| follower CPU | backend CPU | p50 | p99 | max |\n|---|---|---|---|---|\n| {fcpu:.2}% | {bcpu:.2}% | {:.2} ms | {:.2} ms | {:.2} ms |\n",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0)
    );
    drop_db(admin, db);
}
