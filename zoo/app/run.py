"""A run resolved once: a model name, config files and key=value overrides become one frozen
`Run` (family, config, topology, sharding rules, remat, mesh) at the command line's edge,
and that object is what `zoo train`, `zoo plan`, `zoo plan --compile`, the bench and eval
are handed. Nothing downstream parses the same strings again. Everything that can be wrong
with the input fails here, before any model or data is loaded."""

from __future__ import annotations

import copy
import dataclasses

from core import config as config_lib
from core import lora
from core import topology as topology_lib
from core.errors import UserError
from core.flops import train_flops
from core.mesh import for_slices, resolve_axis_sizes
from core.remat import RematConfig
from core.run_config import slice_defaults
from core.sharding import ShardingRules
from core.task import Task
from zoo.registry import ModelFamily, resolve_name


@dataclasses.dataclass(frozen=True)
class Run:
    """What a command runs: `config` is the task's config plus `model` (its architecture)
    and `task` (its name); `mesh` is the axis sizes on the topology's devices."""

    family: ModelFamily
    task: Task  # the family's own, or the variant `task=NAME` chose (a causal LM's sft)
    config: object
    topology: topology_lib.Topology
    rules: ShardingRules
    remat: RematConfig
    mesh: dict[str, int]

    @property
    def model_name(self) -> str:
        return self.config.model_name

    @property
    def built_config(self):
        """The config with the architecture as it is built on this topology and mesh (the
        family's hardware choices made, e.g. llama's attention=auto -> flash on a TPU)."""
        model = self.family.model_for(self.config.model, self.topology, self.config.mesh)
        return dataclasses.replace(self.config, model=model)

    @property
    def adapters(self) -> lora.LoraConfig | None:
        """The LoRA adapters the run trains on its frozen base; None when every weight
        trains."""
        return self.config.lora if self.config.lora.enabled else None

    def transform_model(self, model, seed: int):
        """`model` (built, its starting weights loaded) as the run trains it: the one place
        the run's model transforms are applied (LoRA adapters on a frozen base)."""
        if self.adapters:
            lora.add_adapters(model, self.adapters, seed=seed)
        return model

    def meta_model(self, model_config=None):
        """The run's model on the meta device (nothing allocated; `model_config` in place of
        its architecture), transformed: what plans count and trace."""
        import torch  # start-up

        with torch.device("meta"):
            model = self.family.build(model_config or self.config.model, init=False)
            return self.transform_model(model, seed=0)

    def train_flops_per_item(self) -> float:
        """Model FLOPs of one item's step, what MFU counts: 3x the forward (and the forward
        of a reference model, DPO's), less the weight gradients a LoRA run's frozen base
        never computes."""
        cfg = self.config
        forward = self.family.forward_flops(cfg)
        full = train_flops(forward) + self.task.reference_forwards * forward  # DPO's reference
        if not self.adapters:
            return full
        plain = {"attention": "plain"} if hasattr(cfg.model, "attention") else {}  # countable
        model = dataclasses.replace(cfg.model, **plain)
        trained = lora.step_flops_ratio(  # the family's own loss: the model's step alone
            lambda: self.family.build(model, init=False), self.adapters, self.family.task.loss,
            self.family.task.example_batch(dataclasses.replace(cfg, global_batch_size=1,
                                                               grad_accum=1)))
        return full - train_flops(forward) * (1 - trained)

    def with_config(self, config) -> Run:
        """The same run with its config refined (a Hugging Face architecture, the task's
        token ids); the config's strings are not read again."""
        return dataclasses.replace(self, config=config)


def resolve_run(model_name: str, overrides: list[str], config_files=(),
                saved: bool = False, start=None) -> Run:
    """The run `zoo train MODEL --config F... KEY=VALUE...` describes. With `init_from`
    given, the starting point is identified first (zoo/app/init_from.py) and its
    architecture is the model's: the run's `model.*` keys may say how it runs, not change
    it. `saved`: the config files are a saved run's, whose `model` is whole and whose
    starting point is not read again (it may be gone: a tuned run stands on its own).
    `start`: the run's starting point, identified (zoo/app/init_from.py
    `resolve_started_run`; without it an `init_from` is first read when the run's engine is
    built)."""
    family, size = resolve_name(model_name)
    task = family.task_named(config_lib.given_value("task", config_files, overrides))
    if size is None and not (start or saved):
        raise UserError(f"{model_name} is a model family; name one of its sizes "
                        f"({', '.join(f'{model_name}-{s}' for s in family.sizes)}), or start "
                        "from a checkpoint of it (--init-from)")
    model = start.model if start else None if size else family.config_cls()
    config = config_lib.load(run_schema(family, size, task, model), files=config_files,
                             overrides=[f"model_name={model_name}", *overrides])
    if start:
        start.refuse_changed_architecture(config.model)
        config = start.apply(config, _gives("data.tokenizer", config_files, overrides))
    topology = topology_lib.parse(config.tpu)
    config.mesh = for_slices(config.mesh, topology)
    mesh = resolve_axis_sizes(config.mesh, topology.devices)
    for key, raise_for_slice in slice_defaults(type(config)).items():
        if not config_lib.sets_key(key, config_files, overrides):
            setattr(config, key, raise_for_slice(getattr(config, key), mesh))
    rules = ShardingRules.from_yaml(family.preset("sharding", config.sharding))
    remat = family.remat(config.remat)
    remat.check_device(topology.is_tpu)
    return Run(family, task, config, topology, rules, remat, mesh)


def _gives(key: str, files, overrides) -> bool:
    """Whether the user gave dotted `key` (an override, or in a YAML file)."""
    from omegaconf import OmegaConf  # the config system's own reader

    return (any(o.partition("=")[0] == key for o in overrides)
            or any(OmegaConf.select(config_lib._read_yaml(f), key) is not None for f in files))


def run_schema(family: ModelFamily, size: str | None, task: Task, model=None):
    """The run's config schema: the task's config plus the family's architecture (`size`'s,
    or `model`: a starting point's) and the task's name (saved with the run, so a resumed
    or exported run reads it back)."""
    default = family.sizes[size] if model is None else model
    return dataclasses.make_dataclass(
        f"{family.name.title()}RunConfig",
        [
            ("model", family.config_cls,
             dataclasses.field(default_factory=lambda: copy.deepcopy(default))),
            ("task", str, dataclasses.field(default=task.name)),
        ],
        bases=(task.config_cls,),
    )
