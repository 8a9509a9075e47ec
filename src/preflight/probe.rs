//! The interpreter's check. The probe bundle is one small MLX-style shard whose tensors sit off their widths,
//! as MLX's writer leaves them. The worker's own repair re-lays it. Then the worker's own MLX check judges it
//! (`repack::checks::mlx`, with the same script, device and limits). So what passes here is what every job's
//! check needs.

use std::path::{Path, PathBuf};

use super::Finding;
use crate::fix::{Destination, FixOptions, fix};
use crate::repack::checks::mlx::{self, MlxCheckError};
use crate::safetensors::Alignment;
use crate::safetensors::rewrite::Digests;

/// The check as the worker runs it.
#[derive(Debug, Clone)]
pub struct MlxCheck {
    /// The interpreter (`--python`).
    pub python: PathBuf,
    /// `deploy/verify_mlx.py`, where the worker wrote it.
    pub script: PathBuf,
    /// `cpu` or `gpu`.
    pub device: String,
}

const CHECK: &str = "python";

/// Runs the worker's MLX check on a probe bundle made under `scratch`, and removes the bundle after.
pub async fn mlx(check: &MlxCheck, scratch: &Path) -> Finding {
    let python = check.python.display().to_string();
    let dir = match tempfile::Builder::new().prefix("hubalign-preflight-").tempdir_in(scratch) {
        Ok(dir) => dir,
        Err(e) => {
            return Finding::fail(
                CHECK,
                format!("cannot make the probe bundle in {}: {e}", scratch.display()),
                "give --work-dir a writable directory",
            );
        }
    };
    let output = match crate::blocking::run("the probe bundle", {
        let root = dir.path().to_owned();
        move || probe_bundle(&root)
    })
    .await
    {
        Ok(Ok(output)) => output,
        Ok(Err(why)) => {
            return Finding::fail(CHECK, format!("cannot make the probe bundle: {why}"), "report this as a bug");
        }
        Err(e) => return Finding::fail(CHECK, format!("cannot make the probe bundle: {e}"), "report this as a bug"),
    };
    let started = std::time::Instant::now();
    let interpreter = mlx::Interpreter { python: check.python.clone(), script: check.script.clone() };
    match mlx::run_off_executor(interpreter, output, &check.device).await {
        Ok(record) => Finding::ok(
            CHECK,
            format!(
                "{python}: MLX {} loads a re-laid probe shard on {} bit for bit ({:.1} s)",
                record.mlx_version.as_deref().unwrap_or("(version not said)"),
                check.device,
                started.elapsed().as_secs_f64()
            ),
        ),
        Err(e @ MlxCheckError::CannotRun { .. }) => Finding::fail(
            CHECK,
            e.to_string(),
            "give --python (or HUBALIGN_PYTHON) an interpreter that exists and has mlx installed",
        ),
        Err(e @ MlxCheckError::NoMlx { .. }) => Finding::fail(
            CHECK,
            e.to_string(),
            format!(
                "install MLX and mlx-lm for it (`{python} -m pip install mlx mlx-lm`, `mlx[cpu]` on Linux), or give --python another"
            ),
        ),
        Err(e) => Finding::fail(
            CHECK,
            format!("{python}: MLX did not pass the probe bundle: {e}"),
            format!("check the MLX install (`{python} -c 'import mlx.core as mx; print(mx.__version__)'`)"),
        ),
    }
}

/// Why the probe bundle could not be made: a bug, or a work directory that cannot hold it.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Discover(#[from] crate::bundle::DiscoverError),
    #[error(transparent)]
    Fix(#[from] crate::fix::FixError),
    #[error("the repair rewrote {0} shards of 1")]
    NotRewritten(u64),
}

/// Writes the probe shard under `root/source` and re-lays it into `root/output` with its manifest, as a job's
/// re-layout does. Returns the output directory.
fn probe_bundle(root: &Path) -> Result<PathBuf, ProbeError> {
    let source = root.join("source");
    let output = root.join("output");
    std::fs::create_dir(&source)?;
    std::fs::write(source.join("model.safetensors"), probe_shard())?;
    let bundles = crate::bundle::discover(&[source])?;
    let options = FixOptions {
        destination: Destination::OutDir(output.clone()),
        alignment: Alignment::default(),
        dry_run: false,
        digests: Digests::Minimal,
        prepared: None,
    };
    let report = fix(&bundles, &options, &mut |_| {})?;
    if report.totals.rewritten != 1 {
        return Err(ProbeError::NotRewritten(report.totals.rewritten));
    }
    Ok(output)
}

/// A shard as MLX writes one: two tensors packed back to back after an unpadded header. So the first
/// tensor's file offset is not a multiple of its width, and the repair pads the header.
fn probe_shard() -> Vec<u8> {
    let header = br#"{"__metadata__":{"format":"mlx"},"probe.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"probe.b":{"dtype":"F16","shape":[2],"data_offsets":[16,20]}}"#;
    let mut shard = (header.len() as u64).to_le_bytes().to_vec();
    shard.extend_from_slice(header);
    for x in [1.0f32, -2.5, 3.25, 0.125] {
        shard.extend_from_slice(&x.to_le_bytes());
    }
    shard.extend_from_slice(&[0x00, 0x3c, 0x00, 0xc0]); // 1.0 and -2.0 as F16
    shard
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_shard_needs_the_repair_every_mlx_shard_needs() {
        let shard = probe_shard();
        let n = u64::from_le_bytes(shard[..8].try_into().unwrap());
        assert_ne!((8 + n) % 4, 0, "the F32 tensor sits off its width");
        let dir = tempfile::tempdir().unwrap();
        let output = probe_bundle(dir.path()).unwrap();
        assert!(output.join("model.safetensors").is_file());
        assert!(output.join(crate::manifest::MANIFEST_FILE).is_file());
    }
}
