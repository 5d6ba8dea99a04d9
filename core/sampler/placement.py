"""Where a sampler's tensors live: on a backend's devices, split by row as its activations
are (`OnBackend`), or on the model's one device (`OnDevice`, backend=None: eager, what the
unit tests and one dtensor process use), or nowhere (`Traced`: placeholders for a step the
plans compile and never run). The engine and the cache ask only these questions."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from core.precision import compute_in


class OnDevice:
    def __init__(self, device: torch.device):
        self.device = device

    def zeros(self, shape: tuple[int, ...], dtype: torch.dtype, spec: tuple) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype, device=self.device)

    def rows(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device)

    def host(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.cpu()

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def sync(self) -> None:
        return None

    def compile_stats(self) -> tuple[int, float]:
        return 0, 0.0

    def autocast(self, model: torch.nn.Module, bf16: bool) -> contextlib.AbstractContextManager:
        return compute_in(model, torch.bfloat16 if bf16 else torch.float32)


class OnBackend:
    """A backend's answers (core/backends/contract.py) for the sampler on `mesh`; with the
    parameter `plan` its `prepare` returned, the weights as its `sampler_weights` lays them
    out (xla: FSDP shards gathered once a call, not once a token)."""

    def __init__(self, backend, mesh, plan=None):
        self.backend, self.mesh, self.plan = backend, mesh, plan

    def zeros(self, shape: tuple[int, ...], dtype: torch.dtype, spec: tuple) -> torch.Tensor:
        return self.backend.sampler_buffer(shape, dtype, spec, self.mesh)

    def rows(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.backend.place_rows({"rows": tensor}, self.mesh)["rows"]

    def host(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.backend.host_rows(tensor)

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.backend.run(fn, *args)

    def sync(self) -> None:
        self.backend.sync()

    def compile_stats(self) -> tuple[int, float]:
        return self.backend.compile_stats()

    def autocast(self, model: torch.nn.Module, bf16: bool) -> contextlib.AbstractContextManager:
        if self.plan is None:
            return self.backend.autocast(model, bf16)
        return self.backend.sampler_weights(model, self.plan, self.mesh, bf16)


class Traced(OnBackend):
    """A backend's placement for a step that is traced and never run (the plans compile it
    for a slice): every buffer is `make(shape, dtype, spec)`'s (placeholders, no memory
    behind them), a stream's `spec` as `zeros` is given it and the rows' tensors split as
    `rows_spec(shape)` says the backend's `place_rows` splits them. Nothing syncs; nothing
    can be read back."""

    def __init__(self, backend, mesh, make: Callable[..., torch.Tensor],
                 rows_spec: Callable[[tuple[int, ...]], tuple]):
        super().__init__(backend, mesh)
        self.make, self.rows_spec = make, rows_spec

    def zeros(self, shape: tuple[int, ...], dtype: torch.dtype, spec: tuple) -> torch.Tensor:
        return self.make(shape, dtype, spec)

    def rows(self, tensor: torch.Tensor) -> torch.Tensor:
        shape = tuple(tensor.shape)
        return self.make(shape, tensor.dtype, self.rows_spec(shape))

    def host(self, tensor: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a traced step never runs: it has no values to read")

    def sync(self) -> None:
        return None

    def compile_stats(self) -> tuple[int, float]:
        return 0, 0.0
