//! Checks tokens and users, and what they may see and change.

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;

use axum::http::HeaderMap;

use super::error::HubError;
use super::model::{Gating, Repo};

/// A user a token authenticates, with the namespaces it may write to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The user name.
    pub user: String,
    /// The user's own namespace and its organisations.
    pub namespaces: BTreeSet<String>,
    /// A token with the `read` role: it reads what the user may, and writes nowhere.
    pub read_only: bool,
}

/// One `--token TOKEN:USER[:ORG,ORG…][:read]` flag. `:read` marks a token with the read role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    /// The secret.
    pub token: String,
    /// Who it is.
    pub account: Account,
}

/// A `--token` that is not `TOKEN:USER[:ORG,ORG…][:read]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected TOKEN:USER[:ORG,ORG…][:read]")]
pub struct BadTokenSpec;

impl FromStr for TokenSpec {
    type Err = BadTokenSpec;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.splitn(4, ':');
        let (Some(token), Some(user)) = (parts.next(), parts.next()) else {
            return Err(BadTokenSpec);
        };
        if token.is_empty() || user.is_empty() {
            return Err(BadTokenSpec);
        }
        let orgs = parts.next().unwrap_or("");
        let read_only = match parts.next() {
            None | Some("write") => false,
            Some("read") => true,
            Some(_) => return Err(BadTokenSpec),
        };
        let mut namespaces: BTreeSet<String> = orgs.split(',').filter(|o| !o.is_empty()).map(String::from).collect();
        namespaces.insert(user.to_owned());
        Ok(TokenSpec { token: token.to_owned(), account: Account { user: user.to_owned(), namespaces, read_only } })
    }
}

/// Every token the simulator accepts.
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    by_token: HashMap<String, Account>,
}

impl Accounts {
    /// From the token flags.
    pub fn new(specs: &[TokenSpec]) -> Accounts {
        Accounts { by_token: specs.iter().map(|s| (s.token.clone(), s.account.clone())).collect() }
    }

    /// Whether `name` is a user a token signs in as (else it is taken for an organisation).
    pub fn is_user(&self, name: &str) -> bool {
        self.by_token.values().any(|a| a.user == name)
    }

    /// Who is calling: `None` without a token. An unknown token is refused, as on the Hub.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Option<&Account>, HubError> {
        let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else { return Ok(None) };
        let token = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
        match token.map(str::trim) {
            Some(t) => self.by_token.get(t).map(Some).ok_or_else(HubError::invalid_token),
            None => Err(HubError::invalid_token()),
        }
    }
}

fn owns(caller: Option<&Account>, repo: &Repo) -> bool {
    caller.is_some_and(|a| a.namespaces.contains(repo.namespace()))
}

/// Metadata access: private repos exist only for their owners.
pub fn can_see(repo: &Repo, caller: Option<&Account>) -> Result<(), HubError> {
    if repo.meta.private && !owns(caller, repo) {
        return Err(HubError::repo_not_found(&repo.id, caller.is_some()));
    }
    Ok(())
}

/// File access: also refused for disabled repos, and for gated ones without a grant.
pub fn can_download(repo: &Repo, caller: Option<&Account>) -> Result<(), HubError> {
    can_see(repo, caller)?;
    if repo.meta.disabled {
        return Err(HubError::disabled());
    }
    let granted = owns(caller, repo) || caller.is_some_and(|a| repo.meta.granted_users.contains(&a.user));
    if repo.meta.gated != Gating::Open && !granted {
        return Err(HubError::gated(&repo.id, caller.is_some()));
    }
    Ok(())
}

/// Write access to a namespace.
pub fn can_write(namespace: &str, caller: Option<&Account>) -> Result<(), HubError> {
    match caller {
        None => Err(HubError::auth_required()),
        Some(a) if a.read_only => Err(HubError::forbidden(format!("the token of {} has the read role", a.user))),
        Some(a) if a.namespaces.contains(namespace) => Ok(()),
        Some(a) => Err(HubError::forbidden(format!("{} cannot write to namespace {namespace}", a.user))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_specs() {
        let spec: TokenSpec = "hf_abc:alice:org1,org2".parse().unwrap();
        assert_eq!(spec.account.user, "alice");
        assert_eq!(spec.account.namespaces.iter().map(String::as_str).collect::<Vec<_>>(), ["alice", "org1", "org2"]);
        assert!(!spec.account.read_only);
        let read: TokenSpec = "hf_r:carol::read".parse().unwrap();
        assert!(read.account.read_only);
        assert!(can_write("carol", Some(&read.account)).is_err(), "a read token writes nowhere");
        assert!("hf_r:carol::admin".parse::<TokenSpec>().is_err());
        assert!("nouser".parse::<TokenSpec>().is_err());
        assert!(":bob".parse::<TokenSpec>().is_err());
    }
}
