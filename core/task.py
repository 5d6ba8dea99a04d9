"""What the engine asks of a kind of training, in one place. The engine (core/engine.py)
knows no task: a Task object (causal LM, seq2seq, image classification: zoo/tasks/) says how
data becomes batches and batches become a loss; a model family names the task it trains.

Extension points (override in a subclass; the defaults are marked):
  config_cls                      the run config schema: a TrainConfig dataclass with the
                                  task's fields (seq_len, data, ...); the engine adds `model`
  unit                            throughput unit ("tokens", "examples"): `<unit>_per_s`
  resolve(config) -> config       a new run config with facts only the data knows filled in
                                  (tokenizer ids, class names); never mutates its argument
  data(config, index, count)      this host's batches: an object whose `batch(i)` is host
                                  `index` of `count`'s rows of global batch i, a pure function
                                  of i, so resuming at step s is starting at batch s
  loss(model, batch)              -> (loss, aux: dict of scalar tensors), traced in the step
  loss_weight(batch)              what `loss` is a mean over in this batch (the tokens not
                                  ignored), or None (default): every row counts the same.
                                  A backend that splits the batch over processes weighs
                                  each process's loss by it, so the step's loss and gradient
                                  are the whole batch's mean
  items_per_step(config)          throughput items per optimizer step; MFU = 3 x forward
                                  FLOPs per item x items / (step time x peak)
  example_batch(config, seed)     a random global batch in the task's format (tests, plan)
  write_hf_extras(config, hf_config, folder)   tokenizer / processor files of an export
  eval_backend                    lm-eval's AutoModel kind ("causal", "seq2seq") for `zoo
                                  eval`, or None: then `evaluate(checkpoint, folder, options)`
  generates_text                  whether `zoo train` ends with a sampled continuation
  sample_prompt                   what that sample continues (the user's --prompt wins)
  chat                            whether prompts go through the tokenizer's chat template
                                  (a model tuned on conversations answers them so)
  after_step(engine, step)        -> dict to log for that step, or None (default: None)
  reference_forwards              forwards of a frozen reference model in each step (DPO's:
                                  1; default 0), counted in MFU
  bind(model, config, place)      -> the task ready to train `model` (built, not yet placed):
                                  what it needs beside the model is its own, made here (a
                                  frozen reference copy or the model's adapters off: DPO; a
                                  sampler). `place(module)` puts a module on the devices as
                                  the model will be (remat, sharding, precision) and returns
                                  it. Called once by the engine; default: itself
  started(engine)                 the engine built around the placed model, before its first
                                  batch is read: a task whose batches come from the model
                                  (GRPO's rollouts) hooks them to it here; default: nothing
  placed(config, params)          -> [Placed(name, bytes per device, in_step, advice)]:
                                  what `bind` puts on the devices beside the trained model
                                  (a reference copy, a sampler's KV cache), from the run
                                  config and the model's parameter plan
                                  (core.sharding.ParamPlan entries, their shard bytes). The
                                  plans (`zoo plan`, `--compile`) and `zoo train`'s fit check
                                  add it, and a plan that does not fit says its advice (what
                                  shrinks it); default: nothing
  sampling(config, mesh_sizes)    -> Sampling(layout, shape, params) or None (default): what
                                  the task samples with on the run's devices between steps
                                  (GRPO's rollouts: the family's cache layout, the rollout's
                                  SamplerShape, its SamplingParams), so `zoo plan --compile`
                                  compiles that sampler's decode step beside the train step
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:  # the CLI imports the registry, which imports this: keep torch out of it
    from collections.abc import Callable
    from pathlib import Path

    import torch
    from transformers import PretrainedConfig

    from core.sharding import ParamPlan

# A run config: an instance of the task's config_cls (a core.run_config.TrainConfig) with the
# family's architecture as `model`. Any, as each task's methods take its own class.
RunConfig: TypeAlias = Any


class Batches(Protocol):
    """What `Task.data` returns: this host's share of each global batch. Batches that read
    the model as it is when they are made (a rollout of the policy) set `on_demand = True`:
    the engine then makes each one when its step asks, never ahead (no prefetch)."""

    def batch(self, index: int) -> dict[str, torch.Tensor]:
        """This host's rows of global batch `index`, a pure function of `index`."""


@dataclasses.dataclass(frozen=True)
class Placed:
    """Device memory a task holds beside the trained model, per device: the plans must count
    it or a run they pass runs out of memory."""

    name: str  # the plan's term, e.g. "reference model (fp32, frozen)"
    bytes: float  # per device
    # True: the train step reads it, so a compiled step holds it among its arguments (a
    # reference's weights); False: it lives between programs (a sampler's KV cache), so a
    # compiled step's total is short of it and the compiled plan adds it
    in_step: bool = True
    # what the user can change to shrink it, for a plan that does not fit ("" : nothing but
    # the model's own settings)
    advice: str = ""
    # a rollout's share that its compiled decode step reads among its arguments ("cache",
    # "weights"), where the compiled plan reads its figure; "" for any other
    in_decode: str = ""


@dataclasses.dataclass(frozen=True)
class Sampling:
    """A sampler a task runs on the run's devices (core/sampler): what fixes its graphs."""

    layout: list  # core.sampler.cache.LayerLayout, one per attention call
    shape: Any  # core.sampler.SamplerShape
    params: Any  # core.sampler.SamplingParams


class Task:
    name = ""
    config_cls: type
    unit = "examples"
    eval_backend: str | None = None
    generates_text = False
    sample_prompt = "The"
    chat = False

    def resolve(self, config: RunConfig) -> RunConfig:
        return config

    def data(self, config: RunConfig, process_index: int, process_count: int) -> Batches:
        raise NotImplementedError

    def loss(self, model: torch.nn.Module,
             batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def loss_weight(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
        return None

    def items_per_step(self, config: RunConfig) -> int:
        raise NotImplementedError

    def example_batch(self, config: RunConfig, seed: int = 0) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def write_hf_extras(self, config: RunConfig, hf_config: PretrainedConfig,
                        folder: Path) -> None:
        return None

    def evaluate(self, checkpoint: str | Path, folder: Path,
                 options: dict[str, Any]) -> tuple[list[tuple], dict]:
        raise NotImplementedError(f"{self.name} has no evaluation of its own")

    reference_forwards = 0

    def bind(self, model: torch.nn.Module, config: RunConfig,
             place: Callable[[torch.nn.Module], torch.nn.Module]) -> Task:
        return self

    def placed(self, config: RunConfig, params: list[ParamPlan]) -> list[Placed]:
        return []

    def sampling(self, config: RunConfig, mesh_sizes: dict[str, int]) -> Sampling | None:
        return None

    # engine: a core.engine.Engine, Any as that module imports this one
    def started(self, engine: Any) -> None:
        return None

    # engine: a core.engine.Engine, Any as that module imports this one
    def after_step(self, engine: Any, step: int) -> dict[str, float] | None:
        return None
