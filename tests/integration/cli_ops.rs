//! What an operator meets at the command line: usage errors exit 2, errors are said once, a busy port is
//! named before anything claims to serve, and the long-running commands say what they do by default.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::audit::world::audit_world;
use crate::serve::{Service, free_port, try_get};
use crate::sim::world::ALICE;
use crate::support::{fixture, hubalign, run, stdout};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn usage_errors_exit_2_and_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo.db");
    let out = run(&["report", "--db", typo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no such database"), "{}", stderr(&out));
    assert!(!typo.exists(), "report never creates an empty store");

    let out = run(&["fix", fixture("mlx_lm/q4").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--out DIR, or --in-place"), "{}", stderr(&out));

    let out = run(&["scan", "/nonexistent/model.safetensors"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(stderr(&out).matches("No such file or directory").count(), 1, "said once: {}", stderr(&out));
}

/// `--db` and `DATABASE_URL` read a location the same way: `sqlite:PATH` is the file at PATH (not a file
/// named `sqlite:…` in the working directory), an unknown scheme is refused, and a mistyped directory is
/// never created.
#[test]
fn store_locations_mean_one_thing_and_a_mistake_is_said_not_made() {
    let world = audit_world(0, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let endpoint = world.endpoint();
    let file = dir.path().join("x.db");
    let out = hubalign()
        .current_dir(dir.path())
        .args(["audit", "--endpoint", endpoint.as_str(), "--db", &format!("sqlite:{}", file.display())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(file.is_file(), "the file the URL names");
    assert!(!dir.path().join("sqlite:").exists(), "no directory named after the scheme");
    let out = hubalign()
        .args(["report", "--by-publisher"])
        .env("DATABASE_URL", format!("sqlite://{}", file.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "DATABASE_URL reads the same: {}", stderr(&out));

    for (db, said) in [("mysql://u@h/db", "`mysql:` is not a store hubalign can use"), ("sqlite:", "names no file")] {
        let out = hubalign().args(["audit", "--endpoint", endpoint.as_str(), "--db", db]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{db}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{db}: {}", stderr(&out));
    }
    let out = hubalign().args(["report"]).env("DATABASE_URL", "mysql://u@h/db").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("DATABASE_URL: `mysql:`"), "{}", stderr(&out));

    let typo = dir.path().join("no-such-dir/x.db");
    let out =
        hubalign().args(["audit", "--endpoint", endpoint.as_str(), "--db", typo.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no such directory"), "{}", stderr(&out));
    assert!(!typo.parent().unwrap().exists(), "the mistyped directory is not created");
}

#[test]
fn a_busy_port_is_named_before_anything_claims_to_serve() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = hubalign()
        .args(["serve", "--endpoint", "http://127.0.0.1:9", "--token", ALICE, "--listen", &addr])
        .arg("--db")
        .arg(dir.path().join("a.db"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(!stdout(&out).contains("hubalign serve: http://"), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains(&addr) && err.contains("--listen"), "{err}");
}

#[test]
fn serve_says_what_it_does_at_the_default_level() {
    let world = audit_world(0, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let port = free_port();
    let endpoint = world.endpoint();
    let _service = Service(
        hubalign()
            .args(["serve", "--endpoint", endpoint.as_str(), "--token", ALICE, "--workers", "0"])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--interval", "86400"])
            .arg("--db")
            .arg(dir.path().join("a.db"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("audit finished") {
            assert!(text.contains("serving") && text.contains("audit started"), "{text}");
            assert!(!text.contains('\u{1b}'), "plain text for a file: {text:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no progress logged at the default level:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(try_get(&format!("http://127.0.0.1:{port}/healthz")).is_some());
}

/// Ctrl-C ends an audit with 130 (as a shell reports SIGINT), and the run is stored interrupted with what it
/// had done, named as the command's.
#[test]
fn ctrl_c_ends_an_audit_with_130_and_its_real_counts_under_its_own_name() {
    let world = audit_world(40, |c| c.faults.latency = Duration::from_millis(100));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let endpoint = world.endpoint();
    let child = hubalign()
        .args(["audit", "--endpoint", endpoint.as_str(), "--concurrency", "2", "--db", db.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while world.counters().requests.get("resolve").copied().unwrap_or(0) < 10 {
        assert!(Instant::now() < deadline, "the audit did not get going");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let runs =
        world.runtime.block_on(async { hubalign::store::Store::open(&db).await.unwrap().runs(5).await.unwrap() });
    let run = &runs[0];
    assert_eq!(run.status, "interrupted", "{run:?}");
    assert!(
        run.repos_probed > 0 && run.shards_probed > 0 && run.bytes_read > 0 && run.resolver_requests > 0,
        "{run:?}"
    );
    assert!(run.error.as_deref().unwrap_or("").contains("Ctrl-C"), "{run:?}");
    assert!(run.started_by.as_deref().unwrap_or("").starts_with("hubalign audit on "), "{run:?}");
}

/// The Hub's own conventions: `HF_HUB_OFFLINE` keeps every command off the network, and with
/// `HF_HUB_DISABLE_IMPLICIT_TOKEN` only a token given on the command line counts.
#[test]
fn hf_hub_offline_and_disable_implicit_token_are_honoured() {
    let world = audit_world(0, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let endpoint = world.endpoint();
    let before = world.counters().requests.values().sum::<u64>();
    let out = hubalign()
        .args(["audit", "--endpoint", endpoint.as_str(), "--db", db.to_str().unwrap()])
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("HF_HUB_OFFLINE is set"), "{}", stderr(&out));
    assert_eq!(world.counters().requests.values().sum::<u64>(), before, "not one request");
    assert!(!db.exists(), "nothing made either");

    let doctor = |env: &[(&str, &str)], token: Option<&str>| {
        let mut cmd = hubalign();
        cmd.args(["doctor", "--endpoint", endpoint.as_str(), "--db", db.to_str().unwrap(), "--json"]);
        if let Some(token) = token {
            cmd.args(["--token", token]);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.env_remove("HF_TOKEN").output().unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    let token_check = |doc: &serde_json::Value| {
        doc["checks"].as_array().unwrap().iter().find(|c| c["check"] == "token").unwrap()["status"].clone()
    };
    let implicit = doctor(&[("HUGGING_FACE_HUB_TOKEN", ALICE)], None);
    assert_eq!(token_check(&implicit), "ok", "{implicit}");
    assert_eq!(implicit["environment"]["token"], "from HUGGING_FACE_HUB_TOKEN (not shown)");
    let refused = doctor(&[("HUGGING_FACE_HUB_TOKEN", ALICE), ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "true")], None);
    assert_eq!(token_check(&refused), "fail", "{refused}");
    let given = doctor(&[("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")], Some(ALICE));
    assert_eq!(token_check(&given), "ok", "{given}");
}

/// `-q`, `-v`, shell completions, `localhost` as a listening host, and a bad repo id as a usage error.
#[test]
fn verbosity_completions_host_names_and_repo_ids_behave_as_operators_expect() {
    let world = audit_world(0, |_| {});
    let endpoint = world.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let audit = |flag: &str| {
        let fresh = dir.path().join(format!("audit{flag}.db"));
        hubalign()
            .args(["audit", "--endpoint", endpoint.as_str(), "--db", fresh.to_str().unwrap(), flag])
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let quiet = audit("-q");
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert!(!stderr(&quiet).contains("INFO"), "-q logs errors only: {}", stderr(&quiet));
    let verbose = audit("-v");
    assert!(stderr(&verbose).contains("DEBUG"), "-v logs debug: {}", stderr(&verbose));
    assert_eq!(run(&["scan", "-q", "-v", "."]).status.code(), Some(2), "-q and -v together are a usage error");

    let bash = run(&["completions", "bash"]);
    assert_eq!(bash.status.code(), Some(0));
    let script = stdout(&bash);
    assert!(script.contains("_hubalign()") && script.contains("doctor") && script.contains("--target-namespace"));
    let zsh = run(&["completions", "zsh"]);
    assert!(stdout(&zsh).contains("#compdef hubalign"));

    let port = free_port();
    let _service = Service(
        hubalign()
            .args(["serve", "--endpoint", endpoint.as_str(), "--token", ALICE, "--workers", "0"])
            .args(["--listen", &format!("localhost:{port}"), "--db", db.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while try_get(&format!("http://127.0.0.1:{port}/healthz")).is_none() {
        assert!(Instant::now() < deadline, "serve --listen localhost:{port} did not answer");
        std::thread::sleep(Duration::from_millis(100));
    }

    let bad =
        hubalign().args(["repack", "not a repo", "--endpoint", endpoint.as_str(), "--token", ALICE]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("REPO"), "{}", stderr(&bad));
}

/// Long work says how far it is where no bar is drawn (a log file, a pipe): an audit's start, progress with
/// its ETA and end, and a job's download with its bytes and ETA, at info.
#[cfg(feature = "system-tests")]
#[test]
fn long_work_says_how_far_it_is_without_a_terminal() {
    let world = audit_world(12, |c| c.faults.latency = Duration::from_millis(60));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let endpoint = world.endpoint();
    let out = hubalign()
        .args(["audit", "--endpoint", endpoint.as_str(), "--concurrency", "2", "--db", db.to_str().unwrap()])
        .env("HUBALIGN_DEBUG_PROGRESS_MS", "200")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stderr(&out);
    for line in ["audit started", "audit progress:", "eta_s=", "audit ended"] {
        assert!(said.contains(line), "{line} in {said}");
    }
    let out = hubalign()
        .args(["repack", "mlx-community/tiny-sharded", "--endpoint", endpoint.as_str(), "--token", ALICE])
        .args(["--db", db.to_str().unwrap(), "--target-namespace", "alice", "--verify-device", "cpu", "--python"])
        .arg(crate::support::python())
        .env("HUBALIGN_DEBUG_PROGRESS_MS", "100")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let said = stderr(&out);
    for line in ["download started", "downloading: ", "of=77825", "eta="] {
        assert!(said.contains(line), "{line} in {said}");
    }
}

/// A worker answers a probe with `--health-listen` as `serve` does, and `hubalign healthcheck` (the
/// container's HEALTHCHECK) reads it: 0 on a 2xx answer, 4 when nothing answers.
#[test]
fn a_worker_serves_its_health_and_healthcheck_reads_it() {
    let world = audit_world(0, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let endpoint = world.endpoint();
    let port = free_port();
    let _worker = Service(
        hubalign()
            .args(["worker", "--endpoint", endpoint.as_str(), "--token", ALICE, "--db", db.to_str().unwrap()])
            .args(["--target-namespace", "alice", "--verify-device", "metal", "--drain-only"])
            .args(["--health-listen", &format!("localhost:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}/healthz");
    let deadline = Instant::now() + Duration::from_secs(30);
    while try_get(&url).is_none() {
        assert!(Instant::now() < deadline, "the worker's health did not answer");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(try_get(&url).unwrap(), "ok\n");
    let ok = run(&["healthcheck", "--url", &url]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    assert!(stdout(&ok).starts_with("200 OK: ok"), "{}", stdout(&ok));
    let nobody = run(&["healthcheck", "--url", &format!("http://127.0.0.1:{}/healthz", free_port()), "--timeout", "2"]);
    assert_eq!(nobody.status.code(), Some(4), "{}", stderr(&nobody));
}
