//! Where the Hub is and who we are, read from the settings `huggingface_hub` reads, as it reads them. These
//! are `HF_ENDPOINT`, `HF_TOKEN`, `HF_TOKEN_PATH` and the token file under `HF_HOME`
//! (`~/.cache/huggingface/token`). `HF_HUB_OFFLINE` forbids any request. `HF_HUB_DISABLE_IMPLICIT_TOKEN`
//! sends only a token given on the command line.

use std::path::PathBuf;

/// The public Hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A secret that never shows in `Debug` or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token string.
    pub fn new(secret: impl Into<String>) -> Token {
        Token(secret.into())
    }

    /// Returns the secret, for an `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// Endpoint and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubConfig {
    /// Base URL, without a trailing slash.
    pub endpoint: String,
    /// The token, if any.
    pub token: Option<Token>,
}

/// Why the Hub cannot be reached with these settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `HF_HUB_OFFLINE` forbids every request, as `huggingface_hub` honours it.
    #[error(
        "HF_HUB_OFFLINE is set, and this command needs the Hub ({endpoint}): unset HF_HUB_OFFLINE to let it go online"
    )]
    Offline {
        /// The Hub it would have asked.
        endpoint: String,
    },
}

impl HubConfig {
    /// Resolves the endpoint and token: explicit values first, then the environment, then the token file.
    /// `HF_HUB_DISABLE_IMPLICIT_TOKEN` rules out the last two for the token. Returns an error under
    /// `HF_HUB_OFFLINE`, because every caller is about to ask the Hub something.
    pub fn resolve(endpoint: Option<String>, token: Option<String>) -> Result<HubConfig, ConfigError> {
        let endpoint = endpoint.or_else(|| env("HF_ENDPOINT")).unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        if env_flag("HF_HUB_OFFLINE") {
            return Err(ConfigError::Offline { endpoint });
        }
        let token = find_token(token).map(|(token, _)| token);
        Ok(HubConfig { endpoint, token })
    }
}

/// Whether an environment variable is set to a true value, as `huggingface_hub` reads its flags (`1`, `ON`,
/// `YES`, `TRUE`, in any case).
pub fn env_flag(key: &str) -> bool {
    env(key).is_some_and(|v| ["1", "ON", "YES", "TRUE"].contains(&v.trim().to_ascii_uppercase().as_str()))
}

/// Returns where the token that [`HubConfig::resolve`] takes comes from, for `doctor`, which never shows the
/// token.
pub fn token_origin(explicit: Option<String>) -> Option<String> {
    find_token(explicit).map(|(_, origin)| origin)
}

/// Returns an environment variable's value, unless it is unset or blank.
fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

/// Returns the token and where it came from: `explicit`, then `HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN`, then the
/// token file. Under `HF_HUB_DISABLE_IMPLICIT_TOKEN`, only `explicit` counts.
fn find_token(explicit: Option<String>) -> Option<(Token, String)> {
    if env_flag("HF_HUB_DISABLE_IMPLICIT_TOKEN") {
        let text = explicit?;
        let text = text.trim();
        return (!text.is_empty()).then(|| (Token(text.to_owned()), "--token".to_owned()));
    }
    let from_file = || {
        let path = token_file()?;
        let text = std::fs::read_to_string(&path).ok()?;
        Some((text, format!("the token file {}", path.display())))
    };
    let (text, origin) = explicit
        .map(|t| (t, "--token".to_owned()))
        .or_else(|| env("HF_TOKEN").map(|t| (t, "HF_TOKEN".to_owned())))
        .or_else(|| env("HUGGING_FACE_HUB_TOKEN").map(|t| (t, "HUGGING_FACE_HUB_TOKEN".to_owned())))
        .or_else(from_file)?;
    let text = text.trim();
    (!text.is_empty()).then(|| (Token(text.to_owned()), origin))
}

/// Returns the token file's path: `HF_TOKEN_PATH`, else `$HF_HOME/token`, else
/// `$XDG_CACHE_HOME/huggingface/token`, else `~/.cache/huggingface/token`.
fn token_file() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HF_TOKEN_PATH") {
        return Some(PathBuf::from(p));
    }
    if let Some(home) = std::env::var_os("HF_HOME") {
        return Some(PathBuf::from(home).join("token"));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join("huggingface").join("token"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_print() {
        let t = Token::new("hf_secret");
        assert_eq!(format!("{t:?}"), "Token(***)");
        let c = HubConfig { endpoint: "x".into(), token: Some(t) };
        assert!(!format!("{c:?}").contains("hf_secret"));
    }

    #[test]
    fn explicit_values_win_and_slashes_are_trimmed() {
        let c = HubConfig::resolve(Some("http://127.0.0.1:9/".into()), Some(" hf_x \n".into())).unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:9");
        assert_eq!(c.token.as_ref().map(Token::expose), Some("hf_x"));
    }
}
