//! The retention benchmark behind BENCHMARKS.md, "Retention".
//!
//! Run: `cargo bench --bench purge` (SQLite; ≈ 3 minutes on 2 cores after
//! the build). `LOGBOOK_BENCH_SESSIONS` (default `25000,100000`) lists the
//! ledger sizes, each of that many ended sessions × 20 events plus 4 live
//! ones; `LOGBOOK_BENCH_WRITERS` (default 4) writer processes checkpoint
//! their own live sessions throughout.
//!
//! For each size: the ledger is imported (the `logbook` binary, release),
//! then the writers start; they run 2 s alone (the baseline), then `logbook
//! purge --yes --json` of every ended session runs beside them, then 2 s
//! alone again. Reported: the purge's wall time and peak RSS (wait4 on its
//! pid), its longest batch (BEGIN to COMMIT, from its report), the file's
//! size before, with the freed pages still in it, and after the incremental
//! vacuum; and the writers' worst single checkpoint during the purge
//! against their worst in the baseline windows of the same run.

use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EVENTS: usize = 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--writer") {
        writer(&args[2]);
        return;
    }
    let sizes: Vec<usize> = std::env::var("LOGBOOK_BENCH_SESSIONS")
        .unwrap_or_else(|_| "25000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let writers: usize = std::env::var("LOGBOOK_BENCH_WRITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    println!("# logbook purge benchmark\n");
    println!(
        "machine: {} cores; SQLite (bundled), synchronous=FULL; {EVENTS} events per session; {writers} writer processes\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| sessions | events | purge wall s | sessions/s | peak RSS MiB | batches | longest batch ms | file before MiB | freed MiB (in file) | file after vacuum MiB | longest vacuum step ms | writer ops | writer errors | worst wait, purge ms | worst wait, baseline ms | ratio |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes {
        run(n, writers);
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_logbook")
}

/// JSON Lines of `n` completed sessions of `EVENTS` events each.
fn seed_file(path: &Path, n: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let t0: i64 = 1_700_000_000_000;
    for i in 0..n {
        let id = format!("ses_{:016x}", 0x5eed_0000_0000_0000u64 + i as u64);
        let at = t0 + i as i64;
        let mut evs = vec![format!(
            r#"{{"seq":0,"type":"created","at_ms":{at},"actor_type":"lib","detail":"session created","data":null,"run_id":null,"hash":""}}"#
        )];
        for s in 1..EVENTS - 1 {
            evs.push(format!(
                r#"{{"seq":{s},"type":"checkpoint","at_ms":{at},"actor_type":"lib","detail":null,"data":{{"step":"step {s} of the seeded work","note":"a note of some length to stand for a real checkpoint"}},"run_id":null,"hash":""}}"#
            ));
        }
        evs.push(format!(
            r#"{{"seq":{},"type":"completed","at_ms":{at},"actor_type":"lib","detail":"done","data":null,"run_id":null,"hash":""}}"#,
            EVENTS - 1
        ));
        writeln!(
            f,
            r#"{{"format":"logbook.session.v1","session_id":"{id}","status":"completed","title":"seeded {i}","goal":null,"app":"old","agent_id":null,"route":null,"stage":null,"parent_session_id":null,"tags":[],"context":{{}},"metadata":{{}},"actor":{{"type":"lib","id":null,"authenticated":false}},"rev":{EVENTS},"checkpoint_seq":{},"refs":[],"final_result":"done","end_reason":null,"usage":{{"input_tokens":0,"output_tokens":0,"api_calls":0,"duration_ms":0}},"created_at_ms":{at},"updated_at_ms":{at},"ended_at_ms":{at},"events":[{}]}}"#,
            EVENTS - 2,
            evs.join(",")
        )
        .unwrap();
    }
    f.flush().unwrap();
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn run(n: usize, writers: usize) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let seed = dir.path().join("seed.jsonl");
    seed_file(&seed, n);
    let ok = Command::new(bin())
        .args(["--db", db.to_str().unwrap(), "import"])
        .arg(&seed)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success(), "import failed");
    std::fs::remove_file(&seed).unwrap();
    let before = std::fs::metadata(&db).unwrap().len();

    // The writers: each its own process and live session.
    let mut kids: Vec<_> = (0..writers)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--writer", db.to_str().unwrap()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outs: Vec<_> = kids
        .iter_mut()
        .map(|k| BufReader::new(k.stdout.take().unwrap()))
        .collect();
    for o in &mut outs {
        let mut l = String::new();
        o.read_line(&mut l).unwrap();
        assert_eq!(l.trim(), "ready");
    }
    let mark = |kids: &mut Vec<std::process::Child>, what: &str| {
        for k in kids.iter_mut() {
            writeln!(k.stdin.as_mut().unwrap(), "{what}").unwrap();
        }
    };
    mark(&mut kids, "baseline");
    std::thread::sleep(Duration::from_secs(2));
    mark(&mut kids, "purge");
    let t = Instant::now();
    // Reaped by wait4 below, which also reads its peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(bin())
        .args([
            "--db",
            db.to_str().unwrap(),
            "purge",
            "--app",
            "old",
            "--yes",
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    let mut status = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: wait4 writes the child's status and rusage into memory we own.
    let rss_kib = unsafe {
        libc::wait4(pid, &mut status, 0, ru.as_mut_ptr());
        ru.assume_init().ru_maxrss
    };
    let wall = t.elapsed().as_secs_f64();
    mark(&mut kids, "baseline");
    std::thread::sleep(Duration::from_secs(2));
    mark(&mut kids, "stop");
    let mut ops = 0u64;
    let mut errors = 0u64;
    let (mut worst_purge, mut worst_base) = (0f64, 0f64);
    for o in &mut outs {
        let mut l = String::new();
        o.read_line(&mut l).unwrap();
        let v: Vec<f64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
        ops += v[0] as u64;
        errors += v[1] as u64;
        worst_base = worst_base.max(v[2]);
        worst_purge = worst_purge.max(v[3]);
    }
    for k in &mut kids {
        k.wait().unwrap();
    }
    let rep: serde_json::Value = serde_json::from_str(text.trim()).expect("purge --json");
    let d = &rep["data"];
    assert_eq!(d["sessions"].as_u64(), Some(n as u64), "{rep}");
    let sp = &d["space"];
    let page = sp["page_size"].as_i64().unwrap_or(4096) as u64;
    let freed = sp["free_pages_before"].as_i64().unwrap_or(0) as u64 * page;
    let after = std::fs::metadata(&db).unwrap().len();
    println!(
        "| {n} | {} | {wall:.1} | {:.0} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {ops} | {errors} | {worst_purge:.1} | {worst_base:.1} | {:.2} |",
        n * EVENTS,
        n as f64 / wall,
        rss_kib as f64 / 1024.0,
        d["batches"],
        d["longest_batch_ms"].as_f64().unwrap_or(0.0),
        mib(before),
        mib(freed),
        mib(after),
        sp["longest_vacuum_ms"].as_f64().unwrap_or(0.0),
        worst_purge / worst_base.max(0.001)
    );
}

/// Child mode: `--writer DB`. Creates a live session, prints `ready`, then
/// checkpoints it as fast as it can, keeping the worst latency of the
/// current phase (`baseline` or `purge`, read from stdin) until `stop`;
/// prints `ops errors worst_baseline_ms worst_purge_ms`.
fn writer(db: &str) {
    let lg = Ledger::open(LedgerOptions::at(db)).unwrap();
    let id = lg
        .create_session(CreateSession::titled("writer beside a purge"))
        .unwrap()
        .session_id
        .to_string();
    println!("ready");
    let phase = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
    let p2 = phase.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let v = match line.unwrap_or_default().trim() {
                "baseline" => 1,
                "purge" => 2,
                _ => 3,
            };
            p2.store(v, std::sync::atomic::Ordering::SeqCst);
        }
        p2.store(3, std::sync::atomic::Ordering::SeqCst);
    });
    let (mut ops, mut errors) = (0u64, 0u64);
    let mut worst = [0f64; 3];
    loop {
        let ph = phase.load(std::sync::atomic::Ordering::SeqCst);
        if ph == 3 {
            break;
        }
        if ph == 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let t = Instant::now();
        let r = lg.checkpoint(
            &id,
            CheckpointRequest {
                step: Some(format!("step {ops}")),
                ..CheckpointRequest::default()
            },
            &Mutation::default(),
        );
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        match r {
            Ok(_) => ops += 1,
            Err(_) => errors += 1,
        }
        let i = usize::from(ph);
        worst[i] = worst[i].max(ms);
    }
    println!("{ops} {errors} {} {}", worst[1], worst[2]);
}
