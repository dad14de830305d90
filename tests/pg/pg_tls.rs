//! TLS to the server (docs/design.md, "Backends"): `sslmode` as libpq reads it, through
//! rustls, against the throwaway server's own CA (`.ci/pg` makes one and a
//! certificate for localhost and 127.0.0.1).

use crate::common::*;
use std::process::Command;

/// The CA file `.ci/pg` exports (a precondition: fails under CI).
fn ca() -> Option<String> {
    let ca = std::env::var("LOGBOOK_TEST_PG_CA").ok();
    precondition(ca.is_some(), "LOGBOOK_TEST_PG_CA (.ci/pg with openssl)").then_some(())?;
    ca
}

/// `logbook sql` on `url`: 1 when the connection uses TLS, else 0.
fn tls_in_use(env: &TestEnv, url: &str) -> Run {
    env.command()
        .arg("--db")
        .arg(url)
        .args([
            "sql",
            "SELECT CASE WHEN ssl THEN 1 ELSE 0 END AS tls FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            "--json",
        ])
        .output()
        .unwrap()
        .into()
}

fn with_query(url: &str, q: &str) -> String {
    format!("{url}?{q}")
}

fn tls_value(r: &Run) -> i64 {
    let d = r.data();
    d["rows"][0][0]
        .as_i64()
        .unwrap_or_else(|| panic!("{}", r.stdout))
}

#[test]
fn pg_sslmode_disable_require_and_verify_full_connect_as_libpq_would() {
    let env = TestEnv::new();
    let Some(ca) = ca() else { return };
    env.create("tls"); // migrate first
    let url = env.db.to_str().unwrap().to_owned();
    assert_eq!(
        tls_value(&tls_in_use(&env, &with_query(&url, "sslmode=disable"))),
        0
    );
    assert_eq!(
        tls_value(&tls_in_use(&env, &with_query(&url, "sslmode=require"))),
        1
    );
    // The server offers TLS: prefer (the default) takes it.
    assert_eq!(tls_value(&tls_in_use(&env, &url)), 1);
    let full = with_query(&url, &format!("sslmode=verify-full&sslrootcert={ca}"));
    assert_eq!(tls_value(&tls_in_use(&env, &full)), 1);
    let by_name = full.replacen("@127.0.0.1:", "@localhost:", 1);
    assert_eq!(tls_value(&tls_in_use(&env, &by_name)), 1);
    // A write over verify-full works like any other.
    let r: Run = env
        .command()
        .args([
            "--db", &full, "session", "create", "--title", "over tls", "--json",
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(r.data()["rev"], 1);
}

#[test]
fn pg_a_certificate_from_another_ca_is_store_io_and_never_connects() {
    let env = TestEnv::new();
    let Some(_) = ca() else { return };
    env.create("tls");
    // A CA of our own that signed nothing the server has.
    let other = env.dir.path().join("other-ca.crt");
    let key = env.dir.path().join("other-ca.key");
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=not the server's CA"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&other)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "openssl made a CA");
    let url = env.db.to_str().unwrap().to_owned();
    for mode in ["verify-ca", "verify-full"] {
        let bad = with_query(
            &url,
            &format!("sslmode={mode}&sslrootcert={}", other.display()),
        );
        let e = assert_error(&tls_in_use(&env, &bad), "STORE_IO", 6);
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("TLS"), "{mode}: {msg}");
        assert!(
            !msg.contains(&env.pg.as_ref().unwrap().url),
            "no URL with its password"
        );
    }
}
