"""The `zoo` command. Heavy imports (torch, torch_xla) happen inside commands so that
`zoo --help` stays instant."""

from __future__ import annotations

import json
import sys

import click

from core.errors import UserError


class _Group(click.Group):
    """Turns UserError into one line on stderr and a non-zero exit, without a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UserError as error:
            raise click.ClickException(str(error)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """zoo: PyTorch/XLA reference models and a shared SPMD runtime for TPUs."""


@cli.command()
@click.argument("slice_type")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def topology(slice_type, as_json):
    """Describe a TPU slice type (v4-32, v5litepod-16, v6e-256, cpu-8, ...)."""
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
        click.echo(f"{key:26} {value}")


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
def doctor(overrides):
    """Report versions and devices, then run a sharded matmul over all devices.

    OVERRIDES are mesh settings such as mesh.tensor=2 (default: fsdp over all devices).
    """
    from core import config, runtime
    from core.mesh import axis_sizes, build_mesh
    from core.smoke import DoctorConfig, sharded_matmul

    cfg = config.load(DoctorConfig, overrides=overrides)
    info = runtime.detect()
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


def main():
    cli(prog_name="zoo")
