//! Running `deploy/verify_mlx.py`: MLX itself loads the output and judges every byte by the digests the
//! re-layout took from the source (the manifest's), without reading the source again.

use std::path::Path;
use std::process::Command;

/// Runs the check of the bundle in `output` (with its manifest) on `device` (`cpu` or `gpu`); returns its JSON
/// record, or why it failed.
pub fn check(python: &Path, script: &Path, output: &Path, device: &str) -> Result<serde_json::Value, String> {
    crate::blocking::assert_off_executor("the MLX check");
    let out = Command::new(python)
        .arg(script)
        .args(["--output".as_ref(), output.as_os_str(), "--device".as_ref(), device.as_ref()])
        .output()
        .map_err(|e| format!("cannot run {} {}: {e}", python.display(), script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let record: serde_json::Value =
        stdout.lines().last().and_then(|l| serde_json::from_str(l).ok()).ok_or_else(|| {
            format!("no result from {}: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim())
        })?;
    if out.status.success() && record["ok"] == true {
        Ok(record)
    } else {
        Err(record["error"].as_str().unwrap_or("failed").to_owned())
    }
}
