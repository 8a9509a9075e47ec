//! The mlx-lm load check: `mlx_lm.load` of the bundle, model and tokenizer, as a person loads the mirror.
//! `deploy/verify_mlx.py` runs it after the MLX load check (its `load_as_mlx_lm`).

use super::{Check, Runs};
use crate::job::payload::{Figures, MlxRecord};

pub(super) const CHECK: Check = Check { name: "mlx_lm_load", runs: Runs::InMlx(read), card: CARD };

const CARD: &str = "{% if c.figures.loaded %}- mlx-lm: `mlx_lm.load` (mlx-lm {{ c.figures.version|string|md }}) loaded the model and its tokenizer
  {%- if c.figures.lazy %}, its weights checked by name and shape without being read (the bundle is larger
  than the check's memory){% else %} at its defaults, every weight evaluated{% endif %}.
{%- else %}- mlx-lm: not loaded ({{ c.figures.why|string|md }}); the MLX load check above covers every tensor.
{%- endif %}";

/// What the record says of `mlx_lm.load`: its entry in `checks`, or `mlx_lm` in a record of an older script.
fn read(record: &MlxRecord) -> Option<Figures> {
    if let Some(figures) = record.checks.get(CHECK.name) {
        return Some(figures.clone());
    }
    let said = serde_json::to_value(record.mlx_lm.as_ref()?).ok()?;
    said.as_object().cloned()
}
