//! Where the Hub is strict, the simulator is too: each rule here has its public source in
//! `crates/hubsim/README.md` ("Strict as the Hub").

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::Value;

use super::world::{ALICE, World, populate, start_on};

/// What the Hub says to a non-writer who did not ask for a pull request.
const PASS_CREATE_PR: &str = "pass `create_pr=1` as a query parameter to create a Pull Request";

fn world(tune: impl FnOnce(&mut hubsim::SimConfig)) -> World {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    start_on(root, tune)
}

/// A commit adding one small file, on top of `parent` when given.
fn ndjson(parent: Option<&str>) -> String {
    let mut header = serde_json::json!({"summary": "add a note", "description": ""});
    if let Some(parent) = parent {
        header["parentCommit"] = parent.into();
    }
    let file = serde_json::json!({"path": "NOTE.md", "content": "aGk=", "encoding": "base64"});
    format!(
        "{}\n{}\n",
        serde_json::json!({"key": "header", "value": header}),
        serde_json::json!({"key": "file", "value": file})
    )
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

#[test]
fn a_non_writer_must_ask_for_a_pull_request_on_preupload_xet_token_and_commit() {
    let world = world(|_| {});
    let api = format!("{}/api/models/mlx-community/tiny-q4", world.endpoint());
    world.runtime.block_on(async {
        let c = reqwest::Client::new();
        let preupload = serde_json::json!({"files": [{"path": "NOTE.md", "sample": "aGk=", "size": 2}]});
        let refused = c.post(format!("{api}/preupload/main")).bearer_auth(ALICE).json(&preupload).send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert!(refused.text().await.unwrap().contains(PASS_CREATE_PR));
        let asked = c.post(format!("{api}/preupload/main?create_pr=1")).bearer_auth(ALICE).json(&preupload);
        assert_eq!(asked.send().await.unwrap().status(), StatusCode::OK);

        let refused = c.get(format!("{api}/xet-write-token/main")).bearer_auth(ALICE).send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert!(refused.text().await.unwrap().contains(PASS_CREATE_PR));
        // huggingface_hub's URL for a pull request's token names the revision `None`.
        let asked = c.get(format!("{api}/xet-write-token/None?create_pr=1")).bearer_auth(ALICE).send().await.unwrap();
        assert_eq!(asked.status(), StatusCode::OK);

        let commit = |query: &'static str| {
            c.post(format!("{api}/commit/main{query}"))
                .bearer_auth(ALICE)
                .header("content-type", "application/x-ndjson")
                .body(ndjson(None))
                .send()
        };
        let refused = commit("").await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert!(refused.text().await.unwrap().contains(PASS_CREATE_PR));
        let opened = commit("?create_pr=1").await.unwrap();
        assert_eq!(opened.status(), StatusCode::OK);
        let answer: Value = opened.json().await.unwrap();
        // The Hub's keys (huggingface_hub's CommitInfo and the recorded commit answer), and no others.
        let expected = ["commitOid", "commitUrl", "hookOutput", "pullRequestUrl", "success"];
        assert_eq!(keys(&answer), expected.iter().map(ToString::to_string).collect(), "{answer}");
        assert!(answer["pullRequestUrl"].as_str().unwrap().ends_with("/mlx-community/tiny-q4/discussions/1"));

        // A pull request's `changes.base` is the branch it targets, not a commit.
        let details: Value = c.get(format!("{api}/discussions/1")).send().await.unwrap().json().await.unwrap();
        assert_eq!(details["changes"]["base"], "refs/heads/main", "{details}");
    });
}

#[test]
fn action_quotas_answer_429_naming_the_action_without_rate_headers() {
    let world = world(|c| {
        c.action_quotas = hubsim::actions::ActionQuotas {
            limits: vec![(hubsim::actions::Action::Commit, 1)],
            window: std::time::Duration::from_secs(3600),
        };
    });
    let url = format!("{}/api/models/alice/private-q4/commit/main", world.endpoint());
    world.runtime.block_on(async {
        let c = reqwest::Client::new();
        let send = || c.post(&url).bearer_auth(ALICE).header("content-type", "application/x-ndjson").body(ndjson(None));
        assert_eq!(send().send().await.unwrap().status(), StatusCode::OK);
        let refused = send().send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        for header in ["ratelimit", "ratelimit-policy", "retry-after"] {
            assert!(!refused.headers().contains_key(header), "{header} on an action quota's 429");
        }
        let body: Value = refused.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("exceeded our hourly quotas for action: commit"), "{body}");
    });
}

#[test]
fn a_creation_while_another_is_in_progress_is_a_409_and_the_edge_refuses_without_headers() {
    let world = world(|c| {
        c.faults.create_conflicts = 1;
        c.faults.edge_429s = 1;
    });
    world.runtime.block_on(async {
        let c = reqwest::Client::new();
        let listing = format!("{}/api/models", world.endpoint());
        let edge = c.get(&listing).send().await.unwrap();
        assert_eq!(edge.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(!edge.headers().contains_key("ratelimit") && !edge.headers().contains_key("retry-after"));
        assert_eq!(c.get(&listing).send().await.unwrap().status(), StatusCode::OK);

        let create = format!("{}/api/repos/create", world.endpoint());
        let body = serde_json::json!({"name": "fresh", "organization": "alice", "visibility": "private"});
        let conflict = c.post(&create).bearer_auth(ALICE).json(&body).send().await.unwrap();
        assert_eq!(conflict.status(), StatusCode::CONFLICT);
        assert!(conflict.text().await.unwrap().contains("another conflicting operation is in progress"));
        assert_eq!(c.post(&create).bearer_auth(ALICE).json(&body).send().await.unwrap().status(), StatusCode::OK);
        let exists = c.post(&create).bearer_auth(ALICE).json(&body).send().await.unwrap();
        assert_eq!(exists.status(), StatusCode::CONFLICT);
        assert!(exists.text().await.unwrap().contains("You already created this model repo"));
    });
}
