//! The MLX load check: `mlx.core.load` returns every array of every shard bit-identical to the source's.
//! `deploy/verify_mlx.py` runs it; its record's top-level fields are its figures.

use serde::Serialize;

use super::{Check, Runs};
use crate::job::payload::{Figures, MlxRecord};

pub(super) const CHECK: Check = Check { name: "mlx_load", runs: Runs::InMlx(read), card: CARD };

const CARD: &str = "- MLX load check: `mlx.core.load` on the **{{ c.figures.device|string|md }}** device (MLX {{ c.figures.mlx_version|string|md }}) returned
  {% if c.figures.tensors is defined %}{{ c.figures.tensors|plural(\"array\", \"arrays\") }} in {{ c.figures.files|plural(\"file\", \"files\") }}{% else %}every array of every shard{% endif %} bit-identical to the source's{% if c.figures.seconds is defined %}, in {{ c.figures.seconds }} s{% endif %}.
{%- if c.figures.device == \"cpu\" %} This check ran on the CPU; it was accepted in place of the Metal check by the
  publisher's policy.{% endif %}";

/// What the MLX load found, from its record.
#[derive(Serialize)]
struct Found<'a> {
    /// Where it ran: `gpu` (Metal) or `cpu`.
    device: &'a str,
    /// The MLX that loaded the bundle.
    #[serde(skip_serializing_if = "Option::is_none")]
    mlx_version: Option<&'a str>,
    /// Files and arrays loaded, when the record has both.
    #[serde(flatten)]
    counts: Option<Counts>,
    /// How long it took, as the script measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    seconds: Option<&'a serde_json::Number>,
}

/// Files and arrays the MLX load returned.
#[derive(Serialize)]
struct Counts {
    files: u64,
    tensors: u64,
}

/// The figures of the record's load: device, MLX version, files, arrays and seconds, those it has.
fn read(record: &MlxRecord) -> Option<Figures> {
    let counts = match (record.files, record.tensors) {
        (Some(files), Some(tensors)) => Some(Counts { files, tensors }),
        _ => None,
    };
    Some(super::figures(&Found {
        device: &record.device,
        mlx_version: record.mlx_version.as_deref(),
        counts,
        seconds: record.seconds.as_ref(),
    }))
}
