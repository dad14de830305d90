//! No conflict clause removes or replaces a ledger row (docs/schema.md,
//! "Append-only"). SQLite's REPLACE resolution deletes the row a new one
//! conflicts with without firing delete triggers (unless the connection
//! turned `recursive_triggers` on, which the `sqlite3` shell does not), so
//! the schema refuses a taken key before any conflict is resolved: every
//! table with a unique key or index is tried from the stock `sqlite3`
//! shell with every conflict clause, and the whole database must read the
//! same afterwards. On PostgreSQL, `ON CONFLICT DO UPDATE` is an UPDATE
//! and meets the same triggers: the same sweep with `ON CONFLICT`.
//!
//! `session_leases` is left out: a lease is the one piece of mutable
//! state (taken, renewed and released in place, each change recorded as
//! an event), not a record.

use crate::common::*;
use crate::purge::{ended, purge};

/// A ledger with rows in every table: a live session (tags, references,
/// an idempotency key, a snapshot, a running and a finished run, a budget,
/// a gate), the same ended, and a purge (purges, tombstones, purge_ends).
/// Returns the live and the ended session's ids.
fn every_table(env: &TestEnv) -> (String, String) {
    let mk = |title: &str| {
        let id = env.create_with(&[
            "--title",
            title,
            "--app",
            "a",
            "--tag",
            "t1",
            "--tag",
            "t2",
            "--idempotency-key",
            title,
        ]);
        env.json(&[
            "session",
            "checkpoint",
            &id,
            "--step",
            "s1",
            "--plan",
            "p1",
            "--plan",
            "p2",
            "--state",
            r#"{"x":1}"#,
        ])
        .data();
        env.json(&[
            "session",
            "checkpoint",
            &id,
            "--step",
            "s2",
            "--state",
            r#"{"x":2}"#,
        ])
        .data();
        let done = env.json(&["run", "create", &id]).data()["run_id"]
            .as_str()
            .unwrap()
            .to_owned();
        env.json(&["run", "start", &done]).data();
        env.json(&["run", "complete", &done]).data();
        let running = env.json(&["run", "create", &id]).data()["run_id"]
            .as_str()
            .unwrap()
            .to_owned();
        env.json(&["run", "start", &running]).data();
        env.json(&["session", "budget", &id, "--max-tokens", "1000"])
            .data();
        env.json(&["gate", "open", &id, "--gate", "g", "--kind", "auto"])
            .data();
        id
    };
    let live = mk("live");
    let over = mk("over");
    env.json(&["session", "complete", &over, "--result", "ok"])
        .data();
    ended(env, "gone", None);
    purge(env, &["--app", "gone"]);
    (live, over)
}

/// The tables with a unique key or index (all but `session_leases`), and
/// for each, copies of existing rows that take one key or all of them
/// (SQL that fills the temp table `x` from the table, `{L}` the live
/// session, `{E}` the ended one).
fn variants() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        (
            "sessions",
            vec![
                "SELECT * FROM sessions WHERE session_id = '{L}'",
                "SELECT * FROM sessions WHERE session_id = '{E}'",
                // The id alone, then the insert_seq alone.
                "SELECT * FROM sessions WHERE session_id = '{L}'; UPDATE x SET insert_seq = insert_seq + 1000",
                "SELECT * FROM sessions WHERE session_id = '{L}'; UPDATE x SET session_id = 'ses_00000000000000ff'",
            ],
        ),
        (
            "session_data",
            vec![
                "SELECT * FROM session_data WHERE session_id = '{L}'",
                "SELECT * FROM session_data WHERE session_id = '{E}'",
            ],
        ),
        (
            "session_tags",
            vec!["SELECT * FROM session_tags WHERE session_id = '{L}'"],
        ),
        (
            "session_refs",
            vec![
                "SELECT * FROM session_refs WHERE session_id = '{L}'",
                // The ordinal alone.
                "SELECT * FROM session_refs WHERE session_id = '{L}' AND ordinal = 0; UPDATE x SET ref_id = 'p9'",
            ],
        ),
        (
            "events",
            vec![
                "SELECT * FROM events WHERE session_id = '{L}' AND seq = 1",
                // The seq alone (a new event_id).
                "SELECT * FROM events WHERE session_id = '{L}' AND seq = 1; UPDATE x SET event_id = event_id + 100000",
            ],
        ),
        (
            "idempotency_keys",
            vec!["SELECT * FROM idempotency_keys WHERE session_id = '{L}'"],
        ),
        (
            "runs",
            vec![
                "SELECT * FROM runs WHERE session_id = '{L}'",
                "SELECT * FROM runs WHERE session_id = '{E}'",
                // The one running run of a session, under new keys.
                "SELECT * FROM runs WHERE session_id = '{L}' AND status = 'running'; UPDATE x SET insert_seq = insert_seq + 1000, run_id = 'run_00000000000000ff'",
            ],
        ),
        (
            "session_budgets",
            vec![
                "SELECT * FROM session_budgets WHERE session_id = '{L}'",
                "SELECT * FROM session_budgets WHERE session_id = '{E}'",
            ],
        ),
        (
            "session_snapshots",
            vec![
                "SELECT * FROM session_snapshots WHERE session_id = '{L}'",
                // The checkpoint's seq alone (a new snapshot_id).
                "SELECT * FROM session_snapshots WHERE session_id = '{L}' AND seq = 1; UPDATE x SET snapshot_id = snapshot_id + 1000, state = '{\"x\":9}'",
            ],
        ),
        (
            "session_gates",
            vec![
                "SELECT * FROM session_gates WHERE session_id = '{L}'",
                "SELECT * FROM session_gates WHERE session_id = '{L}'; UPDATE x SET gate_id = gate_id + 1000",
            ],
        ),
        ("purges", vec!["SELECT * FROM purges"]),
        ("tombstones", vec!["SELECT * FROM tombstones"]),
        ("purge_ends", vec!["SELECT * FROM purge_ends"]),
    ]
}

/// The copy, as statements that build `x`.
fn fill_x(variant: &str, live: &str, over: &str) -> String {
    let v = variant.replace("{L}", live).replace("{E}", over);
    let (select, rest) = v.split_once("; ").unwrap_or((v.as_str(), ""));
    let mut sql = format!("CREATE TEMP TABLE x AS {select};");
    if !rest.is_empty() {
        sql.push_str(rest);
        sql.push(';');
    }
    sql
}

sqlite_only! {
    /// The whole database as the `sqlite3` shell dumps it.
    fn dump(env: &TestEnv) -> String {
        let out = std::process::Command::new("sqlite3")
            .arg(env.path())
            .arg(".dump")
            .output()
            .expect("sqlite3");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `sql` in the stock `sqlite3` shell (no logbook code: foreign
    /// keys and recursive triggers off, as it starts); whether it failed.
    fn shell(env: &TestEnv, sql: &str) -> (bool, String) {
        let out = std::process::Command::new("sqlite3")
            .arg("-bail")
            .arg(env.path())
            .arg(sql)
            .output()
            .expect("sqlite3");
        (
            !out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn no_conflict_clause_replaces_or_removes_a_row_from_the_sqlite3_shell() {
        let env = TestEnv::new();
        let (live, over) = every_table(&env);
        let before = dump(&env);
        let mut tried = 0;
        for (table, copies) in variants() {
            for copy in copies {
                let x = fill_x(copy, &live, &over);
                let clauses = [
                    (format!("INSERT OR REPLACE INTO {table} SELECT * FROM x"), true),
                    (format!("REPLACE INTO {table} SELECT * FROM x"), true),
                    (
                        format!("INSERT OR REPLACE INTO {table} SELECT * FROM x WHERE true ON CONFLICT DO NOTHING"),
                        false,
                    ),
                    (format!("INSERT OR IGNORE INTO {table} SELECT * FROM x"), false),
                    (format!("INSERT OR FAIL INTO {table} SELECT * FROM x"), false),
                    (format!("INSERT OR ABORT INTO {table} SELECT * FROM x"), false),
                    (format!("INSERT OR ROLLBACK INTO {table} SELECT * FROM x"), false),
                    (format!("INSERT INTO {table} SELECT * FROM x WHERE true ON CONFLICT DO NOTHING"), false),
                ];
                for (stmt, must_fail) in clauses {
                    let (failed, err) = shell(&env, &format!("{x} {stmt};"));
                    if must_fail {
                        assert!(failed, "{stmt} ({copy}) ran");
                        assert!(err.contains("logbook: "), "{stmt}: {err}");
                    }
                    assert_eq!(dump(&env), before, "{stmt} ({copy}) changed the database");
                    tried += 1;
                }
            }
            // UPDATE OR REPLACE onto another row's key.
            let keyed = [
                ("sessions", "session_id"),
                ("sessions", "insert_seq"),
                ("session_data", "insert_seq"),
                ("runs", "run_id"),
                ("runs", "insert_seq"),
                ("session_budgets", "session_id"),
                ("session_snapshots", "snapshot_id"),
                ("session_gates", "gate_id"),
                ("events", "event_id"),
                ("purges", "purge_id"),
            ];
            for (t, k) in keyed.iter().filter(|(t, _)| *t == table) {
                for resolve in ["OR REPLACE", "OR IGNORE", "OR FAIL"] {
                    let stmt = format!(
                        "UPDATE {resolve} {t} SET {k} = (SELECT max({k}) FROM {t}) \
                         WHERE {k} = (SELECT min({k}) FROM {t})"
                    );
                    let (failed, err) = shell(&env, &format!("{stmt};"));
                    assert!(failed, "{stmt} ran: {err}");
                    assert_eq!(dump(&env), before, "{stmt} changed the database");
                    tried += 1;
                }
            }
            // A status change that takes the one running run's place.
            if table == "runs" {
                let stmt = format!(
                    "UPDATE OR REPLACE runs SET status = 'running' \
                     WHERE session_id = '{live}' AND status <> 'running'"
                );
                let (failed, _) = shell(&env, &format!("{stmt};"));
                assert!(failed, "{stmt} ran");
                assert_eq!(dump(&env), before, "{stmt} changed the database");
            }
        }
        assert!(tried > 200, "{tried} statements tried");
        env.json(&["verify"]).data();
    }
}

pg_only! {
    /// Every ledger table's rows, as text, in a fixed order (the server).
    fn pg_fingerprint(env: &TestEnv) -> Vec<(String, String)> {
        let mut c = env.pg_client();
        off_runtime(|| {
            variants()
                .into_iter()
                .map(|(t, _)| {
                    let sql = format!(
                        "SELECT coalesce(string_agg(r::text, E'\\n' ORDER BY r::text), '') FROM {t} r"
                    );
                    let text: String = c.query_one(&sql, &[]).unwrap().get(0);
                    (t.to_owned(), text)
                })
                .collect()
        })
    }

    #[test]
    fn no_on_conflict_clause_replaces_or_removes_a_row_on_the_server() {
        let env = TestEnv::new();
        let (live, over) = every_table(&env);
        let before = pg_fingerprint(&env);
        let mut tried = 0;
        let mut c = env.pg_client();
        for (table, copies) in variants() {
            // The table's unique keys: conflict targets (with a partial index's
            // predicate).
            let keys: Vec<String> = off_runtime(|| {
                c.query(
                    "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i \
                     WHERE i.indrelid = $1::text::regclass AND i.indisunique",
                    &[&table],
                )
                .unwrap()
                .iter()
                .map(|r| {
                    let def: String = r.get(0);
                    // "CREATE UNIQUE INDEX n ON public.t USING btree (a, b) WHERE (…)"
                    let cols = def.split_once(" USING btree ").unwrap().1.to_owned();
                    cols
                })
                .collect()
            });
            assert!(!keys.is_empty(), "{table} has no unique key");
            for copy in copies {
                let x = fill_x(copy, &live, &over);
                let cols: Vec<String> = off_runtime(|| {
                    c.query(
                        "SELECT column_name::text FROM information_schema.columns \
                         WHERE table_name = $1 AND table_schema = current_schema() \
                         ORDER BY ordinal_position",
                        &[&table],
                    )
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect()
                });
                let set = cols
                    .iter()
                    .map(|k| format!("{k} = excluded.{k}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let mut stmts = vec![format!(
                    "INSERT INTO {table} SELECT * FROM x ON CONFLICT DO NOTHING"
                )];
                for key in &keys {
                    stmts.push(format!(
                        "INSERT INTO {table} SELECT * FROM x ON CONFLICT {key} DO UPDATE SET {set}"
                    ));
                    stmts.push(format!(
                        "INSERT INTO {table} SELECT * FROM x ON CONFLICT {key} DO NOTHING"
                    ));
                }
                for stmt in stmts {
                    let sql = format!("BEGIN; {x} {stmt}; COMMIT;");
                    let r = off_runtime(|| c.batch_execute(&sql));
                    if r.is_err() {
                        off_runtime(|| c.batch_execute("ROLLBACK")).ok();
                    }
                    off_runtime(|| c.batch_execute("DROP TABLE IF EXISTS x")).ok();
                    assert_eq!(
                        pg_fingerprint(&env),
                        before,
                        "{stmt} ({copy}) changed the database: {r:?}"
                    );
                    tried += 1;
                }
            }
        }
        assert!(tried > 40, "{tried} statements tried");
        env.json(&["verify"]).data();
    }
}
