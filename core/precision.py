"""Mixed precision as a policy: master weights, gradients and optimizer state stay fp32;
the step runs with every floating-point weight cast to the compute dtype (bf16 on TPU),
so FSDP gathers bf16 and the activations -- the residual stream, the layer inputs a
rematerialised stack keeps for backward -- are bf16 too (FSDP2's MixedPrecisionPolicy
with param_dtype=bf16; MaxText's weight_dtype=float32, dtype=bfloat16). Autocast alone
leaves weights fp32: the embedding then starts an fp32 residual stream, and a scanned
llama-8b keeps 8 GiB of fp32 layer inputs per chip where bf16 needs 4. Numerically
sensitive ops (softmax, losses, norms' statistics) still run in fp32 under autocast."""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def compute_in(model: torch.nn.Module, dtype: torch.dtype):
    """Within the block the model's floating-point parameters are `dtype` copies of the
    fp32 masters (gradients flow back to the masters through the cast) and autocast runs
    in `dtype`. fp32: nothing changes."""
    if dtype == torch.float32:
        yield
        return
    masters = []
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None and param.is_floating_point() and param.dtype != dtype:
                masters.append((module, name, param))
                module._parameters[name] = param.to(dtype)
    device = masters[0][2].device.type if masters else "cpu"
    try:
        with torch.autocast(device, dtype=dtype):
            yield
    finally:
        for module, name, param in masters:
            module._parameters[name] = param
