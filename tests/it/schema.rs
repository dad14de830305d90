//! The schema as a public interface: triggers that hold against raw SQL,
//! its declarations (unique seqs, STRICT tables, the status and actor
//! CHECK lists), stock SQLite 3.40 readers, and statements that prepare and
//! are never re-prepared. Query plans are in `schema_plans.rs`;
//! docs/schema.md, migrations and pragmas in `schema_migrations.rs`.

use crate::common::*;
use logbook::SessionStatus;
use rusqlite::Connection;

fn abort_msg(c: &Connection, sql: &str) -> String {
    match c.execute_batch(sql) {
        Ok(()) => panic!("raw SQL was allowed: {sql}"),
        Err(e) => e.to_string(),
    }
}

fn setup() -> (TestEnv, String, String) {
    let env = TestEnv::new();
    let live = env.create("live");
    env.checkpoint(&live, "s1");
    let done = env.create("done");
    env.json(&["session", "complete", &done, "--result", "r"])
        .data();
    (env, live, done)
}

#[test]
fn raw_sql_cannot_modify_or_remove_events() {
    let (env, live, _) = setup();
    let c = env.sql();
    let before: Vec<(i64, String, i64, String)> = {
        let mut st = c
            .prepare("SELECT event_id, session_id, seq, type FROM events ORDER BY event_id")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    for sql in [
        format!("UPDATE events SET detail = 'x' WHERE session_id = '{live}'"),
        "UPDATE events SET seq = seq + 100".to_owned(),
        "UPDATE events SET event_id = event_id + 1000".to_owned(),
        format!("DELETE FROM events WHERE session_id = '{live}'"),
        "DELETE FROM events".to_owned(),
        format!("REPLACE INTO events (event_id, session_id, seq, type, at_ms, actor_type) SELECT event_id, session_id, seq, 'x.evil', at_ms, actor_type FROM events WHERE session_id = '{live}' AND seq = 1"),
        format!("INSERT OR REPLACE INTO events (session_id, seq, type, at_ms, actor_type) VALUES ('{live}', 1, 'x.evil', 0, 'cli')"),
    ] {
        let msg = abort_msg(&c, &sql);
        assert!(msg.contains("logbook:") || msg.contains("UNIQUE"), "{sql}: {msg}");
    }
    let after: Vec<(i64, String, i64, String)> = {
        let mut st = c
            .prepare("SELECT event_id, session_id, seq, type FROM events ORDER BY event_id")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(before, after);
}

#[test]
fn raw_sql_cannot_insert_a_seq_gap_or_duplicate() {
    let (env, live, _) = setup();
    let c = env.sql();
    for seq in [3, 5, 0, 1, -1] {
        let sql = format!(
            "INSERT INTO events (session_id, seq, type, at_ms, actor_type) VALUES ('{live}', {seq}, 'x.raw', 0, 'cli')"
        );
        let msg = abort_msg(&c, &sql);
        assert!(
            msg.contains("previous max seq + 1") || msg.contains("CHECK"),
            "{msg}"
        );
    }
    // The next seq without a hash, or with a prev_hash that is not the
    // previous event's hash, is refused too…
    let msg = abort_msg(&c, &format!(
        "INSERT INTO events (session_id, seq, type, at_ms, actor_type) VALUES ('{live}', 2, 'x.raw', 0, 'cli')"
    ));
    assert!(msg.contains("prev_hash"), "{msg}");
    let msg = abort_msg(&c, &format!(
        "INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash, hash) VALUES ('{live}', 2, 'x.raw', 0, 'cli', zeroblob(32), zeroblob(32))"
    ));
    assert!(msg.contains("prev_hash"), "{msg}");
    // …a correctly chained next event is allowed (raw appends are possible,
    // gaps are not)…
    raw_append(&c, &live, "x.raw", b"raw");
    // …and a brand-new session's first event must be seq 0.
    let msg = abort_msg(&c, "INSERT INTO events (session_id, seq, type, at_ms, actor_type) VALUES ('ses_00000000000000aa', 1, 'x', 0, 'cli')");
    assert!(msg.contains("previous max seq + 1"), "{msg}");
}

#[test]
fn raw_sql_cannot_update_terminal_delete_or_skip_revs() {
    let (env, live, done) = setup();
    let c = env.sql();
    let msg = abort_msg(
        &c,
        &format!("UPDATE sessions SET title = 'x', rev = rev + 1 WHERE session_id = '{done}'"),
    );
    assert!(msg.contains("terminal"), "{msg}");
    let msg = abort_msg(
        &c,
        &format!(
            "UPDATE sessions SET status = 'active', rev = rev + 1 WHERE session_id = '{done}'"
        ),
    );
    assert!(msg.contains("terminal"), "{msg}");
    for sql in [
        format!("DELETE FROM sessions WHERE session_id = '{live}'"),
        format!("DELETE FROM sessions WHERE session_id = '{done}'"),
    ] {
        assert!(abort_msg(&c, &sql).contains("never deleted"));
    }
    for sql in [
        format!("UPDATE sessions SET title = 'x' WHERE session_id = '{live}'"),
        format!("UPDATE sessions SET rev = rev + 2 WHERE session_id = '{live}'"),
        format!("UPDATE sessions SET rev = rev - 1 WHERE session_id = '{live}'"),
        format!("UPDATE sessions SET rev = 1 WHERE session_id = '{live}'"),
        format!("UPDATE sessions SET session_id = 'ses_00000000000000bb', rev = rev + 1 WHERE session_id = '{live}'"),
    ] {
        assert!(abort_msg(&c, &sql).contains("rev = rev + 1"), "{sql}");
    }
    assert_eq!(rev_and_events(&env, &live).0, 2);
    // +1 is allowed, exactly.
    c.execute_batch(&format!(
        "UPDATE sessions SET title = 'renamed', rev = rev + 1 WHERE session_id = '{live}'"
    ))
    .unwrap();
    assert_eq!(rev_and_events(&env, &live).0, 3);
    let n: i64 = c
        .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2);
}

#[test]
fn schema_declares_unique_session_seq_and_strict_tables() {
    let (env, _, _) = setup();
    let c = env.sql();
    let uniq: i64 = c
        .query_row("SELECT \"unique\" FROM pragma_index_list('events') WHERE name = 'events_by_session_seq'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(uniq, 1);
    let mut st = c.prepare("SELECT name, strict FROM pragma_table_list WHERE schema = 'main' AND type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'refinery_schema_history' ORDER BY name").unwrap();
    let tables: Vec<(String, i64)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // Every table is STRICT; later migrations add tables, so the core ones
    // are checked by name and the rest by the rule.
    for name in [
        "events",
        "idempotency_keys",
        "session_data",
        "session_refs",
        "session_tags",
        "sessions",
    ] {
        assert!(tables.iter().any(|(t, _)| t == name), "{name}: {tables:?}");
    }
    assert!(tables.iter().all(|(_, strict)| *strict == 1), "{tables:?}");
}

#[test]
fn status_check_list_matches_the_enum() {
    let (env, _, _) = setup();
    let sql: String = env
        .sql()
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'sessions'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let names: Vec<String> = SessionStatus::VARIANTS
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    // The CHECK is an OR chain (see the migration); compare its values,
    // whitespace-insensitively, with the enum.
    let flat = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let chain: Vec<String> = names.iter().map(|n| format!("status = {n}")).collect();
    assert!(
        flat.contains(&format!("CHECK ({})", chain.join(" OR "))),
        "{flat}"
    );
    let actors: Vec<String> = logbook::ActorType::VARIANTS
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    let actors: Vec<String> = actors.iter().map(|a| format!("actor_type = {a}")).collect();
    assert!(sql.contains(&actors.join(" OR ")), "{sql}");
}

#[test]
fn every_sql_const_prepares() {
    let env = TestEnv::new();
    env.create("t");
    let c = env.sql();
    use logbook::store::sqlite::sql::{events as e, sessions as s};
    // The guarded UPDATE of every verb, as the write kernel builds it.
    let updates: Vec<String> = logbook::model::Verb::VARIANTS
        .iter()
        .map(|v| {
            let guard = logbook::store::SessionGuard {
                from: v.allowed_from(),
                rev: Some(1),
            };
            logbook::store::sqlite::tx::session_update("x", guard, &Default::default()).0
        })
        .collect();
    for sql in updates.iter().map(String::as_str).chain([
        s::SELECT_SESSION,
        s::SELECT_SESSION_BY_SEQ,
        s::SELECT_SESSION_DATA,
        s::SELECT_CHECKPOINT,
        s::INSERT_SESSION,
        s::INSERT_SESSION_DATA,
        s::INSERT_TAG,
        s::SESSION_EXISTS,
        s::SELECT_STATUS_REV,
        s::SELECT_REFS,
        s::COUNT_REFS,
        s::REF_EXISTS,
        s::INSERT_REF,
        e::INSERT_EVENT,
        e::SELECT_EVENTS,
        e::SELECT_LATEST_EVENT,
        e::SELECT_BY_KEY,
        e::SELECT_CREATED_BY_KEY,
        e::INSERT_KEY,
        e::SELECT_NEXT_EVENT,
    ]) {
        c.prepare(sql).unwrap_or_else(|err| panic!("{err}: {sql}"));
    }
}

/// Stock SQLite 3.40 (Debian 12's shell, Python 3.11's module) opens the
/// schema, reads every table, and enforces the triggers.
#[test]
fn stock_sqlite_readers_open_the_schema() {
    let (env, live, _) = setup();
    let script = format!(
        r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(sqlite3.sqlite_version)
names = [r[0] for r in c.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
for n in names:
    c.execute('SELECT * FROM "%s"' % n).fetchall()
print(c.execute("SELECT count(*) FROM events WHERE session_id = ?", ("{live}",)).fetchone()[0])
try:
    c.execute("DELETE FROM events")
    print("deleted")
except sqlite3.DatabaseError as e:
    print("refused:", e)
"#
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(&script)
        .arg(env.path())
        .output()
        .expect("python3");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[1..],
        [
            "2",
            "refused: logbook: events are append-only; DELETE is allowed only for a purged session (a tombstone written in the same transaction)"
        ]
    );
    let out = std::process::Command::new("sqlite3")
        .arg(env.path())
        .arg("SELECT count(*) FROM sessions; SELECT type FROM events ORDER BY event_id LIMIT 1;")
        .output()
        .expect("sqlite3 shell");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "2\ncreated\n");
}

/// Hot statements stay prepared: run through the statement cache with
/// changing bindings and writes in between, none is re-prepared (a cached
/// join or a partial index would make SQLite recompile it on every call).
#[test]
fn hot_statements_are_never_reprepared() {
    use logbook::store::sqlite::sql::list::{build, ListQuery, Order};
    use logbook::store::sqlite::sql::{events as e, sessions as s};
    use rusqlite::{params_from_iter, types::Value, StatementStatus};
    let env = TestEnv::new();
    let ids: Vec<String> = (0..4)
        .map(|i| env.create_with(&["--title", &format!("t{i}"), "--app", "a", "--tag", "x"]))
        .collect();
    for id in &ids {
        env.json(&["session", "checkpoint", id, "--step", "s", "--plan", "p1"])
            .data();
    }
    let c = env.sql();
    let lists: Vec<ListQuery> = vec![
        ListQuery {
            limit: 20,
            ..Default::default()
        },
        ListQuery {
            statuses: vec!["active".into()],
            app: Some("a".into()),
            limit: 20,
            ..Default::default()
        },
        ListQuery {
            tag: Some("x".into()),
            limit: 20,
            ..Default::default()
        },
        ListQuery {
            tag: Some("x".into()),
            statuses: vec!["active".into()],
            limit: 20,
            ..Default::default()
        },
        ListQuery {
            order: Order::Updated,
            statuses: vec!["active".into()],
            limit: 20,
            after: Some((i64::MAX, 1 << 40)),
            ..Default::default()
        },
    ];
    type Binder<'a> = Box<dyn Fn(usize) -> Vec<Value> + 'a>;
    let mut cases: Vec<(String, Binder<'_>)> = Vec::new();
    let id_at = |i: usize| Value::Text(ids[i % ids.len()].clone());
    cases.push((s::SELECT_SESSION.into(), Box::new(move |i| vec![id_at(i)])));
    cases.push((
        s::SELECT_SESSION_BY_SEQ.into(),
        Box::new(|i| vec![Value::Integer(i as i64 % 4 + 1)]),
    ));
    cases.push((
        s::SELECT_SESSION_DATA.into(),
        Box::new(|i| vec![Value::Integer(i as i64 % 4 + 1)]),
    ));
    cases.push((
        s::SELECT_CHECKPOINT.into(),
        Box::new(move |i| vec![id_at(i), Value::Integer(1)]),
    ));
    cases.push((s::SELECT_REFS.into(), Box::new(move |i| vec![id_at(i)])));
    // The rest of `session show`'s path.
    use logbook::store::sqlite::sql::workflow as w;
    for sql in [w::SELECT_PENDING_GATE, w::SELECT_LEASE, w::SELECT_CHILDREN] {
        cases.push((sql.into(), Box::new(move |i| vec![id_at(i)])));
    }
    cases.push((
        e::SELECT_NEXT_EVENT.into(),
        Box::new(move |i| vec![id_at(i)]),
    ));
    cases.push((
        e::SELECT_EVENTS.into(),
        Box::new(move |i| vec![id_at(i), Value::Integer(-1), Value::Integer(100)]),
    ));
    for q in &lists {
        let (sql, params, _) = build(q);
        cases.push((
            sql,
            Box::new(move |i| {
                let mut p = params.clone();
                // Vary a cursor-like bound where there is one.
                if let Some(Value::Integer(n)) = p.last_mut() {
                    *n -= i as i64 % 3;
                }
                p
            }),
        ));
    }
    for (sql, bind) in &cases {
        for i in 0..6 {
            {
                let mut st = c.prepare_cached(sql).unwrap();
                let mut rows = st.query(params_from_iter(bind(i))).unwrap();
                while rows.next().unwrap().is_some() {}
            }
            c.execute_batch(
                "BEGIN IMMEDIATE; UPDATE sessions SET rev = rev + 1 WHERE insert_seq = 1; COMMIT;",
            )
            .unwrap();
        }
        let st = c.prepare_cached(sql).unwrap();
        assert_eq!(
            st.get_status(StatementStatus::RePrepare),
            0,
            "re-prepared: {sql}"
        );
        assert_eq!(st.get_status(StatementStatus::Run), 6, "{sql}");
    }
}

/// The conditional UPDATEs stay prepared too (run inside rolled-back
/// transactions with changing bindings): every shape the write kernel
/// builds, guarded and not.
#[test]
fn conditional_updates_are_never_reprepared() {
    use logbook::model::{SessionStatus, Usage, Verb};
    use logbook::store::sqlite::tx::session_update;
    use logbook::store::{SessionChange, SessionGuard};
    use rusqlite::StatementStatus;
    let env = TestEnv::new();
    let ids: Vec<String> = (0..3).map(|i| env.create(&format!("t{i}"))).collect();
    let c = env.sql();
    let usage = Usage {
        input_tokens: 5,
        ..Usage::default()
    };
    let shapes: Vec<(Verb, SessionChange<'static>)> = vec![
        (
            Verb::Pause,
            SessionChange {
                status: Some(SessionStatus::Paused),
                ..SessionChange::default()
            },
        ),
        (
            Verb::Complete,
            SessionChange {
                status: Some(SessionStatus::Completed),
                final_result: Some("r"),
                ..SessionChange::default()
            },
        ),
        (
            Verb::Fail,
            SessionChange {
                status: Some(SessionStatus::Failed),
                end_reason: Some("r"),
                ..SessionChange::default()
            },
        ),
        (
            Verb::Checkpoint,
            SessionChange {
                checkpoint_at_next_seq: true,
                ..SessionChange::default()
            },
        ),
        (Verb::AppendEvent, SessionChange::default()),
        (
            Verb::Stage,
            SessionChange {
                stage: Some(Some("build")),
                ..SessionChange::default()
            },
        ),
        (
            Verb::Usage,
            SessionChange {
                usage: Some(usage),
                ..SessionChange::default()
            },
        ),
    ];
    for (verb, change) in shapes {
        for rev in [None, Some(1)] {
            let mut sql = String::new();
            for i in 0..5 {
                let change = SessionChange {
                    now_ms: 1_000 + i as i64,
                    ..change
                };
                let guard = SessionGuard {
                    from: verb.allowed_from(),
                    rev,
                };
                let (text, p) = session_update(&ids[i % 3], guard, &change);
                sql = text;
                c.execute_batch("BEGIN IMMEDIATE").unwrap();
                c.prepare_cached(&sql)
                    .unwrap()
                    .execute(rusqlite::params_from_iter(p.iter()))
                    .unwrap();
                c.execute_batch("ROLLBACK").unwrap();
            }
            let st = c.prepare_cached(&sql).unwrap();
            assert_eq!(
                st.get_status(StatementStatus::RePrepare),
                0,
                "re-prepared: {sql}"
            );
        }
    }
}
