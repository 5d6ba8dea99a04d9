"""One optimizer step, apart from the loop that drives it: the model, task, optimizer,
schedule, micro-batches and precision of a run, and nothing that reads data or writes
files. The loop (core/engine.py) calls it with each batch; `zoo plan --compile` builds it
over placeholders and traces one call for the slice's compiler.

The step is traced once and replayed: no `.item()`, no host transfers inside it; metrics are
read in a step closure after the graph ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from core.nan_guard import undone_unless, updated_tensors
from core.optim import build_optimizer, build_schedule, create_state
from core.task import Task


class TrainStep:
    """`step(batch) -> metrics`: forward and backward over `grad_accum` micro-batches,
    gradient clipping, the update (undone in the graph under nan_policy=skip when the loss
    or gradient norm is not finite) and the schedule's step."""

    def __init__(self, model: torch.nn.Module, task: Task, optimizer, scheduler, *, backend,
                 grad_accum: int, grad_clip: float, nan_policy: str, bf16: bool,
                 accumulate_in_loop: bool):
        self.model, self.task, self.backend = model, task, backend
        self.optimizer, self.scheduler = optimizer, scheduler
        self.grad_accum, self.grad_clip, self.nan_policy = grad_accum, grad_clip, nan_policy
        self.bf16 = bf16
        self.step_state = step_state_modules(model)
        # one XLA while loop over micro-batches (the backend's), or unrolled into the graph
        # (a module counting into its buffers in forward cannot be in a loop's body)
        self.accumulate_in_loop = accumulate_in_loop and grad_accum > 1 and not self.step_state
        self._aux_keys = None

    @classmethod
    def around(cls, model: torch.nn.Module, config, task: Task, backend, bf16: bool, *,
               fill_state: Callable = create_state, accumulate_in_loop: bool | None = None):
        """The step for a placed (sharded) model: its optimizer, the optimizer's state made
        before the first trace (so the step compiles once; `fill_state` makes placeholders
        instead when tracing ahead of time), and the schedule, in that order."""
        trained = [p for p in model.parameters() if p.requires_grad]  # not a LoRA run's base
        optimizer = build_optimizer(config.optim, trained)
        fill_state(optimizer)
        scheduler = build_schedule(config.schedule, optimizer, config.steps)
        in_loop = backend.accumulates_in_loop if accumulate_in_loop is None else accumulate_in_loop
        return cls(model, task, optimizer, scheduler, backend=backend,
                   grad_accum=config.grad_accum, grad_clip=config.optim.grad_clip,
                   nan_policy=config.nan_policy, bf16=bf16, accumulate_in_loop=in_loop)

    def __call__(self, batch: dict) -> dict:
        if self.accumulate_in_loop:
            total, aux_sum = self._accumulate(batch)
        else:
            total, aux_sum = self._unrolled(batch)
        params = [p for p in self.model.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip or float("inf"))
        with self._update_guard(total, grad_norm):
            extra = self.optimizer.step()  # custom optimizers may return a dict of metrics
            for module in self.step_state:
                module.after_optimizer_step(self.backend.total)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "loss": total,
            "grad_norm": grad_norm,
            **aux_sum,
            **(extra if isinstance(extra, dict) else {}),
        }

    def autocast(self):
        """The run's precision for the step and any evaluation pass: bf16 runs compute
        with bf16 copies of the fp32 weights (core/precision.py)."""
        return self.backend.autocast(self.model, self.bf16)

    def _unrolled(self, batch: dict) -> tuple:
        """Each micro-batch's forward and backward one after another in the step's graph,
        each loss weighed by its share of the step's (`_shares`)."""
        accum, total, aux_sum = self.grad_accum, 0.0, {}
        micro_batches = list(_micro_batches(batch, accum))
        for micro, share in zip(micro_batches, self._shares(micro_batches)):
            with self.autocast():
                loss, aux = self.backend.run(self.task.loss, self.model, micro)
            (loss * share).backward()
            total = total + loss.detach() * share
            for key, value in aux.items():
                aux_sum[key] = aux_sum.get(key, 0.0) + value.detach() / accum
        return total, aux_sum

    def _shares(self, micro_batches: list[dict]) -> list:
        """What each micro-batch's mean loss counts for in the step's: its share of what the
        whole step's loss averages over (Task.loss_weight: e.g. the tokens not ignored) on
        every process, so the loss and gradient are one big batch's mean whatever grad_accum
        and the process count; an equal share each where every row counts the same."""
        weights = [self.task.loss_weight(micro) for micro in micro_batches]
        if weights[0] is None:
            return [1 / len(micro_batches)] * len(micro_batches)
        whole = self.backend.total(sum(w.detach().float() for w in weights)).clamp(min=1)
        return [w.float() * self.backend.loss_parts / whole for w in weights]

    def _accumulate(self, batch: dict) -> tuple:
        """Mean loss and metrics over the micro-batches, gradients summed into `.grad`, in
        one XLA while loop (torch_xla's gradient_accumulation): the graph and its compile
        time stay those of one micro-batch whatever `grad_accum` is."""
        accum, keys = self.grad_accum, sorted(batch)
        micro = [_micro_batch_axis(batch[k], accum) for k in keys]
        micro_batches = [{k: m[i] for k, m in zip(keys, micro)} for i in range(accum)]
        if self._aux_keys is None:  # traced lazily once, never run: which metrics the task logs
            with torch.no_grad():
                self._aux_keys = sorted(self.task.loss(self.model, micro_batches[0])[1])
        weighed = self.task.loss_weight(micro_batches[0]) is not None

        def one_micro_batch(*tensors):
            inputs, aux_sums = tensors[:len(keys)], tensors[len(keys):]
            micro_batch = dict(zip(keys, inputs))
            with self.autocast():
                loss, aux = self.task.loss(self.model, micro_batch)
            sums = [s + aux[k].detach().float() / accum for s, k in zip(aux_sums, self._aux_keys)]
            if weighed:  # a sum over what the loss averages; divided by the whole's below
                loss = loss * self.task.loss_weight(micro_batch).float()
            return (loss, *sums) if sums else loss  # torch_xla's convention without carries

        zeros = [torch.zeros((), device=batch[keys[0]].device) for _ in self._aux_keys]
        result = self.backend.gradient_accumulation(one_micro_batch, micro, self.model, *zeros)
        loss, *sums = result if zeros else (result,)
        if weighed:  # the loop averaged the micro-batches' sums: make them the whole's mean
            whole = sum(self.task.loss_weight(m) for m in micro_batches).float()
            scale = accum / whole.clamp(min=1)
            loss = loss * scale
            for param in self.model.parameters():
                if param.grad is not None:
                    param.grad.mul_(scale)
        return loss, dict(zip(self._aux_keys, sums))

    def _update_guard(self, loss: torch.Tensor, grad_norm: torch.Tensor):
        """nan_policy=skip: the optimizer step is undone, in the graph, when the loss or the
        gradient norm is not finite. (stop is checked on the host: nothing in the graph.)"""
        if self.nan_policy != "skip":
            return contextlib.nullcontext()
        finite = torch.isfinite(loss) & torch.isfinite(grad_norm)
        state = [tensor for module in self.step_state for tensor in module.step_buffers()]
        return undone_unless(finite, updated_tensors(self.model, self.optimizer) + state)


def step_state_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Modules with state each step moves outside the gradient (DeepSeek's routing bias, by
    the experts' load: zoo/deepseek3/moe.py): `step_buffers()` names the tensors, none when
    there is nothing to move, and `after_optimizer_step(total)` moves them after each update
    (`total`: the backend's sum over every process's rows, for what forward counted)."""
    return [module for module in model.modules()
            if callable(getattr(module, "step_buffers", None)) and module.step_buffers()]


def _micro_batch_axis(tensor: torch.Tensor, accum: int) -> torch.Tensor:
    """[rows, ...] -> [accum, rows / accum, ...]: micro-batch i takes rows i, i + accum, ...
    (strided), so each keeps every device's share of the batch."""
    return tensor.view(tensor.shape[0] // accum, accum, *tensor.shape[1:]).transpose(0, 1)


def _micro_batches(batch: dict, accum: int):
    """The same strided micro-batches one after another, unrolled into the step graph."""
    if accum == 1:
        yield batch  # the usual step: no view ops in its graph
        return
    for i in range(accum):
        yield {k: _micro_batch_axis(v, accum)[i] for k, v in batch.items()}
