//! Reads a model card's metadata as the Hub does. The metadata is the YAML front matter of `README.md`,
//! between a first line `---` and the next `---` line. A YAML parser (`serde_yaml_ng`) parses it. It is
//! served as `cardData` and feeds `tags`, `library_name`, `pipeline_tag` and the licence.

use serde_json::{Map, Value};

use crate::model::RepoMeta;

/// Front matter larger than this is not read; the Hub caps a card's metadata too. The card stays a file.
const MAX_FRONT_MATTER: usize = 64 << 10;

/// The front matter of `card` as a JSON object, or `None` when there is none or it is not a YAML mapping.
pub fn front_matter(card: &str) -> Option<Map<String, Value>> {
    let card = card.strip_prefix('\u{feff}').unwrap_or(card);
    let rest = card.strip_prefix("---\n").or_else(|| card.strip_prefix("---\r\n"))?;
    let end = rest.match_indices("\n---").map(|(i, _)| i).find(|&i| {
        let after = &rest[i + 4..];
        after.is_empty() || after.starts_with('\n') || after.starts_with("\r\n")
    });
    let yaml = match end {
        Some(i) => &rest[..=i],
        None if rest.starts_with("---") => "",
        None => return None,
    };
    if yaml.len() > MAX_FRONT_MATTER {
        return None;
    }
    match serde_yaml_ng::from_str::<Value>(yaml).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// A string, or each string of a list: YAML lets `tags: mlx` stand for `tags: [mlx]`.
fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

/// Derives from a card what the Hub derives. `cardData` is the whole front matter, and the fields it names
/// set the library, pipeline, licence and tags. Tags get what the Hub adds from the card: each language,
/// `dataset:` for each dataset and `base_model:` for each base model. `only_unset` keeps what `meta` already
/// says, for a repo laid out on disk whose sidecar speaks for the Hub's side. A commit to main replaces it,
/// as on the Hub.
pub fn apply(meta: &mut RepoMeta, card: &str, only_unset: bool) {
    let Some(front) = front_matter(card) else { return };
    let text = |key: &str| front.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let set = |field: &mut Option<String>, value: Option<String>| {
        if value.is_some() && !(only_unset && field.is_some()) {
            *field = value;
        }
    };
    set(&mut meta.library_name, text("library_name"));
    set(&mut meta.pipeline_tag, text("pipeline_tag"));
    set(&mut meta.license, text("license"));
    let mut tags = strings(front.get("tags"));
    tags.extend(strings(front.get("language")));
    tags.extend(strings(front.get("datasets")).into_iter().map(|d| format!("dataset:{d}")));
    tags.extend(strings(front.get("base_model")).into_iter().map(|b| format!("base_model:{b}")));
    let mut seen = std::collections::BTreeSet::new();
    tags.retain(|t| seen.insert(t.clone()));
    if !tags.is_empty() && (!only_unset || meta.tags.is_empty()) {
        meta.tags = tags;
    }
    if !(only_unset && meta.card_data.is_some()) {
        meta.card_data = Some(Value::Object(front));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CARD: &str = "---\nlanguage:\n- en\n- de\nlicense: llama3.2\nlibrary_name: mlx\npipeline_tag: text-generation\n\
                        tags: [mlx, 'safetensors']\nbase_model: meta-llama/Llama-3.2-1B-Instruct\n\
                        datasets: tatsu-lab/alpaca\nextra_gated_prompt: |\n  You agree\n  to this.\n---\n# Model\n";

    #[test]
    fn the_front_matter_is_read_as_yaml_flow_and_block_forms_alike() {
        let front = front_matter(CARD).unwrap();
        assert_eq!(front["extra_gated_prompt"], "You agree\nto this.\n");
        assert_eq!(front["tags"], serde_json::json!(["mlx", "safetensors"]));
        let mut meta = RepoMeta::default();
        apply(&mut meta, CARD, false);
        assert_eq!(meta.library_name.as_deref(), Some("mlx"));
        assert_eq!(meta.license.as_deref(), Some("llama3.2"));
        assert_eq!(meta.pipeline_tag.as_deref(), Some("text-generation"));
        assert_eq!(
            meta.tags,
            [
                "mlx",
                "safetensors",
                "en",
                "de",
                "dataset:tatsu-lab/alpaca",
                "base_model:meta-llama/Llama-3.2-1B-Instruct"
            ]
        );
        assert_eq!(meta.card_data.unwrap()["base_model"], "meta-llama/Llama-3.2-1B-Instruct");
    }

    #[test]
    fn a_sidecar_keeps_what_it_says_when_only_unset_fields_are_filled() {
        let mut meta = RepoMeta { library_name: Some("transformers".into()), ..RepoMeta::default() };
        apply(&mut meta, CARD, true);
        assert_eq!(meta.library_name.as_deref(), Some("transformers"));
        assert_eq!(meta.license.as_deref(), Some("llama3.2"));
    }

    #[test]
    fn no_front_matter_or_not_a_mapping_changes_nothing() {
        for card in ["# just a title\n", "---\n- a list\n---\n", "---\nunclosed: yes\n", "---\n: : bad\n---\n"] {
            let mut meta = RepoMeta::default();
            apply(&mut meta, card, false);
            assert_eq!(meta, RepoMeta::default(), "{card:?}");
        }
        assert!(front_matter("---\n---\n# empty\n").is_none());
    }

    /// Front matter past the cap is not parsed, since a card is anyone's text. At the cap it is.
    #[test]
    fn front_matter_past_its_cap_is_not_read() {
        let within = format!("---\nlicense: mit\nnote: {}\n---\n", "a".repeat(MAX_FRONT_MATTER - 40));
        assert_eq!(front_matter(&within).unwrap()["license"], "mit");
        let past = format!("---\nlicense: mit\nnote: {}\n---\n", "a".repeat(MAX_FRONT_MATTER));
        assert!(front_matter(&past).is_none());
    }
}
