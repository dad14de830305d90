//! Run verbs on a server (BENCHMARKS.md, "PostgreSQL", "Run verbs"): each
//! client records usage on a running run of its own, `record_run_usage`
//! with an idempotency key (one statement: docs/postgres.md, "One round
//! trip per write") and without one (the transaction), beside LangGraph's
//! `PostgresSaver.put` on the same server, at 1 and 8 client processes.

use super::{drop_db, lg_versions, median, run_trial, Config, Kind, Trial};
use logbook::ledger::RunUsageDelta;
use logbook::{CreateRun, CreateSession, Ledger, Mutation};
use std::collections::HashMap;
use std::io::{Read, Write};

/// A client of mode `usage` or `usage-keyed` (`a`: mode, database, seconds).
pub fn writer(l: &Ledger, a: &[String]) {
    let keyed = a[0] == "usage-keyed";
    let secs: f64 = a[2].parse().unwrap();
    let id = l
        .create_session(CreateSession::titled("pg bench runs"))
        .unwrap()
        .session_id
        .to_string();
    let run = l
        .create_run(&id, CreateRun::default(), &Mutation::default())
        .unwrap()
        .run_id
        .to_string();
    l.start_run(&run, &Mutation::default()).unwrap();
    let op = |step: String| -> logbook::Result<()> {
        let m = Mutation {
            idempotency_key: keyed.then(|| format!("{run}-{step}")),
            ..Mutation::default()
        };
        let add = RunUsageDelta {
            input_tokens: Some(100),
            output_tokens: Some(20),
            api_calls: Some(1),
        };
        l.record_run_usage(&run, add, &m).map(drop)
    };
    for i in 0..3 {
        op(format!("warm{i}")).unwrap();
    }
    println!("ready {id}");
    std::io::stdout().flush().unwrap();
    let mut go = [0u8; 1];
    std::io::stdin().read_exact(&mut go).unwrap();
    super::measure(secs, false, op);
}

pub fn section(cfg: &Config, admin: &mut postgres::Client) {
    let (lb, lg) = ("lbbench_runs", "lbbench_runs_langgraph");
    let py = super::writer_dbs(cfg, admin, lb, lg);
    let procs = [1usize, 8];
    let kinds = [Kind::KeyedUsage, Kind::LangGraph, Kind::Usage];
    let mut res: HashMap<(Kind, usize), Vec<Trial>> = HashMap::new();
    for round in 0..cfg.rounds {
        for &n in &procs {
            for k in 0..kinds.len() {
                let kind = kinds[(k + round) % kinds.len()];
                let db = if kind == Kind::LangGraph { lg } else { lb };
                let t = run_trial(n, || super::client(kind, db, cfg, false, &py));
                res.entry((kind, n)).or_default().push(t);
            }
        }
    }
    let med = |kind: Kind, n: usize, f: fn(&Trial) -> f64| {
        median(res[&(kind, n)].iter().map(f).collect())
    };
    let errors: usize = res.values().flatten().map(|t| t.errors).sum();
    println!("## Run verbs: usage on a running run, 1 and 8 client processes\n");
    println!("Each process: one `Ledger` handle, a running run of its own session, `record_run_usage` (100 input, 20 output tokens, 1 call) in a loop; LangGraph: `PostgresSaver.put` as in the writers section ({}). {} rounds, trials interleaved, median of the rounds. Errors: {errors}.\n", lg_versions(&py), cfg.rounds);
    println!("| processes | usage (key) ops/s | p50 ms | usage (no key) ops/s | p50 ms | LangGraph put ops/s | p50 ms | usage (key) / put | usage (key) / usage (no key) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &n in &procs {
        let (k, u, g) = (
            med(Kind::KeyedUsage, n, |t| t.rate),
            med(Kind::Usage, n, |t| t.rate),
            med(Kind::LangGraph, n, |t| t.rate),
        );
        println!(
            "| {n} | {k:.0} | {:.2} | {u:.0} | {:.2} | {g:.0} | {:.2} | {:.2} | {:.2} |",
            med(Kind::KeyedUsage, n, |t| t.p50_ms),
            med(Kind::Usage, n, |t| t.p50_ms),
            med(Kind::LangGraph, n, |t| t.p50_ms),
            k / g,
            k / u
        );
    }
    println!();
    drop_db(admin, lb);
    drop_db(admin, lg);
}
