//! `hf-hub` 1.x (HF's Rust client) against the simulator.

use futures_util::StreamExt;
use hf_hub::repository::{CommitOperation, RepoTreeEntry};
use hf_hub::{HFClient, HFError, RepoTypeModel};

use super::world::{ALICE, CAROL, World, standard};
use crate::support::fixture;

fn client(world: &World, token: &str, cache: &std::path::Path) -> HFClient {
    HFClient::builder().endpoint(world.endpoint()).token(token).cache_dir(cache).retry_max_attempts(0).build().unwrap()
}

#[test]
fn lists_reads_ranges_and_downloads() {
    let world = standard();
    let cache = tempfile::tempdir().unwrap();
    let original = std::fs::read(fixture("mlx_lm/sharded/model-00002-of-00004.safetensors")).unwrap();
    world.runtime.block_on(async {
        let c = client(&world, CAROL, cache.path());
        let stream = c.list_models().filter("mlx").full(true).send().unwrap();
        futures_util::pin_mut!(stream);
        let mut ids = Vec::new();
        while let Some(m) = stream.next().await {
            let m = m.unwrap();
            assert!(m.sha.as_ref().is_some_and(|s| s.len() == 40));
            ids.push(m.id);
        }
        ids.sort();
        assert_eq!(ids.join(","), super::world::MLX_IDS, "all pages followed");

        let repo = c.model("mlx-community", "tiny-sharded");
        let info = repo.info().send().await.unwrap();
        let sha = info.sha.clone().unwrap();
        assert_eq!(repo.info().revision(sha.clone()).send().await.unwrap().sha.as_deref(), Some(sha.as_str()));

        let tree = repo.list_tree().recursive(true).send().unwrap();
        futures_util::pin_mut!(tree);
        let mut files = Vec::new();
        while let Some(e) = tree.next().await {
            if let RepoTreeEntry::File { path, size, .. } = e.unwrap() {
                files.push((path, size));
            }
        }
        assert_eq!(files.len(), 8, "{files:?}");

        let name = "model-00002-of-00004.safetensors";
        let head = repo.download_file_to_bytes().filename(name).range(0..8).send().await.unwrap();
        assert_eq!(head.as_ref(), &original[..8]);
        let n = u64::from_le_bytes(head.as_ref().try_into().unwrap());
        let json = repo.download_file_to_bytes().filename(name).range(8..8 + n).send().await.unwrap();
        assert_eq!(json.as_ref(), &original[8..8 + n as usize]);

        let path = repo.download_file().filename(name).send().await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), original);
        assert!(path.to_string_lossy().contains("models--mlx-community--tiny-sharded/snapshots/"));
        assert_eq!(c.whoami().send().await.unwrap().username, "carol");

        let gated = c.model("gemma-org", "gated-q4").download_file_to_bytes().filename("config.json").send().await;
        assert!(matches!(gated, Err(HFError::Forbidden { .. })), "{gated:?}");
    });
}

#[test]
fn creates_a_repository_and_commits() {
    let world = standard();
    let cache = tempfile::tempdir().unwrap();
    world.runtime.block_on(async {
        let c = client(&world, ALICE, cache.path());
        let url = c
            .create_repository()
            .repo_id("alice/rust-made")
            .repo_type(RepoTypeModel)
            .private(true)
            .exist_ok(true)
            .send()
            .await
            .unwrap();
        assert!(url.url.ends_with("/alice/rust-made"));
        let again =
            c.create_repository().repo_id("alice/rust-made").repo_type(RepoTypeModel).exist_ok(true).send().await;
        assert!(again.is_ok(), "exist_ok treats 409 as success");
        let repo = c.model("alice", "rust-made");
        let card = b"---\nlibrary_name: mlx\n---\n".to_vec();
        let ci = repo
            .create_commit()
            .operations(vec![CommitOperation::add_bytes("README.md", card.clone())])
            .commit_message("card")
            .send()
            .await
            .unwrap();
        let first = ci.commit_oid.unwrap();
        let stale = repo
            .create_commit()
            .operations(vec![CommitOperation::add_bytes("x.txt", b"x".to_vec())])
            .commit_message("stale")
            .parent_commit("0123456789abcdef0123456789abcdef01234567")
            .send()
            .await;
        assert!(matches!(&stale, Err(HFError::Http { context }) if context.status.as_u16() == 412), "{stale:?}");
        let pr = repo
            .create_commit()
            .operations(vec![CommitOperation::add_bytes("MEI_ALIGN_MANIFEST.json", b"{}".to_vec())])
            .commit_message("pr")
            .create_pr(true)
            .send()
            .await
            .unwrap();
        // hf-hub 1.0.0 reads the number from `prNum` and `prUrl`, which the Hub does not send (its commit answer
        // names `pullRequestUrl`): the pull request is opened, but hf-hub cannot say which it is.
        assert_eq!((pr.pr_num, pr.pr_url.as_deref()), (None, None), "{pr:?}");
        assert!(pr.commit_oid.is_some(), "{pr:?}");
        // A large file goes through the LFS batch (answered with Xet), the CAS, and an lfsFile commit.
        let mut big = vec![0u8; 3_000_000];
        hubalign_test_support::synth::fill_pseudo_random(7, &mut big);
        let up = repo
            .create_commit()
            .operations(vec![CommitOperation::add_bytes("model.safetensors", big.clone())])
            .commit_message("weights")
            .send()
            .await
            .unwrap();
        assert!(up.commit_oid.is_some());
        let part =
            repo.download_file_to_bytes().filename("model.safetensors").range(1000..2_000_000).send().await.unwrap();
        assert_eq!(part.as_ref(), &big[1000..2_000_000]);
        let whole = repo.download_file().filename("model.safetensors").send().await.unwrap();
        assert_eq!(std::fs::read(whole).unwrap(), big);
        let tree = repo.list_tree().send().unwrap();
        futures_util::pin_mut!(tree);
        let mut xet = None;
        while let Some(e) = tree.next().await {
            if let RepoTreeEntry::File { path, xet_hash, .. } = e.unwrap()
                && path == "model.safetensors"
            {
                xet = xet_hash;
            }
        }
        assert!(xet.is_some(), "stored in Xet");
        let c = world.counters();
        assert!(c.xet_bytes_received >= 1_000_000, "{c:?}");
        assert_eq!(c.lfs_bytes_received, 0);
        repo.update_settings().private(false).send().await.unwrap();
        let readme = repo.download_file_to_bytes().filename("README.md").revision(first).send().await.unwrap();
        assert_eq!(readme.as_ref(), &card[..]);
    });
}
