//! Writes the model card of a mirror. Its front matter holds what the mirror can vouch for: its source, the
//! source's licence, task and languages, and the `not-for-all-audiences` flag. It also holds what marks an
//! aligned mirror. The body renders from `templates/model_card.md.j2`, and every figure in it comes from the
//! manifest or a check that ran.
//!
//! Nothing from the source reaches the card as markup.
//! Identifier-like values must be plain (letters, digits, `._-+/:`), or they are dropped.
//! The template's `md` and `code` filters escape file names and reasons for Markdown and HTML.
//! A licence link goes only into the source repo or to a known licence host.
//! Tags come from an allow-list. A tag a source chose (`official`, `verified`, a vendor's name) is its own
//! claim. The Hub computes some tags itself (`text-generation-inference`, `endpoints_compatible`,
//! `license:…`), and it computes them for the mirror too. So neither kind is carried.

use serde::Serialize;

use crate::hub::info::ModelInfo;
use crate::manifest::{Edited, LeftOut, Manifest, ManifestShard};
use crate::safetensors::Method;

const TEMPLATE: &str = include_str!("../../../templates/model_card.md.j2");

pub use crate::sources::MIRROR_TAG;

/// The tags a mirror carries from its source, beside the Hub's task ids (a task is also a tag).
/// The one tag here keeps a model out of searches for all audiences.
/// Languages and the task have fields of their own.
const CARRIED_TAGS: [&str; 1] = ["not-for-all-audiences"];

/// The Hub's task ids (its `pipeline_tag` values) that MLX models have.
const TASKS: [&str; 16] = [
    "text-generation",
    "image-text-to-text",
    "text2text-generation",
    "feature-extraction",
    "sentence-similarity",
    "automatic-speech-recognition",
    "text-to-speech",
    "text-to-image",
    "image-to-text",
    "visual-question-answering",
    "audio-text-to-text",
    "any-to-any",
    "fill-mask",
    "text-classification",
    "image-classification",
    "translation",
];

/// Hosts a licence link may point to beside the source repo itself: the licences' own publishers.
const LICENSE_HOSTS: [&str; 10] = [
    "opensource.org",
    "www.apache.org",
    "apache.org",
    "creativecommons.org",
    "www.gnu.org",
    "spdx.org",
    "choosealicense.com",
    "www.llama.com",
    "llama.meta.com",
    "ai.google.dev",
];

/// What the source's own card says that the mirror's card carries over. Values come from the Hub and are
/// kept only when short and printable; lists are capped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceCard {
    /// Licence id (`mit`, `apache-2.0`, `other`).
    pub license: Option<String>,
    /// For `license: other`, the licence's name.
    pub license_name: Option<String>,
    /// For `license: other`, where its text is, as the source gave it (checked by `license_url`).
    pub license_link: Option<String>,
    /// The task (`text-generation`).
    pub pipeline_tag: Option<String>,
    /// Languages.
    pub language: Vec<String>,
    /// The card's own tags that a mirror carries (`CARRIED_TAGS` and tasks).
    pub tags: Vec<String>,
    /// The models the source credits as its own origin (its card's `base_model`), as repo ids, at most 4.
    /// The mirror's card links them but keeps them out of its front matter, whose `base_model` is the source.
    pub credits: Vec<String>,
}

/// The most upstream models a card names.
const MAX_CREDITS: usize = 4;

/// Licence ids the Hub uses, with the SPDX identifier their text is published under at `spdx.org`.
const SPDX: [(&str, &str); 14] = [
    ("apache-2.0", "Apache-2.0"),
    ("mit", "MIT"),
    ("bsd-2-clause", "BSD-2-Clause"),
    ("bsd-3-clause", "BSD-3-Clause"),
    ("cc-by-4.0", "CC-BY-4.0"),
    ("cc-by-sa-4.0", "CC-BY-SA-4.0"),
    ("cc-by-nc-4.0", "CC-BY-NC-4.0"),
    ("cc-by-nc-sa-4.0", "CC-BY-NC-SA-4.0"),
    ("cc0-1.0", "CC0-1.0"),
    ("gpl-3.0", "GPL-3.0-only"),
    ("lgpl-3.0", "LGPL-3.0-only"),
    ("agpl-3.0", "AGPL-3.0-only"),
    ("mpl-2.0", "MPL-2.0"),
    ("unlicense", "Unlicense"),
];

/// Where a licence id's text is published, for the ids [`SPDX`] knows.
fn spdx_url(license: &str) -> Option<String> {
    SPDX.iter().find(|(id, _)| *id == license).map(|(_, spdx)| format!("https://spdx.org/licenses/{spdx}.html"))
}

/// The longest value carried over, and the most items of a list.
const MAX_VALUE_LEN: usize = 200;
const MAX_ITEMS: usize = 50;

/// Reads an identifier-like value: a licence id, a task, a language, a tag or a dataset id.
/// It may hold only letters, digits and `._-+/:`, so nothing from the source's card carries markup over.
fn plain(v: &serde_json::Value) -> Option<String> {
    let s = v.as_str()?.trim();
    let ok = !s.is_empty()
        && s.len() <= MAX_VALUE_LEN
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+' | '/' | ':'));
    ok.then(|| s.to_owned())
}

/// Where the licence's text is. It may be a file of the source repo under `endpoint`, or a page of the
/// source repo there. It may be an `https` page of a known licence publisher ([`LICENSE_HOSTS`]).
/// Anything else gives no link.
fn license_url(link: &str, endpoint: &str, source_repo: &str) -> Option<String> {
    let plain_url = |rest: &str| {
        !rest.is_empty()
            && rest.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '~' | '#'))
    };
    if let Some(rest) = link.strip_prefix("https://") {
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        return (LICENSE_HOSTS.contains(&host) && (path.is_empty() || plain_url(path))).then(|| link.to_owned());
    }
    if let Some(rest) = link.strip_prefix(endpoint).and_then(|r| r.strip_prefix('/')) {
        let own = rest.strip_prefix(source_repo).is_some_and(|p| p.is_empty() || p.starts_with('/'));
        return (own && !rest.contains("..") && plain_url(rest)).then(|| link.to_owned());
    }
    if link.contains(':') {
        return None;
    }
    crate::untrusted::check_repo_path(link)
        .ok()
        .map(|()| format!("{endpoint}/{source_repo}/blob/main/{}", crate::untrusted::encode_path(link)))
}

/// A language as cards give it: an ISO 639 code with an optional region (`en`, `zh`, `pt-br`), or
/// `multilingual`.
fn language(s: &str) -> bool {
    let (code, region) = s.split_once('-').unwrap_or((s, ""));
    s == "multilingual"
        || ((2..=3).contains(&code.len())
            && code.bytes().all(|b| b.is_ascii_lowercase())
            && (region.is_empty()
                || ((2..=8).contains(&region.len()) && region.bytes().all(|b| b.is_ascii_alphanumeric()))))
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
            .filter(|t| CARRIED_TAGS.contains(&t.as_str()) || TASKS.contains(&t.as_str()))
            .collect();
        let task = field("pipeline_tag")
            .or_else(|| info.pipeline_tag.clone().map(serde_json::Value::from).as_ref().and_then(plain));
        SourceCard {
            license: field("license").or_else(|| info.license()),
            license_name: field("license_name"),
            license_link: card
                .and_then(|c| c.get("license_link"))
                .and_then(|v| v.as_str())
                .filter(|l| l.len() <= MAX_VALUE_LEN)
                .map(str::to_owned),
            pipeline_tag: task.filter(|t| TASKS.contains(&t.as_str())),
            language: list(card.and_then(|c| c.get("language"))).into_iter().filter(|l| language(l)).collect(),
            tags,
            credits: list(card.and_then(|c| c.get("base_model")))
                .into_iter()
                .filter(|id| crate::untrusted::check_repo_id(id).is_ok())
                .take(MAX_CREDITS)
                .collect(),
        }
    }
}

/// Writes a card's YAML front matter by hand. Every scalar is double-quoted with JSON's escapes, which YAML
/// reads the same way, so no value from the source can change the structure.
/// The licence link is the checked one, or none.
fn front_matter(source_repo: &str, card: &SourceCard, license_url: Option<&str>) -> String {
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    let mut out = String::from("---\n");
    out.push_str(&format!("base_model: {}\n", quote(source_repo)));
    let link = license_url.map(str::to_owned);
    for (key, value) in [
        ("license", &card.license),
        ("license_name", &card.license_name),
        ("license_link", &link),
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
    for (key, items) in [("language", card.language.iter().map(String::as_str).collect::<Vec<_>>()), ("tags", tags)] {
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
    /// Where the licence's text is: the checked `license_link` for `license: other`, else the text of a
    /// well-known licence id.
    pub license_url: Option<String>,
    /// The licence file the mirror carries (`LICENSE`, `LICENSE.md`, …), linked beside it.
    pub license_file: Option<String>,
    /// Whether the tokenizer has a chat template: the usage shows a chat then.
    pub chat_template: bool,
    /// Per shard: the manifest entries.
    pub shards: &'a [ManifestShard],
    /// Shards left as they were (no loader copies from them), with why.
    pub skipped: Vec<(String, String)>,
    /// Files of the source the mirror does not carry, with why: at most [`MAX_LISTED`].
    pub left_out: &'a [LeftOut],
    /// Files left out past [`MAX_LISTED`], and their bytes.
    pub left_out_more: (usize, u64),
    /// Carried configs whose pointers to code were removed.
    pub edited: &'a [Edited],
    /// Which digests the manifest holds, each with the number of shards that carry it, in the manifest's
    /// field names.
    pub digests: Vec<(String, usize)>,
    /// Whether any shard was reordered.
    pub any_relayout: bool,
    /// Misaligned tensors in the source.
    pub before_tensors: u64,
    /// Tensors in the repaired shards.
    pub shard_tensors: u64,
    /// Bytes a copying loader duplicates in the source.
    pub before_bytes: u64,
    /// What each check found, in the list's order.
    pub checks: Vec<crate::repack::checks::CheckOutcome>,
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
    pub checks: &'a crate::job::payload::LocalChecks,
    /// The MLX load check's record.
    pub mlx: crate::job::payload::MlxRecord,
    /// What the bundle's files say: the licence file and whether the tokenizer has a chat template.
    pub files: BundleFiles,
}

/// The largest `tokenizer_config.json` read for its chat template.
const MAX_TOKENIZER_CONFIG: u64 = 1 << 20;

/// What a card reads from the mirror's own files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BundleFiles {
    /// The licence file it carries, if any.
    pub license_file: Option<String>,
    /// Whether its tokenizer has a chat template.
    pub chat_template: bool,
}

impl BundleFiles {
    /// Reads `dir`, the staged mirror. Finds a licence file by its usual names.
    /// Finds a chat template in `tokenizer_config.json` (its `chat_template` key) or beside it
    /// (`chat_template.jinja`, `chat_template.json`).
    /// `repack::download::allow_list` caps the carried files' sizes.
    pub fn of(dir: &std::path::Path) -> BundleFiles {
        let license_file = ["LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "LICENSE.TXT"]
            .into_iter()
            .find(|name| dir.join(name).is_file())
            .map(str::to_owned);
        // A tokenizer config is kilobytes. One far larger is not read, since it is the source's and this runs
        // on a job's thread.
        let config = dir.join("tokenizer_config.json");
        let small = std::fs::metadata(&config).is_ok_and(|m| m.len() <= MAX_TOKENIZER_CONFIG);
        let in_config = small
            .then(|| std::fs::read(&config).ok())
            .flatten()
            .and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok())
            .is_some_and(|config| config.get("chat_template").is_some_and(|t| !t.is_null()));
        let beside = ["chat_template.jinja", "chat_template.json"].iter().any(|name| dir.join(name).is_file());
        BundleFiles { license_file, chat_template: in_config || beside }
    }
}

impl<'a> CardData<'a> {
    /// Gathers the card's facts from the manifest and the checks.
    pub fn new(manifest: &'a Manifest, inputs: CardInputs<'a>) -> CardData<'a> {
        let source_repo = manifest.source_repo.as_deref().unwrap_or("");
        let endpoint = inputs.endpoint.trim_end_matches('/');
        let checked_link = inputs.source.license_link.as_deref().and_then(|l| license_url(l, endpoint, source_repo));
        // The card links the licence's text: the source's own link, else the published text of its id.
        let license_url = checked_link.clone().or_else(|| inputs.source.license.as_deref().and_then(spdx_url));
        let listed = manifest.left_out.len().min(MAX_LISTED);
        let more = &manifest.left_out[listed..];
        let mut digests: Vec<(String, usize)> = Vec::new();
        for name in manifest.shards.iter().flat_map(|s| &s.digests) {
            match digests.iter_mut().find(|(n, _)| n == name) {
                Some((_, count)) => *count += 1,
                None => digests.push((name.clone(), 1)),
            }
        }
        CardData {
            front_matter: front_matter(source_repo, &inputs.source, checked_link.as_deref()),
            license_file: inputs.files.license_file.clone(),
            chat_template: inputs.files.chat_template,
            left_out: &manifest.left_out[..listed],
            left_out_more: (more.len(), more.iter().fold(0u64, |sum, f| sum.saturating_add(f.bytes))),
            edited: &manifest.edited,
            digests,
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
            checks: crate::repack::checks::outcomes(inputs.checks, &inputs.mlx),
            tool_version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// Most left-out files the card names one by one.
pub const MAX_LISTED: usize = 50;

/// Longest piece of untrusted text the card shows; the rest is cut.
const MAX_SHOWN: usize = 120;

/// Writes untrusted text as Markdown that renders it literally. It cuts the text to `MAX_SHOWN` characters
/// and spells out control and invisible characters.
/// It backslash-escapes every ASCII punctuation character. So nothing opens a link, an emphasis, a code
/// span, a table cell or an autolink.
/// It writes `<`, `>` and `&` as entities. So nothing opens an HTML tag, whatever the renderer makes of
/// backslashes.
pub fn markdown_text(s: &str) -> String {
    let mut cut: String = s.chars().take(MAX_SHOWN).collect();
    if cut.len() < s.len() {
        cut.push('…');
    }
    let cut = crate::untrusted::escape_control(&cut);
    let mut out = String::with_capacity(cut.len() * 2);
    for c in cut.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c if c.is_ascii_punctuation() => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// Writes a file name as a code span when it is a plain name, since no plain name can close the span.
/// Writes any other name as [`markdown_text`].
pub fn markdown_code(s: &str) -> String {
    if crate::repack::download::allow_list::plain_name(s) { format!("`{s}`") } else { markdown_text(s) }
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
pub fn render(data: &CardData<'_>) -> Result<String, minijinja::Error> {
    let mut env = minijinja::Environment::new();
    env.add_filter("thousands", |n: u64| thousands(n));
    env.add_filter("md", |s: String| markdown_text(&s));
    env.add_filter("code", |s: String| markdown_code(&s));
    env.add_filter("bytes", |n: u64| crate::report::human_bytes(n));
    env.add_filter("plural", |n: u64, one: String, many: String| {
        format!("{} {}", thousands(n), if n == 1 { one } else { many })
    });
    env.add_template("card", TEMPLATE)?;
    for check in crate::repack::checks::CHECKS.iter().filter(|c| !c.card.is_empty()) {
        env.add_template(check.name, check.card)?;
    }
    env.get_template("card")?.render(minijinja::value::Serde(data))
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
    fn the_models_a_source_credits_are_repo_ids_only_and_the_bundle_says_what_it_carries() {
        let info: ModelInfo = serde_json::from_value(serde_json::json!({ "cardData": { "base_model": [
            "meta-llama/Llama-3.2-1B", "../etc/passwd", "x](http://evil.example)", "javascript:alert(1)",
            "a/b", "c/d", "e/f", "g/h",
        ]}}))
        .unwrap();
        let card = SourceCard::from_info(&info);
        assert_eq!(
            card.credits,
            ["meta-llama/Llama-3.2-1B", "a/b", "c/d", "e/f"],
            "ids that pass the checks of `untrusted`, at most 4"
        );
        let single: ModelInfo =
            serde_json::from_value(serde_json::json!({ "cardData": { "base_model": "q/r" } })).unwrap();
        assert_eq!(SourceCard::from_info(&single).credits, ["q/r"]);

        let dir = tempfile::tempdir().unwrap();
        assert_eq!(BundleFiles::of(dir.path()), BundleFiles::default());
        std::fs::write(dir.path().join("LICENSE.md"), "text").unwrap();
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"chat_template": "{{ messages }}"}"#).unwrap();
        let files = BundleFiles::of(dir.path());
        assert_eq!((files.license_file.as_deref(), files.chat_template), (Some("LICENSE.md"), true));
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"chat_template": null}"#).unwrap();
        assert!(!BundleFiles::of(dir.path()).chat_template);
        assert_eq!(spdx_url("apache-2.0").as_deref(), Some("https://spdx.org/licenses/Apache-2.0.html"));
        assert_eq!(spdx_url("llama3.2"), None);
    }

    #[test]
    fn licenses_from_front_matter() {
        assert_eq!(license_of("---\nlicense: apache-2.0\ntags: [a]\n---\n# x"), Some("apache-2.0".into()));
        assert_eq!(license_of("# no front matter"), None);
        assert_eq!(license_of("---\ntags: [a]\n---\n"), None);
    }

    #[test]
    fn the_source_card_is_carried_over_without_claims_computed_tags_or_hostile_values() {
        let info: ModelInfo = serde_json::from_value(serde_json::json!({
            "pipeline_tag": "text-generation",
            "tags": ["license:other", "mlx"],
            "cardData": {
                "license": "other", "license_name": "ornith", "license_link": "LICENSE",
                "language": ["en", "fr", "pt-br", "English<b>", "x"], "datasets": "some/data",
                "tags": ["mlx", "region:us", "chat", "official", "verified", "meta-llama", "text-generation-inference",
                         "endpoints_compatible", "not-for-all-audiences", "text-generation", "bad\nvalue",
                         "x".repeat(300)],
            }
        }))
        .unwrap();
        let card = SourceCard::from_info(&info);
        assert_eq!(card.license.as_deref(), Some("other"));
        assert_eq!((card.license_name.as_deref(), card.license_link.as_deref()), (Some("ornith"), Some("LICENSE")));
        assert_eq!(card.pipeline_tag.as_deref(), Some("text-generation"));
        assert_eq!(card.language, ["en", "fr", "pt-br"]);
        assert_eq!(card.tags, ["not-for-all-audiences", "text-generation"]);
        let front = front_matter("a/b", &card, None);
        assert!(front.contains("- \"aligned-safetensors\"\n- \"not-for-all-audiences\"\n"), "{front}");
        for claim in ["official", "verified", "meta-llama", "endpoints_compatible", "inference", "datasets", "chat"] {
            assert!(!front.contains(claim), "{claim}: {front}");
        }
        assert!(!front.contains("license_link"), "an unchecked link is not carried: {front}");
        assert!(!front.contains("base_model_relation"), "a re-layout is none of the Hub's relations");
    }

    #[test]
    fn a_licence_links_only_into_the_source_repo_or_to_a_licence_publisher() {
        let url = |l: &str| license_url(l, "http://h", "a/b");
        assert_eq!(url("LICENSE").as_deref(), Some("http://h/a/b/blob/main/LICENSE"));
        assert_eq!(url("http://h/a/b/blob/main/LICENSE.txt").as_deref(), Some("http://h/a/b/blob/main/LICENSE.txt"));
        assert_eq!(
            url("https://www.apache.org/licenses/LICENSE-2.0").as_deref(),
            Some("https://www.apache.org/licenses/LICENSE-2.0")
        );
        for refused in [
            "../../x",
            "https://evil.example/license",
            "https://opensource.org.evil.example/x",
            "https://opensource.org/x)(y",
            "http://h/evil/repo/blob/main/LICENSE",
            "http://h/a/bc/blob/main/LICENSE",
            "http://h/a/b/../../evil/LICENSE",
            "javascript:alert(1)",
            "http:evil.example",
        ] {
            assert_eq!(url(refused), None, "{refused}");
        }
    }

    #[test]
    fn untrusted_text_renders_literally() {
        let name = "x` <img src=x onerror=alert(1)> [Download verified weights](http:evil.example) `y.safetensors";
        let md = markdown_text(name);
        // Take away each backslash escape and each entity: no markup character is left bare.
        let mut bare = String::new();
        let mut chars = md.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                chars.next();
            } else {
                bare.push(c);
            }
        }
        let bare = bare.replace("&lt;", "").replace("&gt;", "").replace("&amp;", "");
        assert!(!bare.chars().any(|c| c.is_ascii_punctuation()), "{bare}");
        assert!(md.contains("&lt;img src\\=x onerror\\=alert\\(1\\)&gt;"), "{md}");
        assert_eq!(markdown_text("a\u{1b}[31m|b"), "a\\\\u\\{1b\\}\\[31m\\|b");
        assert_eq!(markdown_text(&"y".repeat(500)).chars().count(), MAX_SHOWN + 1);
        assert_eq!(markdown_text("www.evil.example"), "www\\.evil\\.example", "no autolink");
        assert_eq!(markdown_code("model-00001-of-00002.safetensors"), "`model-00001-of-00002.safetensors`");
        assert_eq!(markdown_code("a`b"), "a\\`b");
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(thousands(5_343_636_096), "5,343,636,096");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
    }
}
