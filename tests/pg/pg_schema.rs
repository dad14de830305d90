//! The PostgreSQL schema on a real server (docs/design.md, "Backends"): the same tables,
//! columns, views, indexes and triggers as a fresh SQLite database, and
//! `store::postgres::migrate` — once per version when 16 processes race on
//! a new database, a no-op when current, refusing newer, divergent and
//! foreign schemas without writing, under the advisory lock, released on
//! error. The raw-SQL invariants are in `pg_triggers`.

use crate::pg::{connect, pg_test_db, with_database, with_user, PgDb};
use logbook::store::postgres::migrate::{migrate, MIGRATION_LOCK_KEY};
use logbook::store::LATEST_VERSION;
use logbook::ErrorCode;
use std::collections::BTreeMap;

/// A fresh database on the test server, migrated.
fn migrated() -> Option<(PgDb, postgres::Client)> {
    let db = pg_test_db()?;
    let mut c = db.connect();
    migrate(&mut c).unwrap();
    Some((db, c))
}

/// A fresh SQLite ledger, as `Ledger::open` builds it.
fn sqlite() -> (tempfile::TempDir, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    drop(logbook::Ledger::open(logbook::LedgerOptions::at(&path)).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    (dir, c)
}

/// The password in `LOGBOOK_TEST_PG`, to check that no message holds it.
fn password() -> String {
    let url = std::env::var(crate::pg::ENV).unwrap_or_default();
    let userinfo = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split_once('@'))
        .map_or("", |(u, _)| u);
    userinfo.split_once(':').map_or("", |(_, p)| p).to_owned()
}

/// Asserts that `migrate` refuses with `code`, and that its message holds
/// no password; returns the message.
#[track_caller]
fn assert_refused(c: &mut postgres::Client, code: ErrorCode) -> String {
    let e = migrate(c).expect_err("migrate should refuse");
    let msg = e.to_string();
    assert_eq!(e.code(), code, "{msg}");
    let pw = password();
    assert!(
        pw.is_empty() || !msg.contains(&pw),
        "the message holds the password"
    );
    msg
}

type History = Vec<(i32, String, String, String)>;

fn history(c: &mut postgres::Client) -> History {
    c.query(
        "SELECT version, name, applied_on, checksum FROM refinery_schema_history ORDER BY version",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

/// Tables and views with their columns in order: SQLite's.
fn sqlite_relations(c: &rusqlite::Connection) -> BTreeMap<String, (String, Vec<String>)> {
    let mut st = c
        .prepare("SELECT name, type FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'")
        .unwrap();
    let rels: Vec<(String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut cols = c
        .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
        .unwrap();
    rels.into_iter()
        .map(|(name, kind)| {
            let names = cols
                .query_map([&name], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (name, (kind, names))
        })
        .collect()
}

/// Tables and views with their columns in order: PostgreSQL's (the
/// current schema), but the columns only PostgreSQL has.
fn pg_relations(c: &mut postgres::Client) -> BTreeMap<String, (String, Vec<String>)> {
    const PG_ONLY: [(&str, &str); 2] = [("events", "tx_id"), ("tombstones", "tx_id")];
    let mut out: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for r in c
        .query(
            "SELECT c.relname::text, CASE c.relkind WHEN 'v' THEN 'view' ELSE 'table' END, a.attname::text
             FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
             WHERE c.relnamespace = to_regnamespace(current_schema()) AND c.relkind IN ('r', 'v')
               AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY c.relname, a.attnum",
            &[],
        )
        .unwrap()
    {
        let (rel, kind, col): (String, String, String) = (r.get(0), r.get(1), r.get(2));
        let entry = out.entry(rel.clone()).or_insert_with(|| (kind, Vec::new()));
        if !PG_ONLY.contains(&(rel.as_str(), col.as_str())) {
            entry.1.push(col);
        }
    }
    out
}

#[test]
fn pg_migrate_creates_every_sqlite_table_view_and_column_in_order() {
    let Some((_db, mut c)) = migrated() else {
        return;
    };
    let (_dir, s) = sqlite();
    let want = sqlite_relations(&s);
    assert!(want.len() > 10, "{want:?}");
    assert_eq!(pg_relations(&mut c), want);
    // The one PostgreSQL-only column, for the feed.
    let tx: String = c
        .query_one(
            "SELECT format_type(atttypid, atttypmod) || ' ' || attnotnull::text FROM pg_attribute
             WHERE attrelid = 'events'::regclass AND attname = 'tx_id'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tx, "xid8 true");
}

#[test]
fn pg_indexes_and_triggers_match_sqlites() {
    let Some((_db, mut c)) = migrated() else {
        return;
    };
    let (_dir, s) = sqlite();
    let names = |sql: &str| -> Vec<(String, String)> {
        let mut st = s.prepare(sql).unwrap();
        let v: Vec<(String, String)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        v
    };
    let mut sqlite_indexes =
        names("SELECT name, tbl_name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL");
    sqlite_indexes.sort();
    // PostgreSQL's indexes but those behind PRIMARY KEY / UNIQUE
    // constraints (SQLite's are implicit) and the feed's.
    let mut pg_indexes: Vec<(String, String)> = c
        .query(
            "SELECT i.relname::text, t.relname::text FROM pg_index x
             JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
             WHERE t.relnamespace = to_regnamespace(current_schema())
               AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid)
               AND i.relname <> 'events_by_tx'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    pg_indexes.sort();
    assert_eq!(pg_indexes, sqlite_indexes);

    // Every SQLite trigger is a PostgreSQL trigger of the same name on the
    // same table, but the `*_no_replace` ones, which are the tables' keys
    // there (V1's header); PostgreSQL adds one `*_no_truncate` per ledger
    // table.
    let pg_triggers: Vec<(String, String)> = c
        .query(
            "SELECT g.tgname::text, t.relname::text FROM pg_trigger g JOIN pg_class t ON t.oid = g.tgrelid
             WHERE NOT g.tgisinternal AND t.relnamespace = to_regnamespace(current_schema())
             ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut want: Vec<(String, String)> =
        names("SELECT name, tbl_name FROM sqlite_schema WHERE type = 'trigger'")
            .into_iter()
            .filter(|(n, _)| !n.ends_with("_no_replace"))
            // Part of tombstones_truthful and sessions_parent_exists there
            // (docs/schema.md).
            .filter(|(n, _)| {
                n != "tombstones_recorded"
                    && n != "tombstones_raw_sql_own_purge"
                    && n != "sessions_live_parent"
            })
            .collect();
    // The trigger that stands for the parent's foreign key (V7).
    want.push(("sessions_parent_exists".into(), "sessions".into()));
    let tables = names("SELECT name, name FROM sqlite_schema WHERE type = 'table'");
    for (t, _) in &tables {
        if t != "session_leases" && t != "refinery_schema_history" {
            want.push((format!("{t}_no_truncate"), t.clone()));
        }
    }
    want.sort();
    assert_eq!(pg_triggers, want);
}

#[test]
fn pg_second_migrate_is_a_no_op_and_each_version_is_recorded_once() {
    let Some((_db, mut c)) = migrated() else {
        return;
    };
    let first = history(&mut c);
    let versions: Vec<i32> = first.iter().map(|h| h.0).collect();
    assert_eq!(versions, (1..=LATEST_VERSION as i32).collect::<Vec<i32>>());
    assert_eq!(i64::from(*versions.last().unwrap()), LATEST_VERSION);
    migrate(&mut c).unwrap();
    assert_eq!(history(&mut c), first);
    // A new connection too (nothing cached in the client).
    let mut again = connect(&_db.url);
    migrate(&mut again).unwrap();
    assert_eq!(history(&mut c), first);
}

/// An empty history table alone (a refinery run that failed after creating
/// it) is a new database, not a foreign one.
#[test]
fn pg_an_empty_history_table_alone_migrates() {
    let Some(db) = pg_test_db() else { return };
    let mut c = db.connect();
    c.batch_execute(
        "CREATE TABLE refinery_schema_history (version int4 PRIMARY KEY, name VARCHAR(255),
         applied_on VARCHAR(255), checksum VARCHAR(255))",
    )
    .unwrap();
    migrate(&mut c).unwrap();
    assert_eq!(history(&mut c).len(), LATEST_VERSION as usize);
}

#[test]
fn pg_history_newer_than_the_binary_is_refused_untouched() {
    let Some((_db, mut c)) = migrated() else {
        return;
    };
    let future = logbook::store::LATEST_VERSION + 1;
    c.batch_execute(&format!(
        "INSERT INTO refinery_schema_history VALUES ({future}, 'from_the_future', '2030-01-01T00:00:00Z', '1')"
    ))
    .unwrap();
    let before = history(&mut c);
    let msg = assert_refused(&mut c, ErrorCode::StoreVersionTooNew);
    assert!(msg.contains(&format!("schema version {future}")), "{msg}");
    assert_eq!(history(&mut c), before);
}

#[test]
fn pg_divergent_skipped_or_malformed_history_is_corrupt() {
    let Some((_db, mut c)) = migrated() else {
        return;
    };
    for damage in [
        "UPDATE refinery_schema_history SET checksum = '1' WHERE version = 3",
        "UPDATE refinery_schema_history SET name = 'renamed' WHERE version = 3",
        "DELETE FROM refinery_schema_history WHERE version = 2",
        "UPDATE refinery_schema_history SET applied_on = 'yesterday' WHERE version = 1",
        "UPDATE refinery_schema_history SET checksum = 'x' WHERE version = 1",
    ] {
        c.batch_execute(damage).unwrap();
        let before = history(&mut c);
        let msg = assert_refused(&mut c, ErrorCode::StoreCorrupt);
        assert!(
            msg.contains("refinery_schema_history") || msg.contains("differs"),
            "{damage}: {msg}"
        );
        assert_eq!(history(&mut c), before, "{damage}");
        // Back to the recorded history for the next case.
        c.batch_execute("DELETE FROM refinery_schema_history")
            .unwrap();
        for m in logbook::store::postgres::migrate::embedded() {
            c.execute(
                "INSERT INTO refinery_schema_history VALUES ($1, $2, '2026-01-01T00:00:00Z', $3)",
                &[&m.version(), &m.name(), &m.checksum().to_string()],
            )
            .unwrap();
        }
        migrate(&mut c).unwrap();
    }
}

#[test]
fn pg_a_schema_holding_another_applications_tables_is_refused_untouched() {
    let Some(db) = pg_test_db() else { return };
    let mut c = db.connect();
    c.batch_execute("CREATE TABLE accounts (id bigint PRIMARY KEY)")
        .unwrap();
    let msg = assert_refused(&mut c, ErrorCode::StoreCorrupt);
    assert!(msg.contains("not logbook's"), "{msg}");
    let left: Vec<String> = c
        .query(
            "SELECT relname::text FROM pg_class WHERE relnamespace = to_regnamespace(current_schema()) ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["accounts", "accounts_pkey"]);
    // A `sessions` table without logbook's marker is not logbook's either.
    c.batch_execute("DROP TABLE accounts; CREATE TABLE sessions (id bigint)")
        .unwrap();
    assert_refused(&mut c, ErrorCode::StoreCorrupt);
}

/// A function of a name a migration creates, which is not logbook's (here
/// V12's `logbook_create_key_free`): STORE_CORRUPT naming it, nothing
/// created; once it is gone the ledger is made (found by an attack: the
/// migration's error was INTERNAL).
#[test]
fn pg_a_schema_holding_a_function_of_logbooks_name_is_refused_untouched() {
    let Some(db) = pg_test_db() else { return };
    let mut c = db.connect();
    c.batch_execute(
        "CREATE FUNCTION logbook_create_key_free(a text, b text) RETURNS boolean \
         LANGUAGE sql AS 'SELECT true'",
    )
    .unwrap();
    let msg = assert_refused(&mut c, ErrorCode::StoreCorrupt);
    assert!(
        msg.contains("logbook_create_key_free") && msg.contains("not logbook's"),
        "{msg}"
    );
    let tables: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relnamespace = to_regnamespace(current_schema()) \
             AND relname NOT LIKE 'refinery_schema_history%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "nothing of the ledger was left");
    c.batch_execute("DROP FUNCTION logbook_create_key_free(text, text)")
        .unwrap();
    migrate(&mut c).unwrap();
}

#[test]
fn pg_a_search_path_without_a_schema_is_store_io() {
    let Some(db) = pg_test_db() else { return };
    let mut c = db.connect();
    c.batch_execute("SET search_path = no_such_schema").unwrap();
    let msg = assert_refused(&mut c, ErrorCode::StoreIo);
    assert!(msg.contains("search_path"), "{msg}");
}

#[test]
fn pg_a_database_not_in_utf8_is_store_io() {
    let Some(db) = pg_test_db() else { return };
    let admin = std::env::var(crate::pg::ENV).unwrap();
    let name = format!("{}_ascii", db.name);
    let mut a = connect(&admin);
    a.batch_execute(&format!(
        "CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
    ))
    .unwrap();
    let outcome = std::panic::catch_unwind(|| {
        let mut c = connect(&with_database(&admin, &name));
        let msg = assert_refused(&mut c, ErrorCode::StoreIo);
        assert!(msg.contains("SQL_ASCII") && msg.contains("UTF8"), "{msg}");
    });
    a.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .unwrap();
    outcome.unwrap();
}

/// Whether the backend of `c` holds logbook's migration lock (a bigint
/// advisory key shows in pg_locks as its high and low 32 bits).
fn holds_migration_lock(c: &mut postgres::Client) -> bool {
    let (hi, lo) = (MIGRATION_LOCK_KEY >> 32, MIGRATION_LOCK_KEY & 0xFFFF_FFFF);
    c.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
                AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1)",
        &[&hi, &lo],
    )
    .unwrap()
    .get(0)
}

/// A role that may connect but not create tables (PostgreSQL 15's `public`
/// schema grants CREATE to its owner only): the migration fails under the
/// lock, and the lock is released anyway.
#[test]
fn pg_a_migration_that_fails_under_the_lock_releases_it() {
    let Some(db) = pg_test_db() else { return };
    let role = format!("{}_role", db.name);
    let mut admin = connect(&std::env::var(crate::pg::ENV).unwrap());
    admin
        .batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'lbt-role-pw'"))
        .unwrap();
    // PostgreSQL 15's default; 14 still grants CREATE on `public` to all.
    db.connect()
        .batch_execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        .unwrap();
    let url = with_user(&db.url, &role, "lbt-role-pw");
    let outcome = std::panic::catch_unwind(|| {
        let mut c = connect(&url);
        let msg = assert_refused(&mut c, ErrorCode::StoreIo);
        assert!(msg.contains("42501"), "{msg}");
        assert!(!msg.contains("lbt-role-pw"), "{msg}");
        assert!(!holds_migration_lock(&mut c));
        // The control: the lock query sees the lock when it is held.
        c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
            .unwrap();
        assert!(holds_migration_lock(&mut c));
    });
    drop(db);
    admin.batch_execute(&format!("DROP ROLE {role}")).unwrap();
    outcome.unwrap();
}

/// migrate waits for the advisory lock: while another session holds it,
/// a migration of a new database waits and writes nothing.
#[test]
fn pg_migrate_waits_for_the_migration_lock() {
    let Some(db) = pg_test_db() else { return };
    let mut holder = db.connect();
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .unwrap();
    let app = format!("{}_migrator", db.name);
    let url = format!("{}?application_name={app}", db.url);
    let t = std::thread::spawn(move || migrate(&mut connect(&url)).map_err(|e| e.to_string()));
    let mut waited = false;
    for _ in 0..3000 {
        let n: i64 = holder
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1
                 AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                &[&app],
            )
            .unwrap()
            .get(0);
        if n == 1 {
            waited = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let none: Option<String> = holder
        .query_one("SELECT to_regclass('sessions')::text", &[])
        .unwrap()
        .get(0);
    holder
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
        .unwrap();
    t.join().unwrap().unwrap();
    assert!(waited, "the migration never waited for the advisory lock");
    assert_eq!(
        none, None,
        "tables were created while the lock was held elsewhere"
    );
    assert_eq!(history(&mut holder).len(), LATEST_VERSION as usize);
}

/// 16 processes migrate one new database at the same instant: all succeed
/// and each version is applied once.
#[test]
fn pg_sixteen_processes_migrate_one_new_database_once() {
    let Some(db) = pg_test_db() else { return };
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let children: Vec<std::process::Child> = (0..16)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "pg_schema::pg_migrate_entry",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                    "-q",
                ])
                .env("LOGBOOK_TEST_PG_MIGRATE_URL", &db.url)
                .env("LOGBOOK_TEST_PG_MIGRATE_GO", &go)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::fs::write(&go, b"").unwrap();
    let outcomes: Vec<String> = children
        .into_iter()
        .map(|ch| {
            let out = ch.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            text.lines()
                .find_map(|l| l.strip_prefix("migrate: "))
                .unwrap_or("no outcome")
                .to_owned()
        })
        .collect();
    assert_eq!(outcomes, vec!["ok"; 16]);
    let mut c = db.connect();
    let versions: Vec<i32> = history(&mut c).iter().map(|h| h.0).collect();
    assert_eq!(versions, (1..=LATEST_VERSION as i32).collect::<Vec<i32>>());
}

#[test]
#[ignore = "a migrating process pg_sixteen_processes_migrate_one_new_database_once starts, not a test"]
fn pg_migrate_entry() {
    let url = std::env::var("LOGBOOK_TEST_PG_MIGRATE_URL")
        .expect("LOGBOOK_TEST_PG_MIGRATE_URL: a helper process that a test starts, not a test");
    let go = std::path::PathBuf::from(std::env::var("LOGBOOK_TEST_PG_MIGRATE_GO").unwrap());
    let mut c = connect(&url);
    // Connected first, then wait for the others: the migrations start at
    // the same instant.
    for _ in 0..30_000 {
        if go.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    match migrate(&mut c) {
        Ok(()) => println!("migrate: ok"),
        Err(e) => println!("migrate: {} {e}", e.code().as_str()),
    }
}
