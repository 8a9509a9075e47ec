#!/usr/bin/env python3
"""Drive the official huggingface_hub client (with hf_xet) against `hubsim` and check every answer.

    hub_client_check.py CHECK [CHECK ...]     (HF_ENDPOINT, HF_TOKEN and HF_HOME set by the caller)

Checks are the operations the publisher and crawler rely on; each prints `ok CHECK` or raises. The Rust test
(tests/integration/sim/python_client.rs) starts the simulator over a known world and says which checks to run,
passing paths and expectations through environment variables prefixed SIM_.
"""

import hashlib
import json
import os
import struct
import sys
from pathlib import Path

from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url, snapshot_download
from huggingface_hub.errors import (
    DisabledRepoError,
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

FIXTURES = Path(os.environ["SIM_FIXTURES"])
ALICE, BOB, CAROL = os.environ["SIM_ALICE"], os.environ["SIM_BOB"], os.environ["SIM_CAROL"]
api = HfApi(token=ALICE)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(1 << 20):
            h.update(b)
    return h.hexdigest()


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def files_of(directory):
    return sorted(str(p.relative_to(directory)) for p in Path(directory).rglob("*") if p.is_file() and not p.name.startswith("."))


def expect(exc, fn):
    try:
        fn()
    except exc:
        return
    raise AssertionError(f"expected {exc.__name__}")


def check_list():
    ids = [m.id for m in HfApi(token=CAROL).list_models(filter="mlx", full=True)]
    want = sorted(os.environ["SIM_MLX_IDS"].split(","))
    assert sorted(ids) == want, (ids, want)
    assert len(ids) == len(set(ids)), "a repo listed twice across pages"
    full = next(iter(api.list_models(filter="mlx", author="lmstudio", full=True)))
    assert full.sha and len(full.sha) == 40 and full.siblings, full
    assert [m.id for m in api.list_models(search="tiny-q8")] == ["lmstudio/tiny-q8"]
    assert "pytorch-org/not-mlx" in [m.id for m in api.list_models(sort="downloads", limit=3)]
    assert "alice/private-q4" in [m.id for m in api.list_models(author="alice")], "owners see their private repos"
    assert "alice/private-q4" not in [m.id for m in HfApi(token=CAROL).list_models(author="alice")]


def check_info():
    info = api.model_info("mlx-community/tiny-q4", files_metadata=True)
    local = FIXTURES / "mlx_lm/q4"
    by_name = {s.rfilename: s for s in info.siblings}
    assert sorted(by_name) == files_of(local), sorted(by_name)
    shard = by_name["model.safetensors"]
    assert shard.size == (local / "model.safetensors").stat().st_size
    assert shard.lfs.sha256 == sha256(local / "model.safetensors")
    assert by_name["config.json"].lfs is None
    assert info.library_name == "mlx" and "mlx" in info.tags and info.gated is False
    pinned = api.model_info("mlx-community/tiny-q4", revision=info.sha)
    assert pinned.sha == info.sha


def check_tree():
    entries = list(api.list_repo_tree("mlx-community/tiny-sharded", recursive=True))
    paths = sorted(e.path for e in entries)
    assert paths == files_of(FIXTURES / "mlx_lm/sharded"), paths
    shard = next(e for e in entries if e.path == "model-00001-of-00004.safetensors")
    assert shard.lfs.sha256 == sha256(FIXTURES / "mlx_lm/sharded/model-00001-of-00004.safetensors")
    assert sorted(api.list_repo_files("mlx-community/tiny-q4")) == files_of(FIXTURES / "mlx_lm/q4")
    info = api.get_paths_info("mlx-community/tiny-sharded", ["config.json", "model-00002-of-00004.safetensors", "nope"])
    assert sorted(i.path for i in info) == ["config.json", "model-00002-of-00004.safetensors"], info
    assert next(i for i in info if i.path.endswith(".safetensors")).xet_hash


def check_safetensors():
    single = api.get_safetensors_metadata("mlx-community/tiny-q4")
    assert not single.sharded
    local = header(FIXTURES / "mlx_lm/q4/model.safetensors")
    assert set(single.files_metadata["model.safetensors"].tensors) == {k for k in local if k != "__metadata__"}
    sharded = api.get_safetensors_metadata("mlx-community/tiny-sharded")
    assert sharded.sharded and len(sharded.files_metadata) == 4
    for name, meta in sharded.files_metadata.items():
        want = header(FIXTURES / "mlx_lm/sharded" / name)
        assert set(meta.tensors) == {k for k in want if k != "__metadata__"}, name
        assert meta.metadata == want["__metadata__"], name


def check_download():
    path = hf_hub_download("mlx-community/tiny-q4", "model.safetensors")
    assert sha256(path) == sha256(FIXTURES / "mlx_lm/q4/model.safetensors")
    snap = Path(snapshot_download("mlx-community/tiny-sharded"))
    assert files_of(snap) == files_of(FIXTURES / "mlx_lm/sharded")
    for f in files_of(snap):
        assert sha256(snap / f) == sha256(FIXTURES / "mlx_lm/sharded" / f), f


def check_errors():
    expect(GatedRepoError, lambda: hf_hub_download("gemma-org/gated-q4", "config.json", token=False))
    expect(GatedRepoError, lambda: hf_hub_download("gemma-org/gated-q4", "config.json", token=CAROL))
    assert hf_hub_download("gemma-org/gated-q4", "config.json", token=BOB)
    expect(RepositoryNotFoundError, lambda: api.model_info("nobody/nothing"))
    expect(RepositoryNotFoundError, lambda: HfApi(token=CAROL).model_info("alice/private-q4"))
    expect(RevisionNotFoundError, lambda: api.model_info("mlx-community/tiny-q4", revision="no-such-branch"))
    expect(EntryNotFoundError, lambda: hf_hub_download("mlx-community/tiny-q4", "missing.bin"))
    url = hf_hub_url("old-org/disabled-q4", "config.json")
    expect(DisabledRepoError, lambda: get_hf_file_metadata(url))


def upload_and_verify(repo_id, folder):
    api.create_repo(repo_id, private=True, exist_ok=True)
    api.create_repo(repo_id, private=True, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="aligned shards")
    api.update_repo_settings(repo_id, private=False)
    assert not api.model_info(repo_id).private
    snap = Path(snapshot_download(repo_id, token=CAROL))
    assert files_of(snap) == files_of(folder), files_of(snap)
    for f in files_of(folder):
        assert sha256(snap / f) == sha256(Path(folder) / f), f
    tree = {e.path: e for e in api.list_repo_tree(repo_id, recursive=True)}
    return tree


def check_upload_xet():
    tree = upload_and_verify("alice/tiny-q4-aligned", os.environ["SIM_UPLOAD_XET"])
    shard = tree["model.safetensors"]
    assert shard.xet_hash, "uploaded through Xet, so the file is Xet-backed"


def check_upload_lfs():
    assert os.environ.get("HF_HUB_DISABLE_XET") == "1"
    upload_and_verify("alice-org/tiny-q8-aligned", os.environ["SIM_UPLOAD_LFS"])


def check_history():
    # Two commits on a repo of our own: list_repo_commits walks back from the head, newest first.
    repo = "alice/history"
    api.create_repo(repo, exist_ok=True)
    first = api.upload_file(path_or_fileobj=b"one", path_in_repo="a.txt", repo_id=repo, commit_message="first")
    second = api.upload_file(path_or_fileobj=b"two", path_in_repo="a.txt", repo_id=repo, commit_message="second")
    commits = api.list_repo_commits(repo)
    assert [c.title for c in commits[:2]] == ["second", "first"], commits
    assert commits[0].commit_id == second.oid and commits[1].commit_id == first.oid, commits
    assert commits[0].created_at is not None
    assert [c.commit_id for c in api.list_repo_commits(repo, revision=first.oid)][0] == first.oid
    refs = api.list_repo_refs(repo)
    assert [(b.name, b.ref, b.target_commit) for b in refs.branches] == [("main", "refs/heads/main", second.oid)], refs
    assert refs.tags == [] and refs.pull_requests is None
    from huggingface_hub import CommitOperationAdd
    api.create_commit(repo, operations=[CommitOperationAdd("b.txt", b"pr")], commit_message="a PR", create_pr=True)
    prs = api.list_repo_refs(repo, include_pull_requests=True).pull_requests
    assert [p.ref for p in prs] == ["refs/pr/1"], prs
    expect(RevisionNotFoundError, lambda: api.list_repo_commits(repo, revision="nope"))


def check_card_from_disk():
    # A repo laid out on disk: its README's front matter is its card, as if it had been pushed.
    info = api.model_info("cardco/tiny-card")
    card = info.card_data
    assert card is not None, info
    assert (card.library_name, card.license, card.base_model) == ("mlx", "apache-2.0", "org/base"), card
    assert info.library_name == "mlx" and info.pipeline_tag == "text-generation", info
    for tag in ["mlx", "en", "base_model:org/base"]:
        assert tag in info.tags, (tag, info.tags)
    assert "cardco/tiny-card" in [m.id for m in api.list_models(filter="mlx", author="cardco")]


def check_pull_request():
    repo = "alice/pr-target"
    api.create_repo(repo, exist_ok=True)
    from huggingface_hub import CommitOperationAdd
    info = api.create_commit(
        repo,
        operations=[CommitOperationAdd("MEI_ALIGN_MANIFEST.json", b'{"shards": []}')],
        commit_message="Align safetensors",
        create_pr=True,
    )
    assert info.pr_revision == "refs/pr/1" and info.pr_num == 1, info
    assert "MEI_ALIGN_MANIFEST.json" in api.list_repo_files(repo, revision="refs/pr/1")
    assert "MEI_ALIGN_MANIFEST.json" not in api.list_repo_files(repo)
    path = hf_hub_download(repo, "MEI_ALIGN_MANIFEST.json", revision="refs/pr/1")
    assert Path(path).read_bytes() == b'{"shards": []}'
    # upload_folder(create_pr=True) with hf_xet opens the PR through the discussions API, then commits to it.
    info = api.upload_folder(repo_id=repo, folder_path=str(FIXTURES / "mlx_lm/q4"), create_pr=True)
    assert info.pr_num == 2, info
    assert "model.safetensors" in api.list_repo_files(repo, revision="refs/pr/2")
    assert "model.safetensors" not in api.list_repo_files(repo)


def check_rate_limited():
    ids = [m.id for m in HfApi(token=CAROL).list_models(filter="mlx")]
    assert len(ids) == int(os.environ["SIM_EXPECT_COUNT"]), ids


def main():
    for name in sys.argv[1:]:
        globals()[f"check_{name}"]()
        print(f"ok {name}", flush=True)


if __name__ == "__main__":
    main()
