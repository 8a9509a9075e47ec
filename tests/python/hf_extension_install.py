"""Runs `hf extensions install OWNER/hf-NAME` with GitHub's answers served from a local folder.

Usage: hf_extension_install.py FOLDER OWNER/hf-NAME

This machine cannot reach GitHub. Only `_github_request`, the function every GitHub request of
huggingface_hub's extensions module goes through, is replaced: the repo exists, its files are FOLDER's,
its HEAD is a fixed commit. What the install does with them (where it saves the script, the manifest it
writes) is huggingface_hub's own code, as `hf` runs it.
"""

import sys
from pathlib import Path

import httpx2
from huggingface_hub.cli import extensions

FOLDER = Path(sys.argv[1])
REPO = sys.argv[2]
OWNER, NAME = REPO.split("/")
HEAD = "0123456789abcdef0123456789abcdef01234567"


def github(method, url, *, params=None, timeout=None):
    """GitHub's answer to one request, from FOLDER; 404 for anything else."""
    raw = f"https://raw.githubusercontent.com/{OWNER}/{NAME}/HEAD/"
    status, body = 404, b"Not Found"
    if method == "HEAD" and url == f"https://github.com/{OWNER}/{NAME}":
        status, body = 200, b""
    elif url.startswith(raw) and (FOLDER / url[len(raw) :]).is_file():
        status, body = 200, (FOLDER / url[len(raw) :]).read_bytes()
    elif url == f"https://github.com/{OWNER}/{NAME}.git/info/refs":
        status, body = 200, f"001e# service=git-upload-pack\n0000{HEAD} HEAD\x00multi_ack\n".encode()
    response = httpx2.Response(status, content=body, request=httpx2.Request(method, url, params=params))
    response.raise_for_status()
    return response


extensions._github_request = github

from huggingface_hub.cli.hf import main  # noqa: E402

sys.argv = ["hf", "extensions", "install", REPO]
main()
