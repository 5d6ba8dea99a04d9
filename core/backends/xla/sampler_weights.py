"""The weights a sampler reads on the xla backend: copies in the call's precision, split as
the preset splits them but over no FSDP axis. A decode step runs once a token and reads
every weight; from FSDP shards it would all-gather the whole model each token (llama-8b on
v5p-64: 14 GiB a chip a token). The copies are gathered once, in the call's prefill graph,
and every decode step after reads them whole: the rollout holds one copy of the model per
chip (less its tensor and expert splits) instead of moving it every token."""

from __future__ import annotations

import contextlib

import torch

from core.backends.xla.spmd import divisible_spec
from core.mesh import axis_sizes
from core.sharding import ParamPlan, gathered_spec


@contextlib.contextmanager
def gathered_copies(model: torch.nn.Module, plan: list[ParamPlan], mesh, dtype: torch.dtype):
    """Within the block every planned parameter of `model` is a `dtype` copy marked with its
    `gathered_spec` (tied parameters one copy), and autocast runs in `dtype` unless fp32;
    the masters are back after it."""
    sizes = axis_sizes(mesh)
    named = dict(model.named_parameters())
    spec_of = {id(named[entry.name]): entry.spec for entry in plan}
    copies: dict[int, torch.Tensor] = {}
    masters = []
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is None or id(param) not in spec_of:
                continue
            if id(param) not in copies:
                spec = divisible_spec(gathered_spec(spec_of[id(param)]), tuple(param.shape),
                                      sizes)
                # an annotation in the graph (mark_sharding would run a graph a copy), on a
                # computed value: a plain copy keeps the master's, which none may replace
                copies[id(param)] = torch.ops.xla.aot_mark_sharding(
                    param.detach().to(dtype) * 1, str(mesh), str(spec))
            masters.append((module, name, param))
            module._parameters[name] = copies[id(param)]
    autocast = (torch.autocast("xla", dtype=dtype) if dtype != torch.float32
                else contextlib.nullcontext())
    try:
        with autocast:
            yield
    finally:
        for module, name, param in masters:
            module._parameters[name] = param
