"""Benchmark results as a console table, results.json, results.md and a PNG plot: training
entries in one table, generation entries (benchmarks/generation.py) in another."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import generation
from core.flops import spread
from core.table import format_table

COLUMNS = (
    ("entry", lambda r: r["name"]),
    ("impl", lambda r: r["impl"]),
    ("devices", lambda r: r["devices"]),
    ("compile s", lambda r: f"{r['compile_s']:.1f}"),
    (
        "step s (med/mean/min/max)",
        lambda r: (
            f"{r['step_time_median_s']:.3f}/{r['step_time_mean_s']:.3f}/"
            f"{r['step_time_min_s']:.3f}/{r['step_time_max_s']:.3f}"
        ),
    ),
    ("host s", lambda r: _seconds(r["host_time_median_s"])),
    ("items/s", lambda r: f"{r['items_per_s']:,.0f} {r['throughput_unit']}"),
    ("items/s/chip", lambda r: f"{r['items_per_s_per_chip']:,.0f}"),
    ("TFLOP/s/chip", lambda r: f"{r['model_tflops_per_s_per_chip']:.4f}"),
    ("MFU", lambda r: f"{r['mfu']:.1%}" if r["mfu"] is not None else "-"),
    ("compiles", lambda r: r["compiles_timed"]),
    (
        "peak mem",
        lambda r: f"{r['peak_memory_bytes'] / 2**30:.2f} GiB" if r["peak_memory_bytes"] else "n/a",
    ),
)


GENERATION_COLUMNS = (
    ("entry", lambda r: r["name"]),
    ("impl", lambda r: r["impl"]),
    ("devices", lambda r: r["devices"]),
    ("prompts x len", lambda r: f"{r['prompts']} x {r['prompt_len']}"),
    ("new tokens", lambda r: r["max_new_tokens"]),
    ("compile s (graphs)", lambda r: f"{r['compile_s']:.1f} ({r['compiles_warmup']})"),
    ("prefill s", lambda r: f"{r['prefill_s_median']:.3f}"),
    ("prefill tokens/s", lambda r: f"{r['prefill_tokens_per_s']:,.0f}"),
    ("decode s", lambda r: f"{r['decode_s_median']:.3f}"),
    ("decode tokens/s", lambda r: f"{r['decode_tokens_per_s']:,.0f}"),
    ("compiles", lambda r: r["compiles_timed"]),
)

GENERATION_NOTE = (
    "Generation: medians of the timed calls, after an untimed one (compile s: the graphs the "
    "sampler compiled then, 0 for transformers, which does not compile). Prefill tokens/s = "
    "prompt tokens / prefill s (the prompts' forward and the first new token); decode "
    "tokens/s = prompts x (new tokens - 1) / decode s (the steps after the first token). zoo: "
    "the device sampler on the entry's devices; hf: transformers' generate on the host CPU, "
    "fp32, timed from the call to its first logits processor call (prefill) and from there to "
    "its end (decode). Greedy, no stop id: every prompt makes all its new tokens. Compiles: "
    "during the timed calls."
)


def _seconds(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def _kinds(records: list[dict]) -> list[tuple[tuple, list[dict]]]:
    """(columns, records) per kind of entry present: training, then generation."""
    trained = [r for r in records if r.get("kind") != generation.KIND]
    generated = [r for r in records if r.get("kind") == generation.KIND]
    return [(columns, rows) for columns, rows in ((COLUMNS, trained),
                                                  (GENERATION_COLUMNS, generated)) if rows]


def table(records: list[dict]) -> str:
    return "\n\n".join(
        format_table(tuple(c for c, _ in columns), [tuple(f(r) for _, f in columns) for r in rows])
        for columns, rows in _kinds(records)
    )


def footnote(results: dict) -> str:
    env = results["environment"]
    records = results["records"]
    trained = any(r.get("kind") != generation.KIND for r in records)
    return (
        f"torch {env['torch']}, torch_xla {env['torch_xla']}, {env['machine']} with "
        f"{env['host_cpus']} CPUs, commit {env['git_commit']}."
        + (" MFU = model FLOPs (3 x forward matmul FLOPs, causal attention) / (step time x "
           f"peak); peak: {peak_note(results)}. Compiles: during the timed steps (0 = the step "
           "compiled once and was replayed). Host s: median seconds Python spent tracing a "
           "step into torch_xla's graph (part of the step time; '-' for peers outside "
           "torch_xla)." if trained else "")
        + (MAXTEXT_NOTE if any(r["impl"] == "maxtext" for r in records) else "")
        + (" " + GENERATION_NOTE
           if any(r.get("kind") == generation.KIND for r in records) else "")
    )


MAXTEXT_NOTE = (
    " MaxText: its own trainer in its own JAX (benchmarks/maxtext_env.sh), remat_policy=full "
    "(its default: every layer recomputed) unless the entry sets one; step s is its logged "
    "per-step time (async dispatch), compile s its jit(train_step) compile; FLOPs are the "
    "zoo's formula for the same shapes."
)


def peak_note(results: dict) -> str:
    """Where the peaks came from: the TPU catalog, or the CPU calibration and its spread."""
    notes = sorted({r["peak_source"] for r in results["records"] if r["peak_source"]})
    calibration = results.get("calibration") or {}
    notes += [
        f"{dtype} {c['peak_flops'] / 1e9:.0f} GFLOP/s, the median of {c['measurements']} "
        f"measurements (spread {c['spread']:.1%}; {calibration['method']})"
        for dtype, c in calibration.items() if dtype != "method"
    ]
    return "; ".join(notes) or "not measured (run with --mfu)"


BUSY_SPREAD = 0.10  # per-entry peaks of an undisturbed run here lay within a few percent
# A generation entry's decode calls on a quiet host here lay within ~25% of each other; a
# neighbour's load slowed transformers' calls (2 torch threads) up to 20x
BUSY_CALLS_SPREAD = 0.5


def busy_host_warning(results: dict) -> str | None:
    """Say so when the host was busy during the run: its step times are then not comparable.
    Told by the CPU peaks measured before each entry (--mfu), and by how far apart a
    generation entry's timed calls lay."""
    calibration = results.get("calibration") or {}
    spreads = [c["spread"] for dtype, c in calibration.items() if dtype != "method"]
    causes = []
    if spreads and max(spreads) > BUSY_SPREAD:
        causes.append(f"the CPU peak measured before each entry varied by {max(spreads):.0%} "
                      "in this run")
    disturbed = [f"{r['name']} ({r['impl']}) {spread(r['decode_s']):.0%}"
                 for r in results["records"] if r.get("kind") == generation.KIND
                 and spread(r["decode_s"]) > BUSY_CALLS_SPREAD]
    if disturbed:
        causes.append("the decode times of a generation entry's calls lay far apart ("
                      + ", ".join(disturbed) + ")")
    if not causes:
        return None
    return (
        f"warning: {'; '.join(causes)}: other load shared the cores, so its times are not "
        "comparable; rerun on a quiet machine"
    )


def markdown(results: dict, ratios, generation_ratios=()) -> str:
    lines = ["# Benchmark results"]
    for columns, rows in _kinds(results["records"]):
        lines += ["", "| " + " | ".join(c for c, _ in columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(f(r)) for _, f in columns) + " |" for r in rows]
    lines += ["", footnote(results)]
    warning = busy_host_warning(results)
    lines += ["", f"**{warning}**"] if warning else []
    reruns = [r for r in results["records"] if r.get("crashed_logs")]
    if reruns:
        lines += ["", "Entries whose worker crashed and was run again (the row is the rerun):",
                  ""]
        lines += [f"- {r['name']} ({r['impl']}): see {', '.join(r['crashed_logs'])}"
                  for r in reruns]
    if results.get("failed"):
        lines += ["", "Entries that failed (not in the table):", ""]
        lines += [f"- {f['name']} ({f['impl']}): see {f['log']}" for f in results["failed"]]
    if ratios:
        lines += ["", "Step time ratio zoo / peer (below 1.0: the zoo is faster):", ""]
        lines += [f"- {name}: zoo / {peer} = {ratio:.2f}" for name, peer, ratio in ratios]
    if generation_ratios:
        lines += ["", "Generation tokens/s ratio zoo / peer (above 1.0: the zoo is faster):", ""]
        lines += [f"- {generation.ratio_line(ratio)}" for ratio in generation_ratios]
    return "\n".join(lines) + "\n"


def plot(records: list[dict], path: Path) -> None:
    import matplotlib  # matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib

    labels = [f"{r['name']}\n({r['impl']})" for r in records]
    fig, (ax_time, ax_mfu) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(records)), 4.5))
    ax_time.bar(labels, [r["step_time_median_s"] for r in records], color="tab:blue")
    ax_time.set_title("step time, median (s; generation: a decode step)")
    mfu = [100 * r["mfu"] if r["mfu"] is not None else 0 for r in records]
    ax_mfu.bar(labels, mfu, color="tab:green")
    ax_mfu.set_title("MFU % (vs peak measured in the same run)")
    for ax in (ax_time, ax_mfu):
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: dict, ratios, out_dir: Path, generation_ratios=()) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(
        {**results, "ratios": ratios, "generation_ratios": list(generation_ratios)}, indent=1))
    (out_dir / "results.md").write_text(markdown(results, ratios, generation_ratios))
    plot(results["records"], out_dir / "results.png")
