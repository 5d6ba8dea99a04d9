"""A step-time model of a compiled program that counts communication: a model, not a
measurement. libtpu's own `optimal_seconds` leaves collectives out and counts loop bodies
once (facts.md: unusable as a step time), so compiled programs that differ mostly in what
they send over ICI (FSDP gathers, gradient reductions) would look alike without this.

Per chip, from the compiler's numbers:
  compute        matmul FLOPs (every loop trip) / peak bf16 FLOP/s
  memory         HBM bytes the cost analysis counts / HBM bandwidth; it counts each loop
                 body once, so under loops (scan) this term is a lower bound
  communication  sum over collectives of factor x bytes / ICI bandwidth per direction
Ring algorithms, the group size n taken as large ((n-1)/n ~ 1, at most 1/n too high): a
chip sends (and receives) its all-gather's output, its reduce-scatter's input, its
all-to-all's buffer and its collective-permute's buffer once, an all-reduce's buffer twice
(a reduce-scatter then an all-gather), spread over all its links.
Across slices (multi-slice programs) what crosses the data-center network is its own term,
bytes each chip sends over DCN bandwidth per chip, ring algorithms over the S slices: an
all-reduce's buffer 2(S-1)/S times, an all-gather's shard (what a chip sends) S-1 times.
Compute and memory overlap (the larger wins); communication is given both ways:
overlapped (the largest of the terms) and exposed (added to the other two).
"""

from __future__ import annotations

import dataclasses

from core.errors import UserError
from core.topology import DCN_BYTES_PER_S, HBM_BYTES_PER_S, ICI_BYTES_PER_S, Topology

# bytes each chip moves over ICI per byte the collective counts (see above)
RING_FACTOR = {"all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 1.0,
               "collective-permute": 1.0}
LABEL = "a model, not a measurement"


@dataclasses.dataclass(frozen=True)
class StepModel:
    """Projected seconds per step on one chip, by what bounds it."""

    compute_s: float
    memory_s: float
    communication_s: float  # over ICI, inside each slice
    dcn_s: float = 0.0  # over the data-center network, between slices

    @property
    def overlapped_s(self) -> float:
        """Communication hidden behind compute and memory where it is shorter."""
        return max(self.compute_s, self.memory_s, self.communication_s, self.dcn_s)

    @property
    def exposed_s(self) -> float:
        """Communication not hidden at all: it adds to compute and memory."""
        return max(self.compute_s, self.memory_s) + self.communication_s + self.dcn_s

    def mfu(self, model_flops_per_chip: float, peak: float) -> dict[str, float]:
        """Projected MFU, overlapped and exposed: model FLOPs / (projected step x peak)."""
        return {"overlapped": model_flops_per_chip / (self.overlapped_s * peak),
                "exposed": model_flops_per_chip / (self.exposed_s * peak)}

    def record(self) -> dict:
        return {**dataclasses.asdict(self), "overlapped_s": self.overlapped_s,
                "exposed_s": self.exposed_s, "label": LABEL}


def dcn_factor(kind: str, slices: int) -> float:
    """Bytes a chip sends over DCN per byte its cross-slice transfer names (ring over
    `slices`): the send buffer of an all-gather is the chip's shard, of the others the
    whole buffer."""
    if kind == "all-gather":
        return slices - 1.0
    return (2.0 if kind == "all-reduce" else 1.0) * (slices - 1) / slices


def project(matmul_flops: float, hbm_bytes: float, collectives: dict,
            topo: Topology, dcn_collectives: dict | None = None) -> StepModel:
    """The model for one chip of `topo` running a program with these per-chip counts
    (collectives: kind -> {"count", "bytes"}, as benchmarks/plan/tpu_compile.py counts them; those
    that cross slices in `dcn_collectives`). A generation without a published DCN figure
    (v4) cannot be modelled across slices: refused."""
    sent = sum(RING_FACTOR[kind] * value["bytes"] for kind, value in collectives.items())
    over_dcn = sum(dcn_factor(kind, topo.slices) * value["bytes"]
                   for kind, value in (dcn_collectives or {}).items())
    if over_dcn and topo.generation not in DCN_BYTES_PER_S:
        raise UserError(f"no DCN bandwidth is published for {topo.generation}: its "
                        "multi-slice step cannot be modelled")
    return StepModel(compute_s=matmul_flops / topo.peak_bf16_flops_per_chip,
                     memory_s=hbm_bytes / HBM_BYTES_PER_S[topo.generation],
                     communication_s=sent / ICI_BYTES_PER_S[topo.generation],
                     dcn_s=over_dcn / DCN_BYTES_PER_S[topo.generation] if over_dcn else 0.0)
