//! The PostgreSQL test server (docs/design.md, "Backends"): `LOGBOOK_TEST_PG` is a
//! superuser's URL (`bash .ci/run` starts a throwaway server through
//! `.ci/pg`, which documents the other `LOGBOOK_TEST_PG*` variables), and
//! each test gets a fresh database of its own, dropped when the test ends,
//! so PostgreSQL tests run in parallel like the others.
//!
//! Without `LOGBOOK_TEST_PG` a PostgreSQL test skips (one line on stderr,
//! printed once per test binary) — except under CI (`CI` set), where it
//! fails: a suite that silently skipped the server would prove nothing.
//! Nothing here prints a URL: it holds the password.

#![allow(dead_code)]

use std::io::Write;
use std::sync::Once;

/// The variable that names the test server.
pub const ENV: &str = "LOGBOOK_TEST_PG";

/// A database created for one test; dropped (`WITH (FORCE)`, so open
/// connections do not keep it) when this goes out of scope.
pub struct PgDb {
    /// A URL of the new database (same role and password as the server's).
    pub url: String,
    /// Its name: `lbt_` and 16 random hex digits.
    pub name: String,
    admin: String,
}

impl std::fmt::Debug for PgDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDb")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PgDb {
    /// A new connection to the database (panics without printing the URL).
    pub fn connect(&self) -> postgres::Client {
        connect(&self.url)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// Connects to `url`; on failure panics with the driver's error, which
/// never contains the URL.
pub fn connect(url: &str) -> postgres::Client {
    match postgres::Client::connect(url, postgres::NoTls) {
        Ok(c) => c,
        Err(e) => panic!("cannot connect to the PostgreSQL test server: {e}"),
    }
}

static SKIPPED: Once = Once::new();

/// A fresh, empty database on the test server. When `LOGBOOK_TEST_PG` is
/// unset outside CI, prints once that the PostgreSQL half was skipped and
/// ends the test binary with exit 0 (so this never returns `None`; the
/// `Option` lets a caller written for a skip return early).
///
/// # Panics
/// Under CI without `LOGBOOK_TEST_PG`, or when the server cannot be used.
#[track_caller]
pub fn pg_test_db() -> Option<PgDb> {
    let Some(admin) = std::env::var(ENV).ok().filter(|v| !v.is_empty()) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "precondition missing under CI: {ENV} is not set (bash .ci/run starts a server)"
        );
        SKIPPED.call_once(|| {
            // Straight to the stream: libtest captures eprintln! output.
            let _ = writeln!(
                std::io::stderr(),
                "PostgreSQL tests skipped (the suite's PostgreSQL half): set {ENV}, or run bash .ci/pg cargo test"
            );
        });
        std::process::exit(0);
    };
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    let name = format!("lbt_{}", hex::encode(bytes));
    let mut c = connect(&admin);
    // The name is ours (fixed prefix, hex): nothing to quote.
    c.batch_execute(&format!(
        "CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0"
    ))
    .unwrap_or_else(|e| panic!("cannot create a test database: {e}"));
    Some(PgDb {
        url: with_database(&admin, &name),
        name,
        admin,
    })
}

/// A fresh database for the `pg` binary's [`crate::common::TestEnv`]:
/// without `LOGBOOK_TEST_PG`, outside CI, prints one line saying the
/// PostgreSQL half was skipped and ends the test binary with exit 0 (its
/// tests would all skip); under CI that fails instead.
pub fn server_or_exit() -> PgDb {
    match pg_test_db() {
        Some(db) => db,
        None => std::process::exit(0),
    }
}

/// `url` with its database (the path after the authority) replaced by
/// `db`; the query string, if any, is kept.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.find('?') {
        Some(i) => url.split_at(i),
        None => (url, ""),
    };
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |i| after_scheme + i);
    format!("{}/{db}{query}", &base[..authority_end])
}

/// `url` with its user and password replaced.
pub fn with_user(url: &str, user: &str, password: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[after_scheme..];
    let host = rest.split_once('@').map_or(rest, |(_, h)| h);
    format!("{}{user}:{password}@{host}", &url[..after_scheme])
}

#[test]
fn with_database_replaces_only_the_path() {
    assert_eq!(
        with_database("postgres://u:p@127.0.0.1:5432/postgres", "x"),
        "postgres://u:p@127.0.0.1:5432/x"
    );
    assert_eq!(
        with_database("postgresql://u:p@h/postgres?sslmode=disable", "x"),
        "postgresql://u:p@h/x?sslmode=disable"
    );
    assert_eq!(with_database("postgres://u@h:1", "x"), "postgres://u@h:1/x");
    assert_eq!(
        with_user("postgres://u:p@h:1/d?x=y", "r", "s"),
        "postgres://r:s@h:1/d?x=y"
    );
}
