"""Catalog of TPU slice types (and XLA:CPU stand-ins) parsed from names like `v4-32`, and
multi-slice jobs as `Nx<slice>` (`2xv6e-256`: two v6e-256 slices over the data-center
network).

v2/v3/v4/v5p names count TensorCores (v4-32 = 16 chips); v5e/v5litepod/v6e names count chips.
Per-chip numbers are Google's published specs; they feed MFU and memory planning.
"""

from __future__ import annotations

import dataclasses
import os
import re

from core.errors import UserError

GiB = 1024**3


@dataclasses.dataclass(frozen=True)
class Generation:
    name: str
    cores_per_chip: int  # TensorCores per chip
    devices_per_chip: int  # PJRT devices per chip (megacore chips expose one)
    peak_bf16_flops_per_chip: float
    hbm_bytes_per_chip: int
    max_chips_per_host: int
    name_counts_cores: bool  # whether the N in `gen-N` counts TensorCores (else chips)
    valid_sizes: tuple[int, ...]  # valid N in `gen-N`


def _pow2(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(2**k for k in range(hi.bit_length()) if lo <= 2**k <= hi)


def _cube_sizes(max_cores: int) -> tuple[int, ...]:
    """v4/v5p: powers of two up to 256 cores, then whole multiples of 128 cores (4x4x4 cubes)."""
    return tuple(sorted(set(_pow2(8, 256)) | set(range(256, max_cores + 1, 128))))


GENERATIONS: dict[str, Generation] = {
    "v2": Generation("v2", 2, 2, 45e12, 16 * GiB, 4, True, _pow2(8, 512)),
    "v3": Generation("v3", 2, 2, 123e12, 32 * GiB, 4, True, _pow2(8, 2048)),
    "v4": Generation("v4", 2, 1, 275e12, 32 * GiB, 4, True, _cube_sizes(8192)),
    "v5p": Generation("v5p", 2, 1, 459e12, 95 * GiB, 4, True, _cube_sizes(17920)),
    "v5e": Generation("v5e", 1, 1, 197e12, 16 * GiB, 8, False, (1, 4, 8, 16, 32, 64, 128, 256)),
    "v6e": Generation("v6e", 1, 1, 918e12, 32 * GiB, 8, False, (1, 4, 8, 16, 32, 64, 128, 256)),
}
# HBM bandwidth per chip (bytes/s, Google's specs): the memory side of a roofline estimate.
HBM_BYTES_PER_S = {"v2": 700e9, "v3": 900e9, "v4": 1228e9, "v5p": 2765e9, "v5e": 819e9,
                   "v6e": 1640e9}
# ICI bandwidth per chip, each direction (bytes/s): what one chip can send (and, at the same
# time, receive) over all its links; the communication side of a step-time model. Google
# publishes it bidirectional (send + receive) per chip, or as a pod's all-reduce bandwidth
# over its chips, which comes to the same one-direction figure:
#   v4   1.1 PB/s all-reduce bandwidth per 4096-chip pod (cloud.google.com/tpu/docs/v4)
#        = 269 GB/s; ~6 links x 45 GB/s
#   v5p  "Interchip Interconnect BW 4800 Gbps" = 600 GB/s; 1200 GBps bidirectional
#        (cloud.google.com/tpu/docs/v5p)
#   v5e  1600 Gbps = 200 GB/s; 400 GBps bidirectional, 51.2 TB/s all-reduce per 256-chip
#        pod (cloud.google.com/tpu/docs/v5e)
#   v6e  800 GBps bidirectional, 102.4 TB/s all-reduce per 256-chip pod = 400 GB/s
#        (cloud.google.com/tpu/docs/v6e; the launch figure, 3584 Gbps, is 448 GB/s)
# v2/v3 have no per-chip figure published (and the compiler checks do not target them).
ICI_BYTES_PER_S = {"v4": 1.1e15 / 4096, "v5p": 600e9, "v5e": 200e9, "v6e": 400e9}
# Data-center network (DCN) bandwidth per chip, each direction (bytes/s): what crosses
# between slices goes through the hosts' NICs, shared by the host's chips.
#   v5p  "Data center network (DCN) bandwidth per chip 50 Gbps" (cloud.google.com/tpu/docs/v5p)
#   v5e  "Per-host NIC configuration 2 x 100 Gbps NIC", 8 chips a host; "Data center network
#        bandwidth per Pod 6.4 Tbps" over 256 chips: 25 Gbps (cloud.google.com/tpu/docs/v5e)
#   v6e  4 x 200 Gbps NICs per 8-chip host, 25.6 Tbps per 256-chip pod: 100 Gbps
#        (cloud.google.com/tpu/docs/v6e; recalled, the stored copy of that table is cut)
# v4 has no per-chip DCN figure published: its multi-slice step is not modelled (refused).
DCN_BYTES_PER_S = {"v5p": 50e9 / 8, "v5e": 25e9 / 8, "v6e": 100e9 / 8}
ALIASES = {"v5litepod": "v5e"}
VALID_FORMS = (
    "v2-N, v3-N, v4-N, v5p-N (N = TensorCores, e.g. v4-32), "
    "v5litepod-N / v5e-N, v6e-N (N = chips, e.g. v6e-8), cpu or cpu-N (N XLA CPU devices), "
    "and S slices of one of those as Sx<slice> (e.g. 2xv6e-256)"
)


class TopologyError(UserError):
    """A slice name that does not exist."""


@dataclasses.dataclass(frozen=True)
class Topology:
    name: str
    generation: str
    chips: int
    hosts: int
    chips_per_host: int
    cores_per_chip: int
    devices: int  # PJRT devices in the slice = what the SPMD mesh spans
    peak_bf16_flops_per_chip: float | None  # None on CPU: measured by calibration instead
    hbm_bytes_per_chip: int | None
    # Slices joined over the data-center network; chips, hosts and devices count all of them
    slices: int = 1

    @property
    def is_tpu(self) -> bool:
        return self.generation != "cpu"

    @property
    def peak_bf16_flops(self) -> float | None:
        """The whole slice's bf16 peak FLOP/s, the MFU denominator (None on CPU)."""
        return self.peak_bf16_flops_per_chip * self.chips if self.is_tpu else None

    @property
    def peak_description(self) -> str:
        return f"{self.chips} x {self.peak_bf16_flops_per_chip / 1e12:g} TFLOP/s bf16 ({self.name})"

    def per_chip(self, devices: int) -> int:
        """What throughput is divided by per chip: the slice's chips on a TPU; on the CPU
        stand-in, the runtime's virtual devices (each plays a chip)."""
        return self.chips if self.is_tpu else devices

    @property
    def slice_name(self) -> str:
        """The type of each slice (`v6e-256` of `2xv6e-256`): what gcloud creates S of."""
        return self.name.partition("x")[2] if self.slices > 1 else self.name

    @property
    def devices_per_slice(self) -> int:
        return self.devices // self.slices

    def one_slice(self) -> Topology:
        return parse(self.slice_name)

    def describe(self) -> str:
        """`zoo topology`'s lines: one field a line, in units a reader compares."""
        lines = []
        for key, value in self.to_dict().items():
            if key == "peak_bf16_flops_per_chip":
                value = f"{value / 1e12:g} TFLOP/s" if value else "measured by calibration (CPU)"
            elif key == "hbm_bytes_per_chip":
                value = f"{value / 2**30:g} GiB" if value else "host memory (CPU)"
            elif key.endswith("_bytes_per_s_per_chip"):
                value = f"{value / 1e9:g} GB/s each way" if value else "-"
            lines.append(f"{key:26} {value}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The fields, with the bandwidths of both networks per chip (None: not published
        or not a TPU): ICI inside a slice, DCN between slices."""
        return {**dataclasses.asdict(self),
                "ici_bytes_per_s_per_chip": ICI_BYTES_PER_S.get(self.generation),
                "dcn_bytes_per_s_per_chip": DCN_BYTES_PER_S.get(self.generation)}


def parse(name: str) -> Topology:
    """`v4-32` -> Topology, `2xv6e-256` -> two of them; raises TopologyError naming the
    valid forms."""
    text = name.strip().lower()
    if match := re.fullmatch(r"(\d+)x(.+)", text):
        slices = int(match.group(1))
        if slices < 1:
            raise TopologyError(f"'{name}' has no slices; valid forms: {VALID_FORMS}")
        if match.group(2) == "cpu":
            raise TopologyError(f"'{name}': say how many devices each simulated slice has, "
                                f"e.g. {slices}xcpu-4")
        one = parse(match.group(2))
        if one.slices > 1:
            raise TopologyError(f"'{name}' nests slice counts; valid forms: {VALID_FORMS}")
        if slices == 1:
            return one
        # simulated slices on XLA:CPU stay one process (one host)
        hosts, per_host = ((one.hosts * slices, one.chips_per_host) if one.is_tpu
                           else (1, one.chips * slices))
        return dataclasses.replace(one, name=f"{slices}x{one.name}", chips=one.chips * slices,
                                   hosts=hosts, chips_per_host=per_host,
                                   devices=one.devices * slices, slices=slices)
    if text == "cpu" or re.fullmatch(r"cpu-\d+", text):
        n = int(text.split("-")[1]) if "-" in text else int(os.environ.get("CPU_NUM_DEVICES", 1))
        if n < 1:
            raise TopologyError(f"'{name}' has no devices; valid forms: {VALID_FORMS}")
        return Topology(f"cpu-{n}", "cpu", n, 1, n, 1, n, None, None)
    match = re.fullmatch(r"(v\d+[a-z]*)-(\d+)", text)
    gen_name = match and ALIASES.get(match.group(1), match.group(1))
    if not match or gen_name not in GENERATIONS:
        raise TopologyError(f"unknown slice type '{name}'; valid forms: {VALID_FORMS}")
    gen = GENERATIONS[gen_name]
    n = int(match.group(2))
    if n not in gen.valid_sizes:
        unit = "TensorCores" if gen.name_counts_cores else "chips"
        sizes = ", ".join(map(str, gen.valid_sizes[:8]))
        sizes += ", ..." if len(gen.valid_sizes) > 8 else ""
        raise TopologyError(
            f"'{name}' is not a {gen_name} slice: N counts {unit} and must be one of {sizes} "
            f"(valid forms: {VALID_FORMS})"
        )
    chips = n // gen.cores_per_chip if gen.name_counts_cores else n
    per_host = chips if chips <= gen.max_chips_per_host else 4  # multi-host slices: 4 per VM
    return Topology(
        name=text,
        generation=gen_name,
        chips=chips,
        hosts=chips // per_host,
        chips_per_host=per_host,
        cores_per_chip=gen.cores_per_chip,
        devices=chips * gen.devices_per_chip,
        peak_bf16_flops_per_chip=gen.peak_bf16_flops_per_chip,
        hbm_bytes_per_chip=gen.hbm_bytes_per_chip,
    )
