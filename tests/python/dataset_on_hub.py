"""Publishes a hubalign dataset directory to a Hub with the official client, and reads it back as its users do.

    python dataset_on_hub.py ENDPOINT TOKEN REPO DIR SCRATCH

Creates the dataset repo REPO, uploads DIR into it (`HfApi.upload_folder`), then reports as JSON: the repo's
files, whether `list_datasets` lists it and `list_models` does not, `dataset_info`'s id, where
`snapshot_download` put a copy (under SCRATCH), and each table's row count as `datasets.load_dataset(REPO,
TABLE)` reads it from the Hub through the card's configs. HF_ENDPOINT and HF_HOME must be set by the caller
(both libraries read them when imported).
"""

import json
import sys

import datasets
from huggingface_hub import HfApi, snapshot_download


def main():
    endpoint, token, repo, folder, scratch = sys.argv[1:6]
    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo, repo_type="dataset")
    api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=folder, commit_message="snapshot")
    author = repo.split("/")[0]
    out = {
        "files": sorted(api.list_repo_files(repo, repo_type="dataset")),
        "listed": repo in [d.id for d in api.list_datasets(author=author)],
        "in_models": repo in [m.id for m in api.list_models(author=author)],
        "info_id": api.dataset_info(repo).id,
        "copy": snapshot_download(repo, repo_type="dataset", token=token, cache_dir=scratch),
        "rows": {},
    }
    for table in ["repos", "shards", "mirrors", "publishers"]:
        try:
            out["rows"][table] = len(datasets.load_dataset(repo, table, split="train", token=token))
        except Exception as e:  # a table with no file yet has no split: said, not hidden
            out["rows"][table] = f"{type(e).__name__}: {e}"
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
