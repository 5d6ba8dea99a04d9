"""How long `zoo` takes to answer commands that do little work: help, the catalogs, and
refusals of bad input. Each command runs in a fresh process under `python -X importtime`,
so a row gives the wall time (median of the rounds) and which heavy libraries the command
imported, the usual reason a command is slow to answer.

    python -m benchmarks.startup --out benchmarks/results/startup-cpu-2core
    python -m benchmarks.startup --against OLD_CHECKOUT:zoo.tools.cli --out ...

`--against DIR:MODULE` also times another checkout's CLI (MODULE's main() is its `zoo`;
an older layout named it zoo.tools.cli), interleaved with this one round by round, so the
two columns and their ratio come from one run on one machine. Writes OUT.json and OUT.md.
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
_IMPORT = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| *(\S+)$", re.M)


def run_once(root: Path, entry: str, command: str, scratch: Path) -> dict:
    """One fresh process: wall seconds, exit code, and the heavy libraries it imported."""
    args = command.format(missing=scratch / "missing", scratch=scratch).split()
    code = f"import sys; sys.argv = ['zoo', *sys.argv[1:]]; from {entry} import main; main()"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code, *args], cwd=root,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    imported = set(_IMPORT.findall(proc.stderr))
    return {"seconds": seconds, "exit": proc.returncode,
            "heavy": [name for name in HEAVY if name in imported]}


def measure(trees: dict[str, tuple[Path, str]], rounds: int) -> list[dict]:
    """Per command, each tree's median seconds and heavy imports, the trees interleaved."""
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for command in COMMANDS:
            runs: dict[str, list[dict]] = {label: [] for label in trees}
            for _ in range(rounds):
                for label, (root, entry) in trees.items():
                    runs[label].append(run_once(root, entry, command, Path(scratch)))
            rows.append({"command": f"zoo {command}", **{
                label: {"median_s": statistics.median(r["seconds"] for r in got),
                        "exit": got[0]["exit"], "heavy_imports": got[0]["heavy"]}
                for label, got in runs.items()}})
            click.echo(f"{rows[-1]['command']:50} " + "  ".join(
                f"{label} {rows[-1][label]['median_s']:5.1f} s" for label in trees), err=True)
    return rows


def commit_of(root: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                          capture_output=True, text=True).stdout.strip() or "unknown"


def markdown(rows: list[dict], labels: list[str], rounds: int) -> str:
    header = " | ".join(f"{label}: s | {label}: heavy imports" for label in labels)
    ratio = " | this / other" if len(labels) == 2 else ""
    lines = [f"`python -m benchmarks.startup`, median of {rounds} fresh processes per command "
             "and tree, the trees interleaved.", "",
             f"| command | exit | {header}{ratio} |",
             "| --- | --- |" + " --- | --- |" * len(labels) + (" --- |" if ratio else "")]
    for row in rows:
        cells = " | ".join(f"{row[label]['median_s']:.1f} | "
                           f"{', '.join(row[label]['heavy_imports']) or '-'}" for label in labels)
        share = (f" | {row[labels[0]]['median_s'] / row[labels[1]]['median_s']:.2f}"
                 if ratio else "")
        lines.append(f"| `{row['command']}` | {row[labels[0]]['exit']} | {cells}{share} |")
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--against", help="DIR:MODULE, another checkout's CLI to time beside this one.")
@click.option("--rounds", default=3, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write OUT.json and OUT.md.")
def main(against: str | None, rounds: int, out: Path | None) -> None:
    here = Path(__file__).resolve().parents[1]
    trees = {commit_of(here): (here, "tools.cli")}
    if against:
        folder, _, entry = against.partition(":")
        label = commit_of(Path(folder))
        label = f"{label} (other)" if label in trees else label  # the same commit twice
        trees[label] = (Path(folder).resolve(), entry or "tools.cli")
    rows = measure(trees, rounds)
    text = markdown(rows, list(trees), rounds)
    if out:
        out.with_suffix(".json").write_text(json.dumps(
            {"trees": {label: entry for label, (_, entry) in trees.items()}, "rounds": rounds,
             "rows": rows}, indent=1))
        out.with_suffix(".md").write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()
