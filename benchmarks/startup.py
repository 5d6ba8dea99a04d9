"""How long `zoo` takes to answer commands that do little work: help, the catalogs, and
refusals of bad input. Each command runs in a fresh process under `python -X importtime`,
so a row gives the wall time (median of the rounds) and which heavy libraries the command
imported, the usual reason a command is slow to answer.

    python -m benchmarks.startup --out benchmarks/results/startup-cpu-2core
    python -m benchmarks.startup --root OTHER_CHECKOUT --entry zoo.tools.cli  # another tree

`--root` runs another checkout's CLI (an older layout: give its `--entry` module), so a
before/after pair is measured side by side on one machine. Writes NAME.json and NAME.md.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

HEAVY = ("torch", "torch_xla", "transformers", "lm_eval", "jax")
# commands a user runs to look something up, or that a typo turns into a refusal
COMMANDS = (
    "--help",
    "topology v4-32",
    "models",
    "train nosuch-tiny",
    "train llama-tiny nosuch=1",
    "plan llama-8b --tpu v4-8 --compare maxtext",
    "bench --suite nosuch",
    "eval {missing} --tasks arc_easy_sample",
    "generate {missing} --prompt hi",
    "export {missing} {scratch}/export",
)
_IMPORT = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", re.M)


def run_once(root: Path, entry: str, command: str, scratch: Path) -> dict:
    """One fresh process: wall seconds, exit code, and the heavy libraries it imported."""
    args = command.format(missing=scratch / "missing", scratch=scratch).split()
    code = f"import sys; sys.argv = ['zoo', *sys.argv[1:]]; from {entry} import main; main()"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code, *args], cwd=root,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    imported = {name for _, _, name in _IMPORT.findall(proc.stderr)}
    return {"seconds": seconds, "exit": proc.returncode,
            "heavy": sorted(name for name in HEAVY if name in imported)}


def measure(root: Path, entry: str, rounds: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for command in COMMANDS:
            runs = [run_once(root, entry, command, Path(scratch)) for _ in range(rounds)]
            rows.append({"command": f"zoo {command}", "exit": runs[0]["exit"],
                         "median_s": statistics.median(r["seconds"] for r in runs),
                         "heavy_imports": runs[0]["heavy"]})
            click.echo(f"{rows[-1]['command']:55} {rows[-1]['median_s']:5.1f} s  "
                       f"{', '.join(rows[-1]['heavy_imports']) or '-'}", err=True)
    return rows


def commit_of(root: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                          capture_output=True, text=True).stdout.strip() or "unknown"


def markdown(rows: list[dict], commit: str, rounds: int) -> str:
    lines = [f"Measured with `python -m benchmarks.startup` at commit {commit}, median of "
             f"{rounds} fresh processes each.", "", "| command | exit | s | heavy imports |",
             "| --- | --- | --- | --- |"]
    lines += [f"| `{r['command']}` | {r['exit']} | {r['median_s']:.1f} | "
              f"{', '.join(r['heavy_imports']) or '-'} |" for r in rows]
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--root", type=click.Path(file_okay=False, path_type=Path),
              default=Path(__file__).resolve().parents[1], help="The checkout to measure.")
@click.option("--entry", default="tools.cli", show_default=True,
              help="The module whose main() is the `zoo` command in that checkout.")
@click.option("--rounds", default=3, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write OUT.json and OUT.md.")
def main(root: Path, entry: str, rounds: int, out: Path | None) -> None:
    rows, commit = measure(root.resolve(), entry, rounds), commit_of(root)
    if out:
        out.with_suffix(".json").write_text(json.dumps(
            {"commit": commit, "entry": entry, "rounds": rounds, "rows": rows}, indent=1))
        out.with_suffix(".md").write_text(markdown(rows, commit, rounds))
    click.echo(markdown(rows, commit, rounds))


if __name__ == "__main__":
    main()
