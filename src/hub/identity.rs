//! Who a token belongs to and where it may write, from `GET /api/whoami-v2`. The answer names the account,
//! its organisations with the role it holds in each, and the token's own role. That role is `read`, `write`,
//! or `fineGrained` with scoped permissions. Callers read this before any job starts, so a token that
//! cannot publish is reported at once instead of after a whole download.

use serde::Deserialize;

use super::pacing::Bucket;
use super::{BodyLimit, HubClient, HubError, SMALL_CAP};
use crate::untrusted;

/// The account a token belongs to, and what the token may do.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Identity {
    /// The user's name (also their namespace).
    pub name: String,
    /// The organisations the user belongs to.
    #[serde(default)]
    pub orgs: Vec<Org>,
    /// The token itself; absent on answers that do not describe it.
    #[serde(default)]
    pub auth: Option<Auth>,
}

/// An organisation and the user's role in it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Org {
    /// Its name (its namespace).
    pub name: String,
    /// `admin`, `write`, `contributor` or `read`; absent on older answers.
    #[serde(default, rename = "roleInOrg")]
    pub role: Option<String>,
}

/// How the request was authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Auth {
    /// The access token, when one was used.
    #[serde(default, rename = "accessToken")]
    pub access_token: Option<AccessToken>,
}

/// The token's role and, for a fine-grained token, its scopes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AccessToken {
    /// `read`, `write` or `fineGrained`.
    #[serde(default)]
    pub role: Option<String>,
    /// A fine-grained token's permissions.
    #[serde(default, rename = "fineGrained")]
    pub fine_grained: Option<FineGrained>,
}

/// A fine-grained token's permissions: on everything (`global`), and per user or organisation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FineGrained {
    /// Permissions granted everywhere (`discussion.write`: discussions and pull requests on any repo).
    #[serde(default)]
    pub global: Vec<String>,
    /// Permissions granted on named users and organisations.
    #[serde(default)]
    pub scoped: Vec<Scoped>,
}

/// A permission a fine-grained token may hold, as the Hub names it. Neither official client reads these
/// names; they are the token settings page's, as public projects' fixtures record them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Create repos and commit to them (`repo.write`).
    RepoWrite,
    /// Create collections and change them (`collection.write`).
    CollectionWrite,
    /// Open discussions and pull requests (`discussion.write`).
    DiscussionWrite,
}

impl Permission {
    /// Returns the permission's name in a token's answer.
    pub fn name(self) -> &'static str {
        match self {
            Permission::RepoWrite => "repo.write",
            Permission::CollectionWrite => "collection.write",
            Permission::DiscussionWrite => "discussion.write",
        }
    }
}

/// Permissions on one user or organisation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Scoped {
    /// Whom they apply to.
    pub entity: Entity,
    /// `repo.write`, `repo.content.read`, …
    #[serde(default)]
    pub permissions: Vec<String>,
}

/// A user or organisation a scope names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Entity {
    /// Its name.
    pub name: String,
}

/// Whether a token may create and commit to repos in a namespace, as far as its identity says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteAccess {
    /// It may.
    Granted,
    /// It may not, and why, said for the operator with the fix.
    Refused(String),
    /// The answer does not say, as with an older Hub or a role this client does not know. The first write
    /// will tell.
    Unknown(String),
}

/// Roles in an organisation that may create repos in it.
const WRITING_ORG_ROLES: [&str; 3] = ["admin", "write", "contributor"];

impl Identity {
    /// Whether this token may write to `namespace`. The namespace must be the user's own, or an organisation
    /// where the user may write. The token's role must also allow writing there.
    pub fn may_write(&self, namespace: &str) -> WriteAccess {
        let token = self.auth.as_ref().and_then(|a| a.access_token.as_ref());
        if token.and_then(|t| t.role.as_deref()) == Some("read") {
            // Check this first: no namespace helps a read token.
            return self.may(Permission::RepoWrite, namespace);
        }
        let member = namespace == self.name || self.orgs.iter().any(|o| o.name == namespace);
        if !member {
            return WriteAccess::Refused(format!(
                "{} is neither {namespace} nor a member of it; choose --target-namespace {} or one of its \
                 organisations, or a token of a member of {namespace}",
                self.name, self.name
            ));
        }
        if let Some(org) = self.orgs.iter().find(|o| o.name == namespace && namespace != self.name)
            && let Some(org_role) = org.role.as_deref()
            && !WRITING_ORG_ROLES.contains(&org_role)
        {
            return WriteAccess::Refused(format!(
                "{} holds the {org_role} role in {namespace}, which cannot create repos; ask an admin of {namespace} \
                 for the write role",
                self.name
            ));
        }
        self.may(Permission::RepoWrite, namespace)
    }

    /// Whether this token holds `permission` on `namespace`. A write token holds every one. A fine-grained
    /// token holds those it was given there or everywhere. [`Identity::may_write`] judges membership.
    pub fn may(&self, permission: Permission, namespace: &str) -> WriteAccess {
        self.holds(permission, Some(namespace))
    }

    /// Whether this token holds `permission` on every namespace, as a pull request or a note on anyone's repo
    /// needs. A fine-grained token must have been given it everywhere (`global`).
    pub fn may_everywhere(&self, permission: Permission) -> WriteAccess {
        self.holds(permission, None)
    }

    /// Applies [`Identity::may`] to `namespace`, or to every namespace when it is `None`.
    fn holds(&self, permission: Permission, namespace: Option<&str>) -> WriteAccess {
        let token = self.auth.as_ref().and_then(|a| a.access_token.as_ref());
        match token.and_then(|t| t.role.as_deref()) {
            Some("write") => WriteAccess::Granted,
            Some("read") => WriteAccess::Refused(format!(
                "the token of {} is a read token; give one with the write role (huggingface.co/settings/tokens)",
                self.name
            )),
            Some("fineGrained") => {
                let fine = token.and_then(|t| t.fine_grained.as_ref());
                let name = permission.name();
                let everywhere = fine.is_some_and(|f| f.global.iter().any(|p| p == name));
                let there = namespace.is_some_and(|ns| {
                    fine.is_some_and(|f| {
                        f.scoped.iter().any(|s| s.entity.name == ns && s.permissions.iter().any(|p| p == name))
                    })
                });
                if everywhere || there {
                    WriteAccess::Granted
                } else {
                    let on = namespace.unwrap_or("every repo");
                    WriteAccess::Refused(format!(
                        "the fine-grained token of {} has no {name} permission on {on}; add it to the token \
                         (huggingface.co/settings/tokens)",
                        self.name
                    ))
                }
            }
            Some(other) => WriteAccess::Unknown(format!("the token's role is {other:?}, which hubalign does not know")),
            None => WriteAccess::Unknown("the Hub's answer does not give the token's role".to_owned()),
        }
    }
}

impl HubClient {
    /// Asks who the token belongs to and what it may do, and checks the name as a namespace.
    pub async fn identity(&self) -> Result<Identity, HubError> {
        let url = format!("{}/api/whoami-v2", self.endpoint());
        let fetched = self.get(Bucket::Api, &url, &[], BodyLimit::Whole(SMALL_CAP)).await?;
        let who: Identity = serde_json::from_slice(&fetched.body)
            .map_err(|e| HubError::Malformed { url: url.clone(), detail: format!("whoami: {e}") })?;
        untrusted::check_namespace(&who.name).map_err(|e| HubError::Malformed { url, detail: e.to_string() })?;
        Ok(who)
    }

    /// Returns the user the token belongs to, checked as a namespace.
    pub async fn whoami(&self) -> Result<String, HubError> {
        Ok(self.identity().await?.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(json: serde_json::Value) -> Identity {
        serde_json::from_value(json).unwrap()
    }

    fn answer(role: &str, orgs: serde_json::Value, fine: serde_json::Value) -> Identity {
        identity(serde_json::json!({
            "type": "user", "name": "bot", "orgs": orgs,
            "auth": { "type": "access_token", "accessToken": { "displayName": "t", "role": role, "fineGrained": fine } },
        }))
    }

    #[test]
    fn a_write_token_writes_to_its_user_and_to_organisations_where_the_user_may() {
        let orgs = serde_json::json!([
            { "name": "team", "roleInOrg": "write" },
            { "name": "lab", "roleInOrg": "read" },
            { "name": "old" },
        ]);
        let who = answer("write", orgs, serde_json::Value::Null);
        assert_eq!(who.may_write("bot"), WriteAccess::Granted);
        assert_eq!(who.may_write("team"), WriteAccess::Granted);
        assert_eq!(who.may_write("old"), WriteAccess::Granted, "an answer without roles trusts membership");
        let WriteAccess::Refused(why) = who.may_write("lab") else { panic!() };
        assert!(why.contains("read role in lab"), "{why}");
        let WriteAccess::Refused(why) = who.may_write("elsewhere") else { panic!() };
        assert!(why.contains("--target-namespace bot"), "{why}");
    }

    #[test]
    fn a_read_token_writes_nowhere_and_a_fine_grained_one_where_it_is_scoped_to() {
        let who = answer("read", serde_json::json!([]), serde_json::Value::Null);
        assert!(matches!(who.may_write("bot"), WriteAccess::Refused(why) if why.contains("read token")));
        let fine = serde_json::json!({ "canReadGatedRepos": false, "global": [], "scoped": [
            { "entity": { "_id": "1", "type": "user", "name": "bot" }, "permissions": ["repo.content.read", "repo.write"] },
            { "entity": { "_id": "2", "type": "org", "name": "team" }, "permissions": ["repo.content.read"] },
        ]});
        let who = answer("fineGrained", serde_json::json!([{ "name": "team", "roleInOrg": "admin" }]), fine);
        assert_eq!(who.may_write("bot"), WriteAccess::Granted);
        assert!(matches!(who.may_write("team"), WriteAccess::Refused(why) if why.contains("repo.write")));
    }

    #[test]
    fn a_fine_grained_token_holds_collections_and_discussions_only_where_it_was_given_them() {
        let fine = serde_json::json!({ "global": ["discussion.write"], "scoped": [
            { "entity": { "type": "user", "name": "bot" }, "permissions": ["repo.write", "collection.write"] },
            { "entity": { "type": "org", "name": "team" }, "permissions": ["repo.write"] },
        ]});
        let who = answer("fineGrained", serde_json::json!([{ "name": "team", "roleInOrg": "write" }]), fine);
        assert_eq!(who.may(Permission::CollectionWrite, "bot"), WriteAccess::Granted);
        let WriteAccess::Refused(why) = who.may(Permission::CollectionWrite, "team") else { panic!() };
        assert!(why.contains("no collection.write permission on team"), "{why}");
        assert_eq!(who.may(Permission::DiscussionWrite, "anyone-else"), WriteAccess::Granted, "given everywhere");
        assert_eq!(who.may_everywhere(Permission::DiscussionWrite), WriteAccess::Granted);
        let WriteAccess::Refused(why) = who.may_everywhere(Permission::CollectionWrite) else { panic!() };
        assert!(why.contains("no collection.write permission on every repo"), "scoped is not everywhere: {why}");
        let none = answer("fineGrained", serde_json::json!([]), serde_json::json!({ "scoped": [] }));
        assert!(
            matches!(none.may(Permission::DiscussionWrite, "x"), WriteAccess::Refused(why) if why.contains("discussion.write"))
        );
        let write = answer("write", serde_json::json!([]), serde_json::Value::Null);
        assert_eq!(
            write.may(Permission::CollectionWrite, "anywhere"),
            WriteAccess::Granted,
            "the write role holds all"
        );
    }

    #[test]
    fn an_answer_that_does_not_say_leaves_it_to_the_first_write() {
        let who = identity(serde_json::json!({ "name": "bot" }));
        assert!(matches!(who.may_write("bot"), WriteAccess::Unknown(_)));
        let who = answer("owner", serde_json::json!([]), serde_json::Value::Null);
        assert!(matches!(who.may_write("bot"), WriteAccess::Unknown(why) if why.contains("owner")));
    }
}
