"""The gcloud invocations behind `zoo tpu`: one function per command, returning argv lists,
and a runner that executes them or, with --dry-run, prints them shell-quoted.

Nothing here holds a secret: tokens travel in a mode-600 file copied to the workers
(tools/remote.py), never on a command line that `ps` or a log would show.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess

from core.errors import UserError

# A TPU VM software version per generation (`gcloud compute tpus versions list`).
DEFAULT_VERSIONS = {
    "v2": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}


# Google Cloud resource names (RFC 1035 labels), which TPU VM names must be.
NODE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclasses.dataclass(frozen=True)
class Node:
    """A TPU VM (all workers of one slice) and where it lives."""

    name: str
    zone: str
    project: str | None = None

    @classmethod
    def resolve(cls, name: str, zone: str | None, project: str | None) -> Node:
        """Zone and project from the flags, else gcloud's usual environment defaults."""
        if not NODE_NAME.fullmatch(name):
            raise UserError(
                f"'{name}' is not a valid TPU VM name: lowercase letters, digits and hyphens, "
                "starting with a letter, at most 63 characters (e.g. my-v4-32)"
            )
        zone = zone or os.environ.get("CLOUDSDK_COMPUTE_ZONE")
        if not zone:
            raise UserError(
                "no zone: pass --zone (e.g. us-central2-b) or set CLOUDSDK_COMPUTE_ZONE"
            )
        return cls(name, zone, project or os.environ.get("CLOUDSDK_CORE_PROJECT"))

    def where(self) -> list[str]:
        return ["--zone", self.zone, *(["--project", self.project] if self.project else [])]


def tpu_vm(*args: str) -> list[str]:
    return ["gcloud", "compute", "tpus", "tpu-vm", *args]


def describe(node: Node) -> list[str]:
    return tpu_vm("describe", node.name, *node.where(), "--format=json")


def software_version(accelerator: str, version: str | None) -> str:
    """`version`, or the default TPU VM software for the slice type's generation."""
    generation = accelerator.split("-")[0].replace("v5e", "v5litepod")
    return version or DEFAULT_VERSIONS.get(generation, "tpu-ubuntu2204-base")


def create(node: Node, accelerator: str, version: str | None, spot: bool,
           preemptible: bool, data_disk: str | None = None) -> list[str]:
    version = software_version(accelerator, version)
    capacity = ["--spot"] if spot else ["--preemptible"] if preemptible else []
    disk = [f"--data-disk=source={data_disk},mode=read-write"] if data_disk else []
    return tpu_vm("create", node.name, *node.where(), f"--accelerator-type={accelerator}",
                  f"--version={version}", *capacity, *disk)


def queued_resources(*args: str) -> list[str]:
    return ["gcloud", "compute", "tpus", "queued-resources", *args]


def create_slices(node: Node, slice_type: str, slices: int, version: str | None,
                  spot: bool) -> list[str]:
    """S slices as one queued resource (Multislice): nodes NAME-0 ... NAME-(S-1), created
    together, reachable over the data-center network."""
    return queued_resources("create", node.name, *node.where(),
                            f"--accelerator-type={slice_type}",
                            f"--runtime-version={software_version(slice_type, version)}",
                            f"--node-count={slices}", f"--node-prefix={node.name}",
                            *(["--spot"] if spot else []))


def describe_slices(node: Node) -> list[str]:
    return queued_resources("describe", node.name, *node.where(), "--format=json")


def delete_slices(node: Node) -> list[str]:
    """The queued resource and (--force) its nodes."""
    return queued_resources("delete", node.name, *node.where(), "--force", "--quiet")


def slice_nodes(node: Node, slices: int) -> list[Node]:
    """The TPU VMs of a job: the node itself, or NAME-0 ... NAME-(S-1) of its queued
    resource."""
    if slices == 1:
        return [node]
    return [dataclasses.replace(node, name=f"{node.name}-{index}") for index in range(slices)]


def delete(node: Node) -> list[str]:
    return tpu_vm("delete", node.name, *node.where(), "--quiet")


def ssh(node: Node, command: str, worker: str = "all") -> list[str]:
    return tpu_vm("ssh", node.name, *node.where(), f"--worker={worker}", "--command", command)


def scp(node: Node, local: str, remote: str, worker: str = "all") -> list[str]:
    return tpu_vm("scp", local, f"{node.name}:{remote}", *node.where(), f"--worker={worker}")


class Gcloud:
    """Runs gcloud, or prints what it would run (`dry_run`)."""

    def __init__(self, dry_run: bool = False, echo=print):
        self.dry_run, self.echo = dry_run, echo

    def run(self, argv: list[str], *, capture: bool = False, check: bool = True,
            note: str = "") -> subprocess.CompletedProcess:
        if self.dry_run:
            self.echo(shlex.join(argv) + (f"    # {note}" if note else ""))
            return subprocess.CompletedProcess(argv, 0, "", "")
        try:
            result = subprocess.run(argv, text=True, capture_output=capture)
        except FileNotFoundError:
            raise UserError("gcloud not found: install the Google Cloud SDK "
                            "(https://cloud.google.com/sdk/docs/install)") from None
        if check and result.returncode:
            detail = (result.stderr or "").strip().splitlines()[-1:] if capture else []
            raise UserError(f"{shlex.join(argv[:5])} ... failed (exit {result.returncode})"
                            + (f": {detail[0]}" if detail else ""))
        return result

    def state(self, node: Node) -> dict | None:
        """The node's description (state, acceleratorType, ...), or None if it is gone."""
        return self._describe(node, describe(node), "check the node exists and its type")

    def slices_state(self, node: Node) -> dict | None:
        """The queued resource's description ({"state": {"state": ACTIVE, ...}}), or None."""
        return self._describe(node, describe_slices(node), "check the slices are ACTIVE")

    def _describe(self, node: Node, argv: list[str], note: str) -> dict | None:
        if self.dry_run:
            self.run(argv, note=note)
            return None
        result = self.run(argv, capture=True, check=False)
        if result.returncode:
            if "NOT_FOUND" in result.stderr or "not found" in result.stderr.lower():
                return None
            raise UserError(f"gcloud describe {node.name} failed: "
                            f"{(result.stderr.strip().splitlines() or ['?'])[-1]}")
        return json.loads(result.stdout)
