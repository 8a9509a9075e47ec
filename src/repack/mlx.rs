//! Running `deploy/verify_mlx.py`: MLX itself loads source and output and compares them bit for bit.

use std::path::Path;
use std::process::Command;

/// Runs the check on `device` (`cpu` or `gpu`); returns its JSON record, or why it failed.
pub fn check(
    python: &Path,
    script: &Path,
    source: &Path,
    output: &Path,
    device: &str,
) -> Result<serde_json::Value, String> {
    crate::blocking::assert_off_executor("the MLX check");
    let out = Command::new(python)
        .arg(script)
        .args([
            "--source".as_ref(),
            source.as_os_str(),
            "--output".as_ref(),
            output.as_os_str(),
            "--device".as_ref(),
            device.as_ref(),
        ])
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
