"""Time to the first batch of packed text, at first start and after a restart, for the embedded
corpus and for one of a few hundred MB built from it. The token cache exists so that the
restart does not grow with corpus size.

    python -m benchmarks.first_batch --megabytes 300 --out benchmarks/results/first-batch

Each measurement runs in a fresh process (empty in-memory caches), timing
`TokenBatches(...)` plus `batch(0)` the way `zoo train` builds them. Writes NAME.json and
NAME.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from core.data import default_documents

MEASURE = """
import json, sys, time
start = time.perf_counter()
from core.data import load_tokenizer
from zoo.data.packed_text import DataConfig, TokenBatches
tokenizer = load_tokenizer("default")
ready = time.perf_counter()
batches = TokenBatches(DataConfig(source=sys.argv[1], cache_dir=sys.argv[2]), tokenizer,
                       seq_len=2048, global_batch_size=8)
batches.batch(0)
done = time.perf_counter()
print(json.dumps({"seconds": done - ready, "tokens": batches.tokens_per_epoch}))
"""


def build_corpus(folder: Path, megabytes: int) -> Path:
    """The embedded documents repeated (each copy numbered, so no two documents are equal)
    into one text file of about `megabytes` MB."""
    docs = default_documents()
    path = folder / f"corpus-{megabytes}mb.jsonl"
    with path.open("w") as f:
        copy = 0
        while f.tell() < megabytes * 2**20:
            for doc in docs:
                f.write(json.dumps({"text": f"[{copy}] {doc}"}) + "\n")
            copy += 1
    return path


def time_first_batch(source: str, cache: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", MEASURE, source, str(cache)],
                            capture_output=True, text=True)
    if result.returncode:
        raise click.ClickException(f"{source}: {result.stderr.strip().splitlines()[-1:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


@click.command()
@click.option("--megabytes", default=300, show_default=True, help="Size of the large corpus.")
@click.option("--out", required=True, help="Results path without extension.")
def main(megabytes: int, out: str) -> None:
    records = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        sources = {"embedded": "default",
                   f"{megabytes} MB": str(build_corpus(scratch, megabytes))}
        for name, source in sources.items():
            cache = scratch / f"cache-{len(records)}"
            first = time_first_batch(source, cache)
            restart = time_first_batch(source, cache)
            records.append({"corpus": name, "tokens": first["tokens"],
                            "first_start_s": first["seconds"], "restart_s": restart["seconds"]})
            click.echo(f"{name}: {first['tokens']:,} tokens; first start {first['seconds']:.2f} s, "
                       f"restart {restart['seconds']:.3f} s")
    lines = ["| corpus | tokens | first start (tokenize) s | restart s |", "|---|---|---|---|"]
    lines += [f"| {r['corpus']} | {r['tokens']:,} | {r['first_start_s']:.2f} | "
              f"{r['restart_s']:.3f} |" for r in records]
    Path(f"{out}.json").write_text(json.dumps({"records": records}, indent=1))
    Path(f"{out}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
