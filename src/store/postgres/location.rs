//! A PostgreSQL location: the `postgres://` URL (docs/postgres.md, "The URL"), parsed into the
//! driver's connection config, the TLS policy and a display form that never
//! holds the password.
//!
//! The URL is libpq's URI form. rust-postgres parses most of it (host, port,
//! user, password, dbname, `host=` for a Unix socket, `application_name`,
//! `options`, `connect_timeout`, keepalives, `target_session_attrs`, …);
//! logbook takes out what it handles itself — libpq's `sslmode` values
//! `verify-ca` and `verify-full` (the driver knows only disable, prefer and
//! require), `sslrootcert` and `passfile` — and fills in libpq's defaults
//! that the driver leaves empty: `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE`, then the password from `PGPASSWORD` or the password file
//! (`passfile`, `PGPASSFILE`, `~/.pgpass`; ignored unless only its owner can
//! read it, as libpq does).

use crate::error::{Error, Result};
use postgres::config::{Config, Host, SslMode};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Whether a `--db` / `$LOGBOOK_DB` / `LedgerOptions` location names a
/// PostgreSQL server (`postgres://` or `postgresql://`, scheme in any case)
/// rather than a SQLite file (docs/design.md, "Backends").
pub fn is_url(location: &str) -> bool {
    let lower = |p: &str| {
        location
            .get(..p.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(p))
    };
    lower("postgres://") || lower("postgresql://")
}

/// Where a URL's user and password end: the part after `://` and before
/// the query (`?`) is split at its **last** `@`, so that no piece of a
/// password holding an unencoded `@` or `/` is ever taken for the host.
/// Returns (offset of the user in `url`, offset of that `@`), or `None`
/// when the URL names no user.
fn userinfo_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let head_end = url[start..].find('?').map_or(url.len(), |i| start + i);
    let at = url[start..head_end].rfind('@')? + start;
    Some((start, at))
}

/// Refuses a URL whose user or password cannot be told apart from the rest
/// without guessing: more than one `@` before the query, a `/` before the
/// `@`, or a `%` not followed by two hex digits. Runs on the text alone,
/// before anything is parsed, looked up or connected; the message names
/// the character, never the text around it.
fn check_userinfo(url: &str) -> Result<()> {
    let Some((start, at)) = userinfo_span(url) else {
        return Ok(());
    };
    let userinfo = &url[start..at];
    if userinfo.contains('@') {
        return Err(bad(
            "it holds more than one `@` before the query: percent-encode an `@` in the user, password or database name as %40 (e.g. postgres://user:p%40w@host/db)",
        ));
    }
    if userinfo.contains('/') {
        return Err(bad(
            "a `/` comes before the `@` that ends the user and password: percent-encode a `/` in them as %2F (e.g. postgres://user:p%2Fw@host/db)",
        ));
    }
    let b = userinfo.as_bytes();
    let stray = b.iter().enumerate().any(|(i, c)| {
        *c == b'%'
            && !b
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if stray {
        return Err(bad(
            "the user or password holds a `%` that is not followed by two hex digits: percent-encode a `%` as %25",
        ));
    }
    Ok(())
}

/// `url` with any password taken out (`postgres://user:***@host/db`, a
/// `password=` query item's value too): what `Debug` of the options shows
/// before the URL is parsed. The user and password end at the last `@`
/// before the query (as [`PgLocation::parse`] reads them), so a password
/// holding an unencoded `@` or `/` is hidden whole. Text that is not a
/// PostgreSQL URL is returned as it is.
pub fn redacted(url: &str) -> String {
    if !is_url(url) {
        return url.to_owned();
    }
    let (head, tail) = match userinfo_span(url) {
        Some((start, at)) => {
            let userinfo = &url[start..at];
            let head = match userinfo.split_once(':') {
                Some((name, _)) => format!("{}{name}:***", &url[..start]),
                None => url[..at].to_owned(),
            };
            (head, &url[at..])
        }
        None => (String::new(), url),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let items: Vec<String> = query
                .split('&')
                .map(|item| match item.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => item.to_owned(),
                })
                .collect();
            format!("{path}?{}", items.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{head}{tail}")
}

/// How the connection is protected, from the URL's `sslmode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tls {
    /// `disable`: plain TCP.
    Disable,
    /// `prefer` (the default) and `allow`: TLS when the server offers it,
    /// its certificate not checked (libpq's meaning); plain otherwise.
    Prefer,
    /// `require`: TLS or nothing; the certificate is not checked unless a
    /// root certificate is given (then as `verify-ca`, as libpq does).
    Require,
    /// `verify-ca`: TLS, the certificate chain checked against the roots.
    VerifyCa,
    /// `verify-full`: as `verify-ca`, and the certificate names the host.
    VerifyFull,
}

/// A parsed PostgreSQL location.
#[derive(Clone)]
pub struct PgLocation {
    /// The driver's config, defaults and password filled in.
    pub config: Config,
    /// The TLS policy.
    pub tls: Tls,
    /// `sslrootcert`: a PEM file of trusted roots, or `system` for the
    /// bundled Mozilla roots; `None`: `~/.postgresql/root.crt` when it
    /// exists, else the Mozilla roots.
    pub root_cert: Option<String>,
    /// `statement_cache_size`: how many statements logbook prepares (named)
    /// per connection, 0..=10000 (default 256; 0 behind a pooler in
    /// transaction mode that does not keep prepared statements).
    pub statement_cache_size: usize,
    /// `postgres://user@host:port/dbname`: what messages and `Debug` show
    /// (never the password, never the query items).
    pub display: String,
}

impl std::fmt::Debug for PgLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLocation")
            .field("display", &self.display)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// The environment a location is completed from (libpq's `PG*` variables,
/// the home folder and the OS user): passed in so tests need not change the
/// process environment.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `PGHOST`.
    pub host: Option<String>,
    /// `PGPORT`.
    pub port: Option<String>,
    /// `PGUSER`.
    pub user: Option<String>,
    /// `PGDATABASE`.
    pub database: Option<String>,
    /// `PGPASSWORD`.
    pub password: Option<String>,
    /// `PGPASSFILE`.
    pub passfile: Option<PathBuf>,
    /// `PGSSLMODE`.
    pub sslmode: Option<String>,
    /// `PGSSLROOTCERT`.
    pub sslrootcert: Option<String>,
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// The OS user name (libpq's default user).
    pub os_user: Option<String>,
}

impl Env {
    /// The process environment.
    pub fn current() -> Env {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Env {
            host: var("PGHOST"),
            port: var("PGPORT"),
            user: var("PGUSER"),
            database: var("PGDATABASE"),
            password: var("PGPASSWORD"),
            passfile: var("PGPASSFILE").map(PathBuf::from),
            sslmode: var("PGSSLMODE"),
            sslrootcert: var("PGSSLROOTCERT"),
            home: var("HOME").map(PathBuf::from),
            os_user: var("USER").or_else(|| var("LOGNAME")),
        }
    }
}

fn bad(why: impl Into<String>) -> Error {
    Error::invalid(
        "db",
        format!("is not a usable PostgreSQL URL: {}", why.into()),
    )
}

/// Statements prepared per connection unless the URL says otherwise.
pub const STATEMENT_CACHE_DEFAULT: usize = 256;

/// The query items logbook takes out of the URL before the driver parses
/// it, and those it refuses (client certificates are not supported).
const OURS: &[&str] = &["sslmode", "sslrootcert", "passfile", "statement_cache_size"];
const REFUSED: &[&str] = &["sslcert", "sslkey", "sslpassword", "sslcrl", "sslcrldir"];

fn percent_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .ok_or_else(|| bad("a % escape is cut short"))?;
                let hex = std::str::from_utf8(hex).map_err(|_| bad("a % escape is not hex"))?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad("a % escape is not hex"))?);
                i += 3;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| bad("a % escape is not UTF-8"))
}

/// Whether a query item's name can be an option: 1 to 64 of a-z, 0-9, `_`
/// (every libpq parameter is such a name).
fn plain_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl PgLocation {
    /// Parses a `postgres://` URL, completing it from the process
    /// environment ([`Env::current`]).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (`db`) for a URL the driver cannot parse, an
    /// unknown `sslmode`, or a client-certificate item; the message names
    /// the item, never its value. A user or password holding an unencoded
    /// `@` or `/`, or a `%` that is not a `%XX` escape, is refused on the
    /// text alone, before any lookup: its message names the character and
    /// repeats no part of the URL.
    pub fn parse(url: &str) -> Result<PgLocation> {
        Self::parse_with(url, &Env::current())
    }

    /// As [`PgLocation::parse`], from the given environment.
    ///
    /// # Errors
    /// As [`PgLocation::parse`].
    pub fn parse_with(url: &str, env: &Env) -> Result<PgLocation> {
        if !is_url(url) {
            return Err(bad("it must start with postgres:// or postgresql://"));
        }
        // Before anything else: the driver splits the user and password
        // from the host at the first `@`, so a password holding an
        // unencoded `@` or `/` would leave its tail in the host, which is
        // looked up in DNS and printed.
        check_userinfo(url)?;
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut kept = Vec::new();
        let (mut sslmode, mut sslrootcert, mut passfile) = (None, None, None);
        let mut statement_cache_size = STATEMENT_CACHE_DEFAULT;
        for item in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|i| !i.is_empty())
        {
            let (k, v) = item.split_once('=').unwrap_or((item, ""));
            let key = percent_decode(k)?;
            if !plain_key(&key) {
                // The driver would repeat it in "unknown option"; it may be
                // the tail of a password that held a `?`.
                return Err(bad(
                    "a query item's name is not an option name (a-z, 0-9, `_`); it is not repeated",
                ));
            }
            if REFUSED.contains(&key.as_str()) {
                return Err(bad(format!(
                    "`{key}`: client certificates are not supported; use a password or a Unix-socket login"
                )));
            }
            if !OURS.contains(&key.as_str()) {
                kept.push(item);
                continue;
            }
            let value = percent_decode(v)?;
            match key.as_str() {
                "statement_cache_size" => {
                    statement_cache_size = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| *n <= 10_000)
                        .ok_or_else(|| {
                            bad("`statement_cache_size` must be an integer from 0 to 10000")
                        })?;
                }
                "sslmode" => sslmode = Some(value),
                "sslrootcert" => sslrootcert = Some(value),
                _ => passfile = Some(PathBuf::from(value)),
            }
        }
        let rebuilt = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config = Config::from_str(&rebuilt).map_err(|e| {
            // The driver's message names the item (never its value) in
            // the error's source.
            match std::error::Error::source(&e) {
                Some(why) => bad(why.to_string()),
                None => bad(e.to_string()),
            }
        })?;

        let tls =
            match sslmode.or_else(|| env.sslmode.clone()).as_deref() {
                None | Some("prefer") | Some("allow") => Tls::Prefer,
                Some("disable") => Tls::Disable,
                Some("require") => Tls::Require,
                Some("verify-ca") => Tls::VerifyCa,
                Some("verify-full") => Tls::VerifyFull,
                Some(_) => return Err(bad(
                    "`sslmode` must be disable, allow, prefer, require, verify-ca or verify-full",
                )),
            };
        config.ssl_mode(match tls {
            Tls::Disable => SslMode::Disable,
            Tls::Prefer => SslMode::Prefer,
            Tls::Require | Tls::VerifyCa | Tls::VerifyFull => SslMode::Require,
        });
        let root_cert = sslrootcert.or_else(|| env.sslrootcert.clone());
        let tls = match tls {
            Tls::Require if root_cert.is_some() => Tls::VerifyCa,
            t => t,
        };

        fill_defaults(&mut config, env)?;
        if config.get_password().is_none() {
            if let Some(p) = &env.password {
                config.password(p.as_str());
            } else if let Some(p) = password_from_file(&config, passfile, env) {
                config.password(p);
            }
        }
        let display = display_of(&config);
        Ok(PgLocation {
            config,
            tls,
            root_cert,
            statement_cache_size,
            display,
        })
    }
}

/// libpq's defaults for what the URL leaves out.
fn fill_defaults(config: &mut Config, env: &Env) -> Result<()> {
    if config.get_ports().is_empty() {
        if let Some(p) = &env.port {
            let port = p
                .parse::<u16>()
                .map_err(|_| bad("PGPORT must be a port number"))?;
            config.port(port);
        }
    }
    if config.get_hosts().is_empty() {
        match &env.host {
            Some(h) => {
                config.host(h.as_str());
            }
            None => {
                let port = config.get_ports().first().copied().unwrap_or(5432);
                let socket = ["/var/run/postgresql", "/tmp"]
                    .into_iter()
                    .find(|d| Path::new(d).join(format!(".s.PGSQL.{port}")).exists());
                match socket {
                    Some(dir) => config.host_path(dir),
                    None => config.host("localhost"),
                };
            }
        }
    }
    if config.get_user().is_none() {
        let user = env
            .user
            .clone()
            .or_else(|| env.os_user.clone())
            .ok_or_else(|| bad("it names no user, and neither PGUSER nor USER is set"))?;
        config.user(&user);
    }
    if config.get_dbname().is_none() {
        if let Some(d) = &env.database {
            config.dbname(d.as_str());
        }
    }
    Ok(())
}

fn host_text(h: &Host) -> String {
    match h {
        Host::Tcp(name) => name.clone(),
        #[cfg(unix)]
        Host::Unix(path) => path.display().to_string(),
    }
}

/// `postgres://user@host:port/dbname`, without password or query items.
fn display_of(config: &Config) -> String {
    let user = config.get_user().unwrap_or_default();
    let hosts: Vec<String> = config.get_hosts().iter().map(host_text).collect();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{}:{port}/{db}", hosts.join(","))
}

/// The password of the first matching line of the password file (libpq's
/// format: `host:port:dbname:user:password`, `*` matches anything, `\`
/// escapes `:` and `\`); none when the file is missing or others may read it.
fn password_from_file(config: &Config, passfile: Option<PathBuf>, env: &Env) -> Option<String> {
    let path = passfile
        .or_else(|| env.passfile.clone())
        .or_else(|| env.home.as_ref().map(|h| h.join(".pgpass")))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&path).ok()?;
        if !meta.is_file() || meta.permissions().mode() & 0o077 != 0 {
            return None;
        }
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = config.get_hosts().first().map_or_else(
        || "localhost".to_string(),
        |h| match h {
            Host::Tcp(name) => name.clone(),
            // libpq matches a socket login against "localhost".
            #[cfg(unix)]
            Host::Unix(_) => "localhost".to_string(),
        },
    );
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    let want = [host.as_str(), port.as_str(), db, user];
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(pgpass_fields)
        .find(|f| {
            f[..4]
                .iter()
                .zip(want)
                .all(|(got, want)| got == "*" || got == want)
        })
        .map(|mut f| f.swap_remove(4))
}

/// The five fields of one password-file line, unescaped.
fn pgpass_fields(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut()?.push(chars.next().unwrap_or('\\')),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}

#[cfg(test)]
mod tests;
