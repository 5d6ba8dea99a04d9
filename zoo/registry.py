"""The model zoo. A family module exposes `FAMILY` (a ModelFamily); models are named
`<family>-<size>`, e.g. llama-1b. Families are found, not listed:

- every zoo/<name>/family.py in this repository (what `zoo new-model NAME` creates);
- installed packages that declare a `zoo.families` entry point, e.g. in pyproject.toml
  `[project.entry-points."zoo.families"] mynet = "my_pkg.mynet.family"`;
- ZOO_FAMILIES="mynet=my_pkg.mynet.family,other=..." (modules importable from PYTHONPATH),
  a shortcut for a family that is not installed.

Tasks picked with `task=NAME` on top of a family's own (sft, dpo) are found the same way: a
module exposing `VARIANT` (zoo/tasks/variant.py's TaskVariant) in zoo/tasks/NAME.py, a
`zoo.tasks` entry point, or ZOO_TASKS="name=package.module,...".
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from core.errors import UserError
from core.task import RunConfig, Task

if TYPE_CHECKING:  # the CLI imports this: keep torch and transformers out of it
    import torch
    from transformers import PretrainedConfig

    from core.mesh import MeshConfig
    from core.remat import RematConfig
    from core.sampler.cache import LayerLayout
    from core.topology import Topology
    from zoo.tasks.variant import TaskVariant

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
# The presets families share: remat/*.yaml (every family that declares its layers) and
# sharding/<layout>/*.yaml (the families whose parameter names follow that layout).
SHARED_PRESETS = Path(__file__).resolve().parent / "common" / "presets"


def _in_tree_families() -> dict[str, str]:
    families_dir = Path(__file__).resolve().parent
    return {
        path.parent.name: f"zoo.{path.parent.name}.family"
        for path in sorted(families_dir.glob("*/family.py"))
        if not path.parent.name.startswith("_")
    }


def _in_tree_tasks() -> dict[str, str]:
    """zoo/tasks modules that assign `VARIANT` at their top level, read without importing
    them (the CLI imports this module: no torch)."""
    return {path.stem: f"zoo.tasks.{path.stem}" for path in sorted(TASKS_DIR.glob("*.py"))
            if _declares(path, "VARIANT")}


def _declares(path: Path, name: str) -> bool:
    return any(isinstance(node, ast.Assign)
               and any(isinstance(target, ast.Name) and target.id == name
                       for target in node.targets)
               for node in ast.parse(path.read_text()).body)


def _installed(group: str) -> dict[str, str]:
    return {point.name: point.value for point in importlib.metadata.entry_points(group=group)}


def _external(variable: str) -> dict[str, str]:
    spec = os.environ.get(variable, "")
    pairs = [item.partition("=") for item in spec.split(",") if item.strip()]
    if any(not name or not module for name, _, module in pairs):
        raise UserError(f"{variable}='{spec}' must look like name=package.module,name2=...")
    return {name.strip(): module.strip() for name, _, module in pairs}


FAMILIES = {**_in_tree_families(), **_installed("zoo.families"), **_external("ZOO_FAMILIES")}


@functools.cache  # read when a variant is asked for, not at every start of the CLI
def task_modules() -> dict[str, str]:
    """{name: module} of every task variant found."""
    return {**_in_tree_tasks(), **_installed("zoo.tasks"), **_external("ZOO_TASKS")}


# A family's model config: the dataclass of its architecture's hyper-parameters.
ModelConfig = TypeVar("ModelConfig")


class ForwardFlops(Protocol):
    def __call__(self, run: RunConfig, /, causal: bool = True) -> float:
        """Forward matmul FLOPs per item, the task's throughput unit (a token for LMs, an
        example for a classifier); `causal`: the scores a causal mask drops not counted."""


class ActivationBytes(Protocol):
    def __call__(self, run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                 bytes_per_value: int, on_tpu: bool, /) -> dict[str, float]:
        """{term: bytes per device} of the activations a step keeps, `tensor` the mesh's
        tensor axis, `remat` the remat policy of the checkpointed layers (None: no remat)."""


@dataclasses.dataclass(frozen=True)
class ModelFamily(Generic[ModelConfig]):
    """Everything the shared runtime, bench, plan, export and the conformance suite need to
    know about a family. Field order: required first, Hugging Face interop last (optional)."""

    name: str
    config_cls: type[ModelConfig]  # dataclass of architecture hyper-parameters
    sizes: dict[str, ModelConfig]  # size name -> config; "tiny" is the one the tests train
    model_cls: type  # nn.Module built from a config; `init_weights(seed)` initialises it
    task: Task  # what its models are trained for (zoo/tasks): data, loss, export extras, eval
    # its own presets, sharding/*.yaml and remat/*.yaml (those that differ from the shared
    # ones in SHARED_PRESETS, or that no other family has): found before the shared ones
    presets_dir: Path
    # these two take a run config (task.config_cls + `model`: the architecture)
    forward_flops: ForwardFlops
    activation_bytes: ActivationBytes
    # what the shared remat presets are filled with: the class names of its repeated layers
    # (checkpointed; `$layers` in a preset) and the module names of its LayerStacks
    # (scanned; `$stacks`). A family that declares no layer classes has only its own.
    layer_classes: tuple[str, ...] = ()
    layer_stacks: tuple[str, ...] = ()
    # the shared sharding presets it takes, SHARED_PRESETS/sharding/<this>/ (e.g.
    # "dense_decoder": Llama's parameter names); None: its own only
    shared_sharding: str | None = None
    # shared presets its models do not offer, as "kind/name" (e.g. "remat/scan_offload"):
    # every other shared preset reaches it, a new one included
    without_presets: tuple[str, ...] = ()
    hf_class: str | None = None  # transformers class an export loads as
    hf_config: Callable[[ModelConfig], PretrainedConfig] | None = None
    config_from_hf: Callable[[str], ModelConfig] | None = None  # HF folder or hub name
    load_hf: Callable[[torch.nn.Module, str], None] | None = None  # HF weights into the model
    # the model config with the choices that depend on the hardware made, once, when a run
    # is built (llama: attention=auto -> flash on a TPU)
    for_slice: Callable[[ModelConfig, Topology, MeshConfig], ModelConfig] | None = None
    # (model config, total parameters) -> parameters one token runs through (a mixture of
    # experts: the router and k experts per layer); None: all of them
    active_parameters: Callable[[ModelConfig, int], int] | None = None
    # the device sampler's KV cache (core/sampler): one entry per attention call of a
    # forward, in call order; None: the family has no device sampler (host generation only)
    cache_layout: Callable[[ModelConfig], list[LayerLayout]] | None = None

    def build(self, config: ModelConfig, init: bool = True, seed: int = 0) -> torch.nn.Module:
        """The model for `config`, weights initialised from `seed` (or left as allocated:
        under torch.device("meta") nothing is allocated at all). A model the host cannot
        hold is refused before any of it is allocated (`check_host_memory`)."""
        check_host_memory(self, config)
        model = self.model_cls(config)
        if init:
            model.init_weights(seed)
        return model

    def task_named(self, name: str | None) -> Task:
        """The task `task=NAME` picks: the family's own (None or its name) or a registered
        variant built on it (a causal LM's `sft`)."""
        if name in (None, self.task.name):
            return self.task
        variants = variants_for(self.task)  # torch: only when a variant is asked for
        if name not in variants:
            raise UserError(f"task={name} is not a task {self.name} models train for; choose "
                            f"from {', '.join([self.task.name, *variants])}")
        return variants[name].build(self.task, self)

    def model_for(self, config: ModelConfig, topo: Topology, mesh: MeshConfig) -> ModelConfig:
        """The model config as it is built on `topo` over `mesh` (see `for_slice`)."""
        return self.for_slice(config, topo, mesh) if self.for_slice else config

    def preset(self, kind: str, name: str) -> Path:
        """The file of its `kind` ("sharding" or "remat") preset `name`: its own if it has
        one, else the shared one. A remat preset is read with `remat(name)`."""
        path = self._preset_files(kind).get(name)
        if path is None:
            raise UserError(f"{self.name} has no {kind} preset '{name}'; presets: "
                            f"{', '.join(self.preset_names(kind))}")
        return path

    def preset_names(self, kind: str) -> list[str]:
        """Its `kind` presets: its own and the shared ones it takes."""
        return sorted(self._preset_files(kind))

    def remat(self, name: str) -> RematConfig:
        """Remat preset `name`, filled with this family's layer classes and stacks."""
        from core import config as config_lib
        from core.remat import RematConfig  # torch: only when a remat preset is read

        preset = config_lib.load(RematConfig, files=[self.preset("remat", name)])
        return preset.filled(self.layer_classes, self.layer_stacks)

    def _preset_files(self, kind: str) -> dict[str, Path]:
        """name -> file of its `kind` presets: the shared ones it takes, its own over them."""
        shared_dir = self._shared_dir(kind)
        shared = {p.stem: p for p in sorted(shared_dir.glob("*.yaml"))} if shared_dir else {}
        for opted_out in self.without_presets:
            out_kind, _, name = opted_out.partition("/")
            if out_kind == kind and shared.pop(name, None) is None:
                raise UserError(f"{self.name}: without_presets names '{opted_out}', which is "
                                f"not a shared {kind} preset it takes")
        own = {p.stem: p for p in sorted((self.presets_dir / kind).glob("*.yaml"))}
        return {**shared, **own}

    def _shared_dir(self, kind: str) -> Path | None:
        if kind == "remat":
            return SHARED_PRESETS / "remat" if self.layer_classes else None
        return SHARED_PRESETS / kind / self.shared_sharding if self.shared_sharding else None


def check_host_memory(fam: ModelFamily[Any], config: Any) -> None:
    """Refuse, in one line with the figures, to build `config`'s model off the meta device
    when its weights alone take more than the host's available memory: the kernel's OOM
    killer ends such a build minutes later with no message (and may take another process
    with it). Counted on the meta device, exactly and at no cost."""
    import torch  # start-up

    from core import runtime

    if torch.get_default_device().type == "meta":
        return
    available = runtime.host_memory_available()
    if available is None:
        return
    with torch.device("meta"):
        model = fam.model_cls(config)
    tensors = [*model.parameters(), *model.buffers()]
    needed = sum(t.numel() * t.element_size() for t in tensors)
    if needed > available:
        count = sum(p.numel() for p in model.parameters())
        raise UserError(f"a {fam.name} model of {count / 1e9:.2f}B parameters needs "
                        f"{needed / 2**30:.1f} GiB of host memory to build "
                        f"({tensors[0].dtype}), more than the {available / 2**30:.1f} GiB "
                        "available here; check its config (or --init-from folder), or use a "
                        "machine with more memory")


def family(name: str) -> ModelFamily[Any]:
    return importlib.import_module(FAMILIES[name]).FAMILY


def variants_for(family_task: Task) -> dict[str, TaskVariant]:
    """{name: variant} of the registered variants that build on `family_task`, in the order
    they are listed (rank, then name)."""
    found = {name: importlib.import_module(module).VARIANT
             for name, module in task_modules().items()}
    fitting = [(v.rank, name, v) for name, v in found.items()
               if isinstance(family_task, v.builds_on)]
    return {name: variant for _, name, variant in sorted(fitting, key=lambda t: t[:2])}


def model_names() -> list[str]:
    return [f"{fam}-{size}" for fam in FAMILIES for size in family(fam).sizes]


def resolve_name(name: str) -> tuple[ModelFamily[Any], str | None]:
    """`resolve`, and a family's name alone (size None): the name a run started from a
    checkpoint of no zoo size records (its architecture is the checkpoint's)."""
    if name in FAMILIES:
        return family(name), None
    return resolve(name)


def resolve(model_name: str) -> tuple[ModelFamily[Any], str]:
    """'llama-1b' -> (llama family, '1b'); unknown names list the valid ones."""
    fam_name, _, size = model_name.partition("-")
    if fam_name in FAMILIES and size in family(fam_name).sizes:
        return family(fam_name), size
    raise UserError(f"unknown model '{model_name}'; valid: {', '.join(model_names())}")


def family_for_hf_architecture(architecture: str) -> ModelFamily[Any]:
    """The family an exported Hugging Face folder (config.json `architectures`) belongs to."""
    for name in FAMILIES:
        if family(name).hf_class == architecture:
            return family(name)
    known = ", ".join(cls for cls in (family(name).hf_class for name in FAMILIES) if cls)
    raise UserError(f"no zoo model family for Hugging Face class {architecture}; known: {known}")


def parameter_count(fam: ModelFamily[Any], size: str) -> int:
    """Parameters of a size, counted on the meta device (nothing allocated)."""
    import torch  # start-up

    with torch.device("meta"):
        model = fam.build(fam.sizes[size], init=False)
    return sum(p.numel() for p in model.parameters())
