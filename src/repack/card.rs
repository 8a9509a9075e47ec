//! The model card of a mirror: front matter carried over from the source's card (licence, task, languages,
//! datasets, tags) plus what marks an aligned mirror, and a body rendered from `templates/model_card.md.j2`
//! in which every figure comes from the manifest or a check that ran.

use serde::Serialize;

use crate::hub::info::ModelInfo;
use crate::manifest::{Manifest, ManifestShard};
use crate::safetensors::Method;

const TEMPLATE: &str = include_str!("../../templates/model_card.md.j2");

/// The tag every aligned mirror carries, so they can be listed (`filter=aligned-safetensors`).
pub const MIRROR_TAG: &str = "aligned-safetensors";

/// Tags the Hub computes itself (from the licence, the region, the base model, papers, …): never copied.
const COMPUTED_TAG_PREFIXES: [&str; 6] = ["license:", "region:", "base_model:", "arxiv:", "dataset:", "doi:"];

/// What the source's own card says that the mirror's card carries over. Values come from the Hub and are
/// kept only when short and printable; lists are capped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceCard {
    /// Licence id (`mit`, `apache-2.0`, `other`).
    pub license: Option<String>,
    /// For `license: other`, the licence's name.
    pub license_name: Option<String>,
    /// For `license: other`, where its text is.
    pub license_link: Option<String>,
    /// The task (`text-generation`).
    pub pipeline_tag: Option<String>,
    /// Languages.
    pub language: Vec<String>,
    /// Training datasets.
    pub datasets: Vec<String>,
    /// The card's own tags.
    pub tags: Vec<String>,
}

/// The longest value carried over, and the most items of a list.
const MAX_VALUE_LEN: usize = 200;
const MAX_ITEMS: usize = 50;

/// An identifier-like value (a licence id, a task, a language, a tag, a dataset id): letters, digits and
/// `._-+/:` only, so nothing from the source's card can carry markup into the mirror's.
fn plain(v: &serde_json::Value) -> Option<String> {
    let s = v.as_str()?.trim();
    let ok = !s.is_empty()
        && s.len() <= MAX_VALUE_LEN
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '/' | ':'));
    ok.then(|| s.to_owned())
}

/// Where the licence's text is: an `https` URL as given, or a file of the source repo under `endpoint`.
fn license_url(link: &str, endpoint: &str, source_repo: &str) -> Option<String> {
    if let Some(rest) = link.strip_prefix("https://") {
        let ok =
            !rest.is_empty() && rest.chars().all(|c| c.is_ascii_graphic() && !matches!(c, '<' | '>' | '"' | '(' | ')'));
        return ok.then(|| link.to_owned());
    }
    crate::gate::check_repo_path(link)
        .ok()
        .map(|()| format!("{endpoint}/{source_repo}/blob/main/{}", crate::gate::encode_path(link)))
}

/// A string or a list of strings, as card fields come.
fn list(v: Option<&serde_json::Value>) -> Vec<String> {
    match v {
        Some(serde_json::Value::Array(items)) => items.iter().filter_map(plain).take(MAX_ITEMS).collect(),
        Some(v) => plain(v).into_iter().collect(),
        None => Vec::new(),
    }
}

impl SourceCard {
    /// From the Hub's answer for the source: its parsed card, its task, and the licence it is tagged with.
    pub fn from_info(info: &ModelInfo) -> SourceCard {
        let card = info.card_data.as_ref();
        let field = |k: &str| card.and_then(|c| c.get(k)).and_then(plain);
        let tags = list(card.and_then(|c| c.get("tags")))
            .into_iter()
            .filter(|t| !COMPUTED_TAG_PREFIXES.iter().any(|p| t.starts_with(p)))
            .collect();
        SourceCard {
            license: field("license").or_else(|| info.license()),
            license_name: field("license_name"),
            license_link: card
                .and_then(|c| c.get("license_link"))
                .and_then(|v| v.as_str())
                .filter(|l| l.len() <= MAX_VALUE_LEN)
                .map(str::to_owned),
            pipeline_tag: field("pipeline_tag")
                .or_else(|| info.pipeline_tag.clone().map(serde_json::Value::from).as_ref().and_then(plain)),
            language: list(card.and_then(|c| c.get("language"))),
            datasets: list(card.and_then(|c| c.get("datasets"))),
            tags,
        }
    }
}

/// A card's YAML front matter, written by hand: every scalar double-quoted with JSON's escapes, which YAML
/// reads the same way, so no value from the source can change the structure.
fn front_matter(source_repo: &str, card: &SourceCard) -> String {
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    let mut out = String::from("---\n");
    out.push_str(&format!("base_model: {}\n", quote(source_repo)));
    for (key, value) in [
        ("license", &card.license),
        ("license_name", &card.license_name),
        ("license_link", &card.license_link),
        ("pipeline_tag", &card.pipeline_tag),
    ] {
        if let Some(v) = value {
            out.push_str(&format!("{key}: {}\n", quote(v)));
        }
    }
    out.push_str("library_name: \"mlx\"\n");
    let mut tags: Vec<&str> = vec!["mlx", "safetensors", MIRROR_TAG];
    for t in &card.tags {
        if !tags.contains(&t.as_str()) {
            tags.push(t);
        }
    }
    for (key, items) in [
        ("language", card.language.iter().map(String::as_str).collect::<Vec<_>>()),
        ("datasets", card.datasets.iter().map(String::as_str).collect()),
        ("tags", tags),
    ] {
        if !items.is_empty() {
            out.push_str(&format!("{key}:\n"));
            for item in items {
                out.push_str(&format!("- {}\n", quote(item)));
            }
        }
    }
    out.push_str("---\n");
    out
}

/// What the card says.
#[derive(Debug, Clone, Serialize)]
pub struct CardData<'a> {
    /// The YAML front matter, ready to print.
    pub front_matter: String,
    /// The Hub the links point to (the configured endpoint).
    pub endpoint: &'a str,
    /// The source repo.
    pub source_repo: &'a str,
    /// The source commit.
    pub source_sha: &'a str,
    /// The mirror.
    pub target_repo: &'a str,
    /// The mirror's name alone, for a download directory.
    pub target_name: &'a str,
    /// What the source's card says.
    pub source: SourceCard,
    /// Where the licence's text is, for `license: other`.
    pub license_url: Option<String>,
    /// Per shard: the manifest entries.
    pub shards: &'a [ManifestShard],
    /// Shards left as they were (no loader copies from them), with why.
    pub skipped: Vec<(String, String)>,
    /// Whether any shard was reordered.
    pub any_relayout: bool,
    /// Misaligned tensors in the source.
    pub before_tensors: u64,
    /// Tensors in the repaired shards.
    pub shard_tensors: u64,
    /// Bytes a copying loader duplicates in the source.
    pub before_bytes: u64,
    /// Tensors mapped in place during verification.
    pub zero_copy: u64,
    /// Tensors checked.
    pub tensors: u64,
    /// The MLX load check's record.
    pub mlx: serde_json::Value,
    /// hubalign's version.
    pub tool_version: &'static str,
}

/// The facts a card is written from, beside the manifest.
pub struct CardInputs<'a> {
    /// The mirror.
    pub target_repo: &'a str,
    /// The Hub the links point to.
    pub endpoint: &'a str,
    /// What the source's card says.
    pub source: SourceCard,
    /// Bytes a copying loader duplicates in the source.
    pub before_bytes: u64,
    /// The structural and memory-map checks' counts.
    pub checks: &'a super::verify::LocalChecks,
    /// The MLX load check's record.
    pub mlx: serde_json::Value,
}

impl<'a> CardData<'a> {
    /// Gathers the card's facts from the manifest and the checks.
    pub fn new(manifest: &'a Manifest, inputs: CardInputs<'a>) -> CardData<'a> {
        let source_repo = manifest.source_repo.as_deref().unwrap_or("");
        let endpoint = inputs.endpoint.trim_end_matches('/');
        let license_url = inputs.source.license_link.as_deref().and_then(|l| license_url(l, endpoint, source_repo));
        CardData {
            front_matter: front_matter(source_repo, &inputs.source),
            endpoint,
            license_url,
            source_repo,
            source_sha: manifest.source_revision.as_deref().unwrap_or(""),
            target_repo: inputs.target_repo,
            target_name: inputs.target_repo.rsplit('/').next().unwrap_or(inputs.target_repo),
            source: inputs.source,
            shards: &manifest.shards,
            skipped: manifest.skipped.iter().map(|s| (s.file.clone(), s.reason.clone())).collect(),
            any_relayout: manifest.shards.iter().any(|s| s.method == Method::Relayout),
            before_tensors: manifest.shards.iter().map(|s| s.unaligned_before).sum(),
            shard_tensors: manifest.shards.iter().map(|s| s.tensors).sum(),
            before_bytes: inputs.before_bytes,
            zero_copy: inputs.checks.zero_copy,
            tensors: inputs.checks.tensors,
            mlx: inputs.mlx,
            tool_version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Renders the card.
pub fn render(data: &CardData<'_>) -> Result<String, String> {
    let mut env = minijinja::Environment::new();
    env.add_filter("thousands", |n: u64| thousands(n));
    env.add_filter("bytes", |n: u64| crate::report::human_bytes(n));
    env.add_filter("plural", |n: u64, one: String, many: String| {
        format!("{} {}", thousands(n), if n == 1 { one } else { many })
    });
    env.add_template("card", TEMPLATE).map_err(|e| format!("card template: {e}"))?;
    env.get_template("card").and_then(|t| t.render(minijinja::value::Serde(data))).map_err(|e| format!("card: {e}"))
}

/// The `license:` of a README's YAML front matter, if any (and if it reads as a licence id).
pub fn license_of(readme: &str) -> Option<String> {
    let body = readme.strip_prefix("---")?;
    let front = &body[..body.find("\n---")?];
    front
        .lines()
        .find_map(|l| l.strip_prefix("license:"))
        .map(|v| serde_json::Value::from(v.trim().trim_matches('"')))
        .as_ref()
        .and_then(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn licenses_from_front_matter() {
        assert_eq!(license_of("---\nlicense: apache-2.0\ntags: [a]\n---\n# x"), Some("apache-2.0".into()));
        assert_eq!(license_of("# no front matter"), None);
        assert_eq!(license_of("---\ntags: [a]\n---\n"), None);
    }

    #[test]
    fn the_source_card_is_carried_over_without_computed_tags_or_hostile_values() {
        let info: ModelInfo = serde_json::from_value(serde_json::json!({
            "pipeline_tag": "text-generation",
            "tags": ["license:other", "mlx"],
            "cardData": {
                "license": "other", "license_name": "ornith", "license_link": "LICENSE",
                "language": ["en", "fr"], "datasets": "some/data",
                "tags": ["mlx", "region:us", "chat", "bad\nvalue", "x".repeat(300)],
            }
        }))
        .unwrap();
        let card = SourceCard::from_info(&info);
        assert_eq!(card.license.as_deref(), Some("other"));
        assert_eq!((card.license_name.as_deref(), card.license_link.as_deref()), (Some("ornith"), Some("LICENSE")));
        assert_eq!(card.pipeline_tag.as_deref(), Some("text-generation"));
        assert_eq!(card.language, ["en", "fr"]);
        assert_eq!(card.datasets, ["some/data"]);
        assert_eq!(card.tags, ["mlx", "chat"]);
        assert_eq!(license_url("LICENSE", "http://h", "a/b").as_deref(), Some("http://h/a/b/blob/main/LICENSE"));
        assert_eq!(license_url("https://x.org/l", "http://h", "a/b").as_deref(), Some("https://x.org/l"));
        assert_eq!(license_url("../../x", "http://h", "a/b"), None);
        // Anything else is a file of the source repo, encoded: never a link of another scheme.
        let odd = license_url("javascript:alert(1)", "http://h", "a/b").unwrap();
        assert_eq!(odd, "http://h/a/b/blob/main/javascript%3Aalert%281%29");
        let front = front_matter("a/b", &card);
        assert!(front.contains("- \"aligned-safetensors\"\n- \"chat\"\n"), "{front}");
        assert!(!front.contains("base_model_relation"), "a re-layout is none of the Hub's relations");
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(thousands(5_343_636_096), "5,343,636,096");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
    }
}
