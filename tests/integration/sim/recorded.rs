//! Hub answers that public projects recorded from huggingface.co (`tests/fixtures/hub-recorded/`, each with its
//! source): hubalign's client reads each one it has a reader for, served back as the Hub sent it, and the
//! simulator answers the same requests with the same status, keys and value types.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use hubalign::hub::commit::{Change, CommitRefused, Message, PreuploadFile, WriteTo};
use hubalign::hub::repos::Created;
use hubalign::hub::retry::RetryPolicy;
use hubalign::hub::{HubClient, HubConfig, HubError, Token};
use serde_json::Value;

use super::world::{ALICE, World, populate, start_on};

/// A recorded file, by its path under `tests/fixtures/hub-recorded/`.
fn recorded(path: &str) -> Value {
    let text = std::fs::read_to_string(crate::support::fixture(&format!("hub-recorded/{path}"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// One answer to serve: a status, headers and a body.
struct Answer {
    status: StatusCode,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    /// The `response` of a recorded interaction, as the Hub sent it (its headers when they were recorded).
    fn of(interaction: &Value) -> Answer {
        let response = &interaction["response"];
        let status = StatusCode::from_u16(response["status"].as_u64().unwrap() as u16).unwrap();
        let mut headers = Vec::new();
        for (name, values) in response["headers"].as_object().into_iter().flatten() {
            // The length and the connection are the replaying server's to set.
            if ["content-length", "connection", "transfer-encoding"].contains(&name.to_ascii_lowercase().as_str()) {
                continue;
            }
            for value in values.as_array().into_iter().flatten().filter_map(Value::as_str) {
                headers.push((name.clone(), value.to_owned()));
            }
        }
        let body = match &response["body"] {
            Value::String(text) => text.clone().into_bytes(),
            other => other.to_string().into_bytes(),
        };
        Answer { status, headers, body }
    }

    /// The Hub's error answer with `message`, as its errors are sent (a JSON `error`, no rate headers).
    fn error(status: u16, message: &str) -> Answer {
        let body = serde_json::json!({ "error": message }).to_string().into_bytes();
        let headers = vec![("content-type".to_owned(), "application/json; charset=utf-8".to_owned())];
        Answer { status: StatusCode::from_u16(status).unwrap(), headers, body }
    }
}

/// A server that answers each request with the next queued answer, and keeps what was asked.
#[derive(Default)]
struct Replay {
    answers: Mutex<VecDeque<Answer>>,
    asked: Mutex<Vec<String>>,
}

async fn answer_next(State(replay): State<Arc<Replay>>, request: Request) -> Response {
    replay.asked.lock().unwrap().push(format!("{} {}", request.method(), request.uri()));
    let Some(answer) = replay.answers.lock().unwrap().pop_front() else {
        return Response::builder().status(599).body(Body::from("nothing queued")).unwrap();
    };
    let mut response = Response::builder().status(answer.status).body(Body::from(answer.body)).unwrap();
    for (name, value) in answer.headers {
        let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) else { continue };
        response.headers_mut().append(name, value);
    }
    response
}

/// The replaying server and a client of it, on a runtime of their own.
struct Bench {
    runtime: tokio::runtime::Runtime,
    replay: Arc<Replay>,
    hub: HubClient,
}

impl Bench {
    fn new() -> Bench {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let replay = Arc::new(Replay::default());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(answer_next).with_state(replay.clone());
        runtime.spawn(async move { axum::serve(listener, app).await });
        let config = HubConfig { endpoint, token: Some(Token::new("hf_recorded".to_owned())) };
        let hub = HubClient::new(config, RetryPolicy::default()).unwrap();
        Bench { runtime, replay, hub }
    }

    /// Runs `call` with `answers` queued, and returns what it gave and the requests it made.
    fn serve<T>(&self, answers: Vec<Answer>, call: impl std::future::Future<Output = T>) -> (T, Vec<String>) {
        self.replay.asked.lock().unwrap().clear();
        *self.replay.answers.lock().unwrap() = answers.into();
        let out = self.runtime.block_on(call);
        (out, std::mem::take(&mut *self.replay.asked.lock().unwrap()))
    }
}

const PARENT: &str = "8aa4cd78db279c7d673ade7a798dd4adff562cbb";

#[test]
fn hubalign_reads_every_recorded_answer_it_has_a_reader_for() {
    let bench = Bench::new();
    let hub = &bench.hub;
    let bodies = "cassette_bodies";

    let (created, _) = bench.serve(vec![Answer::of(&recorded(&format!("{bodies}/POST_api_repos_create_200.json")))], {
        hub.create_private_repo("user/tmp_test_space")
    });
    assert_eq!(created.unwrap(), Created::New);
    let (exists, _) = bench.serve(vec![Answer::of(&recorded(&format!("{bodies}/POST_api_repos_create_409.json")))], {
        hub.create_private_repo("user/tmp_test_space")
    });
    assert_eq!(exists.unwrap(), Created::Existed, "the recorded 409 of a repo that exists");

    let preupload = recorded(&format!("{bodies}/POST_api_spaces_user_tmp_test_space_preupload_main_200.json"));
    let file = PreuploadFile { path: "app.py".into(), sample: b"import gradio".to_vec(), size: 152 };
    let (asked, requests) =
        bench.serve(vec![Answer::of(&preupload)], hub.preupload(WriteTo::from("user/tmp_test_space"), &[file]));
    assert_eq!(asked.unwrap().0, Vec::<String>::new(), "app.py goes inline, as the Hub said");
    assert_eq!(requests, ["POST /api/models/user/tmp_test_space/preupload/main"]);

    let commit = recorded(&format!("{bodies}/POST_api_spaces_user_tmp_test_space_commit_main_200.json"));
    let note = [Change::Inline { path: "app.py", content: b"import gradio".to_vec() }];
    let to_main = hub.commit(WriteTo::from("user/tmp_test_space"), PARENT, Message::from("Upload app.py"), &note);
    let (committed, _) = bench.serve(vec![Answer::of(&commit)], to_main);
    let committed = committed.unwrap();
    assert_eq!(committed.commit, "855efb9561990d02233a49204227f93ba5cfaa81");
    assert_eq!(committed.pull_request, None);
    // No pull request's commit answer was recorded: this is the recorded answer with the key huggingface_hub's
    // CommitInfo reads for one.
    let mut opened = commit.clone();
    opened["response"]["body"]["pullRequestUrl"] =
        "https://huggingface.co/spaces/user/tmp_test_space/discussions/3".into();
    let as_pr = WriteTo::pull_request("user/tmp_test_space".into());
    let (proposed, requests) = bench.serve(vec![Answer::of(&opened)], hub.commit(as_pr, PARENT, "Align".into(), &note));
    assert_eq!(proposed.unwrap().pull_request, Some(3));
    assert_eq!(requests, ["POST /api/models/user/tmp_test_space/commit/main?create_pr=1"]);
    // Without the key, the answer is malformed: never a pull request numbered 0.
    let as_pr = WriteTo::pull_request("user/tmp_test_space".into());
    let (unnumbered, _) = bench.serve(vec![Answer::of(&commit)], hub.commit(as_pr, PARENT, "Align".into(), &note));
    assert!(matches!(unnumbered, Err(CommitRefused::Hub(HubError::Malformed { .. }))), "{unnumbered:?}");

    let deleted = recorded(&format!("{bodies}/DELETE_api_repos_delete_200.json"));
    let (gone, _) = bench.serve(vec![Answer::of(&deleted)], hub.delete_repo("user/tmp_test_space"));
    gone.unwrap();

    let tree = recorded("tree/GET_api_models_google-bert_bert-base-uncased_tree_dd4bc8b.json");
    let sha = "dd4bc8b21efa05ec961e3efc4ee5e3832a3679c7";
    let (files, _) = bench.serve(vec![Answer::of(&tree)], hub.tree("google-bert/bert-base-uncased", sha));
    let files = files.unwrap();
    let listed = tree["response"]["body"].as_array().unwrap().iter().filter(|e| e["type"] == "file").count();
    assert_eq!(files.len(), listed);
    let bin = files.iter().find(|f| f.path == "pytorch_model.bin").unwrap();
    assert_eq!(bin.size, 440_473_133);
    assert_eq!(bin.lfs.as_ref().unwrap().oid, "097417381d6c7230bd9e3557456d726de6e83245ec8b24f529f60198a67b203a");

    let paths_info = recorded("tree/POST_api_models_google-bert_bert-base-uncased_paths-info_dd4bc8b.json");
    let repo = hubalign::hub::repo_ref::RepoRef::model("google-bert/bert-base-uncased");
    let asked = ["tf_model.h5".to_owned()];
    let (files, _) = bench.serve(vec![Answer::of(&paths_info)], hub.paths_info_of(repo, sha, &asked));
    assert_eq!(files.unwrap()[0].size, 536_063_208);

    let whoami = recorded("whoami/whoami-v2_hub-ci_write_token.json");
    let (who, _) = bench.serve(vec![Answer::of(&whoami)], hub.identity());
    assert_eq!(who.unwrap().name, "hub.js");

    let listing = recorded("collections/GET_api_collections_owner.json");
    let (collections, _) = bench.serve(vec![Answer::of(&listing)], hub.collections_of("huggingfacejs"));
    let collections = collections.unwrap();
    assert_eq!(collections[0].slug, "huggingfacejs/test-collection-690df2897fa1945492b8cf42");
    let slug = recorded("collections/GET_api_collections_slug.json");
    let (items, _) = bench.serve(vec![Answer::of(&slug)], hub.collection_items(&collections[0].slug));
    assert!(!items.unwrap().is_empty());
}

#[test]
fn hubalign_reads_the_hubs_recorded_refusals_as_what_they_mean() {
    let bench = Bench::new();
    let hub = &bench.hub;
    let texts = recorded("errors/known_error_texts.json");
    // The text the Hub sends for the refusal whose recorded endpoint mentions `what`.
    let text = |what: &str| {
        let items = texts["items"].as_array().unwrap();
        let item = items.iter().find(|i| i["endpoint"].as_str().unwrap().contains(what)).unwrap();
        item["message"].as_str().or(item["message_contains"].as_str()).unwrap().to_owned()
    };
    let note = [Change::Inline { path: "NOTE.md", content: b"hi".to_vec() }];
    let commit = || hub.commit(WriteTo::from("user/repo"), PARENT, "a note".into(), &note);

    let (stale, _) = bench.serve(vec![Answer::error(412, &text("stale parentCommit"))], commit());
    assert!(matches!(stale, Err(CommitRefused::Moved)), "{stale:?}");

    let file = PreuploadFile { path: "NOTE.md".into(), sample: b"hi".to_vec(), size: 2 };
    let (refused, _) = bench.serve(
        vec![Answer::error(403, &text("preupload/main by a non-writer"))],
        hub.preupload("user/repo".into(), &[file]),
    );
    let refused = refused.unwrap_err();
    assert!(refused.to_string().contains("create_pr=1"), "the Hub's words are kept: {refused}");

    let (quota, requests) = bench.serve(vec![Answer::error(429, &text("action quota"))], commit());
    assert!(matches!(quota, Err(CommitRefused::Hub(HubError::ActionQuota { .. }))), "{quota:?}");
    assert_eq!(requests.len(), 1, "an action quota's 429 is not sent again");

    // The 409 of a creation in progress is sent again; the next answer decides. (A new client: the quota's
    // refusal above paused this one's writes.)
    let bench = Bench::new();
    let hub = &bench.hub;
    let in_progress = Answer::error(409, &text("concurrent creates"));
    let made = Answer::of(&recorded("cassette_bodies/POST_api_repos_create_200.json"));
    let (created, requests) = bench.serve(vec![in_progress, made], hub.create_private_repo("user/fresh"));
    assert_eq!(created.unwrap(), Created::New);
    assert_eq!(requests.len(), 2);
}

#[test]
fn hubalign_reads_the_recorded_webhooks_and_rate_limit_headers() {
    for file in
        ["discussion_create_pr_hubdocs.json", "discussion_update_closed_pr_space.json", "repo_content_update_refs.json"]
    {
        let body = recorded(&format!("webhooks/{file}"))["body"].to_string();
        let read = hubalign::webhook::payload::read(body.as_bytes());
        assert!(read.is_ok(), "{file}: {read:?}");
    }
    let examples = recorded("headers/ratelimit_examples.json");
    let limit = hubalign::hub::pacing::parse_rate_limit_value(examples["RateLimit"].as_str().unwrap()).unwrap();
    assert_eq!((limit.remaining, limit.reset_seconds), (0, 55));
}

/// Where `got` (the simulator's answer) and `want` (the recorded one) differ in keys or value types, each
/// named by its path. An array is judged by its first element; an empty one matches any. A recorded
/// placeholder `"<any T>"` stands for a value of type T.
fn differences(got: &Value, want: &Value, at: &str) -> Vec<String> {
    let kind = |v: &Value| match v {
        Value::String(s) if s.starts_with("<any ") => {
            s.trim_start_matches("<any ").trim_end_matches('>').to_lowercase()
        }
        Value::Object(_) => "object".into(),
        Value::Array(_) => "array".into(),
        Value::String(_) => "string".into(),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "boolean".into(),
        Value::Null => "null".into(),
    };
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let mut out: Vec<String> =
                g.keys().filter(|k| !w.contains_key(*k)).map(|k| format!("{at}.{k}: not sent by the Hub")).collect();
            out.extend(w.keys().filter(|k| !g.contains_key(*k)).map(|k| format!("{at}.{k}: missing")));
            for (k, w) in w {
                if let Some(g) = g.get(k) {
                    out.extend(differences(g, w, &format!("{at}.{k}")));
                }
            }
            out
        }
        (Value::Array(g), Value::Array(w)) => match (g.first(), w.first()) {
            (Some(g), Some(w)) => differences(g, w, &format!("{at}[0]")),
            _ => Vec::new(),
        },
        _ if kind(got) == kind(want) => Vec::new(),
        _ => vec![format!("{at}: a {} where the Hub sends a {}", kind(got), kind(want))],
    }
}

fn sim_world() -> World {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    start_on(root, |_| {})
}

/// Sends a request to the simulator as ALICE; the status and the JSON answer.
async fn ask(request: reqwest::RequestBuilder) -> (u16, Value) {
    let answer = request.bearer_auth(ALICE).send().await.unwrap();
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[test]
fn the_simulator_answers_the_recorded_requests_with_the_same_status_keys_and_types() {
    let world = sim_world();
    let api = format!("{}/api", world.endpoint());
    let mut compared = BTreeMap::new();
    world.runtime.block_on(async {
        let c = reqwest::Client::new();
        let create = serde_json::json!({"name": "fresh", "organization": "alice", "visibility": "private"});
        compared.insert("create 200", ask(c.post(format!("{api}/repos/create")).json(&create)).await);
        compared.insert("create 409", ask(c.post(format!("{api}/repos/create")).json(&create)).await);
        let files = serde_json::json!({"files": [{"path": "app.py", "sample": "aGk=", "size": 2}]});
        let preupload = c.post(format!("{api}/models/alice/fresh/preupload/main")).json(&files);
        compared.insert("preupload 200", ask(preupload).await);
        let line = |key: &str, value: Value| serde_json::json!({"key": key, "value": value}).to_string();
        let ndjson = format!(
            "{}\n{}\n",
            line("header", serde_json::json!({"summary": "Upload app.py", "description": ""})),
            line("file", serde_json::json!({"content": "aGk=", "path": "app.py", "encoding": "base64"}))
        );
        let commit =
            c.post(format!("{api}/models/alice/fresh/commit/main")).header("content-type", "application/x-ndjson");
        compared.insert("commit 200", ask(commit.body(ndjson)).await);
        let tree = c.get(format!("{api}/models/mlx-community/tiny-q4/tree/main?recursive=false&expand=false"));
        compared.insert("tree 200", ask(tree).await);
        let paths = serde_json::json!({"paths": ["model.safetensors"], "expand": false});
        let paths_info = c.post(format!("{api}/models/mlx-community/tiny-q4/paths-info/main")).json(&paths);
        compared.insert("paths-info 200", ask(paths_info).await);
        compared.insert("whoami 200", ask(c.get(format!("{api}/whoami-v2"))).await);
        let delete = serde_json::json!({"name": "fresh", "organization": "alice"});
        compared.insert("delete 200", ask(c.delete(format!("{api}/repos/delete")).json(&delete)).await);
    });

    let bodies = "cassette_bodies";
    let expect = [
        ("create 200", recorded(&format!("{bodies}/POST_api_repos_create_200.json"))),
        ("create 409", recorded(&format!("{bodies}/POST_api_repos_create_409.json"))),
        ("preupload 200", recorded(&format!("{bodies}/POST_api_spaces_user_tmp_test_space_preupload_main_200.json"))),
        ("commit 200", recorded(&format!("{bodies}/POST_api_spaces_user_tmp_test_space_commit_main_200.json"))),
        ("whoami 200", recorded("whoami/whoami-v2_hub-ci_write_token.json")),
        ("delete 200", recorded(&format!("{bodies}/DELETE_api_repos_delete_200.json"))),
    ];
    for (what, interaction) in expect {
        let (status, body) = &compared[what];
        assert_eq!(u64::from(*status), interaction["response"]["status"].as_u64().unwrap(), "{what}: {body}");
        assert_eq!(differences(body, &interaction["response"]["body"], what), Vec::<String>::new(), "{body}");
    }
    // A collection, read whole and listed, with a model and a dataset in it: keyed as the Hub keys them.
    let collections = world.runtime.block_on(async {
        let c = reqwest::Client::new();
        let dataset = serde_json::json!({"name": "data", "organization": "alice", "type": "dataset"});
        assert_eq!(ask(c.post(format!("{api}/repos/create")).json(&dataset)).await.0, 200);
        let made = serde_json::json!({"title": "Recorded", "namespace": "alice", "description": "d", "private": false});
        let (_, made) = ask(c.post(format!("{api}/collections")).json(&made)).await;
        let slug = made["slug"].as_str().unwrap().to_owned();
        for (kind, id) in [("dataset", "alice/data"), ("model", "mlx-community/tiny-q4")] {
            let item = serde_json::json!({"item": {"type": kind, "id": id}});
            assert_eq!(ask(c.post(format!("{api}/collections/{slug}/items")).json(&item)).await.0, 200);
        }
        (
            ask(c.get(format!("{api}/collections/{slug}"))).await,
            ask(c.get(format!("{api}/collections?owner=alice"))).await,
        )
    });
    let ((_, whole), (_, listed)) = collections;
    let recorded_whole = recorded("collections/GET_api_collections_slug.json")["response"]["body"].clone();
    let recorded_listed = recorded("collections/GET_api_collections_owner.json")["response"]["body"].clone();
    let item_of =
        |c: &Value, kind: &str| c["items"].as_array().unwrap().iter().find(|i| i["type"] == kind).unwrap().clone();
    let without_items = |c: &Value| {
        let mut c = c.clone();
        c["items"] = Value::Array(Vec::new());
        c
    };
    assert_eq!(
        differences(&without_items(&whole), &without_items(&recorded_whole), "collection"),
        Vec::<String>::new()
    );
    assert_eq!(
        differences(&without_items(&listed[0]), &without_items(&recorded_listed[0]), "listed"),
        Vec::<String>::new()
    );
    for kind in ["model", "dataset"] {
        let (got, want) = (item_of(&whole, kind), item_of(&recorded_whole, kind));
        assert_eq!(differences(&got, &want, kind), Vec::<String>::new(), "{got}");
    }
    // A tree's entries: a regular file and an LFS (Xet-backed) one, each keyed as the Hub keys them.
    let recorded_tree = recorded("tree/GET_api_models_google-bert_bert-base-uncased_tree_dd4bc8b.json");
    let entries = recorded_tree["response"]["body"].as_array().unwrap().clone();
    let (regular, lfs): (Vec<_>, Vec<_>) = entries.iter().partition(|e| e.get("lfs").is_none());
    for what in ["tree 200", "paths-info 200"] {
        let (status, body) = &compared[what];
        assert_eq!(*status, 200, "{what}: {body}");
        for entry in body.as_array().unwrap() {
            let like = if entry.get("lfs").is_some() { lfs[0] } else { regular[0] };
            assert_eq!(differences(entry, like, what), Vec::<String>::new(), "{entry}");
        }
    }
}
