//! Writes a synthetic MLX-layout shard for benchmarks: `synth_shard PATH SIZE_MIB pad|relayout [sparse]`.
//!
//! Tensors look like a 4-bit MLX model's (U32 weights, BF16 scales and biases, a BF16 norm per layer).
//! `pad` keeps every relative offset aligned and starts the data at an odd offset, so header padding fixes
//! it; `relayout` gives each norm an odd length, which only a reorder fixes. `sparse` writes the header and
//! extends the file without writing data (zeros), for scan benchmarks over many large files. The payload's
//! pseudo-random bytes are seeded by the file name, so the shards of one bundle differ (identical shards would
//! let Xet deduplicate all but one, and a repack benchmark would upload next to nothing for the wrong reason).

use std::io::{BufWriter, Write};

use hubalign_test_support::synth::{Dtype, mlx_header, write_mlx_style_stream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, size_mib, kind, rest @ ..] = args.as_slice() else {
        return Err("usage: synth_shard PATH SIZE_MIB pad|relayout [sparse]".into());
    };
    let target: u64 = size_mib.parse::<u64>()? << 20;
    let relayout = match kind.as_str() {
        "pad" => false,
        "relayout" => true,
        other => return Err(format!("kind must be pad or relayout, not {other}").into()),
    };
    let sparse = rest.first().is_some_and(|s| s == "sparse");
    let (rows, cols) = (2048u64, 512u64);
    let per_layer = rows * cols * 4 + 2 * rows * (cols / 8) * 2 + (rows + u64::from(relayout)) * 2;
    let layers = (target / per_layer).max(1);
    let mut names = Vec::new();
    let mut specs: Vec<(Dtype, Vec<u64>)> = Vec::new();
    for l in 0..layers {
        let p = format!("model.layers.{l}.mlp.down_proj");
        names.push(format!("{p}.weight"));
        specs.push(("U32", vec![rows, cols]));
        names.push(format!("model.layers.{l}.input_layernorm.weight"));
        specs.push(("BF16", vec![rows + u64::from(relayout)]));
        for part in ["scales", "biases"] {
            names.push(format!("{p}.{part}"));
            specs.push(("BF16", vec![rows, cols / 8]));
        }
    }
    let view: Vec<(&str, Dtype, &[u64])> =
        names.iter().zip(&specs).map(|(n, (d, s))| (n.as_str(), *d, s.as_slice())).collect();
    // The writer name's length moves the data start; pick one that starts it off any 8-byte boundary.
    let format = (0..8)
        .map(|extra| format!("mlx{}", "x".repeat(extra)))
        .find(|f| (8 + mlx_header(&view, Some(f)).len()) % 8 == 3)
        .unwrap_or_else(|| "mlx".to_owned());
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    if sparse {
        let header = mlx_header(&view, Some(&format));
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(header.as_bytes())?;
        let data: u64 =
            specs.iter().map(|(d, s)| s.iter().product::<u64>() * hubalign_test_support::synth::bits(d) / 8).sum();
        let file = out.into_inner()?;
        file.set_len(8 + header.len() as u64 + data)?;
    } else {
        let name = std::path::Path::new(path).file_name().map(|n| n.as_encoded_bytes().to_vec()).unwrap_or_default();
        // FNV-1a of the file name.
        let seed =
            name.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        write_mlx_style_stream(&mut out, &view, Some(&format), seed)?;
        out.flush()?;
    }
    Ok(())
}
