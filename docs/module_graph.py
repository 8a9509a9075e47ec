#!/usr/bin/env python3
"""Print the product crate's module graph: which top-level module of `src/` names which (`crate::x` paths,
`super::` climbs out of a module), the cycles among them, and the lines of code.

    python3 docs/module_graph.py [SRC_DIR] [--depth 2]

`--depth 2` looks one level deeper (`repack::upload`, `hub::info`), where the finer cycles live. Prints the graph
in docs/ARCHITECTURE.md and the figures in docs/decisions/0003-no-module-cycles.md; run it on an older checkout
(`git worktree add`) for the "before".
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

import argparse

parser = argparse.ArgumentParser(description="The product crate's module graph and its cycles.")
parser.add_argument("src", nargs="?", default="src", help="the crate's source directory (default: src)")
parser.add_argument("--depth", type=int, choices=(1, 2), default=1, help="1: top-level modules; 2: one level down")
options = parser.parse_args()
src = Path(options.src)
depth = options.depth


def module_of(path: Path) -> tuple:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def name(parts) -> str:
    return "::".join(parts[:depth]) or "(root)"


def strip_comments(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))? )?mod tests\s*\{.*", "", text, flags=re.S)


edges = defaultdict(set)
lines = 0
files = 0
for path in sorted(src.rglob("*.rs")):
    if "tests" in path.parts or path.name == "tests.rs":
        continue
    text = path.read_text()
    files += 1
    lines += sum(1 for line in text.splitlines() if line.strip())
    me = module_of(path)
    if not me:
        continue
    body = strip_comments(text)
    # One level of braces expanded: `use crate::{a, b::c}` names `crate::a` and `crate::b::c`.
    body = re.sub(
        r"((?:crate|super|self)::(?:[a-z_][a-z0-9_]*::)*)\{([^{}]*)\}",
        lambda m: " ".join(m.group(1) + item.strip() for item in m.group(2).split(",")),
        body,
    )
    # `self::` is the file's own module, each `super::` one up.
    for m in re.finditer(r"(?<![a-z_:])((?:crate|super|self)(?:::super)*)::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", body):
        head, rest = m.group(1).split("::"), tuple(m.group(2).split("::"))
        if head[0] == "crate":
            base = ()
        elif head[0] == "self":
            base = me
        else:
            base = me[: len(me) - len(head)] if len(head) <= len(me) else None
        if base is None:
            continue
        target = base + rest
        if name(target) != name(me):
            edges[name(me)].add(name(target))

modules = {name(module_of(p)) for p in src.rglob("*.rs") if module_of(p)}
edges = {k: {t for t in v if t in modules} for k, v in edges.items()}

print(f"{files} files, {lines} non-blank lines (tests excluded)")
for k in sorted(edges):
    if edges[k]:
        print(f"{k} -> {', '.join(sorted(edges[k]))}")

# Cycles: strongly connected components of more than one module.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))


sys.setrecursionlimit(10000)
for v in sorted(modules):
    if v not in index:
        visit(v)
print(f"cycles: {len(sccs)}")
for c in sccs:
    print("  " + " <-> ".join(c))
