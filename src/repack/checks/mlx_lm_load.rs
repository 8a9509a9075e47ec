//! The mlx-lm load check: `mlx_lm.load` of the bundle, model and tokenizer, as a person loads the mirror.
//! `deploy/verify_mlx.py` runs it after the MLX load check (its `load_as_mlx_lm`).

use super::{Check, Runs};
use crate::job::payload::{Figures, MlxLmLoad, MlxRecord};

pub(super) const CHECK: Check = Check { name: "mlx_lm_load", runs: Runs::InMlx(read), card: CARD };

const CARD: &str = "{% if c.figures.loaded %}- mlx-lm: `mlx_lm.load` (mlx-lm {{ c.figures.version|string|md }}) loaded the model and its tokenizer
  {%- if c.figures.lazy %}, its weights checked by name and shape without being read (the bundle is larger
  than the check's memory){% else %} at its defaults, every weight evaluated{% endif %}.
{%- else %}- mlx-lm: not loaded ({{ c.figures.why|string|md }}); the MLX load check above covers every tensor.
{%- endif %}";

/// Reads what the record says of `mlx_lm.load` as an [`MlxLmLoad`]: its entry in `checks`, or else the
/// `mlx_lm` field that older scripts write. An entry of another type is not rendered, since a runner's record
/// comes from outside.
fn read(record: &MlxRecord) -> Option<Figures> {
    let said: MlxLmLoad = match record.checks.get(CHECK.name) {
        Some(figures) => serde_json::from_value(serde_json::Value::Object(figures.clone())).ok()?,
        None => record.mlx_lm.clone()?,
    };
    Some(super::figures(&said))
}
