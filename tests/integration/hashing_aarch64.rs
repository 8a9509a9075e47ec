//! The aarch64 SHA-256 kernel, cross-built and run under `qemu-aarch64 -cpu max` (which has the SHA-2
//! instructions): its results must be `sha2`'s, block for block. `tests/run.sh` installs the target, the
//! cross linker and qemu.

use std::path::Path;
use std::process::Command;

#[test]
fn the_interleaved_aarch64_kernel_matches_sha2_under_qemu() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["run", "--locked", "--release", "--target", "aarch64-unknown-linux-gnu", "--manifest-path"])
        .arg(root.join("tests/aarch64/Cargo.toml"))
        .env("CARGO_TARGET_DIR", root.join("target/aarch64-check"))
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", "aarch64-linux-gnu-gcc")
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER", "qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu")
        .output()
        .expect("running cargo");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the aarch64 check failed (tests/run.sh installs what it needs):\n{stdout}\n{stderr}"
    );
    assert_eq!(stdout.trim(), "sha_arm::compress_pair matches sha2 in 42 cases");
}
