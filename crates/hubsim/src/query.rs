//! Parses query strings with repeated keys (`filter=a&filter=b`, `expand=x&expand=y`). serde's form decoding
//! cannot express them.

/// Decoded `key=value` pairs in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    /// Parses a raw query string (or a form body).
    pub fn parse(raw: &str) -> Params {
        Params(form_urlencoded::parse(raw.as_bytes()).into_owned().collect())
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Every value of `key` (also accepting the `key[]` spelling).
    pub fn all(&self, key: &str) -> Vec<&str> {
        let bracketed = format!("{key}[]");
        self.0.iter().filter(|(k, _)| k == key || *k == bracketed).map(|(_, v)| v.as_str()).collect()
    }

    /// A boolean flag: `true`, `1` or `True`.
    pub fn flag(&self, key: &str) -> bool {
        self.get(key).is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
    }

    /// A number, if present and valid.
    pub fn number(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| v.parse().ok())
    }

    /// These parameters without `key`, re-encoded, for building the next page's URL.
    pub fn encode_without(&self, key: &str) -> String {
        let mut ser = form_urlencoded::Serializer::new(String::new());
        for (k, v) in self.0.iter().filter(|(k, _)| k != key) {
            ser.append_pair(k, v);
        }
        ser.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_and_flags() {
        let p = Params::parse("filter=mlx&filter=license%3Amit&full=true&limit=5&expand[]=sha&cursor=10");
        assert_eq!(p.all("filter"), ["mlx", "license:mit"]);
        assert_eq!(p.all("expand"), ["sha"]);
        assert!(p.flag("full"));
        assert!(!p.flag("config"));
        assert_eq!(p.number("limit"), Some(5));
        assert_eq!(p.encode_without("cursor"), "filter=mlx&filter=license%3Amit&full=true&limit=5&expand%5B%5D=sha");
    }
}
