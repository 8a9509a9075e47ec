//! What the kernel returned to a run of the binary, per file, from an `strace` of it.
//!
//! Descriptors are named two ways because neither works everywhere: `-y` prints `3</path>` in the call
//! itself, but only where strace can read the tracee's `/proc/<pid>/fd` (a CI sandbox printed bare numbers
//! and the count came out 0). The descriptor table rebuilt from `openat`/`close` in trace order covers that
//! case; the threads of one process share one table, so it is keyed by descriptor alone.

use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Output};

/// Runs the binary with `args` under strace; bytes returned by `read`/`pread64` from files whose path ends
/// with `suffix`, per path.
pub(crate) fn bytes_read_by_kernel(args: &[&str], suffix: &str) -> (Output, BTreeMap<String, u64>) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-s", "0", "-y", "-e", "trace=open,openat,close,read,pread64", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_hubalign"))
        .args(args)
        .output()
        .expect("strace is needed for this test (bash tests/run.sh installs it)");
    let counts = reads_per_file(&std::fs::read_to_string(&trace).unwrap(), suffix);
    (out, counts)
}

/// Sums successful reads per file in an `strace -f` log.
fn reads_per_file(trace: &str, suffix: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let mut open_files: HashMap<i64, String> = HashMap::new();
    // A call another thread interrupts is printed in two lines, `read(5, <unfinished ...>` and later
    // `<... read resumed>…) = n`, tied by the thread id; they are joined before parsing.
    let mut unfinished: HashMap<&str, &str> = HashMap::new();
    for line in trace.lines() {
        // strace pads the thread id to five columns: `9177  read(…`.
        let Some((tid, call)) = line.split_once(' ') else { continue };
        let call = call.trim_start();
        let joined;
        let call = if let Some(entry) = call.strip_suffix("<unfinished ...>") {
            unfinished.insert(tid, entry);
            continue;
        } else if let Some(rest) = call.strip_prefix("<... ") {
            let Some(entry) = unfinished.remove(tid) else { continue };
            let Some((_, rest)) = rest.split_once("resumed>") else { continue };
            joined = format!("{entry}{rest}");
            joined.as_str()
        } else {
            call
        };
        let Some((name, args)) = call.split_once('(') else { continue };
        // strace pads short calls with spaces before ` = ` to line the results up.
        let Some((args, ret)) = args.rsplit_once(" = ") else { continue };
        let Some(args) = args.trim_end().strip_suffix(')') else { continue };
        let Some(ret) = leading_number(ret) else { continue };
        match name {
            "open" | "openat" if ret >= 0 => {
                let quoted = args.split('"').nth(1).unwrap_or_default();
                open_files.insert(ret, quoted.to_owned());
            }
            "close" => {
                open_files.remove(&leading_number(args).unwrap_or(-1));
            }
            "read" | "pread64" if ret > 0 => {
                let fd = args.split(", ").next().unwrap_or_default();
                let path = match fd.split_once('<') {
                    Some((_, named)) => named.trim_end_matches('>').to_owned(),
                    None => leading_number(fd).and_then(|fd| open_files.get(&fd).cloned()).unwrap_or_default(),
                };
                if path.ends_with(suffix) {
                    *counts.entry(path).or_insert(0) += ret as u64;
                }
            }
            _ => {}
        }
    }
    counts
}

/// `-1 ENOENT (…)`, `3</p>` and `8` all start with the number strace means.
fn leading_number(text: &str) -> Option<i64> {
    let text = text.trim_start();
    let end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(text.len(), |(i, _)| i);
    text[..end].parse().ok()
}

#[test]
fn traces_with_and_without_named_descriptors_count_the_same_bytes() {
    let named = "\
7 openat(AT_FDCWD</w>, \"/t/big.safetensors\", O_RDONLY|O_CLOEXEC) = 3</t/big.safetensors>
8 read(3</t/big.safetensors>, <unfinished ...>
7 read(4</t/other.bin>, \"\"..., 100) = 100
8 <... read resumed>\"\"..., 8) = 8
8 pread64(3</t/big.safetensors>, \"\"..., 151, 8) = 151
8 close(3</t/big.safetensors>) = 0
";
    let bare = "\
7 openat(AT_FDCWD, \"/t/big.safetensors\", O_RDONLY|O_CLOEXEC) = 3
7 openat(AT_FDCWD, \"/t/missing.safetensors\", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
8 read(3, <unfinished ...>
7 read(4, \"\"..., 100)             = 100
8 <... read resumed>\"\"..., 8)       = 8
8    pread64(3, \"\"..., 151, 8)         = 151
8    close(3)                          = 0
7 openat(AT_FDCWD, \"/t/other.bin\", O_RDONLY) = 3
7 read(3, \"\"..., 4096) = 4096
";
    for trace in [named, bare] {
        let counts = reads_per_file(trace, ".safetensors");
        assert_eq!(counts, BTreeMap::from([("/t/big.safetensors".to_owned(), 159)]), "{trace}");
    }
}
