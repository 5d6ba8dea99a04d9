"""`zoo tpu ...`: TPU VM slices from a workstation, through gcloud. Every command takes
--dry-run, which prints the exact gcloud invocations instead of running them."""

from __future__ import annotations

import click

from zoo.tools import tpu as ops
from zoo.tools.gcloud import Gcloud, Node, create, delete

DATA_DISK_HELP = ("A persistent disk (projects/P/zones/Z/disks/D) to attach read-write: "
                  "where checkpoints survive the VM.")


def node_options(command):
    for option in reversed([
        click.argument("name"),
        click.option("--zone", help="GCE zone (default: CLOUDSDK_COMPUTE_ZONE)."),
        click.option("--project", help="GCP project (default: gcloud's configured one)."),
        click.option("--dry-run", is_flag=True, help="Print the gcloud commands; run nothing."),
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
def create_command(name, zone, project, dry_run, accelerator, version, spot, preemptible,
                   data_disk):
    """Create TPU VM NAME."""
    from zoo.core import topology

    topology.parse(accelerator)  # a clear error for impossible slice types
    gcloud, node = target(name, zone, project, dry_run)
    gcloud.run(create(node, accelerator, version, spot, preemptible, data_disk))


def node_command(command_name: str, operation, help_text: str) -> None:
    """`zoo tpu COMMAND_NAME NAME`: an operation that needs nothing but the node."""

    @tpu.command(command_name, help=help_text)
    @node_options
    def command(name, zone, project, dry_run):
        operation(*target(name, zone, project, dry_run))


node_command("setup", ops.setup, "Copy this repo to every worker and run setup_vm.sh there.")
node_command("sync", ops.sync,
             "Copy local changes to every worker (not .git, .venv, runs, checkpoints, data).")
node_command("stop", ops.stop,
             "End the processes `zoo tpu run` started (by their recorded ids), on every worker.")


@tpu.command("run", context_settings={"ignore_unknown_options": True})
@node_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run_command(name, zone, project, dry_run, command):
    """Start COMMAND (after --) on every worker in the background, in ~/zoo."""
    ops.run(*target(name, zone, project, dry_run), list(command))


@tpu.command("logs")
@node_options
@click.option("--worker", default=0, show_default=True, help="Worker index.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines.")
def logs_command(name, zone, project, dry_run, worker, follow):
    """Print a worker's run log."""
    ops.logs(*target(name, zone, project, dry_run), worker, follow)


@tpu.command("status")
@node_options
def status_command(name, zone, project, dry_run):
    """The node's state and, per worker, whether the run is going."""
    gcloud, node = target(name, zone, project, dry_run)
    info = gcloud.state(node)
    if dry_run:
        ops.worker_states(gcloud, node)
        return
    if info is None:
        click.echo(f"{name}: not found in {node.zone}")
        return
    click.echo(f"{name}: {info.get('state', '?')} ({info.get('acceleratorType', '?')})")
    for index, state in enumerate(ops.worker_states(gcloud, node)):
        click.echo(f"  worker {index}: {state}")


@tpu.command("delete")
@node_options
def delete_command(name, zone, project, dry_run):
    """Delete TPU VM NAME."""
    gcloud, node = target(name, zone, project, dry_run)
    gcloud.run(delete(node))


@tpu.command("babysit", context_settings={"ignore_unknown_options": True})
@node_options
@click.option("--tpu", "accelerator", required=True, help="Accelerator type, e.g. v4-32.")
@click.option("--version", help="TPU VM software version (default per generation).")
@click.option("--spot", is_flag=True)
@click.option("--preemptible", is_flag=True)
@click.option("--max-restarts", default=10, show_default=True)
@click.option("--backoff", default=60.0, show_default=True,
              help="Seconds before the first restart; doubles each time.")
@click.option("--poll", default=120.0, show_default=True, help="Seconds between checks.")
@click.option("--data-disk", help=DATA_DISK_HELP)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def babysit_command(name, zone, project, dry_run, accelerator, version, spot, preemptible,
                    max_restarts, backoff, poll, data_disk, command):
    """Keep COMMAND running on NAME: recreate, set up and restart it after preemption.
    Training resumes from its latest complete checkpoint."""
    gcloud, node = target(name, zone, project, dry_run)
    code = ops.babysit(gcloud, node, accelerator, list(command), spot=spot,
                       preemptible=preemptible, version=version, max_restarts=max_restarts,
                       backoff=backoff, poll=poll, data_disk=data_disk, echo=click.echo)
    raise SystemExit(code)
