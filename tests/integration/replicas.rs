//! `serve` replicas sharing one PostgreSQL store: every replica answers, exactly one runs the scheduled audit
//! at each tick, and when it is killed another takes the schedule over.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::audit::world::audit_world;
use crate::postgres::postgres_url;
use crate::serve::{Service, free_port, try_get};
use crate::sim::world::ALICE;
use crate::support::{hubalign, python};

/// Starts a replica (no workers, an audit every 2 s, a 3 s scheduler lease, `extra` flags) and waits until
/// it answers.
fn replica(endpoint: &str, db: &str, extra: &[&str]) -> (Service, String) {
    replica_of(hubalign(), endpoint, db, &[extra, &["--interval", "2"]].concat(), Stdio::null())
}

/// [`replica`] started by `command` (hubalign, or hubalign under `faketime`), its errors to `stderr`.
fn replica_of(mut command: Command, endpoint: &str, db: &str, extra: &[&str], stderr: Stdio) -> (Service, String) {
    let port = free_port();
    let child = command
        .args(["serve", "--endpoint", endpoint, "--token", ALICE, "--db", db, "--workers", "0"])
        .args(extra)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--scheduler-lease", "3"])
        .args(["--target-namespace", "alice", "--verify-device", "cpu"])
        .arg("--python")
        .arg(python())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while try_get(&format!("{base}/healthz")).is_none() {
        assert!(Instant::now() < deadline, "the replica never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    (Service(child), base)
}

/// The audit runs as (start in unix seconds, replica that started it), oldest first.
fn runs(db: &str) -> Vec<(i64, String)> {
    let out = hubalign().args(["store", "export", "--db", db]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["table"] == "audit_runs")
        .map(|e| {
            let at = hubalign::time::parse_utc(e["row"]["started_at"].as_str().unwrap()).unwrap();
            (at, e["row"]["started_by"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// No two runs start within one interval (2 s; starts are stored to the second).
fn one_per_tick(runs: &[(i64, String)]) {
    for pair in runs.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= 1, "two audits in one tick: {runs:?}");
    }
}

#[test]
fn two_replicas_run_one_audit_per_tick_and_the_survivor_takes_over() {
    let world = audit_world(0, |_| {});
    let endpoint = world.endpoint();
    let db = postgres_url();
    // Started first, so it would lead if `--no-scheduler` did not keep it from the lease.
    let (reader, reader_url) = replica(&endpoint, &db, &["--no-scheduler"]);
    let (first, first_url) = replica(&endpoint, &db, &[]);
    let (second, second_url) = replica(&endpoint, &db, &[]);
    let first_pid = first.0.id().to_string();
    std::thread::sleep(Duration::from_secs(8));
    let before = runs(&db);
    assert!(before.len() >= 3, "audits every 2 s: {before:?}");
    let leaders: std::collections::BTreeSet<&str> = before.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(leaders.len(), 1, "one replica ran them all: {before:?}");
    assert!(leaders.iter().next().unwrap().ends_with(&format!("-{first_pid}")), "the first to start leads");
    one_per_tick(&before);
    // All serve the same store.
    for base in [&first_url, &second_url, &reader_url] {
        let api: Vec<serde_json::Value> = serde_json::from_str(&try_get(&format!("{base}/api/runs")).unwrap()).unwrap();
        assert!(api.len() >= before.len());
    }
    // The leader dies without giving its lease up; the survivor takes over once the lease lapses.
    drop(first);
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(30);
    let after = loop {
        let all = runs(&db);
        if all.iter().skip(before.len()).any(|r| !leaders.contains(r.1.as_str())) {
            break all;
        }
        assert!(Instant::now() < deadline, "no replica took the schedule over: {all:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(3 + 2 + 3), "took over in {took:?} (lease 3 s, interval 2 s)");
    one_per_tick(&after);
    let second_pid = second.0.id().to_string();
    assert!(after.last().unwrap().1.ends_with(&format!("-{second_pid}")), "{after:?}");
    let reader_pid = reader.0.id();
    let by_reader = |who: &str| who.ends_with(&format!("-{reader_pid}")) || who.contains(&format!("-{reader_pid},"));
    assert!(!after.iter().any(|r| by_reader(&r.1)), "the --no-scheduler replica audited: {after:?}");
    let overview = try_get(&format!("{reader_url}/")).unwrap();
    assert!(overview.contains("left to the other replicas"), "its overview says who audits");
    drop(second);
    drop(reader);
}

/// `hubalign` run under libfaketime with its clock `offset` seconds from this machine's (timers, which
/// read the monotonic clock, keep their pace). The library is preloaded as the `faketime` wrapper preloads
/// it, but without the wrapper: the wrapper forks, and killing it would leave the replica running.
fn skewed(offset: i64) -> Command {
    let mut command = Command::new(crate::support::hubalign_bin());
    command.env("LD_PRELOAD", "/usr/$LIB/faketime/libfaketime.so.1");
    command.env("FAKETIME", format!("{offset:+}"));
    command.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    command
}

/// A replica whose clock is ten minutes ahead neither takes the scheduler lease from a live replica nor
/// audits early: leases, schedules and run times are the database's. It says so at start, and `doctor`
/// fails it.
#[test]
fn a_replica_ten_minutes_ahead_takes_no_lease_and_runs_no_audit_early() {
    let world = audit_world(0, |_| {});
    let endpoint = world.endpoint();
    let db = postgres_url();
    // Audits every 5 minutes: the skewed replica's clock says the next one is 5 minutes overdue.
    let (first, _) = replica_of(hubalign(), &endpoint, &db, &["--interval", "300"], Stdio::null());
    let deadline = Instant::now() + Duration::from_secs(60);
    while runs(&db).is_empty() {
        assert!(Instant::now() < deadline, "the first replica never audited");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = tempfile::NamedTempFile::new().unwrap();
    let stderr = Stdio::from(log.reopen().unwrap());
    let (_skewed, _) = replica_of(skewed(600), &endpoint, &db, &["--interval", "300"], stderr);
    // Several beats of the 3 s lease.
    std::thread::sleep(Duration::from_secs(8));
    let holder = world.runtime.block_on(async {
        let store = hubalign::store::Store::open_at(&db).await.unwrap();
        store.lease_holder(hubalign::store::leases::SCHEDULER).await.unwrap()
    });
    let first_pid = first.0.id().to_string();
    assert!(holder.as_ref().is_some_and(|(h, _)| h.ends_with(&format!("-{first_pid}"))), "{holder:?}");
    let after = runs(&db);
    assert_eq!(after.len(), 1, "no audit before its time: {after:?}");
    let said = std::fs::read_to_string(log.path()).unwrap();
    // 600 s, give or take the second the two clocks were read in.
    let ahead = said.split("clock is ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<i64>().ok());
    assert!(ahead.is_some_and(|s| (599..=601).contains(&s)) && said.contains("s ahead of the store's"), "{said}");

    // `doctor` fails a skewed clock, and passes this machine's.
    let doctor = |mut command: Command| {
        command
            .args(["doctor", "--endpoint", &endpoint, "--token", ALICE, "--db", &db, "--target-namespace", "alice"])
            .args(["--verify-device", "cpu", "--python"])
            .arg(python())
            .output()
            .unwrap()
    };
    let out = doctor(skewed(600));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(text.lines().any(|l| l.contains("FAIL") && l.contains("clock")), "{text}");
    let out = doctor(hubalign());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.lines().any(|l| l.contains("ok") && l.contains("clock")), "{text}");
}
