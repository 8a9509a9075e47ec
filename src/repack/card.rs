//! The model card of a mirror, rendered from `templates/model_card.md.j2`.

use serde::Serialize;

use crate::manifest::Manifest;
use crate::safetensors::Method;

const TEMPLATE: &str = include_str!("../../templates/model_card.md.j2");

/// What the card says.
#[derive(Debug, Clone, Serialize)]
pub struct CardData<'a> {
    /// The source repo.
    pub source_repo: &'a str,
    /// The source commit.
    pub source_sha: &'a str,
    /// The mirror.
    pub target_repo: &'a str,
    /// The source's licence id, carried over.
    pub license: Option<String>,
    /// Per shard: the manifest entries.
    pub shards: &'a [crate::manifest::ManifestShard],
    /// Whether any shard was reordered.
    pub any_relayout: bool,
    /// Misaligned tensors in the source.
    pub before_tensors: u64,
    /// Their bytes.
    pub before_bytes: u64,
    /// The same, for people.
    pub before_bytes_text: String,
    /// Tensors mapped in place during verification.
    pub zero_copy: u64,
    /// Tensors checked.
    pub tensors: u64,
    /// The MLX load check's record.
    pub mlx: serde_json::Value,
    /// hubalign's version.
    pub tool_version: &'static str,
}

impl<'a> CardData<'a> {
    /// Gathers the card's facts from the manifest and the checks.
    pub fn new(
        manifest: &'a Manifest,
        target_repo: &'a str,
        license: Option<String>,
        before_bytes: u64,
        checks: &super::verify::LocalChecks,
        mlx: serde_json::Value,
    ) -> CardData<'a> {
        CardData {
            source_repo: manifest.source_repo.as_deref().unwrap_or(""),
            source_sha: manifest.source_revision.as_deref().unwrap_or(""),
            target_repo,
            license,
            shards: &manifest.shards,
            any_relayout: manifest.shards.iter().any(|s| s.method == Method::Relayout),
            before_tensors: manifest.shards.iter().map(|s| s.unaligned_before).sum(),
            before_bytes,
            before_bytes_text: format!("{:.2} MB", before_bytes as f64 / 1e6),
            zero_copy: checks.zero_copy,
            tensors: checks.tensors,
            mlx,
            tool_version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// Renders the card.
pub fn render(data: &CardData<'_>) -> Result<String, String> {
    let mut env = minijinja::Environment::new();
    env.add_template("card", TEMPLATE).map_err(|e| format!("card template: {e}"))?;
    env.get_template("card").and_then(|t| t.render(minijinja::value::Serde(data))).map_err(|e| format!("card: {e}"))
}

/// The `license:` of a README's YAML front matter, if any.
pub fn license_of(readme: &str) -> Option<String> {
    let body = readme.strip_prefix("---")?;
    let front = &body[..body.find("\n---")?];
    front
        .lines()
        .find_map(|l| l.strip_prefix("license:"))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn licenses_from_front_matter() {
        assert_eq!(super::license_of("---\nlicense: apache-2.0\ntags: [a]\n---\n# x"), Some("apache-2.0".into()));
        assert_eq!(super::license_of("# no front matter"), None);
        assert_eq!(super::license_of("---\ntags: [a]\n---\n"), None);
    }
}
