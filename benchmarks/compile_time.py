"""TPU compile time of a model's train step by depth and remat preset, with the real TPU
compiler (libtpu, compile-only; no TPU needed). Scan exists to make this flat in depth.

    python -m benchmarks.compile_time llama-8b --tpu v5p-8 --depths 8,16,32 \\
        --remats none,checkpoint,scan,scan_checkpoint --out benchmarks/results/NAME

Each point is one `zoo plan --compile --json` process (fresh compiler, fresh memory);
extra key=value arguments go to every plan. Writes NAME.json (records + the command) and
NAME.md (a table of compile seconds: depth x remat).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import click


def compile_point(model: str, tpu: str, depth: int, remat: str, overrides: list[str]) -> dict:
    command = [sys.executable, "-c", "from tools.cli import main; main()", "plan", model,
               "--tpu", tpu, "--compile", "--json", f"model.num_hidden_layers={depth}",
               f"remat={remat}", *overrides]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise click.ClickException(f"{model} depth {depth} remat={remat} failed: "
                                   f"{result.stderr.strip().splitlines()[-1:]}")
    record = json.loads(result.stdout)
    return {"depth": depth, "remat": remat, "compile_seconds": record["compile_seconds"],
            "trace_seconds": record["trace_seconds"], "fits": record["fits"],
            "hbm_total": record["hbm_per_chip"]["compiled"].get("total"),
            "flops_per_chip": record["flops_per_chip"].get("compiled_matmul")}


def table(records: list[dict], depths: list[int], remats: list[str]) -> str:
    """Compile seconds and compiled HBM per chip, by depth (rows) and remat (columns)."""
    points = {(r["depth"], r["remat"]): r for r in records}
    lines = ["| layers | " + " | ".join(remats) + " |", "|---" * (len(remats) + 1) + "|"]
    for depth in depths:
        cells = [f"{points[(depth, remat)]['compile_seconds']:.1f} s, "
                 f"{points[(depth, remat)]['hbm_total'] / 2**30:.1f} GiB" for remat in remats]
        lines.append(f"| {depth} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("model")
@click.argument("overrides", nargs=-1)
@click.option("--tpu", required=True, help="Slice to compile for, e.g. v5p-8.")
@click.option("--depths", default="8,16,32", show_default=True)
@click.option("--remats", default="none,checkpoint,scan,scan_checkpoint", show_default=True)
@click.option("--out", required=True, help="Path prefix of the .json and .md results.")
def main(model, overrides, tpu, depths, remats, out):
    depth_list = [int(d) for d in depths.split(",")]
    remat_list = remats.split(",")
    records = []
    for depth in depth_list:
        for remat in remat_list:
            records.append(compile_point(model, tpu, depth, remat, list(overrides)))
            click.echo(f"{model} x{depth} layers remat={remat}: "
                       f"{records[-1]['compile_seconds']:.1f} s compile")
    command = "python -m benchmarks.compile_time " + shlex.join(sys.argv[1:])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"command": command, "model": model, "tpu": tpu, "records": records}, indent=1))
    out.with_suffix(".md").write_text(
        f"TPU compile seconds and compiled HBM per chip of `{model}`'s train step for {tpu} "
        f"(libtpu, compile-only), by depth and remat preset.\n\n    {command}\n\n"
        + table(records, depth_list, remat_list) + "\n")
    click.echo(table(records, depth_list, remat_list))


if __name__ == "__main__":
    main()
