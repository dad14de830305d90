use super::*;

fn env() -> Env {
    Env {
        os_user: Some("agent".into()),
        ..Env::default()
    }
}

#[test]
fn is_url_takes_both_schemes_in_any_case_and_nothing_else() {
    for yes in [
        "postgres://h/db",
        "postgresql://h",
        "POSTGRES://h",
        "PostgreSQL://x",
    ] {
        assert!(is_url(yes), "{yes}");
    }
    for no in [
        "ledger.db",
        "./postgres://x",
        "postgres:/x",
        "pg://h",
        "",
        "postgres",
    ] {
        assert!(!is_url(no), "{no}");
    }
}

#[test]
fn redacted_takes_out_every_password() {
    assert_eq!(
        redacted("postgres://bob:s3cr@t@db:5432/l?password=p2&sslmode=require"),
        "postgres://bob:***@db:5432/l?password=***&sslmode=require"
    );
    assert_eq!(redacted("postgresql://bob@db/l"), "postgresql://bob@db/l");
    // Up to the last `@` before the query: no piece of the password
    // is left in what looks like the host or the database.
    assert_eq!(
        redacted("postgres://owner:Own3r-p@ss/w:rd%@127.0.0.1:5432/lb"),
        "postgres://owner:***@127.0.0.1:5432/lb"
    );
    assert_eq!(
        redacted("postgres://owner:pa/ss@h/lb?application_name=a@b"),
        "postgres://owner:***@h/lb?application_name=a@b"
    );
    assert_eq!(redacted("postgres://db"), "postgres://db");
    assert_eq!(redacted("/var/lib/ledger.db"), "/var/lib/ledger.db");
}

#[test]
fn display_and_debug_never_hold_the_password() {
    let loc = PgLocation::parse_with(
        "postgres://bob:s3cr%3At@db.example:6543/ledger?sslmode=require&application_name=x",
        &env(),
    )
    .unwrap();
    assert_eq!(loc.display, "postgres://bob@db.example:6543/ledger");
    assert_eq!(loc.config.get_password(), Some(&b"s3cr:t"[..]));
    assert_eq!(loc.tls, Tls::Require);
    assert_eq!(loc.config.get_application_name(), Some("x"));
    let dbg = format!("{loc:?}");
    assert!(!dbg.contains("s3cr"), "{dbg}");
}

#[test]
fn sslmode_verify_modes_and_root_certs() {
    let p = |u: &str| PgLocation::parse_with(u, &env()).unwrap();
    assert_eq!(p("postgres://h/d").tls, Tls::Prefer);
    assert_eq!(p("postgres://h/d?sslmode=disable").tls, Tls::Disable);
    assert_eq!(p("postgres://h/d?sslmode=verify-ca").tls, Tls::VerifyCa);
    let full = p("postgres://h/d?sslmode=verify-full&sslrootcert=/etc/ca.pem");
    assert_eq!(full.tls, Tls::VerifyFull);
    assert_eq!(full.root_cert.as_deref(), Some("/etc/ca.pem"));
    assert_eq!(full.config.get_ssl_mode(), SslMode::Require);
    // libpq: require with a root certificate verifies the chain.
    assert_eq!(
        p("postgres://h/d?sslmode=require&sslrootcert=system").tls,
        Tls::VerifyCa
    );
}

#[test]
fn bad_urls_are_invalid_argument_naming_the_item_not_the_value() {
    for (url, needle) in [
        ("postgres://h/d?sslmode=sometimes", "`sslmode` must be"),
        ("postgres://h/d?sslkey=/k.pem", "`sslkey`"),
        (
            "postgres://h/d?frobnicate=hunter2",
            "unknown option `frobnicate`",
        ),
        ("postgres://h:notaport/d", "port"),
        ("postgres://pw:S3cr@tPW@h/d", "percent-encode an `@`"),
    ] {
        let e = PgLocation::parse_with(url, &env()).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::InvalidArgument, "{url}");
        let msg = e.to_string();
        assert!(msg.contains(needle), "{url}: {msg}");
        assert!(
            !msg.contains("hunter2") && !msg.contains("sometimes") && !msg.contains("tPW"),
            "{msg}"
        );
    }
}

/// The user and password are checked on the text before the driver
/// parses it (it splits at the first `@`, leaving the rest of such a
/// password in the host, which it would look up and print).
#[test]
fn an_unencoded_at_slash_or_stray_percent_in_the_userinfo_is_refused_before_parsing() {
    let more = "more than one `@` before the query";
    let slash = "a `/` comes before the `@`";
    let percent = "a `%` that is not followed by two hex digits";
    for (url, secret, reason) in [
        (
            "postgres://owner:Own3r-p@ss/w:rd%@127.0.0.1:5432/lb",
            "Own3r",
            more,
        ),
        (
            "postgres://owner:Own3r-p@ss/w:rd@127.0.0.1:5432/lb",
            "Own3r",
            more,
        ),
        (
            "postgres://owner:Own3r-p@ss@127.0.0.1:5432/lb",
            "Own3r",
            more,
        ),
        ("postgresql://own@er:Pw0rd@127.0.0.1/lb", "Pw0rd", more),
        ("postgres://ow/ner:Pw0rd@127.0.0.1:5432/lb", "Pw0rd", slash),
        ("postgres://owner:Pw0/rd@127.0.0.1:5432/lb", "Pw0", slash),
        (
            "postgres://owner:Pw0rd%@127.0.0.1:5432/lb",
            "Pw0rd",
            percent,
        ),
        (
            "postgres://owner:Pw0%zzrd@127.0.0.1:5432/lb",
            "Pw0",
            percent,
        ),
        (
            "postgres://owner:Pw0rd%4@127.0.0.1:5432/lb",
            "Pw0rd",
            percent,
        ),
        (
            "postgres://own%er:Pw0rd@127.0.0.1:5432/lb",
            "Pw0rd",
            percent,
        ),
    ] {
        let e = PgLocation::parse_with(url, &env()).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::InvalidArgument, "{url}");
        assert_eq!(e.details()["field"], "db", "{url}");
        let shown = format!("{e} {} {e:?}", e.details());
        assert!(shown.contains(reason), "{url}: {shown}");
        for piece in [secret, "127.0.0.1", "lb"] {
            assert!(!shown.contains(piece), "{url}: {piece} in {shown}");
        }
    }
    // Encoded, each is a password like any other.
    let loc = PgLocation::parse_with(
        "postgres://owner:Own3r-p%40ss%2Fw:rd%25@127.0.0.1:5432/lb",
        &env(),
    )
    .unwrap();
    assert_eq!(loc.config.get_password(), Some(&b"Own3r-p@ss/w:rd%"[..]));
    assert_eq!(loc.display, "postgres://owner@127.0.0.1:5432/lb");
    // An `@` in the query (after the database) is not the userinfo's.
    let loc =
        PgLocation::parse_with("postgres://o:pw@h/lb?application_name=agent@host", &env()).unwrap();
    assert_eq!(loc.config.get_application_name(), Some("agent@host"));
    // A query item's name is never repeated unless it is plain (the
    // tail of a password that held a `?` would be).
    let e = PgLocation::parse_with("postgres://o:12?Pw0rd@h/lb", &env()).unwrap_err();
    assert!(e.to_string().contains("not an option name"), "{e}");
    assert!(!e.to_string().contains("Pw0rd"), "{e}");
}

#[test]
fn libpq_defaults_fill_what_the_url_leaves_out() {
    let e = Env {
        host: Some("pg.internal".into()),
        port: Some("5544".into()),
        user: Some("lb".into()),
        database: Some("ledger".into()),
        password: Some("pw".into()),
        ..env()
    };
    let loc = PgLocation::parse_with("postgres://", &e).unwrap();
    assert_eq!(loc.display, "postgres://lb@pg.internal:5544/ledger");
    assert_eq!(loc.config.get_password(), Some(&b"pw"[..]));
    // The URL wins over the environment.
    let loc = PgLocation::parse_with("postgres://me:mine@h:1/x", &e).unwrap();
    assert_eq!(loc.display, "postgres://me@h:1/x");
    assert_eq!(loc.config.get_password(), Some(&b"mine"[..]));
}

#[test]
fn the_password_file_matches_like_libpq_and_must_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pgpass");
    std::fs::write(
        &file,
        "# comment\nother:5432:*:bob:wrong\ndb.example:*:ledger:bob:pa\\:ss\n*:*:*:*:fallback\n",
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = Env {
        passfile: Some(file.clone()),
        ..env()
    };
    let pw = |u: &str| {
        PgLocation::parse_with(u, &e)
            .unwrap()
            .config
            .get_password()
            .map(<[u8]>::to_vec)
    };
    assert_eq!(
        pw("postgres://bob@db.example/ledger"),
        Some(b"pa:ss".to_vec())
    );
    assert_eq!(
        pw("postgres://eve@db.example/ledger"),
        Some(b"fallback".to_vec())
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(pw("postgres://bob@db.example/ledger"), None);
}
