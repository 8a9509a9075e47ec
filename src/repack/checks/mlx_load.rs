//! The MLX load check: `mlx.core.load` returns every array of every shard bit-identical to the source's.
//! `deploy/verify_mlx.py` runs it; its record's top-level fields are its figures.

use super::{Check, Runs};
use crate::job::payload::{Figures, MlxRecord};

pub(super) const CHECK: Check = Check { name: "mlx_load", runs: Runs::InMlx(read), card: CARD };

const CARD: &str = "- MLX load check: `mlx.core.load` on the **{{ c.figures.device|string|md }}** device (MLX {{ c.figures.mlx_version|string|md }}) returned
  {% if c.figures.tensors is defined %}{{ c.figures.tensors|plural(\"array\", \"arrays\") }} in {{ c.figures.files|plural(\"file\", \"files\") }}{% else %}every array of every shard{% endif %} bit-identical to the source's{% if c.figures.seconds is defined %}, in {{ c.figures.seconds }} s{% endif %}.
{%- if c.figures.device == \"cpu\" %} This check ran on the CPU; it was accepted in place of the Metal check by the
  publisher's policy.{% endif %}";

/// The figures of the record's load: device, MLX version, files, arrays and seconds, those it has.
fn read(record: &MlxRecord) -> Option<Figures> {
    let mut figures = Figures::new();
    figures.insert("device".into(), record.device.clone().into());
    if let Some(version) = &record.mlx_version {
        figures.insert("mlx_version".into(), version.clone().into());
    }
    if let (Some(files), Some(tensors)) = (record.files, record.tensors) {
        figures.insert("files".into(), files.into());
        figures.insert("tensors".into(), tensors.into());
    }
    if let Some(seconds) = &record.seconds {
        figures.insert("seconds".into(), seconds.clone().into());
    }
    Some(figures)
}
