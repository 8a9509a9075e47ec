//! Running `deploy/verify_mlx.py`: MLX itself loads the output and judges every byte by the digests the
//! re-layout took from the source (the manifest's), without reading the source again.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

/// Longest line read from the check's output (its record names at most a few errors).
const MAX_LINE: u64 = 1 << 20;

/// Runs the check of the bundle in `output` (with its manifest) on `device` (`cpu` or `gpu`); returns its JSON
/// record, or why it failed.
pub fn check(python: &Path, script: &Path, output: &Path, device: &str) -> Result<serde_json::Value, String> {
    check_with(python, script, output, device, |_| {})
}

/// [`check`], telling `on_start` the line the script prints once MLX is imported (`{"started": true,
/// "mlx_version": …}`), before it loads anything.
pub fn check_with(
    python: &Path,
    script: &Path,
    output: &Path,
    device: &str,
    on_start: impl FnOnce(&serde_json::Value),
) -> Result<serde_json::Value, String> {
    crate::blocking::assert_off_executor("the MLX check");
    let cannot = |e: std::io::Error| format!("cannot run {} {}: {e}", python.display(), script.display());
    let mut child = Command::new(python)
        .arg(script)
        .args(["--output".as_ref(), output.as_os_str(), "--device".as_ref(), device.as_ref()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(cannot)?;
    // stderr is drained beside stdout, so that neither pipe fills while the other is read.
    let stderr = child.stderr.take().map(|e| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = e.take(MAX_LINE).read_to_string(&mut text);
            text
        })
    });
    let mut on_start = Some(on_start);
    let mut last = String::new();
    if let Some(stdout) = child.stdout.take() {
        let mut lines = BufReader::new(stdout.take(16 * MAX_LINE));
        let mut line = String::new();
        while lines.read_line(&mut line).map_err(cannot)? > 0 {
            if let Ok(started) = serde_json::from_str::<serde_json::Value>(&line)
                && started["started"] == true
                && let Some(tell) = on_start.take()
            {
                tell(&started);
            }
            last = std::mem::take(&mut line);
        }
    }
    let status = child.wait().map_err(cannot)?;
    let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let record: serde_json::Value = serde_json::from_str(last.trim())
        .map_err(|_| format!("no result from {}: {}", script.display(), stderr.trim()))?;
    if status.success() && record["ok"] == true {
        Ok(record)
    } else {
        Err(record["error"].as_str().unwrap_or("failed").to_owned())
    }
}
