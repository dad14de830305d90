//! The workflow rows in JSON Lines (docs/import-export.md): runs, budgets, snapshots and
//! gates export and import back byte-identically, sessions whose end
//! cancelled their runs round-trip, and a malformed run, budget, snapshot or
//! gate rejects its session whole.

use crate::common::*;
use crate::transfer::{
    assert_counts, export_jsonl, import_ok, import_rejecting, rows_anywhere, with_id,
};
use serde_json::{json, Value};

fn run_id_of(r: Value) -> String {
    r["run_id"].as_str().unwrap().to_owned()
}

/// Two sessions with every V3/V4 row export and import carry.
///
/// A (ends failed): a budget crossed under `warn`, two runs (one completed
/// with usage, a turn and an output; one failed), two snapshots, an
/// approved gate and a rejected one (which fails the session).
/// B (stays active, so it can be restored): a snapshot, a budget, a
/// completed run, a running run and a pending one.
fn workflow_ledger(env: &TestEnv) -> (String, String) {
    let a = env.create_with(&["--title", "workflow", "--stage", "plan"]);
    env.json(&[
        "session",
        "budget",
        &a,
        "--max-tokens",
        "10",
        "--on-exceed",
        "warn",
    ])
    .data();
    env.json(&[
        "session",
        "checkpoint",
        &a,
        "--step",
        "plan",
        "--state",
        r#"{"z":[1,2],"a":{"k":"v"}}"#,
    ])
    .data();
    let r1 = run_id_of(
        env.json(&["run", "create", &a, "--input", r#"{"prompt":"hi","n":2}"#])
            .data(),
    );
    env.json(&["run", "start", &r1]).data();
    env.json(&[
        "run",
        "usage",
        &r1,
        "--input-tokens",
        "6",
        "--output-tokens",
        "5",
        "--api-calls",
        "2",
    ])
    .data();
    env.json(&["run", "turn", &r1]).data();
    env.json(&["run", "complete", &r1, "--output", r#"{"answer":42}"#])
        .data();
    let r2 = run_id_of(env.json(&["run", "create", &a]).data());
    env.json(&[
        "run",
        "fail",
        &r2,
        "--code",
        "provider_timeout",
        "--message",
        "timed out\nafter 30 s",
    ])
    .data();
    env.json(&[
        "session",
        "checkpoint",
        &a,
        "--step",
        "build",
        "--state",
        r#"{"built":true}"#,
    ])
    .data();
    env.json(&[
        "gate",
        "open",
        &a,
        "--gate",
        "review",
        "--kind",
        "user-approval",
    ])
    .data();
    env.json(&["gate", "approve", &a, "--gate", "review", "--note", "lgtm"])
        .data();
    env.json(&[
        "gate",
        "open",
        &a,
        "--gate",
        "deploy",
        "--kind",
        "step-confirm",
    ])
    .data();
    env.json(&[
        "gate",
        "reject",
        &a,
        "--gate",
        "deploy",
        "--reason",
        "too risky",
    ])
    .data();

    let b = env.create_with(&["--title", "live", "--stage", "s1"]);
    env.json(&["session", "budget", &b, "--max-api-calls", "100"])
        .data();
    env.json(&[
        "session",
        "checkpoint",
        &b,
        "--step",
        "one",
        "--state",
        r#"{"restored":"yes"}"#,
    ])
    .data();
    let done = run_id_of(env.json(&["run", "create", &b]).data());
    env.json(&["run", "start", &done]).data();
    env.json(&["run", "complete", &done]).data();
    let running = run_id_of(env.json(&["run", "create", &b]).data());
    env.json(&["run", "start", &running]).data();
    env.json(&["run", "create", &b]).data();
    (a, b)
}

fn gate_list(env: &TestEnv, id: &str) -> Value {
    env.json(&["gate", "list", id]).data()
}

fn budget_check(env: &TestEnv, id: &str) -> Value {
    env.json(&["session", "budget", id, "--check"]).data()
}

#[test]
fn jsonl_carries_runs_budgets_snapshots_and_gates_byte_identically() {
    let src = TestEnv::new();
    let (a, b) = workflow_ledger(&src);
    assert_eq!(
        src.json(&["session", "show", &a]).data()["session"]["status"],
        "failed"
    );
    let first = export_jsonl(&src);
    let file = src.dir.path().join("wf.jsonl");
    std::fs::write(&file, &first).unwrap();
    let line_a: Value = serde_json::from_str(
        first
            .lines()
            .find(|l| l.contains(&format!("\"session_id\":\"{a}\"")))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(line_a["runs"].as_array().unwrap().len(), 2);
    assert_eq!(line_a["snapshots"].as_array().unwrap().len(), 2);
    assert_eq!(line_a["gates"].as_array().unwrap().len(), 2);
    assert!(line_a["budget"]["exceeded_at_ms"].is_i64());
    assert!(line_a.get("leases").is_none());

    let dst = TestEnv::new();
    assert_counts(&import_ok(&dst, "jsonl", &file), 2, 0, 0);
    assert_eq!(export_jsonl(&dst), first);
    assert_eq!(dst.json(&["verify"]).code, 0);

    for id in [&a, &b] {
        let strip = |t: String| {
            let mut v: Value = serde_json::from_str(&t).unwrap();
            for e in v["data"]["events"].as_array_mut().unwrap() {
                e["event_id"] = Value::Null;
            }
            v
        };
        assert_eq!(strip(src.show(id)), strip(dst.show(id)), "{id}");
        assert_eq!(
            src.json(&["run", "list", id]).data(),
            dst.json(&["run", "list", id]).data(),
            "{id}"
        );
        assert_eq!(budget_check(&src, id), budget_check(&dst, id), "{id}");
        assert_eq!(gate_list(&src, id), gate_list(&dst, id), "{id}");
        assert_eq!(
            src.json(&["session", "checkpoints", id]).data(),
            dst.json(&["session", "checkpoints", id]).data(),
            "{id}"
        );
    }
    let runs = dst.json(&["run", "list", &a]).data();
    let runs = runs.as_array().unwrap();
    assert_eq!(
        (runs[0]["status"].as_str(), runs[1]["status"].as_str()),
        (Some("completed"), Some("failed"))
    );
    assert_eq!(runs[0]["output"], json!({"answer": 42}));
    assert_eq!(
        runs[0]["usage"],
        json!({"input_tokens": 6, "output_tokens": 5, "api_calls": 2})
    );
    let r1 = runs[0]["run_id"].as_str().unwrap();
    assert_eq!(
        dst.json(&["run", "show", r1]).data(),
        src.json(&["run", "show", r1]).data()
    );
    let bc = budget_check(&dst, &a);
    assert_eq!(
        (bc["exceeded"].as_bool(), bc["on_exceed"].as_str()),
        (Some(true), Some("warn"))
    );
    let gl = gate_list(&dst, &a);
    let st: Vec<&str> = gl["gates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["status"].as_str().unwrap())
        .collect();
    assert_eq!(st, ["approved", "rejected"]);
    let active = dst.json(&["run", "active", &b]).data();
    assert_eq!(active["status"], "running");

    // The imported snapshots serve restore (live B) and fork (failed A).
    let cps = dst.json(&["session", "checkpoints", &b]).data();
    let seq = cps["checkpoints"][0]["seq"].as_i64().unwrap().to_string();
    let r = dst
        .json(&["session", "restore", &b, "--checkpoint", &seq])
        .data();
    assert_eq!(r["context"], json!({"restored": "yes"}));
    assert_eq!(r["stage"], "s1");
    let cps = dst.json(&["session", "checkpoints", &a]).data();
    let seq = cps["checkpoints"][0]["seq"].as_i64().unwrap().to_string();
    let child = dst
        .json(&["session", "fork", &a, "--checkpoint", &seq])
        .data();
    assert_eq!(child["context"], json!({"z": [1, 2], "a": {"k": "v"}}));
    assert_eq!(child["stage"], "plan");
    // The imported runs and budget keep working on the live session.
    let pending = dst.json(&["run", "list", &b]).data()[2]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let running = active["run_id"].as_str().unwrap().to_owned();
    dst.json(&["run", "complete", &running]).data();
    dst.json(&["run", "start", &pending]).data();
    assert_eq!(dst.json(&["verify"]).code, 0);
    // No lease was carried.
    let leases = dst.scalar("SELECT count(*) FROM session_leases");
    assert_eq!(leases, 0);

    // A second import skips both and changes nothing.
    let before = export_jsonl(&dst);
    assert_counts(&import_ok(&dst, "jsonl", &file), 0, 2, 0);
    assert_eq!(export_jsonl(&dst), before);
}

/// Rows of a session in the V3/V4 tables.
fn workflow_rows(env: &TestEnv, id: &str) -> i64 {
    [
        "SELECT count(*) FROM runs WHERE session_id = $1",
        "SELECT count(*) FROM session_budgets WHERE session_id = $1",
        "SELECT count(*) FROM session_snapshots WHERE session_id = $1",
        "SELECT count(*) FROM session_gates WHERE session_id = $1",
        "SELECT count(*) FROM session_leases WHERE session_id = $1",
    ]
    .iter()
    .map(|q| env.rows(q, &[id])[0][0].as_i64().unwrap())
    .sum()
}

#[test]
fn a_malformed_run_budget_snapshot_or_gate_rejects_its_session_whole() {
    let src = TestEnv::new();
    let (a, _) = workflow_ledger(&src);
    let out = src.run(&["export", "--format", "jsonl", "--session", &a]);
    let g: Value = serde_json::from_str(out.stdout.trim()).unwrap();

    let env = TestEnv::new();
    let mut lines: Vec<String> = Vec::new();
    let mut cases: Vec<(u32, &str)> = Vec::new();
    let mut case = |n: u32, field: &'static str, f: &dyn Fn(&mut Value)| {
        let mut v = with_id(g.clone(), n);
        f(&mut v);
        lines.push(v.to_string());
        cases.push((n, field));
    };
    case(1, "runs[1].run_id", &|v| {
        v["runs"][1]["run_id"] = json!("run_XYZ");
    });
    case(2, "runs[0].status", &|v| {
        v["runs"][0]["status"] = json!("done");
    });
    case(3, "runs[0].usage.input_tokens", &|v| {
        v["runs"][0]["usage"]["input_tokens"] = json!(9_007_199_254_740_992_i64);
    });
    case(4, "runs[1].error_code", &|v| {
        v["runs"][1]["error_code"] = Value::Null;
    });
    case(5, "runs[0].output", &|v| {
        v["runs"][0]["output"] = json!({"k": "x".repeat(4 * 1024 * 1024)});
    });
    case(6, "budget.on_exceed", &|v| {
        v["budget"]["on_exceed"] = json!("explode");
    });
    case(7, "snapshots[0].state", &|v| {
        v["snapshots"][0]["state"] = json!({"tampered": true});
    });
    case(8, "snapshots[1].seq", &|v| {
        v["snapshots"][1]["seq"] = json!(1);
    });
    case(9, "gates[1].outcome", &|v| {
        v["gates"][1]["outcome"] = Value::Null;
    });
    case(10, "gates[0].opened_seq", &|v| {
        v["gates"][0]["opened_seq"] = json!(0);
    });
    case(11, "runs[0].session_id", &|v| {
        v["runs"][0]["session_id"] = json!("x");
    });
    // A run id held by a session of the same input already imported.
    case(12, "runs[0].run_id", &|_| {});
    let file = env.dir.path().join("bad-wf.jsonl");
    // Line 12's session must come after the good one holding the same runs:
    // put a good copy (id 13) first.
    let good = with_id(g.clone(), 13).to_string();
    let mut all = vec![good];
    all.extend(lines.iter().cloned());
    std::fs::write(&file, all.join("\n") + "\n").unwrap();

    let (_, d) = import_rejecting(&env, "jsonl", &file);
    assert_counts(&d, 1, 0, cases.len() as u64);
    let got: Vec<(u64, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(u64, String)> = cases
        .iter()
        .enumerate()
        .map(|(i, (_, f))| (i as u64 + 2, (*f).to_owned()))
        .collect();
    assert_eq!(got, want, "{d}");
    for (n, _) in &cases {
        let id = format!("ses_{n:016x}");
        assert_eq!(
            rows_anywhere(&env, &id) + workflow_rows(&env, &id),
            0,
            "{n}"
        );
    }
    assert_eq!(
        workflow_rows(&env, &format!("ses_{:016x}", 13)),
        2 + 1 + 2 + 2
    );
    assert_eq!(env.json(&["verify"]).code, 0);

    // An older line (no runs, budget, snapshots or gates keys) still imports.
    let mut old = with_id(g.clone(), 14);
    for k in ["runs", "budget", "snapshots", "gates"] {
        old.as_object_mut().unwrap().remove(k);
    }
    for e in old["events"].as_array_mut().unwrap() {
        e["run_id"] = Value::Null;
    }
    let ofile = env.dir.path().join("old.jsonl");
    std::fs::write(&ofile, old.to_string() + "\n").unwrap();
    assert_counts(&import_ok(&env, "jsonl", &ofile), 1, 0, 0);
    assert_eq!(workflow_rows(&env, &format!("ses_{:016x}", 14)), 0);
}

/// Found by adversarial testing: runs that a session's end cancelled carry
/// a SESSION_ENDED error, and their sessions must round-trip too — through
/// cancel, fail, a gate rejection, and a budget `fail`.
#[test]
fn sessions_whose_end_cancelled_their_runs_round_trip() {
    let env = TestEnv::new();
    let mut ids = Vec::new();
    for end in ["cancel", "fail", "gate", "budget"] {
        let s = env.create(end);
        let r1 = env.json(&["run", "create", &s]).data()["run_id"]
            .as_str()
            .unwrap()
            .to_owned();
        env.json(&["run", "start", &r1]);
        env.json(&["run", "create", &s]);
        match end {
            "cancel" => assert_eq!(
                env.json(&["session", "cancel", &s, "--reason", "stop"])
                    .code,
                0
            ),
            "fail" => assert_eq!(
                env.json(&["session", "fail", &s, "--reason", "broke"]).code,
                0
            ),
            "gate" => {
                env.json(&["gate", "open", &s, "--gate", "g", "--kind", "user-approval"]);
                assert_eq!(
                    env.json(&["gate", "reject", &s, "--gate", "g", "--reason", "no"])
                        .code,
                    0
                );
            }
            _ => {
                env.json(&[
                    "session",
                    "budget",
                    &s,
                    "--max-tokens",
                    "10",
                    "--on-exceed",
                    "fail",
                ]);
                assert_eq!(
                    env.json(&["run", "usage", &r1, "--input-tokens", "11"])
                        .code,
                    0
                );
            }
        }
        ids.push(s);
    }
    let first = export_jsonl(&env);
    assert!(first.contains("SESSION_ENDED"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("e.jsonl");
    std::fs::write(&file, &first).unwrap();
    let other = TestEnv::new();
    assert_counts(&import_ok(&other, "jsonl", &file), 4, 0, 0);
    assert_eq!(export_jsonl(&other), first);
    assert_eq!(other.json(&["verify"]).code, 0);
}

/// A snapshot's payload (schema V11) exports as hex and imports back byte
/// for byte; a `payload_hex` that does not match what its checkpoint event
/// records — altered, dropped, added, not hex — rejects its session whole.
#[test]
fn a_snapshot_payload_round_trips_and_a_mismatched_one_is_rejected() {
    let src = TestEnv::new();
    let l = src.ledger();
    let s = l
        .create_session(logbook::CreateSession::titled("payload"))
        .unwrap()
        .session_id
        .to_string();
    let payload: Vec<u8> = (0..=255u8).rev().chain([0, 0]).collect();
    let m = logbook::Mutation::default();
    for p in [Some(payload.clone()), None] {
        let req = logbook::CheckpointRequest {
            state: Some(json!({"n": 1})),
            payload: p,
            ..Default::default()
        };
        l.checkpoint(&s, req, &m).unwrap();
    }
    let first = export_jsonl(&src);
    let line: Value = serde_json::from_str(first.trim()).unwrap();
    assert_eq!(line["snapshots"][0]["payload_hex"], hex::encode(&payload));
    assert!(line["snapshots"][1].get("payload_hex").is_none(), "{line}");

    let dst = TestEnv::new();
    let file = dst.dir.path().join("payload.jsonl");
    std::fs::write(&file, &first).unwrap();
    assert_counts(&import_ok(&dst, "jsonl", &file), 1, 0, 0);
    assert_eq!(export_jsonl(&dst), first);
    let back = dst.ledger().snapshot(&s, Some(1)).unwrap();
    assert_eq!(back.payload, Some(payload.clone()));
    assert_eq!(dst.json(&["verify"]).code, 0);

    let env = TestEnv::new();
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: [(u32, &str, Edit); 4] = [
        (
            1,
            "snapshots[0].payload_hex",
            Box::new(|v: &mut Value| {
                v["snapshots"][0]["payload_hex"] = json!("00");
            }),
        ),
        (
            2,
            "snapshots[0].payload_hex",
            Box::new(|v: &mut Value| {
                v["snapshots"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("payload_hex");
            }),
        ),
        (
            3,
            "snapshots[1].payload_hex",
            Box::new(|v: &mut Value| {
                v["snapshots"][1]["payload_hex"] = json!("00ff");
            }),
        ),
        (
            4,
            "snapshots[0].payload_hex",
            Box::new(|v: &mut Value| {
                v["snapshots"][0]["payload_hex"] = json!("0g");
            }),
        ),
    ];
    let lines: Vec<String> = cases
        .iter()
        .map(|(n, _, f)| {
            let mut v = with_id(line.clone(), *n);
            f(&mut v);
            v.to_string()
        })
        .collect();
    let bad = env.dir.path().join("bad-payload.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let (_, d) = import_rejecting(&env, "jsonl", &bad);
    assert_counts(&d, 0, 0, 4);
    let fields: Vec<&str> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["field"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = cases.iter().map(|c| c.1).collect();
    assert_eq!(fields, want, "{d}");
    let n: i64 = env.scalar("SELECT count(*) FROM session_snapshots");
    assert_eq!(n, 0);
}

/// A reset records the session's input and output tokens together as the
/// budget's token base, which can pass 2^53−1 (each count is up to it):
/// the export imports back byte-identically; a base past 2 × (2^53−1) is
/// refused.
#[test]
fn a_token_base_past_2_pow_53_round_trips() {
    let src = TestEnv::new();
    let id = src.create("huge");
    let max = "9007199254740991";
    src.json(&[
        "session",
        "usage",
        &id,
        "--input-tokens",
        max,
        "--output-tokens",
        max,
    ])
    .data();
    src.json(&[
        "session",
        "budget",
        &id,
        "--max-tokens",
        "5",
        "--on-exceed",
        "warn",
    ])
    .data();
    src.json(&["session", "budget", &id, "--reset"]).data();
    let first = export_jsonl(&src);
    let line: Value = serde_json::from_str(first.trim()).unwrap();
    assert_eq!(
        line["budget"]["base_tokens"],
        json!(18_014_398_509_481_982_i64)
    );
    let file = src.dir.path().join("huge.jsonl");
    std::fs::write(&file, &first).unwrap();
    let dst = TestEnv::new();
    assert_counts(&import_ok(&dst, "jsonl", &file), 1, 0, 0);
    assert_eq!(export_jsonl(&dst), first);
    assert_eq!(budget_check(&src, &id), budget_check(&dst, &id));

    let mut past = line;
    past["budget"]["base_tokens"] = json!(18_014_398_509_481_983_i64);
    std::fs::write(&file, format!("{past}\n")).unwrap();
    let other = TestEnv::new();
    let (_, details) = import_rejecting(&other, "jsonl", &file);
    assert!(
        details.to_string().contains("budget.base_tokens"),
        "{details}"
    );
    assert_eq!(rows_anywhere(&other, &id), 0);
}
