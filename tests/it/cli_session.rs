//! Each `logbook session` command's success shape and its effect on the DB.

use crate::common::*;
use serde_json::Value;

const SESSION_KEYS: &[&str] = &[
    "schema_version",
    "session_id",
    "status",
    "title",
    "goal",
    "app",
    "agent_id",
    "route",
    "stage",
    "parent_session_id",
    "tags",
    "context",
    "metadata",
    "actor",
    "rev",
    "plan_ids",
    "operation_ids",
    "deployment_ids",
    "checkpoint",
    "final_result",
    "end_reason",
    "usage",
    "created_at_ms",
    "updated_at_ms",
    "ended_at_ms",
];

/// The keys of a JSON object, in the order they were printed.
fn keys_in_order(text: &str, path: &[&str]) -> Vec<String> {
    // serde_json's Value sorts keys unless preserve_order is on, so read the
    // printed order with a streaming deserializer into an ordered list.
    let v: Value = serde_json::from_str(text).unwrap();
    let mut cur = &v;
    for p in path {
        cur = &cur[*p];
    }
    let obj = cur.as_object().unwrap();
    let mut found: Vec<(usize, String)> = obj
        .keys()
        .map(|k| {
            let needle = format!("\"{k}\":");
            (text.find(&needle).unwrap(), k.clone())
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, k)| k).collect()
}

#[test]
fn create_returns_the_whole_session_in_fixed_key_order() {
    let env = TestEnv::new();
    let r = env.json(&[
        "session",
        "create",
        "--title",
        "ship billing v3",
        "--app",
        "billing",
        "--goal",
        "g\nline 2",
        "--agent",
        "agent-7",
        "--route",
        "r1",
        "--stage",
        "plan",
        "--tag",
        "x",
        "--tag",
        "y",
        "--tag",
        "x",
        "--context",
        r#"{"b":1,"a":[true,null]}"#,
        "--metadata",
        "{}",
    ]);
    let d = r.data();
    assert_eq!(keys_in_order(&r.stdout, &["data"]), SESSION_KEYS);
    assert_eq!(d["schema_version"], "1");
    assert_eq!(d["status"], "active");
    assert_eq!(d["rev"], 1);
    assert_eq!(d["title"], "ship billing v3");
    assert_eq!(d["goal"], "g\nline 2");
    assert_eq!(d["agent_id"], "agent-7");
    assert_eq!(d["tags"], serde_json::json!(["x", "y"]));
    assert_eq!(d["context"], serde_json::json!({"a":[true,null],"b":1}));
    assert_eq!(
        d["actor"],
        serde_json::json!({"type":"cli","id":null,"authenticated":false})
    );
    assert_eq!(d["checkpoint"], Value::Null);
    assert_eq!(d["ended_at_ms"], Value::Null);
    assert_eq!(d["created_at_ms"], d["updated_at_ms"]);
    let id = d["session_id"].as_str().unwrap();
    assert!(id.starts_with("ses_") && id.len() == 20);
    assert_eq!(event_types(&env, id), ["created"]);
    assert_eq!(r.stdout.lines().count(), 1);
}

#[test]
fn pending_start_pause_resume_checkpoint_complete() {
    let env = TestEnv::new();
    let id = env.create_with(&["--title", "t", "--pending"]);
    assert_eq!(
        env.json(&["session", "show", &id]).data()["session"]["status"],
        "pending"
    );
    let s = env.json(&["session", "start", &id, "--if-rev", "1"]).data();
    assert_eq!(
        (s["status"].as_str(), s["rev"].as_i64()),
        (Some("active"), Some(2))
    );
    let s = env
        .json(&["session", "pause", &id, "--reason", "lunch"])
        .data();
    assert_eq!(
        (s["status"].as_str(), s["rev"].as_i64()),
        (Some("paused"), Some(3))
    );
    let s = env.json(&["session", "resume", &id]).data();
    assert_eq!(
        (s["status"].as_str(), s["rev"].as_i64()),
        (Some("active"), Some(4))
    );
    let s = env
        .json(&[
            "session",
            "checkpoint",
            &id,
            "--step",
            "deploy",
            "--note",
            "canary at 10%",
            "--plan",
            "pln_1",
            "--operation",
            "op_1",
            "--deployment",
            "dep-1",
            "--plan",
            "pln_2",
            "--plan",
            "pln_1",
        ])
        .data();
    assert_eq!(s["rev"], 5);
    assert_eq!(s["checkpoint"]["step"], "deploy");
    assert_eq!(s["checkpoint"]["note"], "canary at 10%");
    assert_eq!(s["checkpoint"]["seq"], 4);
    assert_eq!(s["plan_ids"], serde_json::json!(["pln_1", "pln_2"]));
    assert_eq!(s["operation_ids"], serde_json::json!(["op_1"]));
    assert_eq!(s["deployment_ids"], serde_json::json!(["dep-1"]));
    // Linking again keeps first-linked order, without duplicates.
    let s = env
        .json(&[
            "session",
            "checkpoint",
            &id,
            "--plan",
            "pln_3",
            "--plan",
            "pln_2",
        ])
        .data();
    assert_eq!(
        s["plan_ids"],
        serde_json::json!(["pln_1", "pln_2", "pln_3"])
    );
    assert_eq!(s["checkpoint"]["step"], Value::Null);
    let s = env
        .json(&["session", "complete", &id, "--result", "shipped v3"])
        .data();
    assert_eq!(
        (s["status"].as_str(), s["rev"].as_i64()),
        (Some("completed"), Some(7))
    );
    assert_eq!(s["final_result"], "shipped v3");
    assert_eq!(s["ended_at_ms"], s["updated_at_ms"]);
    assert_eq!(
        event_types(&env, &id),
        [
            "created",
            "started",
            "paused",
            "resumed",
            "checkpoint",
            "checkpoint",
            "completed"
        ]
    );
    assert_rev_matches_events(&env, &id);
}

#[test]
fn fail_and_cancel_record_the_reason() {
    let env = TestEnv::new();
    let a = env.create("a");
    let s = env
        .json(&["session", "fail", &a, "--reason", "canary regressed"])
        .data();
    assert_eq!(
        (s["status"].as_str(), s["end_reason"].as_str()),
        (Some("failed"), Some("canary regressed"))
    );
    let b = env.create_with(&["--title", "b", "--pending"]);
    let s = env
        .json(&["session", "cancel", &b, "--reason", "superseded"])
        .data();
    assert_eq!(
        (s["status"].as_str(), s["rev"].as_i64()),
        (Some("cancelled"), Some(2))
    );
    let c = env.create("c");
    env.json(&["session", "pause", &c]).data();
    let s = env.json(&["session", "cancel", &c, "--reason", "r"]).data();
    assert_eq!(s["status"], "cancelled");
    assert_eq!(event_types(&env, &c), ["created", "paused", "cancelled"]);
}

#[test]
fn show_has_session_events_and_resolved() {
    let env = TestEnv::new();
    let parent = env.create("parent");
    let id = env.create_with(&["--title", "child", "--parent", &parent]);
    env.json(&[
        "session",
        "checkpoint",
        &id,
        "--step",
        "s1",
        "--plan",
        "pln_9",
    ])
    .data();
    let r = env.json(&["session", "show", &id]);
    let d = r.data();
    assert_eq!(
        keys_in_order(&r.stdout, &["data"]),
        [
            "session",
            "events",
            "resolved",
            "children",
            "purged_children",
            "blocking_gate",
            "lease"
        ]
    );
    assert_eq!(d["session"]["parent_session_id"], parent.as_str());
    let ev = d["events"].as_array().unwrap();
    assert_eq!(ev.len(), 2);
    assert_eq!(
        keys_in_order(&serde_json::to_string(&ev[1]).unwrap(), &[]).len(),
        9,
    );
    assert_eq!(ev[0]["seq"], 0);
    assert_eq!(ev[0]["type"], "created");
    assert_eq!(ev[1]["type"], "checkpoint");
    assert_eq!(
        ev[1]["data"],
        serde_json::json!({"step":"s1","plan_ids":["pln_9"]})
    );
    assert_eq!(ev[1]["actor_type"], "cli");
    assert_eq!(
        d["resolved"],
        serde_json::json!([
            {"kind":"session","id":parent,"state":"present"},
            {"kind":"plan","id":"pln_9","state":"unknown"}
        ])
    );
    // Deterministic: the same bytes twice.
    assert_eq!(env.show(&id), env.show(&id));
}

#[test]
fn events_pages_by_seq() {
    let env = TestEnv::new();
    let id = env.create("t");
    for i in 1..=5 {
        env.json(&[
            "session",
            "event",
            &id,
            "--type",
            "x.tick",
            "--detail",
            &format!("d{i}"),
        ])
        .data();
    }
    let p = env.json(&["session", "events", &id, "--limit", "2"]).data();
    let seqs: Vec<i64> = p["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!((seqs, p["next_after_seq"].as_i64()), (vec![0, 1], Some(1)));
    let p = env
        .json(&["session", "events", &id, "--after-seq", "3"])
        .data();
    let seqs: Vec<i64> = p["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(
        (seqs, p["next_after_seq"].clone()),
        (vec![4, 5], Value::Null)
    );
}

#[test]
fn custom_event_with_data() {
    let env = TestEnv::new();
    let id = env.create("t");
    let s = env
        .json(&[
            "session",
            "event",
            &id,
            "--type",
            "x.test_run",
            "--detail",
            "42 passed",
            "--data",
            r#"{"passed":42}"#,
        ])
        .data();
    assert_eq!(s["rev"], 2);
    let d = env
        .json(&["session", "events", &id, "--after-seq", "0"])
        .data();
    assert_eq!(d["events"][0]["type"], "x.test_run");
    assert_eq!(d["events"][0]["detail"], "42 passed");
    assert_eq!(d["events"][0]["data"], serde_json::json!({"passed":42}));
}

#[test]
fn json_flags_read_files_and_stdin() {
    let env = TestEnv::new();
    let f = env.dir.path().join("ctx.json");
    std::fs::write(&f, r#"{ "from": "file" }"#).unwrap();
    let arg = format!("@{}", f.display());
    let d = env
        .json(&["session", "create", "--title", "t", "--context", &arg])
        .data();
    assert_eq!(d["context"], serde_json::json!({"from":"file"}));
    let mut c = env.cli(&["session", "create", "--title", "t", "--metadata", "@-"]);
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"from":"stdin"}"#)
        .unwrap();
    let r = Run::from(child.wait_with_output().unwrap());
    assert_eq!(r.data()["metadata"], serde_json::json!({"from":"stdin"}));
}

#[test]
fn list_filters_order_and_human_table() {
    let env = TestEnv::new();
    let a = env.create_with(&[
        "--title", "alpha", "--app", "web", "--tag", "t1", "--agent", "ag1",
    ]);
    let b = env.create_with(&["--title", "beta", "--app", "api", "--tag", "t2"]);
    let c = env.create_with(&["--title", "gamma", "--app", "web", "--parent", &a]);
    env.json(&["session", "complete", &b, "--result", "ok"])
        .data();
    let ids = |args: &[&str]| -> Vec<String> {
        let mut v = vec!["session", "list"];
        v.extend_from_slice(args);
        env.json(&v).data()["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&[]), [c.clone(), b.clone(), a.clone()]);
    assert_eq!(ids(&["--app", "web"]), [c.clone(), a.clone()]);
    assert_eq!(ids(&["--status", "completed"]), [b.as_str()]);
    assert_eq!(
        ids(&["--status", "completed", "--status", "active"]),
        [c.clone(), b.clone(), a.clone()]
    );
    assert_eq!(ids(&["--tag", "t1"]), [a.as_str()]);
    assert_eq!(ids(&["--agent", "ag1"]), [a.as_str()]);
    assert_eq!(ids(&["--parent", &a]), [c.as_str()]);
    assert_eq!(
        ids(&["--order", "updated"]),
        [b.clone(), c.clone(), a.clone()]
    );
    assert_eq!(ids(&["--order", "updated", "--tag", "t2"]), [b.as_str()]);
    assert_eq!(
        ids(&[
            "--since",
            "2000-01-01T00:00:00Z",
            "--until",
            "2999-01-01T00:00:00+05:30"
        ])
        .len(),
        3
    );
    assert_eq!(ids(&["--until", "0"]).len(), 0);
    let page = env.json(&["session", "list", "--limit", "2"]).data();
    assert_eq!(page["sessions"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    assert_eq!(ids(&["--limit", "2", "--cursor", &cursor]), [a.as_str()]);
    // Human output is a table with a header row.
    let r = env.run(&["session", "list"]);
    assert_eq!(r.code, 0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[0].starts_with("SESSION")
            && lines[0].contains("STATUS")
            && lines[0].ends_with("TITLE")
    );
    assert_eq!(lines.len(), 4);
    assert!(lines[1].starts_with(&c));
    let col = lines[0].find("TITLE").unwrap();
    assert!(lines[1..].iter().all(|l| l.chars().count() > col));
}

#[test]
fn human_output_times_are_rfc3339_utc() {
    let env = TestEnv::new();
    let id = env.create("t");
    let r = env.run(&["session", "show", &id]);
    assert_eq!(r.code, 0);
    let created = r.stdout.lines().find(|l| l.starts_with("created")).unwrap();
    let ts = created.split_whitespace().nth(1).unwrap();
    assert!(ts.ends_with('Z') && ts.len() == 24, "{ts}");
}

/// `session list`'s human table shows the time it is sorted by: CREATED by
/// default, UPDATED with `--order updated`.
#[test]
fn list_shows_the_time_column_it_sorts_by() {
    let env = TestEnv::new();
    let a = env.create("first");
    let b = env.create("second");
    // a is updated after b was created: the two orders differ.
    env.checkpoint(&a, "later");
    let time_of = |id: &str, key: &str| {
        let s = env.json(&["session", "show", id]).data()["session"].clone();
        logbook::clock::format_ms(s[key].as_i64().unwrap())
    };
    let table = |args: &[&str]| -> Vec<Vec<String>> {
        let mut v = vec!["session", "list"];
        v.extend_from_slice(args);
        let r = env.run(&v);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
            .lines()
            .map(|l| l.split_whitespace().take(4).map(str::to_owned).collect())
            .collect()
    };
    let rows = table(&[]);
    assert_eq!(rows[0], ["SESSION", "STATUS", "REV", "CREATED"]);
    assert_eq!(
        rows[1],
        [
            b.clone(),
            "active".into(),
            "1".into(),
            time_of(&b, "created_at_ms")
        ]
    );
    assert_eq!(
        rows[2],
        [
            a.clone(),
            "active".into(),
            "2".into(),
            time_of(&a, "created_at_ms")
        ]
    );
    assert_ne!(time_of(&a, "created_at_ms"), time_of(&a, "updated_at_ms"));
    let rows = table(&["--order", "updated"]);
    assert_eq!(rows[0], ["SESSION", "STATUS", "REV", "UPDATED"]);
    assert_eq!(
        rows[1],
        [
            a.clone(),
            "active".into(),
            "2".into(),
            time_of(&a, "updated_at_ms")
        ]
    );
    assert_eq!(
        rows[2],
        [
            b.clone(),
            "active".into(),
            "1".into(),
            time_of(&b, "updated_at_ms")
        ]
    );
}
