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
