//! Local files that are not what they seem: FIFOs and devices named like shards or indexes, symlinks planted
//! in an output directory, an output directory inside its source, names with control characters.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::run_measured;
use crate::support::{copy_tree, fixture, hubalign, stdout, text};

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Runs hubalign, failing the test if it does not finish within 20 s (a read of a FIFO would never).
fn run_bounded(args: &[&str]) -> Output {
    let mut child = hubalign()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("hubalign {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[cfg(feature = "system-tests")]
#[test]
fn fifos_and_devices_are_reported_and_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // A FIFO named like a shard, alone and inside a bundle beside a real shard.
    let fifo = d.join("lone.safetensors");
    mkfifo(&fifo);
    let out = run_bounded(&["scan", fifo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("FIFO"), "{}", text(&out));
    let bundle = d.join("bundle");
    copy_tree(&fixture("mlx_lm/q4"), &bundle);
    mkfifo(&bundle.join("extra.safetensors"));
    let out = run_bounded(&["scan", "--format", "json", bundle.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let rows: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let extra = rows.iter().find(|r| r["path"].as_str().unwrap().ends_with("extra.safetensors")).unwrap();
    assert_eq!(extra["verdict"], "invalid");
    assert!(extra["error"].as_str().unwrap().contains("FIFO"), "{extra}");
    let out = run_bounded(&["fix", "--out", d.join("fixed").to_str().unwrap(), bundle.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "the FIFO is left alone, the real shard fixed: {}", text(&out));
    assert!(d.join("fixed/model.safetensors").is_file());

    // A sharded bundle whose index is a FIFO, then a link to /dev/zero.
    for (name, plant) in [("fifo-index", "fifo"), ("zero-index", "zero")] {
        let sharded = d.join(name);
        copy_tree(&fixture("mlx_lm/sharded"), &sharded);
        let index = sharded.join("model.safetensors.index.json");
        std::fs::remove_file(&index).unwrap();
        match plant {
            "fifo" => mkfifo(&index),
            _ => std::os::unix::fs::symlink("/dev/zero", &index).unwrap(),
        }
        let m = run_measured(hubalign().args(["scan", sharded.to_str().unwrap()]));
        assert_eq!(m.code, Some(4), "{name}: {}", m.output);
        assert!(
            m.output.contains("model.safetensors.index.json") && m.output.contains("not a regular file"),
            "{name}: {}",
            m.output
        );
        assert!(m.max_rss < 200 << 20, "{name}: peak RSS {} MiB", m.max_rss >> 20);
        let out = run_bounded(&["fix", "--in-place", sharded.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(4), "{name}: {}", text(&out));
    }

    // A shard that is a link to a character device.
    let zero = d.join("zero.safetensors");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let out = run_bounded(&["scan", zero.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("character device"), "{}", text(&out));
}

#[test]
fn symlinks_planted_in_the_output_directory_are_replaced_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("src");
    copy_tree(&fixture("mlx_lm/q4"), &src);
    std::fs::create_dir_all(src.join("extras")).unwrap();
    std::fs::write(src.join("extras/notes.txt"), b"sidecar in a subdirectory").unwrap();
    let victims = d.join("victims");
    std::fs::create_dir_all(&victims).unwrap();
    for v in ["config", "shard", "notes"] {
        std::fs::write(victims.join(v), b"do not touch").unwrap();
    }
    let out_dir = d.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::os::unix::fs::symlink(victims.join("config"), out_dir.join("config.json")).unwrap();
    std::os::unix::fs::symlink(victims.join("shard"), out_dir.join("model.safetensors")).unwrap();
    std::os::unix::fs::symlink(&victims, out_dir.join("extras")).unwrap();

    let out = run_bounded(&["fix", "--out", out_dir.to_str().unwrap(), src.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for v in ["config", "shard", "notes"] {
        assert_eq!(std::fs::read(victims.join(v)).unwrap(), b"do not touch", "{v} was written through a link");
    }
    assert_eq!(std::fs::read_dir(&victims).unwrap().count(), 3, "nothing new in the link's target");
    for f in ["config.json", "model.safetensors", "extras/notes.txt"] {
        let meta = std::fs::symlink_metadata(out_dir.join(f)).unwrap();
        assert!(meta.is_file(), "{f} is a regular file now");
    }
    assert!(std::fs::symlink_metadata(out_dir.join("extras")).unwrap().is_dir());
    assert_eq!(std::fs::read(out_dir.join("config.json")).unwrap(), std::fs::read(src.join("config.json")).unwrap());
}

#[test]
fn an_output_directory_inside_its_source_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("b");
    copy_tree(&fixture("mlx_lm/q4"), &src);
    for out in [src.join("out"), src.join("deeper/still/out")] {
        let o = run_bounded(&["fix", "--out", out.to_str().unwrap(), src.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
        assert!(text(&o).contains("inside the bundle"), "{}", text(&o));
        assert!(!out.exists(), "nothing created");
    }
    // Through a symlink to the source, too.
    let alias = dir.path().join("alias");
    std::os::unix::fs::symlink(&src, &alias).unwrap();
    let o = run_bounded(&["fix", "--out", alias.join("out").to_str().unwrap(), src.to_str().unwrap()]);
    assert!(text(&o).contains("inside the bundle"), "{}", text(&o));
}

#[test]
fn file_names_with_control_characters_are_escaped_in_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let evil = dir.path().join("evil\u{1b}[2J\nforged.safetensors");
    std::fs::copy(fixture("mlx_lm/q4/model.safetensors"), &evil).unwrap();
    let table = stdout(&run_bounded(&["scan", "--format", "table", dir.path().to_str().unwrap()]));
    let bin = crate::support::hubalign_bin();
    // CSV on a terminal (`script` gives it one, and the progress bar draws there too): a person reads it, so it
    // is escaped like the table. Only the bar's own cursor movements may be escape sequences.
    let command = format!("{} scan --format csv {}", bin.to_str().unwrap(), dir.path().display());
    let on_terminal = Command::new("script").args(["-qec", &command, "/dev/null"]).output().unwrap();
    let on_terminal = String::from_utf8_lossy(&on_terminal.stdout).replace("\r\n", "\n");
    let on_terminal = ["\u{1b}[1A", "\u{1b}[1B", "\u{1b}[2K"].iter().fold(on_terminal, |t, bar| t.replace(bar, ""));
    for (format, shown) in [("table", &table), ("csv on a terminal", &on_terminal)] {
        assert!(!shown.contains('\u{1b}'), "{format}: {shown:?}");
        assert!(!shown.lines().any(|l| l.starts_with("forged")), "{format}: {shown}");
        assert!(shown.contains("\\u{1b}[2J\\u{a}forged"), "{format}: {shown}");
    }
    // CSV into a pipe is data for a program: RFC 4180, the name quoted and read back byte for byte.
    let piped = run_bounded(&["scan", "--format", "csv", dir.path().to_str().unwrap()]);
    let mut rows = csv::Reader::from_reader(&piped.stdout[..]);
    let paths: Vec<String> = rows.records().map(|r| r.unwrap()[0].to_owned()).collect();
    assert_eq!(paths, [evil.to_str().unwrap()]);
}

#[cfg(feature = "system-tests")]
#[test]
fn the_mlx_check_holds_a_tensor_at_a_time_not_the_shard() {
    // A 256 MiB shard of eight 32 MiB tensors, as MLX writes it (one odd-length tensor first), repaired.
    let dir = tempfile::tempdir().unwrap();
    let (src, out) = (dir.path().join("src"), dir.path().join("out"));
    std::fs::create_dir_all(&src).unwrap();
    let mut file = std::fs::File::create(src.join("model.safetensors")).unwrap();
    let names: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    let mut specs: Vec<(&str, hubalign_test_support::synth::Dtype, &[u64])> = vec![("a", "BF16", &[3])];
    specs.extend(names.iter().map(|n| (n.as_str(), "F32", &[8u64 << 20][..])));
    hubalign_test_support::synth::write_mlx_style_stream(&mut file, &specs, Some("mlx"), 11).unwrap();
    drop(file);
    let fixed = hubalign().args(["fix", src.to_str().unwrap(), "--out", out.to_str().unwrap()]).output().unwrap();
    assert!(fixed.status.success(), "{}", text(&fixed));
    let mut check = std::process::Command::new(crate::support::python());
    check.arg(crate::support::root().join("deploy/verify_mlx.py")).arg("--output").arg(&out);
    let measured = run_measured(&mut check);
    assert_eq!(measured.code, Some(0), "{}", measured.output);
    // The interpreter and MLX take about 90 MiB; the shard is 256 MiB. Loading it whole peaked above 340 MiB.
    assert!(measured.max_rss < 200 << 20, "peak {} MiB: {}", measured.max_rss >> 20, measured.output);
    // The address-space cap holds: a check that would need more than it fails, with its record.
    check.args(["--max-address-space", &(64u64 << 20).to_string()]);
    let capped = run_measured(&mut check);
    assert_eq!(capped.code, Some(1), "{}", capped.output);
    assert!(capped.output.contains("\"ok\": false"), "{}", capped.output);
    // As the worker runs it, the bundle and the limits come on stdin once it is staged: no cap passes, the
    // cap fails.
    let waiting = |cap: u64| {
        let mut check = Command::new(crate::support::python());
        check.arg(crate::support::root().join("deploy/verify_mlx.py")).arg("--wait");
        let io = std::process::Stdio::piped;
        let mut child = check.stdin(io()).stdout(io()).stderr(io()).spawn().unwrap();
        let go = serde_json::json!({"output": out.to_str().unwrap(), "jobs": 1, "max_address_space": cap});
        let line = format!("{go}\n");
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), line.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let free = waiting(0);
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
    let capped = waiting(64 << 20);
    assert_eq!(capped.status.code(), Some(1), "{}", text(&capped));
    assert!(String::from_utf8_lossy(&capped.stdout).contains("\"ok\": false"), "{}", text(&capped));
}
