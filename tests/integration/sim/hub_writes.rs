//! hubalign's Hub client against a simulator as strict as the Hub: a creation in progress, a hidden repo's
//! Xet token, the quota on actions, and the edge's 429.

use std::time::{Duration, SystemTime};

use hubalign::hub::collections::CollectionCreated;
use hubalign::hub::commit::{Change, CommitRefused, Message, WriteTo};
use hubalign::hub::repos::Created;
use hubalign::hub::retry::RetryPolicy;
use hubalign::hub::{HubClient, HubConfig, HubError, Token};
use reqwest::StatusCode;

use super::world::{ALICE, World, populate, start_on};

fn world(tune: impl FnOnce(&mut hubsim::SimConfig)) -> World {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    start_on(root, tune)
}

fn client(world: &World) -> HubClient {
    let config = HubConfig { endpoint: world.endpoint(), token: Some(Token::new(ALICE.to_owned())) };
    HubClient::new(config, RetryPolicy::default()).unwrap()
}

#[test]
fn a_creation_refused_while_another_is_in_progress_is_sent_again() {
    let world = world(|c| c.faults.create_conflicts = 2);
    let hub = client(&world);
    world.runtime.block_on(async {
        assert_eq!(hub.create_private_repo("alice/fresh").await.unwrap(), Created::New);
        assert_eq!(hub.create_private_repo("alice/fresh").await.unwrap(), Created::Existed);
    });
    let sim = &world.hub.as_ref().unwrap().sim;
    assert!(sim.repos().get("alice/fresh").unwrap().meta.private, "created private");
    assert_eq!(world.counters().requests["repo_create"], 4, "two refused, one made, one that exists");
}

#[test]
fn a_404_on_the_xet_write_token_is_an_error_not_a_hub_without_xet() {
    let world = world(|_| {});
    let hub = client(&world);
    let missing = world.runtime.block_on(hub.xet_write_token(WriteTo::from("alice/no-such-repo")));
    assert!(matches!(missing, Err(HubError::Status { status: StatusCode::NOT_FOUND, .. })), "{missing:?}");
}

#[test]
fn the_quota_on_actions_pauses_every_write_in_minutes_without_resending() {
    let world = world(|c| {
        c.action_quotas = hubsim::actions::ActionQuotas {
            limits: vec![(hubsim::actions::Action::Commit, 1)],
            window: Duration::from_secs(3600),
        };
        // The request quota's `RateLimit` says requests are left: that is no wait either.
        let window = Duration::from_secs(300);
        c.quotas = vec![(hubsim::faults::Bucket::Api, hubsim::faults::Quota { requests: 1000, window })];
    });
    let hub = client(&world);
    let note = [Change::Inline { path: "NOTE.md", content: b"hi".to_vec() }];
    let commit = || async {
        let parent = hub.model_info("alice/private-q4").await.unwrap().sha.unwrap();
        hub.commit(WriteTo::from("alice/private-q4"), &parent, Message::from("a note"), &note).await
    };
    world.runtime.block_on(async {
        commit().await.unwrap();
        let before = SystemTime::now();
        let refused = commit().await;
        let Err(CommitRefused::Hub(HubError::ActionQuota { until, message, .. })) = refused else {
            panic!("{refused:?}")
        };
        assert!(message.contains("hourly quotas for action: commit"), "{message}");
        let now = hubalign::time::unix_seconds_after(before);
        assert!((now + 299..=now + 301).contains(&until), "a pause of five minutes: {until} from {now}");
        assert!(hub.actions_paused_until().is_some());
        // While paused, no commit is sent at all; writes the quota does not count go on.
        let unsent = commit().await;
        assert!(matches!(unsent, Err(CommitRefused::Hub(HubError::ActionQuota { .. }))), "{unsent:?}");
        hub.set_private("alice/private-q4", true).await.unwrap();
    });
    assert_eq!(world.counters().requests["commit"], 2, "one made, one refused, none resent");
}

#[test]
fn a_read_refused_at_the_edge_without_a_wait_backs_off_and_goes_on() {
    let world = world(|c| c.faults.edge_429s = 2);
    let hub = client(&world).with_edge_wait(Duration::from_millis(50));
    let started = std::time::Instant::now();
    let info = world.runtime.block_on(hub.model_info("mlx-community/tiny-q4")).unwrap();
    assert_eq!(info.id.as_deref(), Some("mlx-community/tiny-q4"));
    assert!(started.elapsed() >= Duration::from_millis(150), "waited 50 ms, then 100 ms");
    assert_eq!(hub.stats.snapshot().rate_limited, 2);
    assert!(hub.actions_paused_until().is_none(), "a read's refusal pauses no write");
}

#[test]
fn an_action_refused_at_the_edge_is_waited_out_not_taken_for_the_quota() {
    let world = world(|c| c.faults.edge_429s = 1);
    let hub = client(&world).with_edge_wait(Duration::from_millis(50));
    assert_eq!(world.runtime.block_on(hub.create_private_repo("alice/edge")).unwrap(), Created::New);
    assert!(hub.actions_paused_until().is_none(), "only the Hub's words for its quota pause actions");
    assert_eq!(world.counters().requests["repo_create"], 2, "refused at the edge, then made");
}

#[test]
fn a_collection_that_exists_is_named_by_the_hubs_409() {
    let world = world(|_| {});
    let hub = client(&world);
    let (made, again) = world.runtime.block_on(async {
        let made = hub.create_collection("alice", ("Twice", "d"), false).await.unwrap();
        (made, hub.create_collection("alice", ("Twice", "d"), false).await.unwrap())
    });
    let CollectionCreated::New(slug) = made else { panic!("{made:?}") };
    assert_eq!(again, CollectionCreated::Existed(slug), "the existing one, from the 409's body");
    assert_eq!(world.counters().requests.get("collections_list"), None, "no listing needed to find it");
}
