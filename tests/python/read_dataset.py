"""Reads a hubalign dataset directory the way its users do, and prints what each reader saw as JSON.

    python read_dataset.py DIR

For each table (repos, shards, mirrors, publishers): every row, read once with pyarrow (all parts of all
snapshots, `<table>/*/*.parquet`), once with DuckDB's `read_parquet` over the same glob, and once with
`datasets.load_dataset(DIR, TABLE)`, which finds the files through the card's `configs` as it does on the Hub;
each sorted the same way, plus each table's Parquet schema (column names and types) as pyarrow reads it.
Run offline, with HF_HOME pointing at a scratch directory.
"""

import glob
import json
import os
import sys

import datasets
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

TABLES = {"repos": "repo_id", "shards": "repo_id, file", "mirrors": "source", "publishers": "namespace"}


def rows_pyarrow(paths, order):
    table = pa.concat_tables([pq.read_table(p) for p in paths])
    rows = table.to_pylist()
    keys = [k.strip() for k in order.split(",")]
    return sorted(rows, key=lambda r: [r[k] for k in keys]), {f.name: str(f.type) for f in table.schema}


def rows_duckdb(pattern, order):
    con = duckdb.connect()
    cur = con.execute(f"SELECT * FROM read_parquet('{pattern}') ORDER BY {order}")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def rows_datasets(root, table, order):
    rows = datasets.load_dataset(root, table, split="train").to_list()
    keys = [k.strip() for k in order.split(",")]
    return sorted(rows, key=lambda r: [r[k] for k in keys])


def main():
    root = sys.argv[1]
    out = {"pyarrow": {}, "duckdb": {}, "datasets": {}, "schema": {}}
    for table, order in TABLES.items():
        pattern = os.path.join(root, table, "*", "*.parquet")
        paths = sorted(glob.glob(pattern))
        if not paths:
            out["pyarrow"][table] = out["duckdb"][table] = out["datasets"][table] = []
            continue
        out["pyarrow"][table], out["schema"][table] = rows_pyarrow(paths, order)
        out["duckdb"][table] = rows_duckdb(pattern, order)
        out["datasets"][table] = rows_datasets(root, table, order)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
