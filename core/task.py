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
  after_step(engine, step)        -> dict to log for that step, or None (default: None)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports the registry, which imports this: keep torch out of it
    import torch


class Task:
    name = ""
    config_cls: type
    unit = "examples"
    eval_backend: str | None = None
    generates_text = False

    def resolve(self, config):
        return config

    def data(self, config, process_index: int, process_count: int):
        raise NotImplementedError

    def loss(self, model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def loss_weight(self, batch: dict) -> torch.Tensor | None:
        return None

    def items_per_step(self, config) -> int:
        raise NotImplementedError

    def example_batch(self, config, seed: int = 0) -> dict:
        raise NotImplementedError

    def write_hf_extras(self, config, hf_config, folder) -> None:
        return None

    def evaluate(self, checkpoint, folder, options: dict) -> tuple[list[tuple], dict]:
        raise NotImplementedError(f"{self.name} has no evaluation of its own")

    def after_step(self, engine, step: int) -> dict | None:
        return None
