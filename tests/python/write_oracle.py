#!/usr/bin/env python3
"""Each write hubalign makes, made by the official client `huggingface_hub` against `hubsim`, with what it asked.

    write_oracle.py REPO SOURCE      (HF_ENDPOINT and HF_TOKEN set by the caller)

REPO is a new repo in the token's namespace; SOURCE a repo of another namespace, which gets a pull request
and a discussion. For each operation the simulator's request journal is emptied before and read after, and
one JSON object {operation: [request, ...]} is printed. `tests/integration/sim/oracle.rs` makes the same
operations with hubalign's client and compares the two (`docs/HUB_REQUESTS.md`).
"""

import json
import os
import sys
import urllib.request

from huggingface_hub import CommitOperationAdd, HfApi

ENDPOINT = os.environ["HF_ENDPOINT"].rstrip("/")
api = HfApi(token=os.environ["HF_TOKEN"])


def journal(path, method):
    request = urllib.request.Request(f"{ENDPOINT}/_sim/requests{path}", method=method)
    with urllib.request.urlopen(request) as answer:
        body = answer.read()
    return json.loads(body) if body else None


def main():
    repo, source = sys.argv[1], sys.argv[2]
    namespace = repo.split("/")[0]
    # A shard-sized file goes to Xet storage; a small JSON file travels inline.
    shard = bytes(range(256)) * 4096
    operations = {
        "create": lambda: api.create_repo(repo, private=True),
        "visibility": lambda: api.update_repo_settings(repo, visibility="public"),
        "commit": lambda: api.upload_file(path_or_fileobj=b'{"a": 1}', path_in_repo="config.json", repo_id=repo),
        "commit through Xet": lambda: api.upload_file(
            path_or_fileobj=shard, path_in_repo="model.safetensors", repo_id=repo
        ),
        "pull request": lambda: api.create_commit(
            source,
            operations=[CommitOperationAdd("model.safetensors", shard[::-1])],
            commit_message="Align safetensors",
            commit_description="An automated pull request.",
            create_pr=True,
        ),
        "discussion": lambda: api.create_discussion(source, title="A note", description="An aligned copy."),
        "collection": lambda: api.add_collection_item(
            api.create_collection("Oracle collection", namespace=namespace, description="d").slug,
            repo,
            "model",
            note="n",
        ),
        "webhook": lambda: api.create_webhook(
            url="http://127.0.0.1:9/hook", watched=[{"type": "user", "name": namespace}], secret="s"
        ),
        "delete": lambda: api.delete_repo(repo),
    }
    asked = {}
    for name, operation in operations.items():
        journal("/reset", "POST")
        operation()
        asked[name] = journal("", "GET")
    print(json.dumps(asked))


if __name__ == "__main__":
    main()
