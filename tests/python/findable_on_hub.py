"""Reads what hubalign made findable on a Hub with the official client, as its users read it.

    python findable_on_hub.py ENDPOINT TOKEN OWNER REPO [REPO ...]

Reports as JSON:
- "collections": each collection OWNER has, by title, with its items' ids and notes, as `list_collections`
  lists them and `get_collection` reads each (the listing shows at most four items);
- "listed_items": the item count the listing showed for each;
- "notes": for each REPO, its discussions (`get_repo_discussions`): title, author, status, pull request or not;
- "scratch": with a REPO given, the official client's own round trip on a scratch collection: created, created
  again with `exists_ok` (the same slug), the first REPO added, added again with `exists_ok`, removed, and the
  collection deleted.
"""

import json
import sys

from huggingface_hub import HfApi


def main():
    endpoint, token, owner = sys.argv[1:4]
    repos = sys.argv[4:]
    api = HfApi(endpoint=endpoint, token=token)
    collections, listed = {}, {}
    for summary in api.list_collections(owner=owner, limit=100):
        listed[summary.title] = len(summary.items)
        full = api.get_collection(summary.slug)
        collections[full.title] = {
            "slug": full.slug,
            "items": sorted(i.item_id for i in full.items),
            "types": sorted({i.item_type for i in full.items}),
            "notes": sorted({i.note or "" for i in full.items}),
            "private": full.private,
        }
    notes = {}
    for repo in repos:
        notes[repo] = [
            {"title": d.title, "author": d.author, "status": d.status, "pr": d.is_pull_request}
            for d in api.get_repo_discussions(repo)
        ]
    scratch = None
    if repos:
        made = api.create_collection("scratch of the official client", namespace=owner)
        again = api.create_collection("scratch of the official client", namespace=owner, exists_ok=True)
        with_item = api.add_collection_item(made.slug, repos[0], "model", note="a note")
        api.add_collection_item(made.slug, repos[0], "model", exists_ok=True)
        item = with_item.items[0]
        api.delete_collection_item(made.slug, item.item_object_id)
        emptied = api.get_collection(made.slug)
        api.delete_collection(made.slug)
        scratch = {
            "same_slug": made.slug == again.slug,
            "item": item.item_id,
            "note": item.note,
            "emptied": len(emptied.items),
            "deleted": made.slug not in [c.slug for c in api.list_collections(owner=owner)],
            "url": made.url,
        }
    json.dump({"collections": collections, "listed_items": listed, "notes": notes, "scratch": scratch}, sys.stdout)


if __name__ == "__main__":
    main()
