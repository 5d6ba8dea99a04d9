"""LoRA adapters (Hu et al., 2021) on a model's linear layers and stacked expert weights,
chosen by config (`lora.*`).

Each adapted linear layer gets two children named as PEFT names them, `<layer>.lora_A`
([rank, in]) and `<layer>.lora_B` ([out, rank], zero at the start), and a forward hook adds
`lora_B(lora_A(dropout(x))) * alpha / rank` to the layer's output. An expert weight
`<experts>.<w>` ([E, out, in], PEFT's `target_parameters`) gets `<experts>.lora_A.<w>`
([E, rank, in]) and `<experts>.lora_B.<w>` ([E, out, rank]): each expert its own adapter,
added by the experts module itself (`expert_adapter_output`), which names the weights it
can adapt in `lora_parameters`. Every other weight is frozen: no gradient, no optimizer
state, nothing for FSDP to reduce.

Why not peft's layers: peft replaces each target by a wrapper that moves its weight to
`<layer>.base_layer.weight`, and zoo addresses base weights by name everywhere (sharding
presets, Hugging Face import and export, scanned stacks, checkpoints); llama's o_proj also
takes attention's heads, not features. Here every base name stays as it is, and adapters
are sharded by their base weight's rule (core/sharding.py). peft is still what writes and
reads the adapter folder (`eval/export.py`), with the same key names.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math

import torch
from torch import nn

from core.errors import UserError
from core.remat import LayerStack
from core.sharding import ADAPTER_MATRICES, base_weight_of


@dataclasses.dataclass
class LoraConfig:
    rank: int = 0  # 0: no adapters, every weight trains
    alpha: float = 16.0  # the adapters' output is scaled by alpha / rank
    dropout: float = 0.0  # on the adapters' input
    # module names, matched as PEFT's target_modules list: a name, or its last components
    targets: list[str] = dataclasses.field(default_factory=lambda: ["q_proj", "v_proj"])

    def __post_init__(self):
        if self.rank < 0:
            raise ValueError(f"lora.rank must be 0 (off) or a positive rank, not {self.rank}")
        if not self.alpha > 0 or math.isinf(self.alpha):
            raise ValueError(f"lora.alpha must be a positive number, not {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout must be in [0, 1), not {self.dropout}")
        if self.rank and not self.targets:
            raise ValueError("lora.targets is empty; name the modules to adapt, e.g. "
                             "lora.targets=[q_proj,v_proj]")

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def add_adapters(model: nn.Module, config: LoraConfig, seed: int) -> list[str]:
    """Freeze `model` and adapt the weights `config.targets` names; their names. Refused in
    one line, before anything changes: a target that matches nothing, one that matches a
    module that is not linear, a rank above a weight's smaller dimension."""
    targets = adapted_weights(model, config)
    model.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    for owner, leaf in targets.values():
        if leaf == "weight" and isinstance(owner, nn.Linear):
            _attach_to_linear(owner, config, generator)
        else:
            _attach_to_experts(owner, leaf, config, generator)
    return list(targets)


def adapted_weights(model: nn.Module, config: LoraConfig) -> dict[str, tuple[nn.Module, str]]:
    """name -> (owner module, parameter name) of each weight `config.targets` adapts: a
    linear layer's `weight` (PEFT's target_modules), or an expert weight its module lists
    in `lora_parameters` (PEFT's target_parameters). Works on a meta-device model, so bad
    targets are refused before a model is built for real."""
    modules = dict(model.named_modules())
    experts = {f"{name}.{leaf}": (module, leaf) for name, module in modules.items()
               for leaf in getattr(module, "lora_parameters", ())}
    chosen = {}
    for target in config.targets:
        found = {f"{name}.weight": (module, "weight") for name, module in modules.items()
                 if _matches(name, target)}
        found |= {name: pair for name, pair in experts.items() if _matches(name, target)}
        if not found:
            raise UserError(f"lora.targets: '{target}' matches nothing in the model; "
                            f"{_adaptable(modules, experts)}")
        chosen |= found
    for name, (module, leaf) in chosen.items():
        if leaf == "weight" and not isinstance(module, nn.Linear):
            raise UserError(f"lora.targets: {name.removesuffix('.weight')} is a "
                            f"{type(module).__name__}, not a linear layer; "
                            f"{_adaptable(modules, experts)}")
        out_features, in_features = getattr(module, leaf).shape[-2:]
        if config.rank > min(in_features, out_features):
            raise UserError(f"lora.rank={config.rank} is larger than {name}'s smaller "
                            f"dimension ({out_features}x{in_features}); use a rank up to "
                            f"{min(in_features, out_features)}")
    if config.dropout and any(leaf != "weight" for _, leaf in chosen.values()):
        raise UserError("lora.dropout must be 0 when adapting expert weights: PEFT's expert "
                        "adapters have none, so the exported adapter would not be the trained one")
    return chosen


def _adaptable(modules: dict[str, nn.Module], experts: dict) -> str:
    """What LoRA can adapt in this model, for an error message."""
    linear = sorted({name.rsplit(".", 1)[-1] for name, m in modules.items()
                     if isinstance(m, nn.Linear)})
    stacked = sorted({name.rsplit(".", 1)[-1] for name in experts})
    return ("LoRA adapts the linear layers " + ", ".join(linear)
            + (" and the expert weights " + ", ".join(stacked) if stacked else ""))


def _matches(name: str, target: str) -> bool:
    """PEFT's rule for a target_modules list: the whole name or its last components."""
    return name == target or name.endswith("." + target)


def _attach_to_linear(module: nn.Linear, config: LoraConfig,
                      generator: torch.Generator) -> None:
    """PEFT's initialisation: A Kaiming-uniform, B zero, so training starts at the base."""
    module.lora_A = nn.Linear(module.in_features, config.rank, bias=False)
    module.lora_B = nn.Linear(config.rank, module.out_features, bias=False)
    with torch.no_grad():
        nn.init.kaiming_uniform_(module.lora_A.weight, a=math.sqrt(5), generator=generator)
        nn.init.zeros_(module.lora_B.weight)
    module.lora_dropout = nn.Dropout(config.dropout) if config.dropout else nn.Identity()
    module.lora_scale = config.scale
    module.register_forward_hook(_add_adapter_output)


class ExpertFactor(nn.Module):
    """One factor (lora_A or lora_B) of the adapters on a module's stacked expert weights:
    a parameter per adapted weight, named as that weight, [E, rank, in] or [E, out, rank].
    A module, so that the FLOP count of `step_flops_ratio` sees it."""

    def forward(self, tokens: torch.Tensor, weight: str) -> torch.Tensor:
        """[E, groups, capacity, in] tokens times each expert's own matrix."""
        return torch.einsum("egci,eoi->egco", tokens, getattr(self, weight))


def _attach_to_experts(module: nn.Module, leaf: str, config: LoraConfig,
                       generator: torch.Generator) -> None:
    """As a linear layer's adapter, one per expert (PEFT's initialisation per expert)."""
    experts, out_features, in_features = getattr(module, leaf).shape
    if not hasattr(module, "lora_A"):
        module.lora_A, module.lora_B = ExpertFactor(), ExpertFactor()
    lora_a = torch.empty(experts, config.rank, in_features)
    for matrix in lora_a:
        nn.init.kaiming_uniform_(matrix, a=math.sqrt(5), generator=generator)
    module.lora_A.register_parameter(leaf, nn.Parameter(lora_a))
    module.lora_B.register_parameter(leaf, nn.Parameter(
        torch.zeros(experts, out_features, config.rank)))
    module.lora_scale = config.scale


def expert_adapter_output(module: nn.Module, weight: str, tokens: torch.Tensor,
                          output: torch.Tensor) -> torch.Tensor:
    """`output` (tokens [E, groups, capacity, in] times the experts' `weight`) plus that
    weight's adapter, where it has one: what an experts module that lists `weight` in its
    `lora_parameters` returns from each product."""
    lora_a = module._modules.get("lora_A")
    if lora_a is None or weight not in lora_a._parameters or getattr(module, "lora_off", False):
        return output
    return output + module.lora_B(lora_a(tokens, weight), weight) * module.lora_scale


@contextlib.contextmanager
def adapters_off(model: nn.Module):
    """The base model alone while inside (DPO's reference under LoRA: no second copy). A
    scanned layer stack replays its first trace, so it cannot switch; refused in one line."""
    if any(isinstance(m, LayerStack) and m.scan for m in model.modules()):
        raise UserError("the model's adapters cannot be switched off inside a scanned layer "
                        "stack (its trace is replayed), which DPO's reference under LoRA "
                        "needs; use a remat preset without scan")
    adapted = _adapted_modules(model)
    for module in adapted:
        module.lora_off = True
    try:
        yield
    finally:
        for module in adapted:
            module.lora_off = False


def has_adapters(model: nn.Module) -> bool:
    """Whether `add_adapters` adapted `model` (then its frozen base is the model with its
    adapters off)."""
    return bool(_adapted_modules(model))


def _adapted_modules(model: nn.Module) -> list[nn.Module]:
    return [module for module in model.modules() if hasattr(module, "lora_scale")]


def _add_adapter_output(module, args, output):
    if getattr(module, "lora_off", False):
        return output
    features = args[0]
    if hasattr(module, "features"):  # a linear layer fed another layout (llama's o_proj)
        features = module.features(features)
    adapter = module.lora_B(module.lora_A(module.lora_dropout(features)))
    return output + adapter * module.lora_scale


def step_flops_ratio(build_model, config: LoraConfig, loss, batch: dict) -> float:
    """What a training step with adapters on a frozen base computes, against one that
    trains every weight. A matmul's backward costs twice its forward, half of it for its
    weight's gradient, which a frozen weight never gets: so the step is 3x the forward less
    the forward of the frozen weights' own matmuls. Counted from one forward of
    `loss(model, batch)` on the meta device (nothing runs; no backward, which there would
    break torch_xla's later ones under SPMD); `build_model()` builds on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode  # start-up

    with torch.device("meta"):
        model = build_model()
        add_adapters(model, config, seed=0)
    counter = FlopCounterMode(display=False)
    counted = collections.Counter()  # FLOPs inside modules of each kind

    def count_as(module: nn.Module, kind: str) -> None:
        start = {}
        module.register_forward_pre_hook(lambda *_: start.update(at=counter.get_total_flops()))
        # registered after the adapter's hook: a linear layer's FLOPs include its adapter's
        module.register_forward_hook(lambda *_: counted.update(
            {kind: counter.get_total_flops() - start["at"]}))

    for name, module in model.named_modules():
        if name.rpartition(".")[2] in ADAPTER_MATRICES:
            count_as(module, "adapters")
        elif _frozen_layer(module):  # its adapters' FLOPs included (a hook, its own call)
            count_as(module, "frozen")
        if getattr(module, "routes_by_matmul", False):  # a mixture of experts' dispatch
            count_as(module, "routing")
            for child in module.children():
                count_as(child, "routed")
    with counter, torch.no_grad():
        loss(model, {k: v.to("meta") for k, v in batch.items()})
    # model FLOPs, as MFU counts them: not the matmuls that only move tokens to experts
    model_flops = counter.get_total_flops() - (counted["routing"] - counted["routed"])
    frozen = counted["frozen"] - counted["adapters"]
    return (3 * model_flops - frozen) / (3 * model_flops)


def _frozen_layer(module: nn.Module) -> bool:
    """A layer with frozen weights of its own and no weights below it but its adapters':
    its FLOPs are its own matmuls with those weights, and its adapters'."""
    own = list(module.parameters(recurse=False))
    below = [p for name, child in module.named_children() if name not in ADAPTER_MATRICES
             for p in child.parameters()]
    return bool(own) and not any(p.requires_grad for p in own) and not below


def merged(weights: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Full weights with every adapter folded into its base weight (W + scale * B @ A), and
    the adapter matrices left out: a plain model of the base's architecture."""
    out = {name: w for name, w in weights.items() if base_weight_of(name) is None}
    for name, weight in weights.items():
        if name.rpartition(".")[0].endswith(".lora_A"):
            base = base_weight_of(name)
            lora_b = weights[name.replace(".lora_A.", ".lora_B.")]
            delta = torch.einsum("...or,...ri->...oi", lora_b.double(), weight.double()) * scale
            out[base] = (out[base].double() + delta).to(out[base].dtype)
    return out


def adapter_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter matrices alone."""
    return {name: w for name, w in weights.items() if base_weight_of(name) is not None}


# PEFT (0.21.2, over transformers 5.24) folds targets of these names onto a mixture of
# experts' stacked weights and leaves linear layers of the same names unadapted, in silence
MLP_NAMES_PEFT_FOLDS = ("gate_proj", "up_proj", "down_proj")


def _check_peft_applies_them(model: nn.Module, weights: dict) -> None:
    """Refuse, in one line, an adapter folder PEFT would load without some of its
    adapters: in a model with expert weights, the linear layers named as an MLP's
    (deepseek3's dense first layers and shared experts). Their adapters were trained and
    the merged export holds them; PEFT drops them (docs/lora.md)."""
    if not any(getattr(module, "lora_parameters", ()) for module in model.modules()):
        return
    lost = sorted(name.removesuffix(".weight") for name, (_, leaf) in weights.items()
                  if leaf == "weight" and name.split(".")[-2] in MLP_NAMES_PEFT_FOLDS)
    if lost:
        raise UserError(
            f"an adapter folder would lose the adapters of {len(lost)} linear layers "
            f"({lost[0]}, ...): PEFT applies targets named {', '.join(MLP_NAMES_PEFT_FOLDS)} "
            "to a mixture of experts' stacked weights only; export the merged model (no "
            "--adapter), or tune with lora.targets that name no MLP linear layer")


def as_peft(model: nn.Module, config: LoraConfig) -> tuple[dict, dict[str, torch.Tensor]]:
    """`model`'s adapters as PEFT's adapter folder holds them: LoraConfig's target arguments
    (target_modules for linear layers, target_parameters for expert weights) and the
    weights under PEFT's names and layouts. PEFT wraps a module's expert weights one after
    another, the first registered innermost (`<experts>.base_layer.lora_A`), and keeps each
    expert's factors side by side, [E * rank, in] and [out, rank * E]."""
    weights = adapted_weights(model, config)
    _check_peft_applies_them(model, weights)

    def targets(linear: bool) -> list[str] | None:
        names = [name for name, (_, leaf) in weights.items() if (leaf == "weight") == linear]
        found = [t for t in config.targets if any(_matches(n.removesuffix(".weight"), t)
                                                  for n in names)]
        return found or None

    state = {}
    for name, module in model.named_modules():
        factors = module._modules.get("lora_A")
        if isinstance(module, nn.Linear) and factors is not None:
            for matrix in ADAPTER_MATRICES:
                state[f"{name}.{matrix}.weight"] = getattr(module, matrix).weight
        elif isinstance(factors, ExpertFactor):
            leaves = [leaf for leaf in module.lora_parameters if leaf in factors._parameters]
            for depth, leaf in enumerate(reversed(leaves)):
                prefix = f"{name}." + "base_layer." * depth
                state[prefix + "lora_A.weight"] = factors.get_parameter(leaf).flatten(0, 1)
                lora_b = module.lora_B.get_parameter(leaf)
                state[prefix + "lora_B.weight"] = lora_b.permute(1, 2, 0).flatten(1)
    return ({"target_modules": targets(linear=True), "target_parameters": targets(linear=False)},
            {f"base_model.model.{name}": w.detach().contiguous() for name, w in state.items()})
