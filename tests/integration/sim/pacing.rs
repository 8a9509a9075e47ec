//! The Hub client's POSTs share the API bucket's pacing with its GETs.

use std::time::Duration;

use hubalign::hub::pacing::Bucket;
use hubalign::hub::retry::RetryPolicy;
use hubalign::hub::{BodyLimit, HubClient, HubConfig, Token};

use super::world::{ALICE, rate_limited};

/// A POST that opens a bucket must teach it the quota: before, a successful POST left the bucket "probing"
/// for ever, and every later request of the process (the audit's and the other jobs') waited on it.
#[test]
fn a_post_learns_the_quota_so_later_requests_are_paced_not_stalled() {
    let world = rate_limited(3, 1);
    let endpoint = world.endpoint();
    let config = HubConfig { endpoint: endpoint.clone(), token: Some(Token::new(ALICE.to_owned())) };
    let hub = HubClient::new(config, RetryPolicy::default()).unwrap();
    let preupload = format!("{endpoint}/api/models/alice/private-q4/preupload/main");
    let body = br#"{"files":[{"path":"notes.txt","sample":"aGk=","size":2}]}"#.to_vec();
    world.runtime.block_on(async {
        let work = async {
            for _ in 0..4 {
                let answer = hub.post(&preupload, "application/json", body.clone()).await?;
                assert!(answer.body.starts_with(b"{"), "{:?}", String::from_utf8_lossy(&answer.body));
                let info = format!("{endpoint}/api/models/alice/private-q4");
                hub.get(Bucket::Api, &info, &[], BodyLimit::Whole(1 << 20)).await?;
            }
            Ok::<_, hubalign::hub::HubError>(())
        };
        // Eight requests at three a second: about three seconds when paced; for ever when stalled.
        tokio::time::timeout(Duration::from_secs(20), work).await.expect("requests stalled").unwrap();
    });
    let c = world.counters();
    assert_eq!(c.rate_limited, 0, "the quota learned from the POSTs' answers paces them: {c:?}");
    assert_eq!(hub.stats.snapshot().api_requests, 8);
}
