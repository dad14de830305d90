//! Reading and writing the test database without logbook, on either
//! engine (plain SQLite, or a plain client of the PostgreSQL test server):
//! rows, scalars, raw SQL, a held write lock, and what the database holds
//! as bytes. Re-exported by `common`.

#![allow(dead_code)]

use crate::common::{companion, on_pg, TestEnv};
use serde_json::Value;

impl TestEnv {
    /// A plain client of the server database (PostgreSQL only).
    #[track_caller]
    pub fn pg_client(&self) -> postgres::Client {
        match &self.pg {
            Some(pg) => off_runtime(|| pg.connect()),
            None => panic!("pg_client() on a SQLite env"),
        }
    }

    /// The rows a query returns, read without logbook (plain SQLite, or a
    /// plain server client), each column as JSON: integers, reals, text,
    /// booleans, NULL (a BLOB/BYTEA as lowercase hex). Parameters are
    /// text, written `$1`, `$2`, … (both engines read that form).
    #[track_caller]
    pub fn rows(&self, sql: &str, args: &[&str]) -> Vec<Vec<Value>> {
        if on_pg() {
            return off_runtime(|| self.pg_rows(sql, args));
        }
        let c = self.sql();
        let mut st = c.prepare(sql).unwrap();
        let n = st.column_count();
        st.query_map(rusqlite::params_from_iter(args), |r| {
            Ok((0..n)
                .map(|i| match r.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Null => Value::Null,
                    rusqlite::types::ValueRef::Integer(v) => v.into(),
                    rusqlite::types::ValueRef::Real(v) => v.into(),
                    rusqlite::types::ValueRef::Text(t) => {
                        String::from_utf8_lossy(t).into_owned().into()
                    }
                    rusqlite::types::ValueRef::Blob(b) => hex::encode(b).into(),
                })
                .collect())
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    /// [`TestEnv::rows`] on the server.
    #[track_caller]
    fn pg_rows(&self, sql: &str, args: &[&str]) -> Vec<Vec<Value>> {
        {
            use postgres::types::Type;
            let params: Vec<&(dyn postgres::types::ToSql + Sync)> = args
                .iter()
                .map(|a| a as &(dyn postgres::types::ToSql + Sync))
                .collect();
            let mut c = self.pg_client();
            let st = c.prepare(sql).unwrap();
            let types: Vec<Type> = st.columns().iter().map(|c| c.type_().clone()).collect();
            c.query(&st, &params)
                .unwrap()
                .iter()
                .map(|r| {
                    (0..types.len())
                        .map(|i| match &types[i] {
                            t if *t == Type::INT8 => r.get::<_, Option<i64>>(i).into(),
                            t if *t == Type::INT4 => r.get::<_, Option<i32>>(i).into(),
                            t if *t == Type::INT2 => r.get::<_, Option<i16>>(i).into(),
                            t if *t == Type::FLOAT8 => r.get::<_, Option<f64>>(i).into(),
                            t if *t == Type::BOOL => r.get::<_, Option<bool>>(i).into(),
                            t if *t == Type::BYTEA => {
                                r.get::<_, Option<Vec<u8>>>(i).map(hex::encode).into()
                            }
                            _ => r.get::<_, Option<String>>(i).into(),
                        })
                        .collect()
                })
                .collect()
        }
    }

    /// The one integer a SQL query returns, read without logbook (plain
    /// SQLite, or a plain server client; an integer column of either).
    #[track_caller]
    pub fn scalar(&self, sql: &str) -> i64 {
        if on_pg() {
            return off_runtime(|| {
                let row = self.pg_client().query_one(sql, &[]).unwrap();
                row.try_get::<_, i64>(0)
                    .or_else(|_| row.try_get::<_, i32>(0).map(i64::from))
                    .unwrap()
            });
        }
        self.sql().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// Runs SQL statements (`;`-separated, no parameters) without logbook,
    /// on either engine, as a tamperer or another client could: write the
    /// SQL for the engine at hand (see [`pick`]).
    #[track_caller]
    pub fn batch(&self, sql: &str) {
        if on_pg() {
            off_runtime(|| self.pg_client().batch_execute(sql).unwrap());
        } else {
            self.sql().execute_batch(sql).unwrap();
        }
    }

    /// [`TestEnv::batch`] that returns the engine's error as text instead
    /// of panicking.
    pub fn try_batch(&self, sql: &str) -> Result<(), String> {
        if on_pg() {
            off_runtime(|| self.pg_client().batch_execute(sql)).map_err(|e| {
                // The server's own message (the driver's Display is only
                // "db error").
                e.as_db_error().map_or_else(
                    || e.to_string(),
                    |d| format!("{}: {}", d.code().code(), d.message()),
                )
            })
        } else {
            self.sql().execute_batch(sql).map_err(|e| e.to_string())
        }
    }

    /// Holds what a writer of session `id` must wait for, as another client
    /// could: SQLite's write lock (`BEGIN IMMEDIATE`), or on PostgreSQL the
    /// session's row lock (`SELECT … FOR UPDATE`, which every write of the
    /// session takes first). Released by [`WriteLock::release`] or on drop.
    #[track_caller]
    pub fn hold_write_lock(&self, id: &str) -> WriteLock {
        if on_pg() {
            off_runtime(|| {
                let mut c = self.pg_client();
                c.batch_execute("BEGIN").unwrap();
                let n = c
                    .execute(
                        "SELECT 1 FROM sessions WHERE session_id = $1 FOR UPDATE",
                        &[&id],
                    )
                    .unwrap();
                assert_eq!(n, 1, "no session {id} to lock");
                WriteLock::Pg(c)
            })
        } else {
            let c = self.sql();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            WriteLock::Sqlite(c)
        }
    }

    /// How many connections to the server database sit idle inside a
    /// transaction (PostgreSQL only): a reader or writer that holds one
    /// between calls shows here.
    pub fn pg_idle_in_transaction(&self) -> i64 {
        self.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
             AND state LIKE 'idle in transaction%'",
        )
    }

    /// Rows of `table`, 0 when the table (or the SQLite file) does not
    /// exist yet.
    pub fn count_or_zero(&self, table: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        if on_pg() {
            return off_runtime(|| {
                self.pg_client()
                    .query_one(&sql, &[])
                    .map_or(0, |r| r.get::<_, i64>(0))
            });
        }
        self.sql().query_row(&sql, [], |r| r.get(0)).unwrap_or(0)
    }

    /// What the DB holds, as bytes (for secret greps): the file and its
    /// `-wal` (if any); on PostgreSQL every row of every table of the
    /// database's schema, as text.
    pub fn db_bytes(&self) -> Vec<u8> {
        if on_pg() {
            return off_runtime(|| self.pg_text());
        }
        let mut bytes = std::fs::read(&self.db).unwrap();
        bytes.extend(std::fs::read(companion(&self.db, "-wal")).unwrap_or_default());
        bytes
    }

    /// Every row of every table of the server database, as text.
    fn pg_text(&self) -> Vec<u8> {
        {
            let mut c = self.pg_client();
            let tables: Vec<String> = c
                .query(
                    "SELECT quote_ident(table_name) FROM information_schema.tables
                     WHERE table_schema = current_schema() ORDER BY table_name",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert!(!tables.is_empty(), "no tables");
            let mut bytes = Vec::new();
            for t in tables {
                let row = c
                    .query_one(
                        &format!("SELECT coalesce(string_agg(t::text, E'\\n'), '') FROM {t} t"),
                        &[],
                    )
                    .unwrap();
                bytes.extend(row.get::<_, String>(0).into_bytes());
                bytes.push(b'\n');
            }
            bytes
        }
    }
}

/// A write lock another client holds ([`TestEnv::hold_write_lock`]).
pub enum WriteLock {
    Sqlite(rusqlite::Connection),
    Pg(postgres::Client),
}

impl WriteLock {
    /// Ends the holder's transaction (ROLLBACK).
    pub fn release(self) {
        match self {
            WriteLock::Sqlite(c) => c.execute_batch("ROLLBACK").unwrap(),
            WriteLock::Pg(mut c) => off_runtime(move || {
                c.batch_execute("ROLLBACK").unwrap();
                drop(c);
            }),
        }
    }
}

/// Runs `f` on a thread of its own, outside any tokio runtime the caller
/// is in (the blocking PostgreSQL client starts one of its own, which
/// tokio refuses inside another), and returns what it returns.
pub fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// `sqlite` in the `it` binary, `pg` in the `pg` one: the same statement
/// in each engine's dialect.
pub fn pick<'a>(sqlite: &'a str, pg: &'a str) -> &'a str {
    if on_pg() {
        pg
    } else {
        sqlite
    }
}

/// An event's `data.step` as a SQL expression of the engine's dialect.
pub fn json_step() -> &'static str {
    pick("json_extract(data, '$.step')", "data::json->>'step'")
}

/// A trigger that fails every insert of an event whose detail or data holds
/// `BOOM` (SQLite; [`BOOM_TRIGGER_PG`] on PostgreSQL).
pub const BOOM_TRIGGER: &str = "CREATE TRIGGER boom BEFORE INSERT ON events \
    WHEN instr(coalesce(NEW.detail,'')||coalesce(NEW.data,''),'BOOM') \
    BEGIN SELECT RAISE(ABORT,'boom'); END;";

/// The same trigger on PostgreSQL.
pub const BOOM_TRIGGER_PG: &str = "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ \
    BEGIN IF strpos(coalesce(NEW.detail,'') || coalesce(NEW.data,''), 'BOOM') > 0 THEN \
    RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$; \
    CREATE TRIGGER boom BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION boom();";

/// `BEGIN IMMEDIATE` succeeds at once (busy timeout 0): no lock is held.
/// On PostgreSQL: every session row can be locked at once (`NOWAIT`), and
/// no connection of the database sits idle in a transaction.
#[track_caller]
pub fn assert_write_lock_free(env: &TestEnv) {
    if on_pg() {
        off_runtime(|| {
            env.pg_client()
                .batch_execute("BEGIN; SELECT 1 FROM sessions FOR UPDATE NOWAIT; ROLLBACK")
                .expect("no session row is locked");
        });
        assert_eq!(
            env.pg_idle_in_transaction(),
            0,
            "a connection is left in a transaction"
        );
        return;
    }
    let c = rusqlite::Connection::open(env.path()).unwrap();
    c.busy_timeout(std::time::Duration::ZERO).unwrap();
    c.execute_batch("BEGIN IMMEDIATE; ROLLBACK;")
        .expect("the write lock is free");
}
