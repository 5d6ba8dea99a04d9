"""The attention kernel a decoder runs on a given slice and mesh (`for_slice`)."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from core.errors import UserError
from core.mesh import MeshConfig
from core.topology import Topology
from zoo.common.decoder_config import DecoderConfig

# DecoderConfig or a subclass (a family's): for_slice returns what it is given
AnyDecoderConfig = TypeVar("AnyDecoderConfig", bound=DecoderConfig)


def for_slice(config: AnyDecoderConfig, topo: Topology, mesh: MeshConfig) -> AnyDecoderConfig:
    """`attention=auto` made concrete for the hardware and mesh: flash on a TPU, plain
    elsewhere. torch_xla's flash kernel splits batch and heads only: with the sequence split
    over devices it would gather every query and compute all of attention on each device."""
    sequence_split = mesh.sequence != 1
    if config.attention == "flash" and sequence_split:
        raise UserError(f"model.attention=flash cannot split sequences (mesh.sequence="
                        f"{mesh.sequence}); use model.attention=plain or auto")
    return dataclasses.replace(
        config, attention="flash" if config.uses_flash(topo.is_tpu, sequence_split)
        else "plain")
