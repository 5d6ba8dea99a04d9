"""The `zoo` command: it parses and dispatches, and each command's work lives in its room.
Commands import what they run when they run it, so `zoo --help`, the catalogs and every
refusal of a bad flag answer without importing torch, torch_xla, transformers or lm_eval."""

from __future__ import annotations

import errno
import json
import logging
import os

import click

from core import program_start, runtime
from core.errors import UserError
from tools.options import FiniteRange, PathArg, hub_name, plain_name, task_names
from tools.tpu_commands import tpu as tpu_group

# flax, which torchax imports for torch_xla's scan, warns at import that TensorFlow is
# missing (for gs:// paths in flax.io, which zoo never uses): noise to our users.
logging.getLogger("absl").addFilter(
    lambda record: "Tensorflow library not found" not in record.getMessage())
program_start.mark()  # the goodput account's start, where a shell ran other commands first


# a disk that refuses a write: read-only, full, over quota, not permitted
DISK_REFUSALS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM}


class _Group(click.Group):
    """Turns UserError, and a disk that refuses a write, into one line on stderr and a
    non-zero exit, without a traceback."""

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
        except OSError as error:
            if error.errno not in DISK_REFUSALS:
                raise
            full = "free space there, or " if error.errno in (errno.ENOSPC, errno.EDQUOT) else ""
            raise click.ClickException(  # the disk a command writes to, not zoo
                f"cannot write {error.filename or 'a file'}: {error.strerror}; {full}write "
                "elsewhere (--out, checkpoint_dir)") from None
        except click.UsageError as error:  # one line too, naming where the help is
            command = error.ctx.command_path if error.ctx else "zoo"
            one_line = click.ClickException(f"{error.format_message()} (see {command} --help)")
            one_line.exit_code = error.exit_code
            raise one_line from None


POSITIVE = click.IntRange(min=1)
# the paths commands take, each declared with its kind (tools/options.py checks it)
RUN_OR_CHECKPOINT = PathArg("folder", reads=True, urls=True,
                            what="a run folder or one of its checkpoints")
RUN_OUT = PathArg("folder", reads=False, urls=True, what="a run folder (or a bucket URL)")
STARTING_POINT = PathArg("folder", reads=True, urls=True, name=hub_name,
                         what="a zoo run folder or checkpoint, or a Hugging Face folder or "
                              "Hub name")
CONFIG_FILE = PathArg("file", reads=True, text=True, what="a YAML config file")
RESULTS_OUT = PathArg("folder", reads=False, what="a folder for the results")
TPU_HELP = "Slice type to run on: v4-32, v5litepod-16, ... or cpu-N here."


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """zoo: PyTorch/XLA reference models and a shared SPMD runtime for TPUs."""


@cli.command()
@click.argument("slice_type")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def topology(slice_type, as_json):
    """Describe a TPU slice type (v4-32, v5litepod-16, v6e-256, cpu-8, ...) or S slices of
    one (2xv6e-256): chips, hosts, peaks and the ICI / DCN bandwidth per chip."""
    from core.topology import parse  # start-up

    topo = parse(slice_type)
    click.echo(json.dumps(topo.to_dict(), indent=2) if as_json else topo.describe())


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@click.option("--tpu", help=TPU_HELP)
def doctor(overrides, tpu):
    """Report versions and devices, then run a sharded matmul over all devices.

    OVERRIDES are mesh settings such as mesh.tensor=2 (default: fsdp over all devices).
    Example: zoo doctor --tpu cpu-8 mesh.tensor=2
    """
    from tools.doctor import doctor as check_devices  # torch_xla

    report, ok = check_devices(list(overrides), tpu)
    click.echo(report)
    if not ok:
        raise SystemExit(1)


@cli.command()
def models():
    """List every registered model and size with its parameter count (and, for a mixture of
    experts, the parameters each token is active in)."""
    from zoo.app.catalog import model_lines  # torch: the families' meta models

    click.echo("\n".join(model_lines()))


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("model", required=False)
@click.argument("overrides", nargs=-1)
@click.option("--tpu", help=TPU_HELP)
@click.option("--steps", type=POSITIVE, help="Optimizer steps to train (total, across resumes).")
@click.option("--out", type=RUN_OUT,
              help="Run folder (default runs/MODEL); reruns resume from it.")
@click.option("--init-from", type=STARTING_POINT,
              help="Start from these weights: a zoo run folder or checkpoint, "
              "or a Hugging Face folder or Hub name (MODEL may then be left out).")
@click.option("--config", "config_files", multiple=True,
              type=CONFIG_FILE, help="YAML config file(s).")
@click.option("--force-resume", is_flag=True,
              help="Resume the run in --out even though its settings differ from these.")
@click.option(
    "--prompt", help="Prompt for the sample printed at the end (default: the task's, e.g. "
    "'The'; a tuned model's is a question, put through its chat template)."
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
def train(model, overrides, config_files, **options):
    """Train MODEL (see `zoo models`); OVERRIDES are key=value config settings.

    Example: zoo train llama-tiny --tpu cpu-4 --steps 40 optim.lr=1e-3 remat=scan
    """
    from tools.launch import TrainRequest, launch  # start-up

    if model and "=" in model:  # `zoo train --init-from DIR task=sft`: no model name
        model, overrides = None, (model, *overrides)

    launch(TrainRequest(model, tuple(overrides), config_files=tuple(config_files), **options),
           click.echo)


@cli.command("generate")
@click.argument("run_or_checkpoint", type=RUN_OR_CHECKPOINT)
@click.option("--prompt", help="One prompt: prints it with its continuation.")
@click.option("--prompts", "prompts_file",
              type=PathArg("file", reads=True, text=True, what="a JSON-lines file of prompts"),
              help='A JSON-lines file, a string or {"prompt": TEXT} a line: prints a JSON line '
                   '{"prompt", "completion", "finish"} for each.')
@click.option("--tpu", help="The slice to generate on (e.g. cpu-4); default: the run's.")
@click.option("--max-new-tokens", type=POSITIVE, default=50, show_default=True)
@click.option("--temperature", type=FiniteRange(min=0), default=0.8, show_default=True,
              help="Sampling temperature, as `zoo train`'s sample; 0 = greedy.")
@click.option("--top-k", type=click.IntRange(min=0), default=40, show_default=True,
              help="Sample from the K likeliest tokens; 0 = no top-k cut.")
@click.option("--top-p", type=FiniteRange(min=0, max=1, min_open=True), default=1.0,
              show_default=True, help="Sample from the likeliest tokens whose probability "
                                      "reaches P; 1 = no cut.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Sampling seed: the same seed gives the same text on any number of "
                   "devices (not the --host path's text).")
@click.option("--stop", "stops", multiple=True,
              help="End a continuation before this text (repeatable).")
@click.option("--batch-size", type=POSITIVE, default=8, show_default=True,
              help="Prompts generated at once on the devices.")
@click.option("--raw", is_flag=True,
              help="Prompt a chat-tuned run with the text alone, not through its chat "
                   "template (the default prompts it as it was trained).")
@click.option("--host", is_flag=True,
              help="Generate on the host CPU with transformers, as `zoo train`'s end-of-run "
                   "sample does, not on the run's devices.")
def generate_command(run_or_checkpoint, prompt, prompts_file, tpu, stops, raw, host, **asked):
    """Continue prompts with a trained run (folder) or one of its checkpoints, on the run's
    devices; the last line on stderr says how fast. --temperature 0 is greedy."""
    if (prompt is None) == (prompts_file is None):
        raise click.UsageError("give --prompt TEXT or --prompts FILE.jsonl (one of them)")
    if any(stop == "" for stop in stops):
        raise UserError("--stop '' is empty; give the text to stop at")
    from zoo.app.generate import Asked, generate_texts, read_prompts  # torch

    prompts = [prompt] if prompts_file is None else read_prompts(prompts_file)
    done = generate_texts(run_or_checkpoint, prompts, Asked(stops=tuple(stops), **asked),
                          tpu=tpu, raw=raw, host=host)
    if done.note:
        click.echo(f"note: {done.note}", err=True)
    if prompts_file is None:
        click.echo(done.text[0])
    else:
        for row in zip(prompts, done.completion, done.finish, strict=True):
            click.echo(json.dumps(dict(zip(("prompt", "completion", "finish"), row)),
                                  ensure_ascii=False))
    if done.stats:
        click.echo(done.stats, err=True)


@cli.command("new-model")
@click.argument("name")
@click.option("--dir", "parent", type=PathArg(
                  "folder", reads=False, what="a folder to create the family in"),
              help="Create the family here (out of tree, registered with ZOO_FAMILIES) "
                   "instead of zoo/.")
def new_model(name, parent):
    """Start a model family NAME from the template: a folder that trains as is.

    A folder in zoo/ is found as it is (no registry edit). Then see CONTRIBUTING.md.
    """
    from zoo.app.scaffold import next_steps, scaffold  # the registry imports every family

    click.echo(next_steps(name, scaffold(name, parent), parent))


@cli.command()
@click.option("--mfu", is_flag=True, help="Measure the peak (CPU calibration) and report MFU.")
@click.option("--suite", default="default", show_default=True,
              type=PathArg("file", reads=True, text=True, name=plain_name,
                           what="a suite name or a YAML file"),
              help="Suite name or YAML path.")
@click.option("--models", help="Only entries of these models (comma-separated).")
@click.option("--tpu", help="Run every entry on this slice type instead of its own.")
@click.option("--steps", type=POSITIVE, default=10, show_default=True,
              help="Timed steps per entry.")
@click.option("--out", default="runs/bench", show_default=True,
              type=RESULTS_OUT,
              help="Results folder.")
@click.option("--compare", type=click.Choice(["hf", "maxtext"]),
              help="Also run the same config through transformers' implementation (hf) or "
                   "MaxText's trainer (maxtext: llama entries; its environment is built on "
                   "first use) and report the step-time ratio.")
@click.option("--baseline", type=PathArg(
                  "file", reads=True, text=True, what="a results.json of an earlier zoo bench"),
              help="results.json to compare against; exits non-zero on regressions.")
@click.option("--tolerance", type=FiniteRange(min=0), default=0.20, show_default=True,
              help="Allowed MFU drop, and growth of step time relative to the suite's first "
                   "entry, vs the baseline (fraction).")
@click.option("--profile", "profile_dir", type=PathArg(
                  "folder", reads=False, what="a folder for the profile"),
              help="Capture an XLA profile of the timed steps here.")
@click.option("--backend", type=click.Choice(["xla", "dtensor"]), default="xla",
              show_default=True,
              help="dtensor: also run each entry the dtensor backend can run (one process per "
                   "device) beside its xla row, and report the step-time ratio.")
def bench(**options):
    """Step time, throughput and MFU for a benchmark suite (synthetic data)."""
    from benchmarks.bench import BenchRequest  # torch, the families
    from benchmarks.bench import bench as run_bench  # torch, the families

    run_bench(BenchRequest(**options), click.echo)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("model", required=False)
@click.argument("overrides", nargs=-1)
@click.option("--tpu", required=True, help="Slice type, e.g. v4-8, v5p-128.")
@click.option("--target-mfu", type=FiniteRange(min=0, max=1, min_open=True), default=0.5,
              show_default=True, help="The MFU the step time is projected at.")
@click.option("--compile", "compile_", is_flag=True,
              help="Also trace the exact train step and compile it with the TPU compiler "
              "(libtpu, compile-only: no TPU needed) for the slice's topology.")
@click.option("--compare", type=click.Choice(["maxtext"]),
              help="With --compile: also compile MaxText's own train step for the same shapes "
              "and slice, both programs by MaxText's libtpu, and print them side by side "
              "(its environment is built on first use).")
@click.option("--search", "search_", is_flag=True,
              help="Search remat x per-device batch x sharding preset x mesh split (the keys "
              "not given as OVERRIDES), prune with the analytic plan, compile the rest with "
              "libtpu and rank by projected throughput; prints the winner's `zoo train` line.")
@click.option("--budget", type=FiniteRange(min=0, min_open=True),
              help="With --search: stop compiling after this many minutes.")
@click.option("--jobs", type=POSITIVE, help="With --search: compile processes at once "
              "(default: as many as cores and host memory allow, by the first compile).")
@click.option("--max-batch", type=POSITIVE, default=16, show_default=True,
              help="With --search: the largest per-device batch (sequences) to try.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON record.")
def plan(model, overrides, tpu, target_mfu, compile_, compare, search_, budget, jobs, max_batch,
         as_json):
    """Will MODEL fit on a slice? Per-chip memory and the step time a target MFU implies;
    with --compile, the compiler's own per-chip HBM, FLOPs, collectives and step estimate.

    OVERRIDES are `zoo train` keys: global_batch_size=, seq_len=, sharding=, remat=, mesh.*
    """
    if compare and not compile_:
        raise UserError(f"--compare {compare} compares compiled programs: add --compile")
    if (budget or jobs) and not search_:
        raise UserError("--budget and --jobs bound a search: add --search")
    if search_:
        if compare:
            raise UserError("--search ranks zoo's own configurations: drop --compare "
                            "(compare the winner with `--compile --compare maxtext` after)")
        from benchmarks.plan import search  # torch, the families

        result = search.search(model, tpu, list(overrides), budget, jobs, max_batch, click.echo,
                               compile_=compile_)
        click.echo(json.dumps(result.record(), indent=2) if as_json else search.describe(result))
        return
    from benchmarks.plan.report import plan_report  # torch, the families
    from zoo.app.init_from import resolve_started_run  # torch, the families

    run = resolve_started_run(model, [f"tpu={tpu}", *overrides])[0]
    click.echo(plan_report(run, target_mfu, compile_, compare, as_json, click.echo))


@cli.command("goodput")
@click.argument("run", type=PathArg("folder", reads=True, what="the --out of a zoo train run",
                                      urls=True))
@click.option("--plot", "plot_path",
              type=PathArg("file", reads=False, what="a .png file or a folder", suffix=".png",
                           file_in_folder="goodput.png"),
              help="Where to draw each attempt's time by category: a .png file, or a "
              "folder to hold goodput.png (default: RUN/goodput.png, or ./goodput.png for "
              "a run in a bucket).")
def goodput_command(run, plot_path):
    """Where the wall time of RUN (a run folder or bucket URL) went, over every attempt:
    productive steps, compiles, data waits, checkpoints, evaluation, restarts, lost work."""
    from core import goodput

    summary = goodput.run_account(run)
    path = plot_path or ("goodput.png" if "://" in run else os.path.join(run, "goodput.png"))
    goodput.plot(summary, path)
    click.echo(f"{goodput.describe(summary)}\nplot: {path}")


@cli.command()
@click.argument("checkpoint", type=RUN_OR_CHECKPOINT)
@click.argument("out", type=PathArg("folder", reads=False, what="a new folder for the export"))
@click.option("--adapter", is_flag=True, help="A LoRA run: write its adapters as a PEFT "
              "adapter folder over its --init-from base (default: the merged model).")
def export(checkpoint, out, adapter):
    """Export a training run or checkpoint (CHECKPOINT) as a Hugging Face folder OUT."""
    from eval.export import describe_export  # torch
    from eval.export import export as export_checkpoint  # torch

    click.echo(describe_export(export_checkpoint(checkpoint, out, adapter)))


@cli.command("eval")
@click.argument("checkpoint", type=PathArg(
                  "folder", reads=True, urls=True, what="a run, checkpoint or Hugging Face folder"))
@click.option("--tasks", type=PathArg(
                  "folder", reads=True, name=task_names,
                  what="task names or a folder of task YAMLs"),
              help="Language models, comma-separated: lm-eval task names, `arc` "
              "(arc_easy + arc_challenge), the sample tasks, or a folder of task YAMLs.")
@click.option("--data", type=PathArg(
                  "folder", reads=True, what="an image folder (DIR/val/<class>/...)"),
              help="Image classifiers: an image folder (DIR/val/<class>/...) to "
              "report top-1 on (default: the embedded image set).")
@click.option("--num-fewshot", type=click.IntRange(min=0),
              help="Examples in each prompt (default: each task's own).")
@click.option("--limit", type=POSITIVE, help="Only the first N documents per task.")
@click.option("--batch-size", type=POSITIVE, default=8, show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda", "xla"]), default="cpu",
              show_default=True)
@click.option("--out", type=RESULTS_OUT,
              help="Folder for eval_results.json (default: next to the checkpoint).")
@click.option("--chat-template/--no-chat-template", default=False, show_default=True,
              help="Language models: render each prompt with the model's own chat template "
              "(a tuned model, e.g. --tasks zoo_instructions); few-shot examples become "
              "earlier turns.")
def eval_command(checkpoint, tasks, **options):
    """Score CHECKPOINT (a run, a checkpoint or a Hugging Face folder): lm-eval tasks for
    language models, top-1 on an image folder for image classifiers."""
    from eval.evaluate import describe, evaluate  # lm_eval and torch, when a task runs

    click.echo(describe(*evaluate(checkpoint, tasks, **options)))


cli.add_command(tpu_group)


def main():
    runtime.configure()  # before anything imports torch_xla (transformers may)
    cli(prog_name="zoo")


if __name__ == "__main__":  # how torchrun's launcher starts each process of a dtensor run
    main()
