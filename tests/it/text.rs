//! Text fields (CASES C15, C16, C18, C19): an over-cap value is refused
//! whole, naming the field and the limit, and caps count characters, not
//! bytes; multi-byte characters at every preview width and cap never panic
//! and previews cut on a character boundary; invalid UTF-8 and NUL planted
//! in the database read back (as U+FFFD, and whole); control characters in
//! text fields are refused.

use crate::common::*;
use logbook::{CreateSession, Mutation};
use serde_json::Value;
use std::collections::HashMap;
use std::fs;

/// A display preview: at most `max` characters, and either the whole value
/// or a prefix of it (cut on a character boundary) followed by `…`.
#[track_caller]
fn check_preview(cell: &str, full: &str, max: usize) {
    let n = cell.chars().count();
    assert!(n <= max, "preview wider than {max} ({n}): {cell:?}");
    if cell != full {
        let cut = cell
            .strip_suffix('…')
            .unwrap_or_else(|| panic!("a cut preview must end with …: {cell:?}"));
        assert!(!cut.is_empty(), "empty preview");
        assert!(
            full.starts_with(cut),
            "{cell:?} is not a prefix of the value"
        );
    }
}

/// C15: every over-cap input is INVALID_ARGUMENT naming the field and the
/// limit, and changes nothing; values exactly at the cap, in multi-byte
/// characters, are accepted and returned byte-identical.
#[test]
fn c15_over_cap_input_is_refused_whole() {
    let env = TestEnv::new();
    let id = env.create("t");
    let before = env.show(&id);
    let sessions0 = env.scalar("SELECT count(*) FROM sessions");
    let a = |n: usize| "a".repeat(n);
    let big = env.dir.path().join("big.json");
    fs::write(&big, format!("{{\"k\":\"{}\"}}", a(256 * 1024 - 8 + 1))).unwrap();
    let big_arg = format!("@{}", big.display());
    let (t201, t4097) = (a(201), a(4097));
    let over: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["session", "create", "--title", &t201], "title", "200"),
        (
            vec!["session", "create", "--title", "t", "--goal", &t4097],
            "goal",
            "4096",
        ),
        (
            vec!["session", "create", "--title", "t", "--context", &big_arg],
            "context",
            "262144",
        ),
        (
            vec![
                "session",
                "checkpoint",
                &id,
                "--step",
                "s",
                "--note",
                &t4097,
            ],
            "note",
            "4096",
        ),
        (
            vec!["session", "checkpoint", &id, "--step", &t201],
            "step",
            "200",
        ),
        (
            vec!["session", "complete", &id, "--result", &t4097],
            "result",
            "4096",
        ),
        (
            vec!["session", "fail", &id, "--reason", &t4097],
            "reason",
            "4096",
        ),
        (
            vec!["session", "event", &id, "--type", "x.t", "--detail", &t4097],
            "detail",
            "4096",
        ),
    ];
    for (args, field, limit) in &over {
        let r = env.json(args);
        let e = assert_error(&r, "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], *field, "{}", r.stdout);
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains(field) && msg.contains(limit), "{msg}");
        assert!(e["details"]["reason"].as_str().unwrap().contains(limit));
        assert_eq!(env.scalar("SELECT count(*) FROM sessions"), sessions0);
        assert_eq!(env.show(&id), before, "{field}");
    }

    // Exactly at the cap, multi-byte.
    let title = "漢".repeat(200);
    let goal = "漢".repeat(4096);
    let at = env.dir.path().join("at.json");
    fs::write(&at, format!("{{\"k\":\"{}\"}}", a(256 * 1024 - 8))).unwrap();
    let at_arg = format!("@{}", at.display());
    let d = env
        .json(&[
            "session",
            "create",
            "--title",
            &title,
            "--goal",
            &goal,
            "--app",
            "a",
            "--context",
            &at_arg,
        ])
        .data();
    assert_eq!(
        (d["title"].as_str(), d["goal"].as_str()),
        (Some(title.as_str()), Some(goal.as_str()))
    );
    assert_eq!(d["context"]["k"].as_str().unwrap().len(), 256 * 1024 - 8);
    let shown: Value = serde_json::from_str(&env.show(&id_of(&d))).unwrap();
    assert_eq!(shown["data"]["session"]["title"], title.as_str());

    let note = "🙏".repeat(4096);
    let d = env
        .json(&["session", "checkpoint", &id, "--step", "s", "--note", &note])
        .data();
    assert_eq!(d["checkpoint"]["note"], note.as_str());
    let shown: Value = serde_json::from_str(&env.show(&id)).unwrap();
    assert_eq!(shown["data"]["events"][1]["detail"], note.as_str());

    let result = "🙏".repeat(4096);
    let done = env.create("done");
    let d = env
        .json(&["session", "complete", &done, "--result", &result])
        .data();
    assert_eq!(d["final_result"], result.as_str());
    let reason = "漢".repeat(4096);
    let failed = env.create("failed");
    let d = env
        .json(&["session", "fail", &failed, "--reason", &reason])
        .data();
    assert_eq!(d["end_reason"], reason.as_str());

    // Later reads and a valid checkpoint work.
    assert_eq!(listed(&env.json(&["session", "list"]).data()).len(), 4);
    env.show(&id);
    let ev = env.json(&["session", "events", &id]).data();
    assert_eq!(ev["events"].as_array().unwrap().len(), 2);
    let d = env.checkpoint(&id, "ok");
    assert_eq!(d["rev"], 3);
    assert_eq!(assert_rev_matches_events(&env, &id), 3);
}

/// The human-output cell after `label` on the line that starts with it.
fn kv_value<'a>(out: &'a str, label: &str) -> &'a str {
    let prefix = format!("{label:<11}");
    out.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {label} line in:\n{out}"))
}

/// The widest SUMMARY cell of a timeline (the CLI's `SUMMARY_WIDTH`).
const SUMMARY_WIDTH: usize = 100;

/// The SUMMARY cell of the events-table row of type `ty`.
fn detail_cell<'a>(out: &'a str, ty: &str) -> &'a str {
    let line = out
        .lines()
        .find(|l| l.contains(&format!("  {ty}  ")) && l.contains("  cli  "))
        .unwrap_or_else(|| panic!("no {ty} row in:\n{out}"));
    let (_, rest) = line.split_once("  cli  ").unwrap();
    rest.trim_start()
}

/// C16: values that put a multi-byte character across every preview width
/// and cap never panic; previews end on a character boundary; stored values
/// are returned whole; caps count characters, not bytes.
#[test]
fn c16_multibyte_text_at_widths_and_caps_never_panics() {
    let env = TestEnv::new();
    let mut values = Vec::new();
    for w in [20_usize, 48, 60, 80, 100, 200, 4096] {
        values.push(format!("{}🙏tail", "a".repeat(w - 1)));
        values.push(format!("{}漢tail", "a".repeat(w - 2)));
    }
    let mut titled = Vec::new(); // (id, value)
    let mut noted = Vec::new();
    let mut resulted = Vec::new();
    for v in &values {
        let n = v.chars().count();
        let r = env.json(&[
            "session", "create", "--title", v, "--app", "zz", "--goal", v,
        ]);
        assert_no_panic(&r);
        if n <= 200 {
            let d = r.data();
            assert_eq!(
                (d["title"].as_str(), d["goal"].as_str()),
                (Some(v.as_str()), Some(v.as_str()))
            );
            titled.push((id_of(&d), v.clone()));
        } else {
            let e = assert_error(&r, "INVALID_ARGUMENT", 2);
            assert_eq!(e["details"]["field"], "title");
        }

        let s = env.create_with(&["--title", "n", "--app", "zz"]);
        let r = env.json(&["session", "checkpoint", &s, "--step", "s", "--note", v]);
        assert_no_panic(&r);
        if n <= 4096 {
            assert_eq!(r.data()["checkpoint"]["note"], v.as_str());
            noted.push((s, v.clone()));
        } else {
            assert_eq!(
                assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
                "note"
            );
            assert_eq!(rev_and_events(&env, &s), (1, 1, 0));
        }

        let s = env.create_with(&["--title", "r", "--app", "zz"]);
        let r = env.json(&["session", "complete", &s, "--result", v]);
        assert_no_panic(&r);
        if n <= 4096 {
            assert_eq!(r.data()["final_result"], v.as_str());
            resulted.push((s, v.clone()));
        } else {
            assert_eq!(
                assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
                "result"
            );
            assert_eq!(rev_and_events(&env, &s), (1, 1, 0));
        }
    }
    assert_eq!((titled.len(), noted.len(), resulted.len()), (10, 12, 12));

    // list, JSON and human.
    let r = env.json(&["session", "list", "--limit", "1000"]);
    assert_no_panic(&r);
    let d = r.data();
    let by_id: HashMap<String, Value> = d["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (id_of(s), s.clone()))
        .collect();
    let human = env.run(&["session", "list", "--limit", "1000"]);
    assert_no_panic(&human);
    assert_eq!(human.code, 0);
    for (id, v) in &titled {
        assert_eq!(by_id[id]["title"], v.as_str());
        let line = human
            .stdout
            .lines()
            .find(|l| l.starts_with(id.as_str()))
            .unwrap();
        let (_, cell) = line.split_once("  zz  ").unwrap();
        check_preview(cell.trim_start(), v, 48);
    }

    // show, JSON and human.
    for (id, v) in &titled {
        let shown: Value = serde_json::from_str(&env.show(id)).unwrap();
        assert_eq!(shown["data"]["session"]["title"], v.as_str());
        let h = env.run(&["session", "show", id]);
        assert_no_panic(&h);
        assert_eq!(h.code, 0);
        assert_eq!(kv_value(&h.stdout, "title"), v.as_str());
        check_preview(kv_value(&h.stdout, "goal"), v, 80);
    }
    for (id, v) in &noted {
        let shown: Value = serde_json::from_str(&env.show(id)).unwrap();
        assert_eq!(shown["data"]["events"][1]["detail"], v.as_str());
        assert_eq!(shown["data"]["session"]["checkpoint"]["note"], v.as_str());
        let h = env.run(&["session", "show", id]);
        assert_no_panic(&h);
        assert_eq!(h.code, 0);
        let (_, note) = kv_value(&h.stdout, "checkpoint").split_once("): ").unwrap();
        check_preview(note, v, 60);
        check_preview(
            detail_cell(&h.stdout, "checkpoint"),
            &format!("step s · {v}"),
            SUMMARY_WIDTH,
        );
    }
    for (id, v) in &resulted {
        let shown: Value = serde_json::from_str(&env.show(id)).unwrap();
        assert_eq!(shown["data"]["session"]["final_result"], v.as_str());
        let h = env.run(&["session", "show", id]);
        assert_no_panic(&h);
        assert_eq!(h.code, 0);
        check_preview(kv_value(&h.stdout, "result"), v, 80);
        check_preview(detail_cell(&h.stdout, "completed"), v, SUMMARY_WIDTH);
    }

    // CAP characters in CAP+3 bytes is accepted whole; CAP+1 characters is not.
    let s = env.create("cap");
    let at_cap = format!("{}🙏", "a".repeat(4095));
    assert_eq!((at_cap.chars().count(), at_cap.len()), (4096, 4099));
    let d = env
        .json(&[
            "session",
            "checkpoint",
            &s,
            "--step",
            "s",
            "--note",
            &at_cap,
        ])
        .data();
    assert_eq!(d["checkpoint"]["note"], at_cap.as_str());
    let over = format!("{}🙏", "a".repeat(4096));
    let r = env.json(&["session", "checkpoint", &s, "--step", "s", "--note", &over]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "note"
    );
    assert_eq!(rev_and_events(&env, &s), (2, 2, 1));
}

// PostgreSQL's UTF8 text refuses invalid UTF-8: a fact of SQLite's TEXT.
sqlite_only! {
/// C18: invalid UTF-8 planted in TEXT columns reads back as U+FFFD; other
/// sessions still list; the session stays writable.
#[test]
fn c18_invalid_utf8_in_the_db_reads_as_replacement_characters() {
    let env = TestEnv::new();
    let ids: Vec<String> = (1..=3).map(|i| env.create(&format!("t{i}"))).collect();
    let s2 = ids[1].as_str();
    {
        let c = env.sql();
        c.execute(
            "UPDATE sessions SET title = CAST(X'66FF6F' AS TEXT), rev = rev + 1 WHERE session_id = ?1",
            [s2],
        )
        .unwrap();
        raw_append(&c, s2, "x.raw", b"\xC3\x28");
    }
    let bad_title = "f\u{FFFD}o";
    let bad_detail = "\u{FFFD}(";

    let r = env.json(&["session", "list"]);
    assert_no_panic(&r);
    let d = r.data();
    let titles: HashMap<String, Value> = d["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (id_of(s), s["title"].clone()))
        .collect();
    assert_eq!(titles.len(), 3);
    assert_eq!(titles[&ids[0]], "t1");
    assert_eq!(titles[s2], bad_title);
    assert_eq!(titles[&ids[2]], "t3");
    let h = env.run(&["session", "list"]);
    assert_no_panic(&h);
    assert_eq!(h.code, 0);
    assert!(h.stdout.contains(bad_title));
    assert!(ids.iter().all(|id| h.stdout.contains(id.as_str())));

    let r = env.json(&["session", "show", s2]);
    assert_no_panic(&r);
    let d = r.data();
    assert_eq!(d["session"]["title"], bad_title);
    assert_eq!(d["events"][1]["type"], "x.raw");
    assert_eq!(d["events"][1]["detail"], bad_detail);
    let h = env.run(&["session", "show", s2]);
    assert_no_panic(&h);
    assert_eq!(h.code, 0);
    assert!(h.stdout.contains(bad_title) && h.stdout.contains(bad_detail));

    let d = env.json(&["session", "events", s2]).data();
    assert_eq!(d["events"][1]["detail"], bad_detail);

    let r = env.json(&["session", "checkpoint", s2, "--step", "after"]);
    assert_no_panic(&r);
    let d = r.data();
    assert_eq!(
        (d["rev"].as_i64(), d["checkpoint"]["seq"].as_i64()),
        (Some(3), Some(2))
    );
    assert_eq!(assert_rev_matches_events(&env, s2), 3);
}
}

/// C19 (a): a NUL inside a JSON value is stored escaped and returned exactly
/// (docs/schema.md), and the key after it is redacted.
#[test]
fn c19_nul_inside_json_values_is_kept_and_redacted() {
    let env = TestEnv::new();
    let input = r#"{"k":"before\u0000after AKIAIOSFODNN7EXAMPLE"}"#;
    let want = "before\u{0}after [REDACTED]";
    let d = env
        .json(&[
            "session",
            "create",
            "--title",
            "t",
            "--app",
            "a",
            "--context",
            input,
        ])
        .data();
    assert_eq!(d["context"]["k"], want);
    let id = id_of(&d);
    env.json(&["session", "event", &id, "--type", "x.nul", "--data", input])
        .data();
    let shown = env.show(&id);
    let v: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["data"]["session"]["context"]["k"], want);
    assert_eq!(v["data"]["events"][1]["type"], "x.nul");
    assert_eq!(v["data"]["events"][1]["data"]["k"], want);
    assert_eq!(
        v["data"]["events"][1]["data"]["k"]
            .as_str()
            .unwrap()
            .chars()
            .count(),
        23
    );
    assert!(shown.contains(r"before\u0000after [REDACTED]"));
    assert!(!shown.contains("AKIA"));
    let stored = env.rows(
        "SELECT d.context, e.data FROM session_data d JOIN events e
         ON e.session_id = d.session_id AND e.seq = 1 WHERE d.session_id = $1",
        &[&id],
    );
    for text in [&stored[0][0], &stored[0][1]] {
        let text = text.as_str().unwrap();
        assert!(text.contains(r"before\u0000after [REDACTED]"), "{text}");
        assert!(!text.contains("AKIA"), "{text}");
    }
}

// PostgreSQL's text cannot hold a NUL: a fact of SQLite's TEXT.
sqlite_only! {
/// C19 (b): a NUL planted by SQL in a title reads back whole.
#[test]
fn c19_nul_planted_in_a_title_reads_back_whole() {
    let env = TestEnv::new();
    let id = env.create("t");
    env.sql()
        .execute(
            "UPDATE sessions SET title = 'a' || char(0) || 'b', rev = rev + 1 WHERE session_id = ?1",
            [&id],
        )
        .unwrap();
    let shown = env.show(&id);
    assert!(shown.contains(r#""title":"a\u0000b""#), "{shown}");
    let v: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["data"]["session"]["title"], "a\u{0}b");
    let d = env.json(&["session", "list"]).data();
    assert_eq!(d["sessions"][0]["title"], "a\u{0}b");
    let cmds: [&[&str]; 2] = [
        &["session", "show", &id],
        &["session", "list", "--limit", "5"],
    ];
    for args in cmds {
        let h = env.run(args);
        assert_no_panic(&h);
        assert_eq!(h.code, 0);
        assert!(h.stdout.contains(r"a\u{0}b"), "{}", h.stdout);
        assert!(!h.stdout.contains('\0'));
    }
}
}

/// C19 (c, through the library until MCP exists): control characters in
/// text fields are INVALID_ARGUMENT and store nothing.
#[test]
fn c19_control_characters_in_text_fields_are_refused() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let e = lg
        .create_session(CreateSession::titled("a\u{0}b"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
    assert_eq!(env.scalar("SELECT count(*) FROM sessions"), 0);
    let id = lib_create(&lg, "t", "a");
    let note = "before\u{0}after AKIAIOSFODNN7EXAMPLE";
    let e = lg
        .checkpoint(&id, cp("s", Some(note)), &Mutation::default())
        .unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
    assert!(!e.to_string().contains("AKIA"));
    assert_eq!(rev_and_events(&env, &id), (1, 1, 0));
}
