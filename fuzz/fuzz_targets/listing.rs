//! Any bytes as a listing page: parsing never panics; every entry the checks of `untrusted` let through has a valid id,
//! commit and paths (so it encodes to itself and stays inside a directory), and every entry it refuses is
//! recorded with an id and reason that hold no control character.

#![no_main]

use hubalign::untrusted;
use hubalign::hub::listing::sort_entries;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(items) = serde_json::from_slice::<Vec<serde_json::Value>>(data) else { return };
    let count = items.len();
    let (repos, invalid) = sort_entries(items);
    assert_eq!(repos.len() + invalid.len(), count, "every entry is kept or refused");
    for r in &repos {
        assert!(untrusted::check_repo_id(&r.id).is_ok());
        assert_eq!(untrusted::encode_path(&r.id), r.id);
        for path in r.shard_paths() {
            let p = std::path::Path::new(&path);
            assert!(p.components().all(|c| matches!(c, std::path::Component::Normal(_))), "{path:?}");
        }
    }
    for i in &invalid {
        assert!(!i.id.chars().any(char::is_control), "{:?}", i.id);
        assert!(!i.reason.chars().any(char::is_control), "{:?}", i.reason);
        assert!(!i.id.is_empty() && i.id.chars().count() <= hubalign::hub::listing::INVALID_ID_LEN);
    }
});
