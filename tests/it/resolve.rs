//! Reference resolution in `show` (docs/design.md, "Resolution").

use crate::common::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Writes a resolver configuration only its owner can change (whatever
/// the umask): logbook refuses any other.
fn write_config(path: &Path, body: impl AsRef<[u8]>) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// `show --json` with `LOGBOOK_CONFIG` pointing at `config`.
fn show_with(env: &TestEnv, config: &Path, id: &str) -> Run {
    let mut c = env.command();
    c.env("LOGBOOK_CONFIG", config)
        .arg("--db")
        .arg(env.path())
        .args(["session", "show", id, "--json"]);
    c.output().unwrap().into()
}

fn states(v: &Value) -> Vec<(String, String, String)> {
    v["resolved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_owned(),
                r["id"].as_str().unwrap().to_owned(),
                r["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn alive(pid: i32) -> bool {
    // SAFETY-free: kill(pid, 0) only asks whether the pid exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn each_state_present_missing_unavailable_unknown() {
    let env = TestEnv::new();
    let dir = env.dir.path().to_owned();
    let s = env.create("a");
    let parent = env.create_with(&["--title", "child", "--parent", &s]);
    env.json(&[
        "session",
        "checkpoint",
        &parent,
        "--plan",
        "pln_ok",
        "--plan",
        "pln_missing",
        "--plan",
        "pln_err",
        "--plan",
        "pln_slow",
        "--operation",
        "op_1",
        "--deployment",
        "dep-1",
    ]);
    let plan = dir.join("plan.sh");
    let pidfile = dir.join("slow.pid");
    script(
        &plan,
        &format!(
            "case \"$1\" in\n pln_missing) exit 3;;\n pln_err) exit 1;;\n pln_slow) sleep 30 & echo $! > {}; wait; exit 0;;\nesac\nexit 0",
            pidfile.display()
        ),
    );
    let config = dir.join("resolvers.toml");
    write_config(
        &config,
        format!(
            "[resolvers.plan]\ncommand = [\"{}\", \"{{id}}\"]\ntimeout_ms = 700\n\n[resolvers.deployment]\ncommand = [\"{}\", \"{{id}}\"]\n",
            plan.display(),
            dir.join("no-such-program").display()
        ),
    );
    let r = show_with(&env, &config, &parent);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(
        states(&r.data()),
        [
            ("session", s.as_str(), "present"),
            ("plan", "pln_ok", "present"),
            ("plan", "pln_missing", "missing"),
            ("plan", "pln_err", "unavailable"),
            ("plan", "pln_slow", "unavailable"),
            ("operation", "op_1", "unknown"),
            ("deployment", "dep-1", "unavailable"),
        ]
        .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
    );
    // The timed-out resolver's whole process group was killed.
    let child: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut gone = false;
    for _ in 0..100 {
        if !alive(child) {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(gone, "the resolver's child {child} outlived its timeout");
    // Without a configuration every external reference is unknown; the
    // default location is logbook.toml beside the database (for a server,
    // $HOME/.config/logbook/logbook.toml: HOME is the env's folder).
    let plain = env.json(&["session", "show", &parent]).data();
    assert!(states(&plain)[1..].iter().all(|r| r.2 == "unknown"));
    let default = if on_pg() {
        let d = dir.join(".config/logbook");
        std::fs::create_dir_all(&d).unwrap();
        d.join("logbook.toml")
    } else {
        dir.join("logbook.toml")
    };
    std::fs::copy(&config, default).unwrap();
    let beside = env.json(&["session", "show", &parent]).data();
    assert_eq!(states(&beside)[1].2, "present");
}

/// Ids reach the resolver as one argument each, never through a shell.
#[test]
fn ids_are_arguments_not_shell_text() {
    let env = TestEnv::new();
    let dir = env.dir.path().to_owned();
    let s = env.create("a");
    let nasty = [
        "pln_$(touch${IFS}pwned)",
        "pln_;touch${IFS}pwned2;",
        "pln_--help",
        "pln_`id`",
    ];
    // `--plan=VALUE`, so that a value beginning with '-' stays a value.
    let mut fixed = vec!["session".to_owned(), "checkpoint".into(), s.clone()];
    fixed.extend(nasty.iter().map(|n| format!("--plan={n}")));
    let fixed: Vec<&str> = fixed.iter().map(String::as_str).collect();
    assert_eq!(env.json(&fixed).code, 0);
    let log = dir.join("args.log");
    let plan = dir.join("plan.sh");
    script(
        &plan,
        &format!(
            "printf '%s|%s\\n' \"$#\" \"$1\" >> {}\nexit 0",
            log.display()
        ),
    );
    let config = dir.join("c.toml");
    write_config(
        &config,
        format!(
            "[resolvers.plan]\ncommand = [\"{}\", \"{{id}}\"]\n",
            plan.display()
        ),
    );
    let r = show_with(&env, &config, &s);
    assert_eq!(r.code, 0);
    let mut seen: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    seen.sort();
    let mut want: Vec<String> = nasty.iter().map(|n| format!("1|{n}")).collect();
    want.sort();
    assert_eq!(seen, want);
    assert!(!dir.join("pwned").exists() && !dir.join("pwned2").exists());
    assert!(std::env::current_dir()
        .map(|d| !d.join("pwned").exists())
        .unwrap());
}

/// Resolvers run in parallel, at most 8 at once.
#[test]
fn resolvers_run_in_parallel_bounded_to_8() {
    let env = TestEnv::new();
    let dir = env.dir.path().to_owned();
    let s = env.create("a");
    let mut args = vec!["session".to_owned(), "checkpoint".into(), s.clone()];
    for k in 0..12 {
        args.push("--plan".into());
        args.push(format!("pln_{k}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(env.json(&a).code, 0);
    let running = dir.join("running");
    std::fs::create_dir(&running).unwrap();
    let counts = dir.join("counts");
    let plan = dir.join("plan.sh");
    script(
        &plan,
        &format!(
            "touch {r}/$1\nls {r} | wc -l >> {c}\nsleep 0.3\nls {r} | wc -l >> {c}\nrm {r}/$1\nexit 0",
            r = running.display(),
            c = counts.display()
        ),
    );
    let config = dir.join("c.toml");
    write_config(
        &config,
        format!(
            "[resolvers.plan]\ncommand = [\"{}\", \"{{id}}\"]\n",
            plan.display()
        ),
    );
    let r = show_with(&env, &config, &s);
    assert_eq!(r.code, 0);
    assert!(states(&r.data()).iter().all(|x| x.2 == "present"));
    let max = std::fs::read_to_string(&counts)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse::<usize>().unwrap())
        .max()
        .unwrap();
    assert!(
        (2..=8).contains(&max),
        "at most 8 at once, and more than one: {max}"
    );
}

#[test]
fn a_bad_configuration_is_invalid_argument_naming_the_file() {
    let env = TestEnv::new();
    let dir = env.dir.path().to_owned();
    let s = env.create("a");
    env.json(&["session", "checkpoint", &s, "--plan", "pln_1"]);
    let bare = env.create("bare");
    let config = dir.join("c.toml");
    for body in [
        "[resolvers.plan\ncommand = 1",
        "[resolvers.session]\ncommand = [\"true\", \"{id}\"]",
        "[resolvers.plan]\ncommand = [\"true\"]",
        "[resolvers.plan]\ncommand = [\"true\", \"--id={id}\"]",
        "[resolvers.plan]\ncommand = []",
        "[resolvers.plan]\ncommand = [\"true\", \"{id}\"]\ntimeout_ms = 0",
        "[resolvers.plan]\ncommand = [\"true\", \"{id}\"]\nshell = true",
    ] {
        write_config(&config, body);
        let e = assert_error(&show_with(&env, &config, &s), "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], "config", "{body}");
        assert!(e["message"].as_str().unwrap().contains("c.toml"), "{body}");
        // A session without external references never reads the file.
        assert_eq!(show_with(&env, &config, &bare).code, 0, "{body}");
    }
}

/// Many references to a hanging resolver stop at the overall bound (the
/// longest timeout, at least 10 s), not after timeout × references / 8
/// (found by adversarial testing).
#[test]
fn many_hanging_resolvers_share_one_overall_bound() {
    let env = TestEnv::new();
    let dir = env.dir.path().to_owned();
    let s = env.create("a");
    let mut args = vec!["session".to_owned(), "checkpoint".into(), s.clone()];
    for k in 0..40 {
        args.push(format!("--plan=pln_{k}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(env.json(&a).code, 0);
    let plan = dir.join("hang.sh");
    script(&plan, "sleep 30");
    let config = dir.join("c.toml");
    write_config(
        &config,
        format!(
            "[resolvers.plan]\ncommand = [\"{}\", \"{{id}}\"]\ntimeout_ms = 6000\n",
            plan.display()
        ),
    );
    let t = std::time::Instant::now();
    let r = show_with(&env, &config, &s);
    let took = t.elapsed();
    assert_eq!(r.code, 0);
    assert!(states(&r.data()).iter().all(|x| x.2 == "unavailable"));
    // 40 references × 6 s / 8 at once would be 30 s; the bound is 10 s.
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
}

/// A session with one plan reference, a resolver script that leaves
/// `ran` behind when it runs, and a configuration naming it.
fn planted(env: &TestEnv) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let dir = env.dir.path().to_owned();
    let s = env.create("a");
    env.json(&["session", "checkpoint", &s, "--plan", "pln_1"])
        .data();
    let ran = dir.join("ran");
    let plan = dir.join("plan.sh");
    script(&plan, &format!("touch {}\nexit 0", ran.display()));
    let config = dir.join("c.toml");
    write_config(
        &config,
        format!(
            "[resolvers.plan]\ncommand = [\"{}\", \"{{id}}\"]\n",
            plan.display()
        ),
    );
    (s, config, ran)
}

#[track_caller]
fn refused_config(r: &Run, config: &Path, why: &str) {
    let e = assert_error(r, "INVALID_ARGUMENT", 2);
    assert_eq!(e["details"]["field"], "config");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("invalid `config`: {}: {why}", config.display())),
        "{msg}"
    );
}

/// A `logbook.toml` another user can change is refused before it is read
/// (attack report #1): whoever could write it could make `show` run any
/// program as its caller.
#[test]
fn a_config_another_user_can_change_is_refused_and_runs_nothing() {
    let env = TestEnv::new();
    let (s, config, ran) = planted(&env);
    for mode in [0o620, 0o602, 0o666, 0o644 | 0o020] {
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(mode)).unwrap();
        refused_config(
            &show_with(&env, &config, &s),
            &config,
            &format!("is writable by group or others (mode {mode:04o})"),
        );
        assert!(!ran.exists(), "mode {mode:o}: the resolver ran");
    }
    if is_root() {
        // Owned by another user, even if only its owner may write it.
        std::os::unix::fs::chown(&config, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
        refused_config(
            &show_with(&env, &config, &s),
            &config,
            "is owned by uid 65534, not by this user (uid 0) or root",
        );
        assert!(!ran.exists(), "another user's file: the resolver ran");
        std::os::unix::fs::chown(&config, Some(0), Some(0)).unwrap();
    }
    // A FIFO under the name is refused at once, not waited on.
    let fifo = env.dir.path().join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) reads a NUL-terminated path and touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused_config(&show_with(&env, &fifo, &s), &fifo, "is not a regular file");
    // The same file, writable by its owner alone, is used.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = show_with(&env, &config, &s);
    assert_eq!(states(&r.data())[0].2, "present");
    assert!(ran.exists());
}

/// The default location is checked as `LOGBOOK_CONFIG` is, including the
/// last fallback: for a server with neither XDG_CONFIG_HOME nor HOME set,
/// `logbook.toml` in the current folder (for a file given as a relative
/// name, beside the database is the current folder too).
#[test]
fn the_default_config_even_in_the_current_folder_is_checked() {
    let env = TestEnv::new();
    let (s, config, ran) = planted(&env);
    let dir = env.dir.path().to_owned();
    let default = dir.join("logbook.toml");
    std::fs::rename(&config, &default).unwrap();
    std::fs::set_permissions(&default, std::fs::Permissions::from_mode(0o664)).unwrap();
    let show = || -> Run {
        let mut c = env.command();
        c.env_remove("HOME")
            .current_dir(&dir)
            .arg("--db")
            .arg(if on_pg() {
                env.path()
            } else {
                Path::new("ledger.db")
            })
            .args(["session", "show", &s, "--json"]);
        c.output().unwrap().into()
    };
    refused_config(
        &show(),
        Path::new("logbook.toml"),
        "is writable by group or others (mode 0664)",
    );
    assert!(!ran.exists());
    std::fs::set_permissions(&default, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(states(&show().data())[0].2, "present");
    assert!(ran.exists());
}

/// A reference id that begins with `-` would reach the resolver as an
/// option (attack report #1): checkpoint refuses it, naming the field,
/// and records nothing.
#[test]
fn reference_ids_beginning_with_a_dash_are_refused_naming_the_field() {
    let env = TestEnv::new();
    let s = env.create("a");
    for (flag, field) in [
        ("--plan=--output=/tmp/x", "plan_ids"),
        ("--operation=-v", "operation_ids"),
        ("--deployment=-", "deployment_ids"),
    ] {
        let r = env.json(&["session", "checkpoint", &s, "--plan", "pln_ok", flag]);
        let e = assert_error(&r, "INVALID_ARGUMENT", 2);
        assert_eq!(e["details"]["field"], field, "{flag}");
        assert_eq!(
            e["message"],
            format!("invalid `{field}`: must not begin with `-` (a resolver would read it as an option)")
        );
    }
    let v = env.json(&["session", "show", &s]).data();
    assert_eq!(v["session"]["rev"], 1);
    assert_eq!(v["session"]["plan_ids"], serde_json::json!([]));
    // A dash inside an id is fine.
    env.json(&["session", "checkpoint", &s, "--plan", "pln-1"])
        .data();
    // The same through MCP.
    crate::mcp::rt().block_on(async {
        let client = crate::mcp::connect(&env, &[]).await;
        let e = crate::mcp::err(
            &crate::mcp::call(
                &client,
                "logbook_session_checkpoint",
                serde_json::json!({"session_id": s, "plan_ids": ["-o"]}),
            )
            .await,
            "INVALID_ARGUMENT",
        );
        assert_eq!(e["details"]["field"], "plan_ids");
    });
    assert_eq!(
        env.json(&["session", "show", &s]).data()["session"]["rev"],
        2
    );
}

/// A reference id beginning with `-` stored before checkpoint refused
/// such ids (or by another client) is never passed to the resolver: it is
/// `unavailable`.
#[test]
fn a_stored_reference_id_beginning_with_a_dash_never_reaches_the_resolver() {
    let env = TestEnv::new();
    let dir = env.dir.path().to_owned();
    let s = env.create("a");
    env.json(&["session", "checkpoint", &s, "--plan", "pln_1"])
        .data();
    env.batch(&format!(
        "INSERT INTO session_refs (session_id, kind, ref_id, ordinal, linked_seq)
         VALUES ('{s}', 'plan', '-o', 1, 1)"
    ));
    let log = dir.join("args.log");
    let plan = dir.join("plan.sh");
    script(&plan, &format!("echo \"$1\" >> {}\nexit 0", log.display()));
    let config = dir.join("c.toml");
    write_config(
        &config,
        format!(
            "[resolvers.plan]\ncommand = [\"{}\", \"{{id}}\"]\n",
            plan.display()
        ),
    );
    let r = show_with(&env, &config, &s);
    assert_eq!(
        states(&r.data()),
        [("plan", "pln_1", "present"), ("plan", "-o", "unavailable")].map(|(a, b, c)| (
            a.to_owned(),
            b.to_owned(),
            c.to_owned()
        ))
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "pln_1\n");
}
