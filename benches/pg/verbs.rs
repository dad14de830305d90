//! Gate, lease, budget, reference, run-ending and create writes on a server
//! (BENCHMARKS.md, "PostgreSQL", "Gates, leases, budgets, references and ends as
//! one statement"): each
//! cycle of verbs timed with idempotency keys (one statement each:
//! docs/postgres.md, "One round trip per write") and without (the
//! transaction), on one `Ledger` in this process, the two interleaved, the
//! median of the rounds.

use super::{drop_db, fresh_db, median, Config};
use logbook::{
    CheckpointRequest, CreateRun, CreateSession, GateKind, Ledger, LedgerOptions, LockRequest,
    Mutation, SetBudget,
};
use std::time::Instant;

/// One cycle's verbs on a fresh session (created outside the timing).
#[derive(Clone, Copy)]
enum Cycle {
    /// `gate open` (blocking) then `gate approve`: 2 writes.
    Gate,
    /// `lock` then `unlock`: 2 writes (`lock` takes no key either way).
    Lease,
    /// `budget` on a session without one: 1 write.
    Budget,
    /// `budget` on a session that has one (set outside the timing), then
    /// `budget --reset`: 2 writes.
    BudgetChange,
    /// `lock` over a lease expired (taken outside the timing): 1 write;
    /// `lock` takes no key, so the unkeyed trial sends `--if-rev`, which
    /// takes the transaction.
    Takeover,
    /// `checkpoint` linking two plan ids and an operation id: 1 write.
    Refs,
    /// `complete` with two runs open: 1 write (the runs created outside
    /// the timing).
    EndWithRuns,
    /// `complete` with no run: 1 write.
    End,
    /// `session create`: 1 write (one statement with a key or without).
    Create,
    /// `session create --parent` (the cycle's session): 1 write (one
    /// statement with a key or without).
    CreateChild,
}

impl Cycle {
    const ALL: [Cycle; 10] = [
        Cycle::Gate,
        Cycle::Lease,
        Cycle::Budget,
        Cycle::BudgetChange,
        Cycle::Takeover,
        Cycle::Refs,
        Cycle::End,
        Cycle::EndWithRuns,
        Cycle::Create,
        Cycle::CreateChild,
    ];

    fn name(self) -> &'static str {
        match self {
            Cycle::Gate => "gate open + approve",
            Cycle::Lease => "lock + unlock (lock: one statement both ways)",
            Cycle::Budget => "budget (new)",
            Cycle::BudgetChange => "budget (changed) + budget --reset",
            Cycle::Takeover => "lock over an expired lease (no key: `--if-rev`)",
            Cycle::Refs => "checkpoint with 3 references",
            Cycle::EndWithRuns => "complete with 2 open runs",
            Cycle::End => "complete with no run",
            Cycle::Create => "create (one statement both ways)",
            Cycle::CreateChild => "create with a parent (one statement both ways)",
        }
    }

    fn writes(self) -> f64 {
        match self {
            Cycle::Gate | Cycle::Lease | Cycle::BudgetChange => 2.0,
            _ => 1.0,
        }
    }
}

/// Runs `n` cycles of `c` (keyed or not) on fresh sessions; the time of the
/// verbs alone, ms per write.
fn time_cycles(l: &Ledger, c: Cycle, keyed: bool, n: usize, tag: &str) -> f64 {
    let m = |k: &str| Mutation {
        idempotency_key: keyed.then(|| k.to_owned()),
        ..Mutation::default()
    };
    let mut spent = 0.0;
    for i in 0..n {
        let id = l
            .create_session(CreateSession::titled("pg bench verbs"))
            .unwrap()
            .session_id
            .to_string();
        if matches!(c, Cycle::EndWithRuns) {
            for r in 0..2 {
                l.create_run(&id, CreateRun::default(), &Mutation::default())
                    .unwrap_or_else(|e| panic!("run {r}: {e}"));
            }
        }
        let k = |s: &str| format!("{tag}-{i}-{s}");
        let mut rev = None;
        match c {
            Cycle::BudgetChange => {
                let b = SetBudget {
                    max_tokens: Some(1000),
                    ..SetBudget::default()
                };
                l.set_budget(&id, b, &m(&k("b0"))).unwrap();
            }
            Cycle::Takeover => {
                let short = LockRequest {
                    ttl_ms: Some(1),
                    ..LockRequest::default()
                };
                let lease = l.lock(&id, &short, &Mutation::default()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
                rev = (!keyed).then_some(lease.session.rev);
            }
            _ => {}
        }
        let t = Instant::now();
        match c {
            Cycle::Gate => {
                l.open_gate(&id, "deploy", GateKind::UserApproval, &m(&k("o")))
                    .unwrap();
                l.approve_gate(&id, "deploy", None, &m(&k("a"))).unwrap();
            }
            Cycle::Lease => {
                let lease = l
                    .lock(&id, &LockRequest::default(), &Mutation::default())
                    .unwrap();
                l.unlock(&id, &lease.token, &m(&k("u"))).unwrap();
            }
            Cycle::Budget => {
                let b = SetBudget {
                    max_tokens: Some(1000),
                    ..SetBudget::default()
                };
                l.set_budget(&id, b, &m(&k("b"))).unwrap();
            }
            Cycle::BudgetChange => {
                let b = SetBudget {
                    max_api_calls: Some(50),
                    ..SetBudget::default()
                };
                l.set_budget(&id, b, &m(&k("b"))).unwrap();
                l.reset_budget(&id, &m(&k("r"))).unwrap();
            }
            Cycle::Takeover => {
                let over = Mutation {
                    if_rev: rev,
                    ..Mutation::default()
                };
                let taken = l.lock(&id, &LockRequest::default(), &over).unwrap();
                assert!(taken.taken_over_from.is_some());
            }
            Cycle::Refs => {
                let req = CheckpointRequest {
                    step: Some("s".into()),
                    plan_ids: vec!["plan-1".into(), "plan-2".into()],
                    operation_ids: vec!["op-1".into()],
                    ..CheckpointRequest::default()
                };
                l.checkpoint(&id, req, &m(&k("c"))).unwrap();
            }
            Cycle::EndWithRuns | Cycle::End => {
                l.complete(&id, "done", &m(&k("d"))).unwrap();
            }
            Cycle::Create | Cycle::CreateChild => {
                let req = CreateSession {
                    parent_session_id: matches!(c, Cycle::CreateChild).then(|| id.clone()),
                    idempotency_key: m(&k(if matches!(c, Cycle::Create) { "n" } else { "p" }))
                        .idempotency_key,
                    ..CreateSession::titled("pg bench create")
                };
                l.create_session(req).unwrap();
            }
        }
        spent += t.elapsed().as_secs_f64();
    }
    spent * 1000.0 / (n as f64 * c.writes())
}

pub fn section(cfg: &Config, admin: &mut postgres::Client) {
    let db = "lbbench_verbs";
    fresh_db(admin, db);
    let l = Ledger::open(LedgerOptions::at(super::db_url(&cfg.base, db))).unwrap();
    let n = 200;
    // Warm: every statement prepared on the connection, both ways.
    for c in Cycle::ALL {
        time_cycles(&l, c, true, 3, "warm-key");
        time_cycles(&l, c, false, 3, "warm");
    }
    println!(
        "## Gate, lease and budget verbs: one statement (key) against the transaction (no key)\n"
    );
    println!("One process, one `Ledger` handle; each cycle on a fresh session (created outside the timing), {n} cycles per trial, keyed and unkeyed trials interleaved, {} rounds, median ms per write.\n", cfg.rounds);
    println!("| verbs | key: ms per write | no key: ms per write | no key / key |");
    println!("|---|---|---|---|");
    for c in Cycle::ALL {
        let (mut keyed, mut plain) = (Vec::new(), Vec::new());
        for round in 0..cfg.rounds {
            let tag = format!("r{round}");
            if round % 2 == 0 {
                keyed.push(time_cycles(&l, c, true, n, &tag));
                plain.push(time_cycles(&l, c, false, n, &tag));
            } else {
                plain.push(time_cycles(&l, c, false, n, &tag));
                keyed.push(time_cycles(&l, c, true, n, &tag));
            }
        }
        let (k, p) = (median(keyed), median(plain));
        println!("| {} | {k:.3} | {p:.3} | {:.2} |", c.name(), p / k);
    }
    println!();
    drop(l);
    drop_db(admin, db);
}
