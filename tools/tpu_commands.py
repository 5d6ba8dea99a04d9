"""`zoo tpu ...`: TPU VM slices from a workstation, through gcloud. Every command takes
--dry-run, which prints the exact gcloud invocations instead of running them."""

from __future__ import annotations

import click

from tools import slices as multi
from tools import tpu as ops
from tools.gcloud import (
    Gcloud,
    Node,
    create,
    create_slices,
    delete,
    delete_slices,
    slice_nodes,
)
from tools.options import FiniteRange

DATA_DISK_HELP = ("A persistent disk (projects/P/zones/Z/disks/D) to attach read-write: "
                  "where checkpoints survive the VM.")


def node_options(command):
    for option in reversed([
        click.argument("name"),
        click.option("--zone", help="GCE zone (default: CLOUDSDK_COMPUTE_ZONE)."),
        click.option("--project", help="GCP project (default: gcloud's configured one)."),
        click.option("--dry-run", is_flag=True, help="Print the gcloud commands; run nothing."),
        click.option("--slices", default=1, show_default=True, type=click.IntRange(min=1),
                     help="Slices of a multi-slice job (its nodes are NAME-0, NAME-1, ...)."),
    ]):
        command = option(command)
    return command


def target(name, zone, project, dry_run) -> tuple[Gcloud, Node]:
    return Gcloud(dry_run=dry_run, echo=click.echo), Node.resolve(name, zone, project)


@click.group("tpu")
def tpu():
    """Create, set up and run on TPU VM slices (all workers at once), and babysit
    preemptible ones."""


@tpu.command("create")
@node_options
@click.option("--tpu", "accelerator", required=True, help="Accelerator type, e.g. v4-32.")
@click.option("--version", help="TPU VM software version (default per generation).")
@click.option("--spot", is_flag=True, help="Spot capacity (cheaper, can be preempted).")
@click.option("--preemptible", is_flag=True, help="Preemptible capacity.")
@click.option("--data-disk", help=DATA_DISK_HELP)
def create_command(name, zone, project, dry_run, slices, accelerator, version, spot,
                   preemptible, data_disk):
    """Create TPU VM NAME, or with --slices S (or --tpu Sx<type>) S slices as one queued
    resource: nodes NAME-0 ... NAME-(S-1)."""
    slice_type, slices = job_slices(accelerator, slices)
    gcloud, node = target(name, zone, project, dry_run)
    if slices == 1:
        gcloud.run(create(node, slice_type, version, spot, preemptible, data_disk))
        return
    refuse_single_slice_options(preemptible, data_disk)
    gcloud.run(create_slices(node, slice_type, slices, version, spot))


def refuse_single_slice_options(preemptible: bool, data_disk: str | None) -> None:
    if preemptible or data_disk:
        raise click.UsageError("a multi-slice job takes --spot (not --preemptible) and keeps "
                               "its checkpoints in a bucket (not --data-disk)")


def job_slices(accelerator: str, slices: int) -> tuple[str, int]:
    """(each slice's type, how many): `--tpu 2xv6e-256` or `--tpu v6e-256 --slices 2`."""
    from core import topology  # start-up

    topo = topology.parse(accelerator)  # a clear error for impossible slice types
    if topo.slices > 1 and slices not in (1, topo.slices):
        raise click.UsageError(f"--tpu {accelerator} is {topo.slices} slices, --slices says "
                               f"{slices}; give one of them")
    return topo.slice_name, max(topo.slices, slices)


def node_command(command_name: str, operation, help_text: str) -> None:
    """`zoo tpu COMMAND_NAME NAME`: an operation that needs nothing but the node, done on
    every slice's node of a multi-slice job."""

    @tpu.command(command_name, help=help_text)
    @node_options
    def command(name, zone, project, dry_run, slices):
        gcloud, node = target(name, zone, project, dry_run)
        for each in slice_nodes(node, slices):
            operation(gcloud, each)


node_command("setup", ops.setup, "Copy this repo to every worker and run setup_vm.sh there.")
node_command("sync", ops.sync,
             "Copy the source tree to every worker: what git tracks or does not ignore, "
             "never a run folder or export.")
node_command("stop", ops.stop,
             "End the processes `zoo tpu run` started (by their recorded ids), on every worker.")


@tpu.command("run", context_settings={"ignore_unknown_options": True})
@node_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run_command(name, zone, project, dry_run, slices, command):
    """Start COMMAND (after --) on every worker in the background, in ~/zoo; on every
    slice of a multi-slice job, with its megascale settings."""
    gcloud, node = target(name, zone, project, dry_run)
    if slices == 1:
        ops.run(gcloud, node, list(command))
    else:
        multi.run(gcloud, node, slices, list(command))


@tpu.command("logs")
@node_options
@click.option("--worker", default=0, show_default=True, type=click.IntRange(min=0),
              help="Worker index.")
@click.option("--slice", "slice_index", default=0, show_default=True, type=click.IntRange(min=0),
              help="Slice index (multi-slice jobs).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines.")
def logs_command(name, zone, project, dry_run, slices, worker, slice_index, follow):
    """Print a worker's run log."""
    gcloud, node = target(name, zone, project, dry_run)
    if not 0 <= slice_index < slices:
        raise click.UsageError(f"--slice {slice_index}: the job has slices 0-{slices - 1}")
    ops.logs(gcloud, slice_nodes(node, slices)[slice_index], worker, follow)


@tpu.command("status")
@node_options
def status_command(name, zone, project, dry_run, slices):
    """The node's (each slice's) state and, per worker, whether the run is going."""
    gcloud, node = target(name, zone, project, dry_run)
    if slices > 1:
        info = gcloud.slices_state(node)
        if not dry_run:
            click.echo(f"{name}: {((info or {}).get('state') or {}).get('state', 'GONE')} "
                       f"({slices} slices)")
    for each in slice_nodes(node, slices):
        info = gcloud.state(each)
        if dry_run:
            ops.worker_states(gcloud, each)
            continue
        if info is None:
            click.echo(f"{each.name}: not found in {node.zone}")
            continue
        click.echo(f"{each.name}: {info.get('state', '?')} "
                   f"({info.get('acceleratorType', '?')})")
        if info.get("state") == "READY":
            for index, state in enumerate(ops.worker_states(gcloud, each)):
                click.echo(f"  worker {index}: {state}")


@tpu.command("delete")
@node_options
def delete_command(name, zone, project, dry_run, slices):
    """Delete TPU VM NAME (with --slices: the queued resource and all its nodes)."""
    gcloud, node = target(name, zone, project, dry_run)
    gcloud.run(delete(node) if slices == 1 else delete_slices(node))


@tpu.command("babysit", context_settings={"ignore_unknown_options": True})
@node_options
@click.option("--tpu", "accelerator", required=True, help="Accelerator type, e.g. v4-32.")
@click.option("--version", help="TPU VM software version (default per generation).")
@click.option("--spot", is_flag=True)
@click.option("--preemptible", is_flag=True)
@click.option("--max-restarts", default=10, show_default=True, type=click.IntRange(min=0))
@click.option("--backoff", default=60.0, show_default=True, type=FiniteRange(min=0),
              help="Seconds before the first restart; doubles each time.")
@click.option("--poll", default=120.0, show_default=True, type=FiniteRange(min=0, min_open=True),
              help="Seconds between checks.")
@click.option("--data-disk", help=DATA_DISK_HELP)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def babysit_command(name, zone, project, dry_run, slices, accelerator, version, spot,
                    preemptible, max_restarts, backoff, poll, data_disk, command):
    """Keep COMMAND running on NAME: recreate, set up and restart it after preemption (all
    slices of a multi-slice job when any one is lost). Training resumes from its latest
    complete checkpoint."""
    slice_type, slices = job_slices(accelerator, slices)
    gcloud, node = target(name, zone, project, dry_run)
    if slices == 1:
        code = ops.babysit(gcloud, node, slice_type, list(command), spot=spot,
                           preemptible=preemptible, version=version,
                           max_restarts=max_restarts, backoff=backoff, poll=poll,
                           data_disk=data_disk, echo=click.echo)
    else:
        refuse_single_slice_options(preemptible, data_disk)
        code = multi.babysit(gcloud, node, slice_type, slices, list(command), spot=spot,
                             version=version, max_restarts=max_restarts, backoff=backoff,
                             poll=poll, echo=click.echo)
    raise SystemExit(code)
