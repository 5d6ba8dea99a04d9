"""The `zoo` command. Heavy imports (torch, torch_xla) happen inside commands so that
`zoo --help` stays instant."""

from __future__ import annotations

import json
import logging
import os
import sys

import click

from core.errors import UserError
from tools.tpu_commands import tpu as tpu_group

# flax, which torchax imports for torch_xla's scan, warns at import that TensorFlow is
# missing (for gs:// paths in flax.io, which zoo never uses): noise to our users.
logging.getLogger("absl").addFilter(
    lambda record: "Tensorflow library not found" not in record.getMessage())


class _Group(click.Group):
    """Turns UserError into one line on stderr and a non-zero exit, without a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as error:
            raise click.ClickException(str(error)) from None
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] != "torch_xla":
                raise
            raise click.ClickException(  # a command only the xla backend runs
                f"zoo {ctx.invoked_subcommand} needs torch_xla, which is not installed: "
                "./setup_vm.sh (or pip install 'zoo[xla]')") from None
        except click.UsageError as error:  # one line too, naming where the help is
            command = error.ctx.command_path if error.ctx else "zoo"
            one_line = click.ClickException(f"{error.format_message()} (see {command} --help)")
            one_line.exit_code = error.exit_code
            raise one_line from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """zoo: PyTorch/XLA reference models and a shared SPMD runtime for TPUs."""


@cli.command()
@click.argument("slice_type")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def topology(slice_type, as_json):
    """Describe a TPU slice type (v4-32, v5litepod-16, v6e-256, cpu-8, ...) or S slices of
    one (2xv6e-256): chips, hosts, peaks and the ICI / DCN bandwidth per chip."""
    from core import topology as topo

    info = topo.parse(slice_type).to_dict()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    for key, value in info.items():
        if key == "peak_bf16_flops_per_chip":
            value = f"{value / 1e12:g} TFLOP/s" if value else "measured by calibration (CPU)"
        elif key == "hbm_bytes_per_chip":
            value = f"{value / 2**30:g} GiB" if value else "host memory (CPU)"
        elif key.endswith("_bytes_per_s_per_chip"):
            value = f"{value / 1e9:g} GB/s each way" if value else "-"
        click.echo(f"{key:26} {value}")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
def doctor(overrides):
    """Report versions and devices, then run a sharded matmul over all devices.

    OVERRIDES are mesh settings such as mesh.tensor=2 (default: fsdp over all devices).
    """
    from core import config
    from core.backends.xla.runtime import detect
    from core.backends.xla.smoke import DoctorConfig, sharded_matmul
    from core.backends.xla.spmd import build_mesh
    from core.mesh import axis_sizes

    cfg = config.load(DoctorConfig, overrides=overrides)
    info = detect()
    rows = [
        ("torch", info.torch),
        ("torch_xla", info.torch_xla),
        ("jax", info.jax),
        ("torchax", info.torchax),
        ("PJRT device", f"{info.pjrt_device}, {info.device_count} devices"),
        ("processes", f"{info.process_index + 1} of {info.process_count}"),
        ("TPU type", info.tpu_type or "none detected"),
    ]
    mesh = build_mesh(cfg.mesh)
    rows.append(("mesh", " ".join(f"{a}={s}" for a, s in axis_sizes(mesh).items())))
    for key, value in rows:
        click.echo(f"{key:12} {value}")
    result = sharded_matmul(mesh)
    verdict = "ok" if result.ok else "FAILED"
    click.echo(
        f"{'smoke check':12} sharded matmul {result.shape} over {result.shards} shards: "
        f"{verdict} (max abs error {result.max_abs_error:.1e}, "
        f"compile+run {result.seconds:.2f} s, output sharding {result.output_sharding})"
    )
    if not result.ok:
        sys.exit(1)


@cli.command()
def models():
    """List every registered model and size with its parameter count (and, for a mixture of
    experts, the parameters each token is active in)."""
    from zoo.registry import FAMILIES, family, parameter_count

    for fam_name in FAMILIES:
        fam = family(fam_name)
        for size in fam.sizes:
            count = parameter_count(fam, size)
            line = f"{fam_name}-{size:10} {count / 1e6:>10,.1f} M parameters"
            if fam.active_parameters:
                active = fam.active_parameters(fam.sizes[size], count)
                line += f", {active / 1e6:,.1f} M active per token"
            click.echo(line)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("model")
@click.argument("overrides", nargs=-1)
@click.option("--tpu", help="Slice type to run on: v4-32, v5litepod-16, ... or cpu-N here.")
@click.option("--steps", type=int, help="Optimizer steps to train (total, across resumes).")
@click.option("--out", help="Run folder (default runs/MODEL); reruns resume from it.")
@click.option("--init-from", help="Hugging Face checkpoint directory to start from.")
@click.option("--config", "config_files", multiple=True, help="YAML config file(s).")
@click.option("--force-resume", is_flag=True,
              help="Resume the run in --out even though its settings differ from these.")
@click.option(
    "--prompt", default="The", show_default=True, help="Prompt for the sample printed at the end."
)
@click.option("--backend", type=click.Choice(["xla", "dtensor"]), default="xla", show_default=True,
              help="xla: torch_xla SPMD; dtensor: torch.distributed FSDP2, one process per "
                   "device (CPU or GPU).")
@click.option("--nproc", type=click.IntRange(min=1),
              help="With --backend dtensor: start this many processes with torchrun's launcher.")
@click.option("--on", "node", help="Run on every worker of this TPU VM (from a workstation).")
@click.option("--zone", help="With --on: the TPU VM's zone.")
@click.option("--project", help="With --on: the TPU VM's project.")
@click.option("--dry-run", is_flag=True, help="With --on: print the gcloud steps only.")
def train(model, overrides, tpu, steps, out, init_from, config_files, force_resume, prompt,
          backend, nproc, node, zone, project, dry_run):
    """Train MODEL (see `zoo models`); OVERRIDES are key=value config settings.

    Example: zoo train llama-tiny --tpu cpu-4 --steps 40 optim.lr=1e-3 remat=scan
    """
    if nproc and backend != "dtensor":
        raise UserError("--nproc starts processes for --backend dtensor; the xla backend "
                        "uses --tpu cpu-N for N devices in one process")
    if backend == "dtensor" and (node or tpu):
        raise UserError("--backend dtensor runs here, one process per device (--nproc N); "
                        "--tpu and --on are the xla backend's")
    if nproc and "LOCAL_RANK" not in os.environ:  # not yet one of torchrun's processes
        from tools.torchrun import launch

        launch(nproc, sys.argv[1:])
        return
    if node:
        from core import topology
        from tools import slices
        from tools import tpu as one_slice
        from tools.gcloud import Gcloud, Node

        if not tpu:
            raise UserError("--on needs --tpu TYPE: the slice type NAME must be")
        multi_slice = topology.parse(tpu).slices > 1  # nodes NAME-0, NAME-1, ...
        launch_training = (slices if multi_slice else one_slice).launch_training
        flags = [f"--{k}={v}" for k, v in (("steps", steps), ("out", out),
                                            ("init-from", init_from)) if v is not None]
        flags += ["--force-resume"] if force_resume else []
        gcloud = Gcloud(dry_run=dry_run, echo=click.echo)
        launch_training(gcloud, Node.resolve(node, zone, project), model, tpu,
                        [*flags, *(f"--config={f}" for f in config_files), *overrides])
        return
    from benchmarks.plan.analytic import check_fits
    from zoo.app.run import resolve_run
    from zoo.app.train import train as run_training

    flags = {"tpu": tpu, "steps": steps, "out": out or f"runs/{model}", "init_from": init_from}
    overrides = [f"{k}={v}" for k, v in flags.items() if v is not None] + list(overrides)
    run = resolve_run(model, overrides, config_files)
    if backend == "xla":
        check_fits(run)
    run, summary = run_training(run, force_resume, backend)
    cfg = run.config
    from core.hosts import current as current_hosts

    if backend == "dtensor" and not current_hosts().main:
        return  # one report for the run, from its first process
    if not summary:
        click.echo(f"nothing to do: {cfg.out} already trained {cfg.steps} steps")
        return
    from core.engine import MIN_TIMED_STEPS, WARMUP_STEPS

    speed = (f"median step {summary['median_step_time_s']:.3f} s, "
             f"{summary['items_per_s']:,.0f} {summary['unit']}/s, MFU {summary['mfu']:.1%}"
             if summary["mfu"] is not None else
             f"too few steps to time (after {WARMUP_STEPS} warm-up steps, "
             f"{MIN_TIMED_STEPS} are timed)")
    click.echo(
        f"done: steps {summary['first_step']}-{summary['last_step']}, loss "
        f"{summary['first_loss']:.3f} -> {summary['last_loss']:.3f}, {speed}, "
        f"{summary['compiles']} "
        f"compile{'s' * (summary['compiles'] != 1)} "
        f"({', '.join(f'{s:.1f} s' for s in summary['compile_s']) or 'none new'}); "
        f"run folder {cfg.out}"
    )
    text = run.family.task.generates_text and cfg.data.source != "synthetic"
    if summary["last_step"] < cfg.steps:  # SIGTERM: saved, and the VM is going away
        return
    if text and current_hosts().main:  # the others' run folders hold no config
        from zoo.app.generate import generate, load_for_generation

        try:
            model_, tokenizer = load_for_generation(cfg.out)
            sample = generate(model_, tokenizer, prompt, max_new_tokens=40, temperature=0.8,
                              top_k=40)
        except UserError as error:  # the run itself went well: say why there is no sample
            click.echo(f"sample: none, {error}")
            return
        click.echo(f"sample: {sample!r}")


@cli.command("generate")
@click.argument("run_or_checkpoint")
@click.option("--prompt", required=True)
@click.option("--max-new-tokens", default=50, show_default=True)
@click.option("--temperature", default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-k", default=0, show_default=True, help="0 = no top-k cut.")
@click.option("--seed", default=0, show_default=True)
def generate_command(run_or_checkpoint, prompt, max_new_tokens, temperature, top_k, seed):
    """Continue PROMPT with a trained run (folder) or one of its checkpoints."""
    from zoo.app.generate import check_sampling, generate, load_for_generation

    check_sampling(max_new_tokens, temperature, top_k)
    model, tokenizer = load_for_generation(run_or_checkpoint, prompt, max_new_tokens)
    click.echo(generate(model, tokenizer, prompt, max_new_tokens, temperature, top_k, seed))


@cli.command("new-model")
@click.argument("name")
@click.option(
    "--dir",
    "parent",
    type=click.Path(file_okay=False),
    help="Create the family here (out of tree, registered with ZOO_FAMILIES) instead of "
    "zoo/.",
)
def new_model(name, parent):
    """Start a model family NAME from the template: a folder that trains as is.

    A folder in zoo/ is found as it is (no registry edit). Then see CONTRIBUTING.md.
    """
    from pathlib import Path

    from zoo.app.scaffold import scaffold

    target = scaffold(name, Path(parent) if parent else None)
    click.echo(f"created {target}/ (config, model, family, sharding/, remat/)")
    if parent:
        click.echo(
            f"register it: export ZOO_FAMILIES={name}={name}.family "
            f"PYTHONPATH={Path(parent).resolve()} (or a `zoo.families` entry point)"
        )
    click.echo(f"next: zoo train {name}-tiny --tpu cpu-4 --steps 50; "
               f"pytest -k {name}")


@cli.command()
@click.option("--mfu", is_flag=True, help="Measure the peak (CPU calibration) and report MFU.")
@click.option("--suite", default="default", show_default=True, help="Suite name or YAML path.")
@click.option("--models", help="Only entries of these models (comma-separated).")
@click.option("--tpu", help="Run every entry on this slice type instead of its own.")
@click.option("--steps", default=10, show_default=True, help="Timed steps per entry.")
@click.option("--out", default="runs/bench", show_default=True, help="Results folder.")
@click.option(
    "--compare",
    type=click.Choice(["hf", "maxtext"]),
    help="Also run the same config through transformers' implementation (hf) or MaxText's "
    "trainer (maxtext: llama entries; its environment is built on first use) and report "
    "the step-time ratio.",
)
@click.option(
    "--baseline",
    type=click.Path(exists=True, dir_okay=False),
    help="results.json to compare against; exits non-zero on regressions.",
)
@click.option(
    "--tolerance",
    default=0.20,
    show_default=True,
    help="Allowed MFU drop, and growth of step time relative to the suite's first entry, "
    "vs the baseline (fraction).",
)
@click.option("--profile", "profile_dir", help="Capture an XLA profile of the timed steps here.")
@click.option("--backend", type=click.Choice(["xla", "dtensor"]), default="xla",
              show_default=True,
              help="dtensor: also run each entry the dtensor backend can run (one process per "
                   "device) beside its xla row, and report the step-time ratio.")
def bench(mfu, suite, models, tpu, steps, out, compare, baseline, tolerance, profile_dir,
          backend):
    """Step time, throughput and MFU for a benchmark suite (synthetic data)."""
    if backend == "dtensor":
        if compare:
            raise UserError("--backend dtensor and --compare each add a second row per entry; "
                            "use one of them")
        compare = "dtensor"
    import dataclasses
    from pathlib import Path

    from benchmarks import harness, report
    from benchmarks.suite import load_suite
    from core.store.location import local_folder

    local_folder(out, "--out")
    entries = load_suite(suite)
    if models:
        wanted = set(models.split(","))
        entries = [e for e in entries if e.model in wanted]
        if not entries:
            raise click.ClickException(f"no entries of {sorted(wanted)} in suite {suite}")
    if tpu:
        entries = [dataclasses.replace(e, tpu=tpu) for e in entries]
    if baseline:
        from benchmarks.gate import confirmed_regressions, load_baseline

        baseline = load_baseline(baseline)
        mfu = True  # the gate compares MFU
    results = harness.run_suite(entries, steps, compare, mfu, profile_dir)
    ratios = harness.compare_ratios(results["records"])
    click.echo(report.table(results["records"]))
    click.echo(report.footnote(results))
    if warning := report.busy_host_warning(results):
        click.echo(warning, err=True)
    for name, peer, ratio in ratios:
        click.echo(f"{name}: step time zoo / {peer} = {ratio:.2f}")
    report.write(results, ratios, Path(out))
    click.echo(f"wrote {out}/results.json, results.md, results.png")
    if baseline:
        failed = confirmed_regressions(results, entries, baseline, tolerance, steps)
        if failed:
            raise click.ClickException(
                f"worse than the baseline by more than {tolerance:.0%}, twice: "
                + "; ".join(failed)
            )
        click.echo(
            f"gate passed: no MFU fell, and no step time relative to "
            f"{results['reference_entry']} grew, by more than {tolerance:.0%}"
        )


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("model")
@click.argument("overrides", nargs=-1)
@click.option("--tpu", required=True, help="Slice type, e.g. v4-8, v5p-128.")
@click.option("--target-mfu", default=0.5, show_default=True)
@click.option("--compile", "compile_", is_flag=True,
              help="Also trace the exact train step and compile it with the TPU compiler "
              "(libtpu, compile-only: no TPU needed) for the slice's topology.")
@click.option("--compare", type=click.Choice(["maxtext"]),
              help="With --compile: also compile MaxText's own train step for the same shapes "
              "and slice, both programs by MaxText's libtpu, and print them side by side "
              "(its environment is built on first use).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON record.")
def plan(model, overrides, tpu, target_mfu, compile_, compare, as_json):
    """Will MODEL fit on a slice? Per-chip memory and the step time a target MFU implies;
    with --compile, the compiler's own per-chip HBM, FLOPs, collectives and step estimate.

    OVERRIDES are `zoo train` keys: global_batch_size=, seq_len=, sharding=, remat=, mesh.*
    """
    from benchmarks.plan.analytic import describe, make_plan
    from zoo.app.run import resolve_run

    if compare and not compile_:
        raise UserError(f"--compare {compare} compares compiled programs: add --compile")
    run = resolve_run(model, [f"tpu={tpu}", *overrides])
    if compare:
        from benchmarks.plan.compare import compare as compare_plans
        from benchmarks.plan.compare_table import describe as describe_comparison

        record = compare_plans(run, target_mfu).record()
        click.echo(json.dumps(record, indent=2) if as_json else describe_comparison(record))
        return
    if not compile_:
        result = make_plan(run, target_mfu)
        click.echo(json.dumps(result.record(), indent=2) if as_json else describe(result))
        return
    from benchmarks.plan.tpu_step import compile_plan, describe_compiled

    compiled = compile_plan(run, target_mfu)
    click.echo(json.dumps(compiled.record(), indent=2) if as_json else describe_compiled(compiled))


@cli.command()
@click.argument("checkpoint")
@click.argument("out")
def export(checkpoint, out):
    """Export a training run or checkpoint (CHECKPOINT) as a Hugging Face folder OUT."""
    from eval.export import export as export_checkpoint

    folder = export_checkpoint(checkpoint, out)
    hf_class = json.loads((folder / "config.json").read_text())["architectures"][0]
    click.echo(f"exported {checkpoint} -> {folder} (loads with transformers' {hf_class})")


@cli.command("eval")
@click.argument("checkpoint")
@click.option("--tasks", help="Language models, comma-separated: lm-eval task names, `arc` "
              "(arc_easy + arc_challenge), the sample tasks, or a folder of task YAMLs.")
@click.option("--data", help="Image classifiers: an image folder (DIR/val/<class>/...) to "
              "report top-1 on (default: the embedded image set).")
@click.option("--num-fewshot", type=int)
@click.option("--limit", type=int, help="Only the first N documents per task.")
@click.option("--batch-size", default=8, show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda", "xla"]), default="cpu",
              show_default=True)
@click.option("--out", help="Folder for eval_results.json (default: next to the checkpoint).")
def eval_command(checkpoint, tasks, data, num_fewshot, limit, batch_size, device, out):
    """Score CHECKPOINT (a run, a checkpoint or a Hugging Face folder): lm-eval tasks for
    language models, top-1 on an image folder for image classifiers."""
    from core.table import format_table
    from eval.evaluate import evaluate

    rows, results_file = evaluate(checkpoint, tasks, num_fewshot=num_fewshot, limit=limit,
                                  batch_size=batch_size, device=device, out=out, data=data)
    table = [(task, metric, f"{value:.4f}", f"{stderr:.4f}" if stderr is not None else "-")
             for task, metric, value, stderr in rows]
    click.echo(format_table(("task", "metric", "value", "stderr"), table))
    click.echo(f"wrote {results_file}")


cli.add_command(tpu_group)


def main():
    from core import runtime

    runtime.configure()  # before anything imports torch_xla (transformers may)
    cli(prog_name="zoo")


if __name__ == "__main__":  # how torchrun's launcher starts each process of a dtensor run
    main()
