//! Export and import (issue 3 §4): the fixtures of both seeds, logbook's
//! own JSON Lines round trip, malformed inputs, idempotency and modes.

use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PHELIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/phelix");
const AMBER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/amber");
const AMBER_UUID: &str = "550e8400-e29b-41d4-a716-446655440000";
const SECRET: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

fn amber_id(uuid: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(format!("amber:{uuid}").as_bytes());
    format!("ses_{}", &hex::encode(h)[..16])
}

/// `import --json`: the report of a run that rejected nothing.
#[track_caller]
fn import_ok(env: &TestEnv, format: &str, src: &Path) -> Value {
    let r = env.json(&["import", "--format", format, src.to_str().unwrap()]);
    r.data()
}

/// `import --json` of a run with rejections: exit 2, the report in details.
#[track_caller]
fn import_rejecting(env: &TestEnv, format: &str, src: &Path) -> (Run, Value) {
    let r = env.json(&["import", "--format", format, src.to_str().unwrap()]);
    let err = assert_error(&r, "INVALID_ARGUMENT", 2);
    let details = err["details"].clone();
    (r, details)
}

#[track_caller]
fn assert_counts(report: &Value, imported: u64, skipped: u64, rejected: u64) {
    assert_eq!(
        (
            report["imported"].as_u64().unwrap(),
            report["skipped"].as_u64().unwrap(),
            report["rejected"].as_u64().unwrap()
        ),
        (imported, skipped, rejected),
        "{report}"
    );
}

fn export_jsonl(env: &TestEnv) -> String {
    let r = env.run(&["export", "--format", "jsonl"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
}

/// Rows of a session in every table (all must be 0 for a rejected one).
fn rows_anywhere(env: &TestEnv, id: &str) -> i64 {
    let c = env.sql();
    [
        "SELECT count(*) FROM sessions WHERE session_id = ?1",
        "SELECT count(*) FROM session_data WHERE session_id = ?1",
        "SELECT count(*) FROM session_tags WHERE session_id = ?1",
        "SELECT count(*) FROM session_refs WHERE session_id = ?1",
        "SELECT count(*) FROM events WHERE session_id = ?1",
        "SELECT count(*) FROM idempotency_keys WHERE session_id = ?1",
    ]
    .iter()
    .map(|q| c.query_row(q, [id], |r| r.get::<_, i64>(0)).unwrap())
    .sum()
}

fn table_counts(env: &TestEnv) -> Vec<i64> {
    let c = env.sql();
    [
        "sessions",
        "session_data",
        "session_tags",
        "session_refs",
        "events",
    ]
    .iter()
    .map(|t| {
        c.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
            .unwrap()
    })
    .collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The DB file and its WAL, as bytes (for secret greps).
fn db_bytes(env: &TestEnv) -> Vec<u8> {
    let mut b = std::fs::read(&env.db).unwrap();
    let mut wal = env.db.as_os_str().to_owned();
    wal.push("-wal");
    if let Ok(w) = std::fs::read(PathBuf::from(wal)) {
        b.extend(w);
    }
    b
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn phelix_fixture_imports_verifies_and_exports_back_the_same_content() {
    let env = TestEnv::new();
    let r = import_ok(&env, "phelix", Path::new(PHELIX));
    assert_counts(&r, 2, 0, 0);
    assert_eq!(r["events"], 6);
    assert_eq!(env.json(&["verify"]).code, 0);

    let s = env
        .json(&["session", "show", "ses_1a2b3c4d5e6f7081"])
        .data();
    assert_eq!(s["session"]["status"], "completed");
    assert_eq!(s["session"]["rev"], 4);
    assert_eq!(s["session"]["actor"]["type"], "cli");
    assert_eq!(s["session"]["final_result"], "shipped v3 to 100%");
    // The checkpoint block is kept as given, beside the event it points at
    // (which is kept exactly: see transfer_fidelity.rs); logbook's own
    // checkpoint is read from that event.
    assert_eq!(
        s["session"]["metadata"]["phelix"]["checkpoint"],
        json!({"step": "deploy", "note": "canary at 10%", "at_ms": 1782036300000_i64, "seq": 2})
    );
    assert_eq!(
        s["session"]["checkpoint"],
        json!({"step": null, "note": "step deploy", "at_ms": 1782036300000_i64, "seq": 2})
    );
    assert_eq!(s["session"]["plan_ids"], json!(["pln_7f3a"]));
    let seqs: Vec<i64> = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3]);
    assert_eq!(
        event_types(&env, "ses_1a2b3c4d5e6f7081"),
        ["created", "checkpoint", "checkpoint", "completed"]
    );
    let a = env
        .json(&["session", "show", "ses_00ff00ff00ff00ff"])
        .data();
    assert_eq!(
        (a["session"]["status"].clone(), a["session"]["rev"].clone()),
        (json!("active"), json!(2))
    );
    assert_eq!(a["session"]["actor"]["type"], "mcp");

    // A second import changes nothing.
    let before = (
        env.show("ses_1a2b3c4d5e6f7081"),
        env.show("ses_00ff00ff00ff00ff"),
    );
    let counts = table_counts(&env);
    assert_counts(&import_ok(&env, "phelix", Path::new(PHELIX)), 0, 2, 0);
    assert_eq!(
        before,
        (
            env.show("ses_1a2b3c4d5e6f7081"),
            env.show("ses_00ff00ff00ff00ff")
        )
    );
    assert_eq!(counts, table_counts(&env));

    // Exported under a permissive umask: folders 0700, files 0600, and the
    // same fields and values as the fixture.
    let out = env.dir.path().join("out/phelix");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .arg(bin())
        .args([
            "--db",
            env.db.to_str().unwrap(),
            "export",
            "--format",
            "phelix",
            "--out",
        ])
        .arg(&out)
        .env_clear()
        .env("HOME", env.dir.path())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(mode(&env.dir.path().join("out")), 0o700);
    assert_eq!(mode(&out), 0o700);
    assert_eq!(mode(&out.join("sessions")), 0o700);
    for name in ["ses_1a2b3c4d5e6f7081.json", "ses_00ff00ff00ff00ff.json"] {
        let got = out.join("sessions").join(name);
        assert_eq!(mode(&got), 0o600, "{name}");
        let got: Value = serde_json::from_slice(&std::fs::read(got).unwrap()).unwrap();
        let want: Value = serde_json::from_slice(
            &std::fs::read(Path::new(PHELIX).join("sessions").join(name)).unwrap(),
        )
        .unwrap();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn amber_fixture_maps_ids_states_types_and_keeps_the_rest() {
    let env = TestEnv::new();
    let r = import_ok(&env, "amber", Path::new(AMBER));
    assert_counts(&r, 1, 0, 0);
    assert_eq!(env.json(&["verify"]).code, 0);
    let id = amber_id(AMBER_UUID);
    let s = env.json(&["session", "show", &id]).data();
    let ses = &s["session"];
    assert_eq!(ses["status"], "completed");
    assert_eq!(ses["title"], "fix login bug");
    assert_eq!(ses["goal"], "fix login bug");
    assert_eq!(ses["route"], "bugfix-quick");
    assert_eq!(ses["stage"], "verify");
    assert_eq!(ses["rev"], 10);
    assert_eq!(ses["usage"]["api_calls"], 42);
    assert_eq!(ses["usage"]["duration_ms"], 180000);
    assert_eq!(ses["metadata"]["amber"]["session_id"], AMBER_UUID);
    assert_eq!(ses["metadata"]["amber"]["usage"]["tokens"], 15000);
    assert_eq!(ses["checkpoint"]["step"], "after-repro");
    assert_eq!(ses["checkpoint"]["seq"], 5);
    assert_eq!(
        event_types(&env, &id),
        [
            "created",
            "started",
            "stage_started",
            "gate_opened",
            "gate_approved",
            "checkpoint",
            "stage_completed",
            "stage_started",
            "stage_completed",
            "completed"
        ]
    );
    let ev = &s["events"];
    assert_eq!(ev[0]["at_ms"], 1782036000000_i64);
    assert_eq!(ev[3]["data"], json!({"gateId": "user-approval-fix"}));
    assert_eq!(
        ev[5]["data"]["snapshot"]["manifest"]["currentStage"],
        "reproduce"
    );
    assert_eq!(ev[9]["data"], json!({"status": "success"}));

    // Idempotent: same id, nothing changes.
    let before = env.show(&id);
    assert_counts(&import_ok(&env, "amber", Path::new(AMBER)), 0, 1, 0);
    // The `.amber` and `.amber/sessions` folders work as SRC too.
    let dot = Path::new(AMBER).join(".amber");
    assert_counts(&import_ok(&env, "amber", &dot), 0, 1, 0);
    assert_counts(&import_ok(&env, "amber", &dot.join("sessions")), 0, 1, 0);
    assert_eq!(before, env.show(&id));
}

/// A ledger with sessions in every status, tags, references, context,
/// metadata, custom events, idempotency keys and a parent/child pair.
fn rich_ledger(env: &TestEnv) -> Vec<String> {
    let mut ids = Vec::new();
    let p = env.create_with(&[
        "--title",
        "parent",
        "--app",
        "web",
        "--tag",
        "a",
        "--tag",
        "b",
        "--context",
        r#"{"z":1,"a":{"k":[1,2.5,"x"]}}"#,
        "--metadata",
        r#"{"owner":"ops"}"#,
        "--goal",
        "line one\n\tline two",
        "--route",
        "r",
        "--stage",
        "s",
        "--agent",
        "ag",
    ]);
    env.json(&[
        "session",
        "checkpoint",
        &p,
        "--step",
        "plan",
        "--note",
        "n1",
        "--plan",
        "pln_1",
        "--plan",
        "pln_2",
        "--operation",
        "op_1",
        "--idempotency-key",
        "k1",
    ]);
    env.json(&[
        "session",
        "checkpoint",
        &p,
        "--deployment",
        "dep-1",
        "--plan",
        "pln_3",
    ]);
    env.json(&[
        "session",
        "event",
        &p,
        "--type",
        "x.build",
        "--detail",
        "ok",
        "--data",
        r#"{"b":2,"a":1}"#,
    ]);
    ids.push(p.clone());
    let child = env.create_with(&["--title", "child", "--parent", &p]);
    env.json(&["session", "complete", &child, "--result", "done"]);
    ids.push(child);
    let pending = env.create_with(&["--title", "pending", "--pending"]);
    ids.push(pending);
    let paused = env.create("paused");
    env.json(&["session", "pause", &paused, "--reason", "wait"]);
    ids.push(paused);
    let failed = env.create("failed");
    env.json(&["session", "fail", &failed, "--reason", "boom"]);
    ids.push(failed);
    let cancelled = env.create_with(&["--title", "cancelled", "--pending"]);
    env.json(&["session", "cancel", &cancelled, "--reason", "nope"]);
    ids.push(cancelled);
    ids
}

#[test]
fn jsonl_round_trip_is_byte_identical() {
    let src = TestEnv::new();
    let ids = rich_ledger(&src);
    let first = export_jsonl(&src);
    assert_eq!(first.lines().count(), ids.len());
    let file = src.dir.path().join("x.jsonl");
    std::fs::write(&file, &first).unwrap();

    let dst = TestEnv::new();
    let r = import_ok(&dst, "jsonl", &file);
    assert_counts(&r, 6, 0, 0);
    assert_eq!(dst.json(&["verify"]).code, 0);
    assert_eq!(export_jsonl(&dst), first);
    for id in &ids {
        // Everything but the global event_id cursor is the same.
        let strip = |t: String| {
            let mut v: Value = serde_json::from_str(&t).unwrap();
            for e in v["data"]["events"].as_array_mut().unwrap() {
                e["event_id"] = Value::Null;
            }
            v
        };
        assert_eq!(strip(src.show(id)), strip(dst.show(id)), "{id}");
    }

    // Children before their parents (reversed file) import all the same.
    let reversed: String = first.lines().rev().map(|l| format!("{l}\n")).collect();
    let rfile = src.dir.path().join("rev.jsonl");
    std::fs::write(&rfile, reversed).unwrap();
    let dst2 = TestEnv::new();
    assert_counts(&import_ok(&dst2, "jsonl", &rfile), 6, 0, 0);
    assert_eq!(export_jsonl(&dst2), first);

    // From stdin, in both orders (so one has the child first: it waits in
    // the spill file), and a --out file is 0600 with the same bytes.
    let from_stdin = |src: &Path| {
        let dst = TestEnv::new();
        let mut c = dst.command();
        let db = dst.db.to_str().unwrap().to_owned();
        c.args(["--db", &db, "import", "--format", "jsonl", "-", "--json"]);
        c.stdin(std::fs::File::open(src).unwrap());
        let run: Run = c.output().unwrap().into();
        assert_counts(&run.data(), 6, 0, 0);
        dst
    };
    assert_eq!(export_jsonl(&from_stdin(&rfile)), first);
    let dst3 = from_stdin(&file);
    let out = dst3.dir.path().join("new/dir/e.jsonl");
    let d = dst3
        .json(&[
            "export",
            "--format",
            "jsonl",
            "--out",
            out.to_str().unwrap(),
        ])
        .data();
    assert_eq!(
        (d["sessions"].clone(), d["events"].clone()),
        (json!(6), json!(13))
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), first);
    assert_eq!(mode(&out), 0o600);
    assert_eq!(mode(out.parent().unwrap()), 0o700);

    // A second import skips everything and changes nothing.
    let counts = table_counts(&dst);
    assert_counts(&import_ok(&dst, "jsonl", &file), 0, 6, 0);
    assert_eq!(counts, table_counts(&dst));
    assert_eq!(export_jsonl(&dst), first);
}

#[test]
fn export_selects_sessions_and_refuses_unknown_ones_and_json_to_stdout() {
    let env = TestEnv::new();
    let ids = rich_ledger(&env);
    let r = env.run(&[
        "export",
        "--format",
        "jsonl",
        "--session",
        &ids[2],
        "--session",
        &ids[2],
    ]);
    assert_eq!(r.stdout.lines().count(), 1);
    assert!(r.stdout.contains(&ids[2]));
    let out = env.dir.path().join("none.jsonl");
    let r = env.json(&[
        "export",
        "--format",
        "jsonl",
        "--session",
        "ses_0000000000000000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_error(&r, "SESSION_NOT_FOUND", 3);
    assert!(!out.exists());
    let leftovers = std::fs::read_dir(env.dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp-")
        })
        .count();
    assert_eq!(leftovers, 0);
    assert_error(
        &env.json(&["export", "--format", "jsonl"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_error(
        &env.json(&["export", "--format", "phelix"]),
        "INVALID_ARGUMENT",
        2,
    );
    // `--out -` is stdout, as `-` is stdin for import (it used to write a
    // file named `-` in the working directory); a folder format refuses it.
    let mut c = env.command();
    c.current_dir(env.dir.path())
        .args(["--db", env.path().to_str().unwrap()]);
    let r: Run = c
        .args(["export", "--format", "jsonl", "--out", "-"])
        .output()
        .unwrap()
        .into();
    assert_eq!((r.code, r.stdout), (0, export_jsonl(&env)));
    assert!(!env.dir.path().join("-").exists());
    assert_error(
        &env.json(&["export", "--format", "phelix", "--out", "-"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert!(!env.dir.path().join("-").exists());
}

/// One good exported line, as a JSON value to mutate.
fn good_line() -> Value {
    let env = TestEnv::new();
    let id = env.create("template");
    env.json(&["session", "checkpoint", &id, "--step", "s"]);
    serde_json::from_str(export_jsonl(&env).trim()).unwrap()
}

/// Found by adversarial testing: imports stored secret-looking event types
/// as given (the verb refuses them), dropped unknown keys inside `actor`,
/// `usage` and `refs[i]` silently, named an unknown key shaped like a
/// token, and stored a JSON object's text whose repeated key held a secret. Each line is now rejected on its own, and nothing secret is
/// stored or echoed.
#[test]
fn imports_refuse_secret_event_types_and_unknown_nested_keys() {
    let env = TestEnv::new();
    let g = good_line();
    let token_key = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    let mut lines = Vec::new();
    let mut v = with_id(g.clone(), 1);
    v["events"][1]["type"] = json!("x.sk-abcdefghijklmnopqrstuvwxyz");
    lines.push(v);
    for (n, key) in [(2, "actor"), (3, "usage")] {
        let mut v = with_id(g.clone(), n);
        v[key]["zz"] = json!(1);
        lines.push(v);
    }
    let mut v = with_id(g.clone(), 4);
    v["refs"] = json!([{"kind": "plan", "id": "p1", "linked_seq": 1, "zz": 1}]);
    lines.push(v);
    let mut v = with_id(g.clone(), 5);
    v["usage"][token_key] = json!(1);
    lines.push(v);
    lines.push(with_id(g.clone(), 6));
    let file = env.dir.path().join("in.jsonl");
    let mut text: Vec<String> = lines.iter().map(Value::to_string).collect();
    // A repeated key: the parsed value keeps the last, so the first (a
    // secret) must not survive in the stored text.
    let dup = with_id(g.clone(), 7).to_string().replacen(
        r#""context":{}"#,
        r#""context":{"a":"sk-abcdefghijklmnopqrstuvwxyz","a":1}"#,
        1,
    );
    assert!(dup.contains("sk-abc"));
    text.push(dup);
    std::fs::write(&file, text.join("\n") + "\n").unwrap();
    let (run, d) = import_rejecting(&env, "jsonl", &file);
    assert_counts(&d, 1, 0, 6);
    let got: Vec<(String, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["field"].as_str().unwrap().to_owned(),
                r["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let newer = "is not a field of this format (from a newer logbook?)".to_owned();
    assert_eq!(
        got,
        vec![
            (
                "events[1].type".to_owned(),
                "looks like it holds a secret; event types are stored as given".to_owned()
            ),
            ("actor.zz".to_owned(), newer.clone()),
            ("usage.zz".to_owned(), newer.clone()),
            ("refs[0].zz".to_owned(), newer),
            (
                "usage".to_owned(),
                "holds a key this format does not know (from a newer logbook?); the key is not repeated"
                    .to_owned()
            ),
            (
                "context".to_owned(),
                "has the same key twice in one object".to_owned()
            ),
        ]
    );
    assert!(!run.stdout.contains("abcdefghijklm") && !run.stderr.contains("abcdefghijklm"));
    for n in [1, 2, 3, 4, 5, 7] {
        assert_eq!(rows_anywhere(&env, &format!("ses_{n:016x}")), 0, "line {n}");
    }

    // Amber: a timeline type that maps to a secret-looking `x.amber.` type.
    let root = env.dir.path().join("proj");
    let uuid = "00000000-0000-4000-8000-000000000009";
    amber_session(
        &root,
        uuid,
        "executing",
        "g",
        &[
            json!({"type": "session_created", "timestamp": "2026-06-21T10:00:00Z"}),
            json!({"type": "ghp_abcdefghijklmnopqrstuvwxyz0123", "timestamp": "2026-06-21T10:01:00Z"}),
        ],
    );
    let (_, d) = import_rejecting(&env, "amber", &root);
    assert_counts(&d, 0, 0, 1);
    assert_eq!(d["rejections"][0]["field"], "type");
    assert_eq!(d["rejections"][0]["line"], 2);
    assert_eq!(rows_anywhere(&env, &amber_id(uuid)), 0);
    assert!(!contains(&db_bytes(&env), "abcdefghijklm"));
}

fn with_id(mut v: Value, n: u32) -> Value {
    v["session_id"] = json!(format!("ses_{n:016x}"));
    v
}

#[test]
fn malformed_jsonl_is_rejected_session_by_session() {
    let env = TestEnv::new();
    let g = good_line();
    let mut lines: Vec<String> = Vec::new();
    // 1: good.
    lines.push(with_id(g.clone(), 1).to_string());
    // 2: truncated.
    let t = with_id(g.clone(), 2).to_string();
    lines.push(t[..t.len() / 2].to_owned());
    // 3: unknown event type.
    let mut v = with_id(g.clone(), 3);
    v["events"][1]["type"] = json!("teleported");
    lines.push(v.to_string());
    // 4: missing field.
    let mut v = with_id(g.clone(), 4);
    v.as_object_mut().unwrap().remove("title");
    lines.push(v.to_string());
    // 5: wrong type, holding a secret that must not be echoed.
    let mut v = with_id(g.clone(), 5);
    v["rev"] = json!(SECRET);
    lines.push(v.to_string());
    // 6: the id of line 1 again.
    lines.push(with_id(g.clone(), 1).to_string());
    // 7: a line over the 16 MiB cap.
    let mut v = with_id(g.clone(), 7);
    v["goal"] = json!("g".repeat(17 * 1024 * 1024));
    lines.push(v.to_string());
    // 8: time steps back.
    let mut v = with_id(g.clone(), 8);
    let t0 = v["events"][0]["at_ms"].as_i64().unwrap();
    v["events"][1]["at_ms"] = json!(t0 - 1);
    lines.push(v.to_string());
    // 9: a status that is not logbook's.
    let mut v = with_id(g.clone(), 9);
    v["status"] = json!("running");
    lines.push(v.to_string());
    // 10: good, with a secret in its goal (redacted on the way in).
    let mut v = with_id(g.clone(), 10);
    v["goal"] = json!(format!("deploy with {SECRET} now"));
    lines.push(v.to_string());
    // 11: a title over its cap.
    let mut v = with_id(g.clone(), 11);
    v["title"] = json!("t".repeat(201));
    lines.push(v.to_string());
    let file = env.dir.path().join("bad.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();

    let (run, d) = import_rejecting(&env, "jsonl", &file);
    assert_counts(&d, 2, 0, 9);
    assert!(!run.stdout.contains(SECRET) && !run.stderr.contains(SECRET));
    assert!(!run
        .stdout
        .contains("ggggggggggggggggggggggggggggggggggggggggg"));
    let got: Vec<(u64, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["file"], file.to_str().unwrap());
            (
                r["line"].as_u64().unwrap(),
                r["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(u64, &str)> = vec![
        (2, "line"),
        (3, "events[1].type"),
        (4, "title"),
        (5, "rev"),
        (6, "session_id"),
        (7, "line"),
        (8, "events[1].at_ms"),
        (9, "status"),
        (11, "title"),
    ];
    let got_ref: Vec<(u64, &str)> = got.iter().map(|(l, f)| (*l, f.as_str())).collect();
    assert_eq!(got_ref, want);
    assert_eq!(
        d["rejections"][0]["reason"]
            .as_str()
            .unwrap()
            .split(':')
            .next(),
        Some("is truncated")
    );
    assert_eq!(
        d["rejections"][5]["reason"],
        "is longer than the limit of 16777216 bytes"
    );
    assert_eq!(
        d["rejections"][8]["reason"],
        "is 201 characters; the limit is 200"
    );

    for n in [3, 4, 5, 7, 8, 9, 11] {
        assert_eq!(rows_anywhere(&env, &format!("ses_{n:016x}")), 0, "{n}");
    }
    assert_eq!(rev_and_events(&env, &format!("ses_{:016x}", 1)), (2, 2, 1));
    assert_eq!(table_counts(&env)[0], 2);
    assert_eq!(env.json(&["verify"]).code, 0);
    let s = env
        .json(&["session", "show", &format!("ses_{:016x}", 10)])
        .data();
    assert_eq!(s["session"]["goal"], "deploy with [REDACTED] now");
    drop(env.sql());
    assert!(!contains(&db_bytes(&env), SECRET));

    // Human output: counts on stdout, the list on stderr, exit 2.
    let r = env.run(&["import", "--format", "jsonl", file.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    assert!(
        r.stdout.starts_with("imported 0, skipped 3, rejected 8"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr
            .starts_with("error[INVALID_ARGUMENT]: 8 session(s) rejected"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains(":8 ses_0000000000000008: `events[1].at_ms` is earlier"),
        "{}",
        r.stderr
    );
}

fn amber_session(root: &Path, uuid: &str, state: &str, goal: &str, timeline: &[Value]) {
    let dir = root.join(".amber/sessions").join(uuid);
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = json!({"sessionId": uuid, "goal": goal, "route": "r", "state": state,
        "currentStage": "build", "createdAt": "2026-06-21T10:00:00Z"});
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let tl: String = timeline.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(dir.join("timeline.jsonl"), tl).unwrap();
}

/// `n` completed Amber sessions under `root`, uuids `…-{i:012x}` and goals
/// `goal {i}`, each with `timeline`.
fn amber_sessions(root: &Path, n: u32, timeline: &[Value]) {
    for i in 0..n {
        let uuid = format!("00000000-0000-4000-8000-{i:012x}");
        amber_session(root, &uuid, "completed", &format!("goal {i}"), timeline);
    }
}

/// An Amber manifest whose `currentStage` looks like a secret is rejected
/// (stage names are stored as given, as `session stage` stores them), and
/// the rest of the import goes ahead.
#[test]
fn an_amber_stage_that_looks_like_a_secret_is_rejected() {
    let env = TestEnv::new();
    let root = env.dir.path().join("proj");
    let start = json!({"type": "session_created", "timestamp": "2026-06-21T10:00:00Z"});
    let (good, bad) = (
        "00000000-0000-4000-8000-000000000001",
        "00000000-0000-4000-8000-000000000002",
    );
    amber_session(&root, good, "executing", "g", std::slice::from_ref(&start));
    amber_session(&root, bad, "executing", "g", std::slice::from_ref(&start));
    let manifest = json!({"sessionId": bad, "goal": "g", "route": "r", "state": "executing",
        "currentStage": "password=hunter2hunter2", "createdAt": "2026-06-21T10:00:00Z"});
    let dir = root.join(".amber/sessions").join(bad);
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let (_, d) = import_rejecting(&env, "amber", &root);
    assert_counts(&d, 1, 0, 1);
    let r = &d["rejections"][0];
    assert_eq!(r["field"], "currentStage");
    assert_eq!(
        r["reason"],
        "looks like it holds a secret; stage names are stored as given"
    );
    assert_eq!(rows_anywhere(&env, &amber_id(bad)), 0);
    let s = env.json(&["session", "show", &amber_id(good)]).data();
    assert_eq!(s["session"]["stage"], "build");
}

/// A rejection names its file, and a path from the input tree passes the
/// redactor (found by adversarial testing: an Amber folder named like a
/// token was printed as is).
#[test]
fn a_rejected_file_path_shaped_like_a_token_is_redacted() {
    let env = TestEnv::new();
    let root = env.dir.path().join("proj");
    let start = json!({"type": "session_created", "timestamp": "2026-06-21T10:00:00Z"});
    amber_session(
        &root,
        "sk-abcdefghijklmnopqrstuvwxyz",
        "executing",
        "g",
        &[start],
    );
    let (run, d) = import_rejecting(&env, "amber", &root);
    assert_counts(&d, 0, 0, 1);
    let file = d["rejections"][0]["file"].as_str().unwrap();
    assert!(
        file.ends_with("/sessions/[REDACTED]/manifest.json"),
        "{file}"
    );
    assert!(!run.stdout.contains("abcdefghijklm") && !run.stderr.contains("abcdefghijklm"));
}

fn ev(t: &str, ts: &str) -> Value {
    json!({"type": t, "timestamp": ts})
}

#[test]
fn malformed_amber_sessions_are_rejected_or_mapped_as_documented() {
    let env = TestEnv::new();
    let root = env.dir.path().join("proj");
    let u = |n: u32| format!("00000000-0000-4000-8000-{n:012x}");
    let start = ev("session_created", "2026-06-21T10:00:00Z");
    // 1: unknown but well-formed type, a time that steps back, a secret goal.
    amber_session(
        &root,
        &u(1),
        "executing",
        &format!("first line {SECRET}\nsecond"),
        &[
            start.clone(),
            json!({"type": "lint_ran", "timestamp": "2026-06-21T10:01:00Z", "files": 3}),
            ev("stage_started", "2026-06-21T09:59:00Z"),
        ],
    );
    // 2: a malformed type on line 2.
    amber_session(
        &root,
        &u(2),
        "executing",
        "g",
        &[start.clone(), ev("Bad Type", "2026-06-21T10:01:00Z")],
    );
    // 3: an unknown state.
    amber_session(
        &root,
        &u(3),
        "levitating",
        "g",
        std::slice::from_ref(&start),
    );
    // 4: a truncated timeline line.
    let dir4 = root.join(".amber/sessions").join(u(4));
    amber_session(&root, &u(4), "paused", "g", std::slice::from_ref(&start));
    std::fs::write(
        dir4.join("timeline.jsonl"),
        format!("{start}\n{{\"type\":\"stage_st"),
    )
    .unwrap();
    // 5: aborted maps to cancelled; the reason is kept.
    amber_session(
        &root,
        &u(5),
        "aborted",
        "g",
        &[
            start.clone(),
            json!({"type": "session_aborted", "timestamp": "2026-06-21T10:02:00Z", "reason": "user quit"}),
        ],
    );

    let (_, d) = import_rejecting(&env, "amber", &root);
    assert_counts(&d, 2, 0, 3);
    let mut rej: Vec<(String, Option<u64>, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let file = r["file"].as_str().unwrap();
            let rel = file.split(".amber/sessions/").nth(1).unwrap().to_owned();
            (
                rel,
                r["line"].as_u64(),
                r["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    rej.sort();
    assert_eq!(
        rej,
        vec![
            (
                format!("{}/timeline.jsonl", u(2)),
                Some(2),
                "type".to_owned()
            ),
            (format!("{}/manifest.json", u(3)), None, "state".to_owned()),
            (
                format!("{}/timeline.jsonl", u(4)),
                Some(2),
                "line".to_owned()
            ),
        ]
    );
    for n in [2, 3, 4] {
        assert_eq!(rows_anywhere(&env, &amber_id(&u(n))), 0);
    }
    let s = env.json(&["session", "show", &amber_id(&u(1))]).data();
    assert_eq!(s["session"]["status"], "active");
    assert_eq!(s["session"]["stage"], "build");
    assert_eq!(s["session"]["title"], "first line [REDACTED]");
    assert_eq!(s["session"]["goal"], "first line [REDACTED]\nsecond");
    assert_eq!(s["events"][1]["type"], "x.amber.lint_ran");
    assert_eq!(s["events"][1]["data"], json!({"files": 3}));
    assert_eq!(s["events"][2]["at_ms"], s["events"][1]["at_ms"]);
    assert_eq!(s["events"][2]["data"]["timestamp"], "2026-06-21T09:59:00Z");
    let c = env.json(&["session", "show", &amber_id(&u(5))]).data();
    assert_eq!(c["session"]["status"], "cancelled");
    assert_eq!(c["session"]["end_reason"], "user quit");
    assert_eq!(env.json(&["verify"]).code, 0);
    drop(env.sql());
    assert!(!contains(&db_bytes(&env), SECRET));
}

#[test]
fn thousands_of_generated_amber_sessions_import_in_batches() {
    let env = TestEnv::new();
    let root = env.dir.path().join("many");
    let n = 3000u32;
    amber_sessions(
        &root,
        n,
        &[
            ev("session_created", "2026-06-21T10:00:00Z"),
            ev("session_started", "2026-06-21T10:00:01Z"),
            json!({"type": "stage_started", "timestamp": "2026-06-21T10:00:02Z", "stage": "s"}),
            ev("session_completed", "2026-06-21T10:00:03Z"),
        ],
    );
    let d = import_ok(&env, "amber", &root);
    assert_counts(&d, n as u64, 0, 0);
    assert_eq!(d["events"], 4 * n as u64);
    assert_eq!(table_counts(&env)[..1], [n as i64]);
    assert_eq!(env.json(&["verify"]).code, 0);
    assert_counts(&import_ok(&env, "amber", &root), 0, n as u64, 0);
}

#[test]
fn malformed_phelix_files_are_rejected_whole() {
    let env = TestEnv::new();
    let dir = env.dir.path().join("phelix/sessions");
    std::fs::create_dir_all(&dir).unwrap();
    let good =
        std::fs::read_to_string(Path::new(PHELIX).join("sessions/ses_1a2b3c4d5e6f7081.json"))
            .unwrap();
    std::fs::write(dir.join("ses_1a2b3c4d5e6f7081.json"), &good).unwrap();
    // The same session under another file name.
    std::fs::write(dir.join("ses_0000000000000001.json"), &good).unwrap();
    // Truncated.
    std::fs::write(
        dir.join("ses_0000000000000002.json"),
        &good[..good.len() / 2],
    )
    .unwrap();
    // A checkpoint that names a non-checkpoint event.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["session_id"] = json!("ses_0000000000000003");
    v["checkpoint"]["seq"] = json!(0);
    std::fs::write(dir.join("ses_0000000000000003.json"), v.to_string()).unwrap();
    std::fs::write(dir.join("notes.txt"), "not a session").unwrap();

    let (_, d) = import_rejecting(&env, "phelix", &env.dir.path().join("phelix"));
    assert_counts(&d, 1, 0, 3);
    let mut got: Vec<(String, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let f = r["file"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned();
            (f, r["field"].as_str().unwrap().to_owned())
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "ses_0000000000000001.json".to_owned(),
                "session_id".to_owned()
            ),
            ("ses_0000000000000002.json".to_owned(), "file".to_owned()),
            (
                "ses_0000000000000003.json".to_owned(),
                "checkpoint.seq".to_owned()
            ),
        ]
    );
    assert_eq!(rows_anywhere(&env, "ses_0000000000000003"), 0);
    assert_eq!(env.json(&["verify"]).code, 0);
}

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
    let leases: i64 = dst
        .sql()
        .query_row("SELECT count(*) FROM session_leases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(leases, 0);

    // A second import skips both and changes nothing.
    let before = export_jsonl(&dst);
    assert_counts(&import_ok(&dst, "jsonl", &file), 0, 2, 0);
    assert_eq!(export_jsonl(&dst), before);
}

/// Rows of a session in the V3/V4 tables.
fn workflow_rows(env: &TestEnv, id: &str) -> i64 {
    let c = env.sql();
    [
        "SELECT count(*) FROM runs WHERE session_id = ?1",
        "SELECT count(*) FROM session_budgets WHERE session_id = ?1",
        "SELECT count(*) FROM session_snapshots WHERE session_id = ?1",
        "SELECT count(*) FROM session_gates WHERE session_id = ?1",
        "SELECT count(*) FROM session_leases WHERE session_id = ?1",
    ]
    .iter()
    .map(|q| c.query_row(q, [id], |r| r.get::<_, i64>(0)).unwrap())
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

/// Found by adversarial testing: session times that contradict the events
/// (which would let the next live event go back in time), times outside
/// 0..=2^53−1, and session usage over 2^53−1 are refused, naming the field.
#[test]
fn imported_times_and_usage_must_be_consistent_and_in_range() {
    let env = TestEnv::new();
    let s = env.create("t");
    env.json(&["session", "checkpoint", &s, "--step", "one"]);
    let line: Value = serde_json::from_str(export_jsonl(&env).trim()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "updated_at_ms",
            Box::new(|v: &mut Value| v["updated_at_ms"] = json!(1)),
        ),
        (
            "events[1].at_ms",
            Box::new(|v: &mut Value| v["events"][1]["at_ms"] = json!(9_007_199_254_740_992i64)),
        ),
        (
            "events[0].at_ms",
            Box::new(|v: &mut Value| v["events"][0]["at_ms"] = json!(-5)),
        ),
        (
            "created_at_ms",
            Box::new(|v: &mut Value| v["created_at_ms"] = json!(4_102_444_800_000i64)),
        ),
        (
            "usage.input_tokens",
            Box::new(|v: &mut Value| v["usage"]["input_tokens"] = json!(9_007_199_254_740_992i64)),
        ),
    ];
    for (field, edit) in cases {
        let mut v = line.clone();
        edit(&mut v);
        let file = dir.path().join("bad.jsonl");
        std::fs::write(&file, format!("{v}\n")).unwrap();
        let target = TestEnv::new();
        let (_, report) = import_rejecting(&target, "jsonl", &file);
        assert_counts(&report, 0, 0, 1);
        let rej = &report["rejections"][0];
        assert!(
            rej["field"].as_str().unwrap().ends_with(field),
            "{field}: {rej}"
        );
        assert_eq!(rows_anywhere(&target, &s), 0);
    }
}

/// A UTF-8 byte order mark before the first line is not part of the JSON
/// (found by adversarial testing: it used to reject the first session).
#[test]
fn a_byte_order_mark_before_the_first_line_is_ignored() {
    let env = TestEnv::new();
    env.create("a");
    env.create("b");
    let text = export_jsonl(&env);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bom.jsonl");
    let mut bytes = vec![0xEF, 0xBB, 0xBF];
    bytes.extend_from_slice(text.as_bytes());
    std::fs::write(&file, bytes).unwrap();
    let other = TestEnv::new();
    assert_counts(&import_ok(&other, "jsonl", &file), 2, 0, 0);
    assert_eq!(export_jsonl(&other), text);
}

/// Imports of one file racing into one database (found by adversarial
/// testing): sessions another process wrote meanwhile are skipped, never
/// reported as duplicates within this input, and every run exits 0.
#[test]
fn concurrent_imports_of_one_file_skip_each_others_sessions() {
    let src = TestEnv::new();
    let root = src.dir.path().join("many");
    let n = 1000u32; // four batches of at most 256
    amber_sessions(
        &root,
        n,
        &[
            ev("session_created", "2026-06-21T10:00:00Z"),
            ev("session_completed", "2026-06-21T10:00:03Z"),
        ],
    );
    assert_counts(&import_ok(&src, "amber", &root), n as u64, 0, 0);
    let file = src.dir.path().join("all.jsonl");
    std::fs::write(&file, export_jsonl(&src)).unwrap();

    let env = TestEnv::new();
    assert_eq!(env.run(&["session", "list"]).code, 0);
    let cmds = (0..3)
        .map(|_| {
            let mut c = env.command();
            c.arg("--db").arg(&env.db).args([
                "import",
                "--format",
                "jsonl",
                file.to_str().unwrap(),
                "--json",
            ]);
            c
        })
        .collect();
    let runs = race(env.dir.path(), cmds);
    let mut imported = 0;
    for r in &runs {
        assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
        let d = r.data();
        assert_eq!(d["rejected"], 0, "{d}");
        assert_eq!(
            d["imported"].as_u64().unwrap() + d["skipped"].as_u64().unwrap(),
            n as u64,
            "{d}"
        );
        imported += d["imported"].as_u64().unwrap();
    }
    assert_eq!(imported, n as u64);
    assert_eq!(table_counts(&env)[0], n as i64);
    assert_eq!(export_jsonl(&env), export_jsonl(&src));
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// An Amber timeline that is a FIFO or a link to a device (found by
/// adversarial testing) is rejected as "not a regular file" instead of
/// blocking or reading without end; the other sessions import.
#[test]
fn an_amber_timeline_that_is_not_a_regular_file_is_rejected() {
    let env = TestEnv::new();
    let root = env.dir.path().join("proj");
    let u = |n: u32| format!("00000000-0000-4000-8000-{n:012x}");
    let done = [
        ev("session_created", "2026-06-21T10:00:00Z"),
        ev("session_completed", "2026-06-21T10:00:03Z"),
    ];
    for n in 1..=3 {
        amber_session(&root, &u(n), "completed", "g", &done);
    }
    let timeline = |n: u32| {
        root.join(".amber/sessions")
            .join(u(n))
            .join("timeline.jsonl")
    };
    std::fs::remove_file(timeline(1)).unwrap();
    let made = Command::new("mkfifo").arg(timeline(1)).status().unwrap();
    assert!(made.success());
    std::fs::remove_file(timeline(2)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", timeline(2)).unwrap();

    let mut c = Command::new("timeout");
    c.arg("60").arg(bin()).args([
        "--db",
        env.db.to_str().unwrap(),
        "--json",
        "import",
        "--format",
        "amber",
        root.to_str().unwrap(),
    ]);
    let r = Run::from(c.output().unwrap());
    let err = assert_error(&r, "INVALID_ARGUMENT", 2);
    let d = &err["details"];
    assert_counts(d, 1, 0, 2);
    // Sorted: the report follows the folder's listing order.
    let got: Vec<(String, String, String)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let file = r["file"].as_str().unwrap();
            let session = file.split('/').rev().nth(1).unwrap().to_owned();
            (
                session,
                r["field"].as_str().unwrap().to_owned(),
                r["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = |n: u32| {
        (
            u(n),
            "timeline".to_owned(),
            "is not a regular file".to_owned(),
        )
    };
    let mut got = got;
    got.sort();
    assert_eq!(got, vec![want(1), want(2)]);
}
