//! A large file over several connections: 4 MiB ranges at once, passed on in file order, each checked.

use super::pipeline::{jobs, worker_cmd};
use super::upload_share::header_padded_bundle_of;
use crate::audit::world::db;
use crate::sim::world::{World, start_on};

/// A Hub holding one 24 MiB header-padded shard (and a config), with faults as `tune` sets them.
fn world(tune: impl FnOnce(&mut hubsim::SimConfig)) -> (World, u64) {
    let (root, size) = header_padded_bundle_of(6144);
    (start_on(root, tune), size)
}

fn downloaded(world: &World, db: &std::path::Path) -> (String, i64) {
    world.runtime.block_on(async {
        let job = hubalign::store::Store::open(db).await.unwrap().jobs().await.unwrap().remove(0);
        (job.state.to_string(), job.bytes_downloaded)
    })
}

#[test]
fn a_large_shard_comes_in_ranges_over_several_connections_each_byte_once() {
    let (world, size) = world(|_| {});
    let (_dir, db) = db();
    let out = worker_cmd(&world, &db, &["repack", "big-org/big-q4", "--download-connections", "4"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let sim = &world.hub.as_ref().unwrap().sim;
    let c = sim.counters.snapshot();
    // The one large file gets the four connections: six 4 MiB ranges of it.
    assert!(c.range_requests >= size.div_ceil(4 << 20), "{c:?}");
    assert_eq!(downloaded(&world, &db), ("published".to_owned(), size as i64 + 2), "the shard and `{{}}`, once");
}

#[test]
fn ranges_cut_short_are_resumed_from_their_last_byte() {
    // Every storage answer stops after 3 MiB: each 4 MiB range arrives only in part, every time.
    let (world, size) = world(|c| c.faults.storage_cut = 3 << 20);
    let (_dir, db) = db();
    let out = worker_cmd(&world, &db, &["repack", "big-org/big-q4", "--download-connections", "4"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (state, bytes) = downloaded(&world, &db);
    assert_eq!(state, "published");
    // Ranges in flight when one before them was cut are dropped, and counted.
    assert!(bytes >= size as i64, "{bytes} of {size}");
}

#[test]
fn ranges_that_bring_other_bytes_are_refused_and_nothing_is_published() {
    let (world, _) = world(|c| c.faults.range_skew = 1);
    let (_dir, db) = db();
    let out = worker_cmd(&world, &db, &["repack", "big-org/big-q4", "--download-connections", "4"]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    let reason = jobs(&world, &db)[0].2.clone().unwrap_or_default();
    assert!(reason.contains("model.safetensors: content does not match the Hub's hash"), "{reason}");
    assert!(!world.hub.as_ref().unwrap().sim.repos().contains_key(&crate::support::mirror("big-org/big-q4")));
}
