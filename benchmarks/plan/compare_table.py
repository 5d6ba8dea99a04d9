"""The console side of `zoo plan --compile --compare maxtext`: one table, zoo and MaxText
per chip with their ratio, under a heading that says which compiler made both and over a
footnote that says what the projected step is (a model, not a measurement)."""

from __future__ import annotations

from benchmarks.plan.step_model import LABEL, RING_FACTOR
from benchmarks.plan.tpu_compile import COLLECTIVES
from core.table import format_bytes, format_table
from core.topology import DCN_BYTES_PER_S, HBM_BYTES_PER_S, ICI_BYTES_PER_S


def _seconds(value: float) -> str:
    return f"{value:.3f} s" if value >= 1 else f"{value * 1e3:.3g} ms"


def _hbm(part: str):
    return lambda record: record["hbm"].get(part)


def _projected(key: str):
    return lambda record: record["projected_step"][key] if "projected_step" in record else None


def _mfu(key: str):
    return lambda record: (record["projected_step"]["mfu"][key] if "projected_step" in record
                           else None)


def _collective(kind: str, field: str, group: str = "collectives"):
    def value(record):
        if "collectives" not in record:
            return None
        return (record.get(group) or {}).get(kind, {}).get(field, 0)
    return value


def _collective_rows(records: dict, group: str, label: str) -> list[tuple]:
    kinds = [kind for kind in COLLECTIVES
             if any(kind in (record.get(group) or {}) for record in records.values())]
    return [spec for kind in kinds for spec in (
        (f"{label}{kind} count", _collective(kind, "count", group), str),
        (f"{label}{kind} bytes", _collective(kind, "bytes", group), format_bytes))]


def row_specs(records: dict) -> list[tuple]:
    """(label, value of a side's record or None, how to show it) per row; what crosses
    slices (multi-slice) in rows of its own."""
    collectives = [*_collective_rows(records, "collectives", ""),
                   *_collective_rows(records, "dcn_collectives", "DCN ")]
    over_slices = any(record.get("dcn_collectives") for record in records.values())
    return [
        ("HBM arguments", _hbm("arguments"), format_bytes),
        ("HBM temporaries", _hbm("temporaries"), format_bytes),
        ("HBM generated code", _hbm("generated_code"), format_bytes),
        ("HBM total", _hbm("total"), format_bytes),
        *collectives,
        ("matmul FLOPs (every loop trip)", lambda record: record.get("matmul_flops"),
         lambda value: f"{value:.3e}"),
        ("compile", lambda record: record["compile_seconds"], lambda value: f"{value:.1f} s"),
        ("model: compute", _projected("compute_s"), _seconds),
        ("model: HBM traffic", _projected("memory_s"), _seconds),
        ("model: ICI traffic", _projected("communication_s"), _seconds),
        *([("model: DCN traffic", _projected("dcn_s"), _seconds)] if over_slices else []),
        ("projected step, ICI overlapped", _projected("overlapped_s"), _seconds),
        ("projected step, ICI exposed", _projected("exposed_s"), _seconds),
        ("projected MFU, ICI overlapped", _mfu("overlapped"), lambda value: f"{value:.1%}"),
        ("projected MFU, ICI exposed", _mfu("exposed"), lambda value: f"{value:.1%}"),
    ]


def ratio(zoo: float | None, peer: float | None) -> str:
    return f"{zoo / peer:.2f}" if zoo is not None and peer else "-"


def table_rows(record: dict) -> list[tuple[str, str, str, str]]:
    """(per chip, zoo, MaxText, zoo/MaxText) rows of a comparison's record."""
    sides = {side: record[side] for side in ("zoo", "maxtext")}
    rows = [("fits", *(_fits(side) for side in sides.values()), "-")]
    for label, value, show in row_specs(sides):
        zoo, peer = (value(side) for side in sides.values())
        rows.append((label, *(show(v) if v is not None else "-" for v in (zoo, peer)),
                     ratio(zoo, peer)))
    return rows


def _fits(side: dict) -> str:
    if side["hbm"].get("refused"):
        return f"no: refused, needs >= {format_bytes(side['hbm']['program_at_least'])}"
    return "yes" if side["fits"] else f"no: {format_bytes(side['hbm']['total'])}"


def describe(record: dict) -> str:
    """The table with its heading and footnote."""
    compiler, trace = record["versions"]["compiler"], record["versions"]["zoo_trace"]
    generation = record["generation"]
    mesh = " ".join(f"{axis}={size}" for axis, size in record["mesh"].items() if size > 1)
    factors = ", ".join(f"{kind} {factor:g}x" for kind, factor in RING_FACTOR.items())
    return "\n".join([
        f"{record['model']} on {record['slice']} ({record['chips']} chips, mesh {mesh}, "
        f"{format_bytes(record['hbm_per_chip'])} HBM per chip): zoo's train step vs MaxText "
        f"{compiler['maxtext']}'s, both compiled by libtpu {compiler['libtpu']} (jax "
        f"{compiler['jax']}, compile-only), counted by the same code",
        f"zoo traced with torch {trace['torch']} / torch_xla {trace['torch_xla']} in "
        f"{record['zoo_trace_seconds']:.0f} s (Pallas kernels lowered for libtpu "
        f"{trace['libtpu']}); attention: {record['attention']}",
        "MaxText settings: " + " ".join(record["maxtext_keys"]),
        "",
        format_table(("per chip", "zoo", "MaxText", "zoo/MaxText"), table_rows(record)),
        "",
        f"projected step: {LABEL}. compute = matmul FLOPs / peak bf16; HBM traffic = the "
        f"cost analysis's bytes / {HBM_BYTES_PER_S[generation] / 1e9:,.0f} GB/s (loop bodies "
        f"counted once: a lower bound under scan); ICI traffic = collective bytes x ring "
        f"factor ({factors}; (n-1)/n taken as 1) / {ICI_BYTES_PER_S[generation] / 1e9:,.0f} "
        "GB/s per chip and direction, all links busy"
        + (f"; DCN traffic = what crosses slices (libtpu's megascale transfers) x ring "
           f"factor over {record['slices']} slices / {DCN_BYTES_PER_S[generation] / 1e9:g} "
           "GB/s per chip" if record.get("slices", 1) > 1 else "")
        + ". Compute and HBM overlap (the larger counts); communication overlapped = the "
        "largest of the terms, exposed = added to it. "
        f"MFU = model FLOPs {record['model_flops_per_chip']:.3e} per chip (3 x forward, "
        "causal; the same for both) / (projected step x peak).",
    ])
