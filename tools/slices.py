"""`zoo tpu ... --slices S`: a multi-slice job, S TPU VMs created together as one queued
resource (nodes NAME-0 ... NAME-(S-1)) and joined over the data-center network. Each
operation is the one-slice operation (tools/tpu.py) on every node; a run gets the megascale
settings that tell each slice's workers which slice they are and where slice 0's first
worker coordinates, and babysit restarts all slices together when any one is lost."""

from __future__ import annotations

import time

from core.errors import UserError
from tools import tpu as ops
from tools.gcloud import Gcloud, Node, create_slices, delete_slices, slice_nodes

MEGASCALE_PORT = "8080"


def megascale_env(slice_id: int, slices: int, coordinator: str) -> dict[str, str]:
    """What libtpu's multi-slice runtime reads on every worker of slice `slice_id`."""
    return {"MEGASCALE_COORDINATOR_ADDRESS": f"{coordinator}:{MEGASCALE_PORT}",
            "MEGASCALE_NUM_SLICES": str(slices), "MEGASCALE_SLICE_ID": str(slice_id),
            "MEGASCALE_PORT": MEGASCALE_PORT}


def coordinator(gcloud: Gcloud, first: Node) -> str:
    """The internal address of worker 0 of slice 0."""
    info = gcloud.state(first)
    if gcloud.dry_run:
        return f"<worker 0 of {first.name}>"
    endpoints = (info or {}).get("networkEndpoints") or []
    if not endpoints:
        raise UserError(f"{first.name} has no network endpoint yet (state "
                        f"{(info or {}).get('state', 'GONE')}); wait until its slices are "
                        "ACTIVE (zoo tpu status)")
    return endpoints[0]["ipAddress"]


def run(gcloud: Gcloud, node: Node, slices: int, argv: list[str]) -> None:
    """Start argv on every worker of every slice, each slice with its megascale settings."""
    nodes = slice_nodes(node, slices)
    address = coordinator(gcloud, nodes[0])
    for index, each in enumerate(nodes):
        ops.run(gcloud, each, argv, megascale_env(index, slices, address))


def preempted(gcloud: Gcloud, node: Node, slices: int) -> str | None:
    """Why the job cannot go on (its queued resource not ACTIVE, a slice not READY), or
    None while every slice is up."""
    info = gcloud.slices_state(node)
    state = ((info or {}).get("state") or {}).get("state", "GONE")
    if state != "ACTIVE":
        return f"slices {state.lower()}"
    for each in slice_nodes(node, slices):
        node_state = (gcloud.state(each) or {}).get("state", "GONE")
        if node_state != "READY":
            return f"{each.name} {node_state.lower()}"
    return None


def recreate(gcloud: Gcloud, node: Node, slice_type: str, slices: int, version: str | None,
             spot: bool, argv: list[str], exists: bool) -> None:
    """All slices anew (a lost slice cannot rejoin a running job): the queued resource
    deleted with its nodes, created, set up, and the command started on every slice.
    Training resumes on all of them from the same latest complete checkpoint."""
    if exists:
        gcloud.run(delete_slices(node))
    gcloud.run(create_slices(node, slice_type, slices, version, spot))
    for each in slice_nodes(node, slices):
        ops.setup(gcloud, each)
    run(gcloud, node, slices, argv)


def babysit(gcloud: Gcloud, node: Node, slice_type: str, slices: int, argv: list[str], *,
            spot: bool, version: str | None, max_restarts: int, backoff: float, poll: float,
            echo=print) -> int:
    """Keep `argv` running on all slices until worker 0 of slice 0 reports success; when
    any slice is preempted or gone, every slice restarts (see `recreate`)."""
    if gcloud.dry_run:
        gcloud.slices_state(node)
        recreate(gcloud, node, slice_type, slices, version, spot, argv, exists=True)
        echo(f"# then poll every {poll:g} s: the slices' states and worker 0's exit; "
             f"restart all {slices} slices up to {max_restarts} times with backoff "
             f"{backoff:g} s x 2^n")
        return 0
    restarts, history = 0, []
    first = slice_nodes(node, slices)[0]
    if preempted(gcloud, node, slices):
        recreate(gcloud, node, slice_type, slices, version, spot, argv,
                 exists=gcloud.slices_state(node) is not None)
    else:
        for each in slice_nodes(node, slices):
            ops.setup(gcloud, each)
        run(gcloud, node, slices, argv)
    while True:
        time.sleep(poll)
        reason = preempted(gcloud, node, slices)
        if reason is None:
            workers = ops.worker_states(gcloud, first)
            state = workers[0] if workers else "unknown"
            if state == "exited 0":
                echo(f"babysit: done after {restarts} restart(s)")
                return 0
            if not (state.startswith("exited") or state == "idle"):
                continue
            reason = f"command {state} on worker 0 of {first.name}"
        history.append(reason)
        if restarts >= max_restarts:
            break
        wait = backoff * 2**restarts
        restarts += 1
        echo(f"babysit: {reason}; restart {restarts}/{max_restarts} of all {slices} slices "
             f"in {wait:g} s")
        time.sleep(wait)
        for each in slice_nodes(node, slices):  # what still runs on a surviving slice
            if (gcloud.state(each) or {}).get("state") == "READY":
                ops.stop(gcloud, each)
        recreate(gcloud, node, slice_type, slices, version, spot, argv, exists=True)
    echo(f"babysit: giving up after {restarts} restart(s) (limit {max_restarts}); "
         f"events: {'; '.join(history)}")
    return 1


def launch_training(gcloud: Gcloud, node: Node, model: str, accelerator: str,
                    train_args: list[str], follow: bool = True) -> None:
    """`zoo train MODEL --tpu SxTYPE --on NAME`: every slice's node checked to be a TYPE,
    synced, and started with its megascale settings; then worker 0 of slice 0 followed."""
    from core import topology  # start-up

    topo = topology.parse(accelerator)
    nodes = slice_nodes(node, topo.slices)
    for each in nodes:
        ops.check_accelerator(gcloud, each, topo.slice_name)
        ops.sync(gcloud, each)
    run(gcloud, node, topo.slices,
        [".venv/bin/zoo", "train", model, "--tpu", accelerator, *train_args])
    if follow:
        ops.logs(gcloud, nodes[0], worker=0, follow=True)
