//! Importing logbook's own JSON Lines when the input is wrong: secret event
//! types and unknown nested keys are refused, a malformed line rejects its
//! session and no other, and imported times and usage must be consistent
//! and in range. Nothing of a rejected session is stored, and no rejected
//! secret reaches the database.

use crate::common::*;
use crate::transfer::{
    amber_id, amber_session, assert_counts, export_jsonl, good_line, import_rejecting,
    rows_anywhere, table_counts, with_id, SECRET,
};
use serde_json::{json, Value};

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
    assert!(!contains_bytes(&env.db_bytes(), b"abcdefghijklm"));
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
    if !on_pg() {
        drop(env.sql());
    }
    assert!(!contains_bytes(&env.db_bytes(), SECRET.as_bytes()));

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

/// Found by adversarial testing: session times that contradict the events
/// (which would let the next live event go back in time), times outside
/// 0..=2^53−1, and session usage over 2^53−1 are refused, naming the field.
#[test]
fn imported_times_and_usage_must_be_consistent_and_in_range() {
    let env = TestEnv::new();
    let s = env.create("t");
    env.json(&["session", "checkpoint", &s, "--step", "one"]);
    let line: Value =
        crate::transfer::unhashed(serde_json::from_str(export_jsonl(&env).trim()).unwrap());
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

/// `import` without `--format` reads jsonl from a file or stdin (the
/// pipe of docs/postgres.md, `export --out - | import -`); a folder needs
/// its format named, and is refused with nothing imported.
#[test]
fn import_without_format_reads_jsonl_from_a_file_or_stdin_and_refuses_a_folder() {
    let src = TestEnv::new();
    let a = src.create("one");
    src.checkpoint(&a, "s1");
    let exported = src.run(&["export", "--format", "jsonl"]).stdout;
    let file = src.dir.path().join("x.jsonl");
    std::fs::write(&file, &exported).unwrap();

    let dst = TestEnv::new();
    let r = dst.json(&["import", file.to_str().unwrap()]).data();
    assert_eq!(r["imported"], 1);
    let piped = TestEnv::new();
    let mut c = piped.cli(&["import", "-"]);
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), exported.as_bytes()).unwrap();
    let r: Run = child.wait_with_output().unwrap().into();
    assert_eq!(r.data()["imported"], 1);
    assert_eq!(piped.run(&["export", "--format", "jsonl"]).stdout, exported);

    let folder = TestEnv::new();
    let e = assert_error(
        &folder.json(&["import", src.dir.path().to_str().unwrap()]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(e["details"]["field"], "--format");
    assert!(!folder.db.exists(), "refused before the database is opened");
}

/// The reason a time more than 24 hours ahead of the ledger's clock is
/// rejected with (attack report #3).
const FUTURE_REASON: &str = "lies more than 24 hours after now (the ledger's clock): every session and event written after it would take its time, so it is refused";

/// An exported session with a pending run, an auto gate, a snapshot and a
/// budget: every kind of time an import carries.
fn line_with_every_time(env: &TestEnv) -> (String, Value) {
    let s = env.create("t");
    env.json(&["run", "create", &s]).data();
    env.json(&["gate", "open", &s, "--gate", "g", "--kind", "auto"])
        .data();
    env.json(&[
        "session",
        "checkpoint",
        &s,
        "--step",
        "s",
        "--state",
        "{\"a\":1}",
    ])
    .data();
    env.json(&["session", "budget", &s, "--max-tokens", "100"])
        .data();
    let line: Value = serde_json::from_str(export_jsonl(env).trim()).unwrap();
    (s, crate::transfer::unhashed(line))
}

/// One session whose times lie in the far future (an imported ledger, or
/// a host whose clock ran ahead) made every session created after it take
/// that time, for good (attack report #3). Import now rejects a session
/// with any time more than 24 hours after now, naming the field, and
/// writes none of it; later sessions keep today's time.
#[test]
fn an_imported_time_more_than_a_day_ahead_is_rejected_naming_the_field() {
    let env = TestEnv::new();
    let (s, line) = line_with_every_time(&env);
    let dir = tempfile::tempdir().unwrap();
    let ahead = now_ms() + 25 * 3_600_000;
    type Edit = Box<dyn Fn(&mut Value, i64)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            // The attack: every time of the session set to 2100-01-01.
            "created_at_ms",
            Box::new(|v: &mut Value, _| {
                let t = json!(4_102_444_800_000i64);
                v["created_at_ms"] = t.clone();
                v["updated_at_ms"] = t.clone();
                for e in v["events"].as_array_mut().unwrap() {
                    e["at_ms"] = t.clone();
                }
                for r in v["runs"].as_array_mut().unwrap() {
                    r["created_at_ms"] = t.clone();
                    r["updated_at_ms"] = t.clone();
                }
                v["snapshots"][0]["at_ms"] = t.clone();
                v["gates"][0]["opened_at_ms"] = t.clone();
                v["gates"][0]["decided_at_ms"] = t.clone();
                v["budget"]["updated_at_ms"] = t;
            }),
        ),
        (
            "updated_at_ms",
            Box::new(|v: &mut Value, t| {
                v["updated_at_ms"] = json!(t);
                v["events"][4]["at_ms"] = json!(t);
            }),
        ),
        (
            "runs[0].updated_at_ms",
            Box::new(|v: &mut Value, t| v["runs"][0]["updated_at_ms"] = json!(t)),
        ),
        (
            "budget.updated_at_ms",
            Box::new(|v: &mut Value, t| v["budget"]["updated_at_ms"] = json!(t)),
        ),
        (
            "snapshots[0].at_ms",
            Box::new(|v: &mut Value, t| v["snapshots"][0]["at_ms"] = json!(t)),
        ),
        (
            "gates[0].decided_at_ms",
            Box::new(|v: &mut Value, t| v["gates"][0]["decided_at_ms"] = json!(t)),
        ),
    ];
    for (field, edit) in cases {
        let mut v = line.clone();
        edit(&mut v, ahead);
        let file = dir.path().join("future.jsonl");
        std::fs::write(&file, format!("{v}\n")).unwrap();
        let target = TestEnv::new();
        let (_, report) = import_rejecting(&target, "jsonl", &file);
        assert_counts(&report, 0, 0, 1);
        let rej = &report["rejections"][0];
        assert_eq!(
            (
                &rej["field"],
                &rej["reason"],
                &rej["session_id"],
                &rej["line"]
            ),
            (&json!(field), &json!(FUTURE_REASON), &json!(s), &json!(1)),
            "{field}"
        );
        assert_eq!(rows_anywhere(&target, &s), 0, "{field}");
        let before = now_ms();
        let later = target
            .json(&["session", "create", "--title", "later"])
            .data();
        let at = later["created_at_ms"].as_i64().unwrap();
        assert!(at >= before && at <= now_ms(), "{field}: created at {at}");
    }
    // 23 hours ahead is within the bound: imported.
    let mut v = line.clone();
    v["runs"][0]["updated_at_ms"] = json!(now_ms() + 23 * 3_600_000);
    let file = dir.path().join("soon.jsonl");
    std::fs::write(&file, format!("{v}\n")).unwrap();
    let target = TestEnv::new();
    let r = target.json(&["import", "--format", "jsonl", file.to_str().unwrap()]);
    assert_counts(&r.data(), 1, 0, 0);
}

/// The bound is exactly 24 hours after the ledger's clock (a fixed clock
/// here): a time at the bound imports, one millisecond later is rejected.
#[test]
fn the_future_bound_is_24_hours_after_the_ledgers_clock() {
    let source = TestEnv::new();
    let s = source.create("t");
    let mut line: Value =
        crate::transfer::unhashed(serde_json::from_str(export_jsonl(&source).trim()).unwrap());
    let now = line["created_at_ms"].as_i64().unwrap() - 3 * 86_400_000;
    let dir = tempfile::tempdir().unwrap();
    for (extra, imported) in [(1, 0), (0, 1)] {
        let t = now + logbook::transfer::IMPORT_MAX_FUTURE_MS + extra;
        assert_eq!(logbook::transfer::IMPORT_MAX_FUTURE_MS, 86_400_000);
        line["created_at_ms"] = json!(t);
        line["updated_at_ms"] = json!(t);
        line["events"][0]["at_ms"] = json!(t);
        let file = dir.path().join("one.jsonl");
        std::fs::write(&file, format!("{line}\n")).unwrap();
        let env = TestEnv::new();
        let (clock, _) = logbook::clock::Clock::fixed(now);
        let lg = logbook::Ledger::open(logbook::LedgerOptions {
            clock,
            ..logbook::LedgerOptions::at(env.path())
        })
        .unwrap();
        let r = lg
            .import(logbook::ImportFormat::Jsonl, &file, &mut |_| {})
            .unwrap();
        assert_eq!(
            (r.imported, r.rejected),
            (imported, 1 - imported),
            "+{extra}"
        );
        if imported == 0 {
            assert_eq!(r.rejections[0].field, "created_at_ms");
            assert_eq!(r.rejections[0].reason, FUTURE_REASON);
            assert_eq!(rows_anywhere(&env, &s), 0);
        } else {
            assert_eq!(lg.get_session(&s).unwrap().created_at_ms, t);
        }
    }
}

/// docs/design.md, "Backends": hash chains verified on arrival. An export edited after it was
/// written (an event's detail, data, time or order) is rejected naming the
/// first event whose hash no longer holds; the same file with every hash
/// left out is imported and gets its chain on arrival.
#[test]
fn an_edited_export_is_rejected_by_its_hashes() {
    let env = TestEnv::new();
    let s = env.create("t");
    env.json(&["session", "checkpoint", &s, "--step", "one", "--note", "n"]);
    env.json(&["session", "checkpoint", &s, "--step", "two"]);
    let line: Value = serde_json::from_str(export_jsonl(&env).trim()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "events[1].hash",
            Box::new(|v: &mut Value| v["events"][1]["data"]["note"] = json!("tampered")),
        ),
        (
            "events[2].hash",
            Box::new(|v: &mut Value| v["events"][2]["data"]["step"] = json!("three")),
        ),
        (
            "events[0].hash",
            Box::new(|v: &mut Value| v["events"][0]["detail"] = json!("made up")),
        ),
        (
            "events[1].hash",
            Box::new(|v: &mut Value| v["events"][1]["hash"] = json!("")),
        ),
    ];
    for (field, edit) in cases {
        let mut v = line.clone();
        edit(&mut v);
        let file = dir.path().join("edited.jsonl");
        std::fs::write(&file, format!("{v}\n")).unwrap();
        let target = TestEnv::new();
        let (_, report) = import_rejecting(&target, "jsonl", &file);
        assert_counts(&report, 0, 0, 1);
        let rej = &report["rejections"][0];
        assert_eq!(rej["field"], field, "{rej}");
        assert!(
            rej["reason"]
                .as_str()
                .unwrap()
                .contains("changed after it was exported"),
            "{rej}"
        );
        assert_eq!(rows_anywhere(&target, &s), 0);
    }
    // Every hash left out: imported, with its chain computed on arrival.
    let mut v = line.clone();
    for e in v["events"].as_array_mut().unwrap() {
        e["hash"] = json!("");
    }
    v["events"][1]["data"]["note"] = json!("written by hand");
    let file = dir.path().join("no-hashes.jsonl");
    std::fs::write(&file, format!("{v}\n")).unwrap();
    let target = TestEnv::new();
    let r = target.json(&["import", "--format", "jsonl", file.to_str().unwrap()]);
    assert_eq!(r.data()["imported"], 1);
    target.json(&["verify"]).data();
}

/// A key given twice in one object of a line — the record itself, an event,
/// the actor — rejects its session (`field` names the object): serde_json
/// would have read the last copy, so the first (`"title":"first"`) was
/// imported as if it were not there. Stored JSON values (`context`) were
/// refused already (above).
#[test]
fn a_key_repeated_in_any_object_of_a_line_rejects_its_session_instead_of_reading_the_last() {
    let env = TestEnv::new();
    let g = good_line();
    let line = |n: u32, from: &str, to: &str| {
        let text = with_id(g.clone(), n).to_string();
        assert!(text.contains(from), "{from} in {text}");
        text.replacen(from, to, 1)
    };
    let lines = [
        line(
            1,
            r#""title":"template""#,
            r#""title":"first","title":"template""#,
        ),
        line(
            2,
            r#"{"actor_type":"cli""#,
            r#"{"seq":0,"actor_type":"cli""#,
        ),
        line(3, r#""actor":{"#, r#""actor":{"type":"mcp","#),
        line(4, r#""usage":{"#, r#""usage":{"api_calls":1,"#),
        with_id(g.clone(), 5).to_string(),
    ];
    let file = env.dir.path().join("dup.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let (_, d) = import_rejecting(&env, "jsonl", &file);
    assert_counts(&d, 1, 0, 4);
    let got: Vec<(u64, &str, &str)> = d["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["field"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            )
        })
        .collect();
    let twice = "has the same key twice in one object";
    assert_eq!(
        got,
        [
            (1, "line", twice),
            (2, "events[0]", twice),
            (3, "actor", twice),
            (4, "usage", twice)
        ]
    );
    for n in 1..=4 {
        assert_eq!(rows_anywhere(&env, &format!("ses_{n:016x}")), 0, "line {n}");
    }
    assert_eq!(table_counts(&env)[0], 1);
}
