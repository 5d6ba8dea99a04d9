"""LoRA adapters (Hu et al., 2021) on a model's linear layers, chosen by config (`lora.*`).

Each adapted layer gets two children named as PEFT names them, `<layer>.lora_A` ([rank, in])
and `<layer>.lora_B` ([out, rank], zero at the start), and a forward hook adds
`lora_B(lora_A(dropout(x))) * alpha / rank` to the layer's output. Every other weight is
frozen: no gradient, no optimizer state, nothing for FSDP to reduce.

Why not peft's layers: peft replaces each target by a wrapper that moves its weight to
`<layer>.base_layer.weight`, and zoo addresses base weights by name everywhere (sharding
presets, Hugging Face import and export, scanned stacks, checkpoints); llama's o_proj also
takes attention's heads, not features. Here every base name stays as it is, and adapters
are sharded by their base weight's rule (core/sharding.py). peft is still what writes and
reads the adapter folder (`eval/export.py`), with the same key names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch
from torch import nn

from core.errors import UserError
from core.remat import LayerStack
from core.sharding import ADAPTER_MATRICES, STACKED, base_weight_of


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
    """Freeze `model` and adapt the modules `config.targets` names; their names. Refused in
    one line, before anything changes: a target that matches nothing, one that matches a
    module that is not linear, a rank above a layer's smaller dimension."""
    targets = adapted_modules(model, config)
    model.requires_grad_(False)
    generator = torch.Generator().manual_seed(seed)
    for module in targets.values():
        _attach(module, config, generator)
    return list(targets)


def adapted_modules(model: nn.Module, config: LoraConfig) -> dict[str, nn.Linear]:
    """name -> module of the layers `config.targets` adapts (works on a meta-device model,
    so bad targets are refused before a model is built for real)."""
    modules = dict(model.named_modules())
    chosen = {name: module for name, module in modules.items()
              if any(_matches(name, target) for target in config.targets)}
    for target in config.targets:
        if not any(_matches(name, target) for name in chosen):
            linear = sorted({name.rsplit(".", 1)[-1] for name, m in modules.items()
                             if isinstance(m, nn.Linear)})
            raise UserError(f"lora.targets: '{target}' matches no module of the model; its "
                            f"linear layers are {', '.join(linear)}")
    for name, module in chosen.items():
        if not isinstance(module, nn.Linear):
            raise UserError(f"lora.targets: {name} is a {type(module).__name__}, not a linear "
                            "layer; LoRA adapts linear layers only (name them instead)")
        smaller = min(module.in_features, module.out_features)
        if config.rank > smaller:
            raise UserError(f"lora.rank={config.rank} is larger than {name}'s smaller "
                            f"dimension ({module.out_features}x{module.in_features}); use a "
                            f"rank up to {smaller}")
    return chosen


def _matches(name: str, target: str) -> bool:
    """PEFT's rule for a target_modules list: the whole name or its last components."""
    return name == target or name.endswith("." + target)


def _attach(module: nn.Linear, config: LoraConfig, generator: torch.Generator) -> None:
    """PEFT's initialisation: A Kaiming-uniform, B zero, so training starts at the base."""
    module.lora_A = nn.Linear(module.in_features, config.rank, bias=False)
    module.lora_B = nn.Linear(config.rank, module.out_features, bias=False)
    with torch.no_grad():
        nn.init.kaiming_uniform_(module.lora_A.weight, a=math.sqrt(5), generator=generator)
        nn.init.zeros_(module.lora_B.weight)
    module.lora_dropout = nn.Dropout(config.dropout) if config.dropout else nn.Identity()
    module.lora_scale = config.scale
    module.register_forward_hook(_add_adapter_output)


@contextlib.contextmanager
def adapters_off(model: nn.Module):
    """The base model alone while inside (DPO's reference under LoRA: no second copy). A
    scanned layer stack replays its first trace, so it cannot switch; refused in one line."""
    if any(isinstance(m, LayerStack) and m.scan for m in model.modules()):
        raise UserError("the model's adapters cannot be switched off inside a scanned layer "
                        "stack (its trace is replayed), which DPO's reference under LoRA "
                        "needs; use a remat preset without scan")
    adapted = [module for module in model.modules() if hasattr(module, "lora_scale")]
    for module in adapted:
        module.lora_off = True
    try:
        yield
    finally:
        for module in adapted:
            module.lora_off = False


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
    the forward of the layers whose weights are frozen. Counted from one forward of
    `loss(model, batch)` on the meta device (nothing runs; no backward, which there would
    break torch_xla's later ones under SPMD); `build_model()` builds on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode  # start-up

    with torch.device("meta"):
        model = build_model()
        add_adapters(model, config, seed=0)
    counter = FlopCounterMode(display=False)
    frozen = []  # FLOPs of each frozen layer's own forward (its adapter's hook runs after)

    def before(module, args):
        module.flops_before = counter.get_total_flops()

    def after(module, args, output):
        frozen.append(counter.get_total_flops() - module.flops_before)

    for module in model.modules():
        if _frozen_layer(module):
            module.register_forward_pre_hook(before)
            module.register_forward_hook(after, prepend=True)
    with counter, torch.no_grad():
        loss(model, {k: v.to("meta") for k, v in batch.items()})
    total = counter.get_total_flops()
    return (3 * total - sum(frozen)) / (3 * total)


def _frozen_layer(module: nn.Module) -> bool:
    """A layer with frozen weights of its own and no weights below it but its adapter's:
    its FLOPs are its own matmuls with those weights."""
    own = list(module.parameters(recurse=False))
    below = [p for name, child in module.named_children() if name not in ADAPTER_MATRICES
             for p in child.parameters()]
    return bool(own) and not any(p.requires_grad for p in own) and not below


def merged(weights: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Full weights with every adapter folded into its base weight (W + scale * B @ A), and
    the adapter matrices left out: a plain model of the base's architecture."""
    out = {name: w for name, w in weights.items() if base_weight_of(name) is None}
    for name, weight in weights.items():
        if name.endswith(".lora_A.weight"):
            base = base_weight_of(name)
            lora_b = weights[name.replace(".lora_A.", ".lora_B.")]
            delta = torch.einsum("...or,...ri->...oi", lora_b.double(), weight.double()) * scale
            out[base] = (out[base].double() + delta).to(out[base].dtype)
    return out


def adapter_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter matrices alone."""
    return {name: w for name, w in weights.items() if base_weight_of(name) is not None}


def fingerprint(model: nn.Module) -> dict[str, float]:
    """Per frozen weight (per layer in a scanned stack, by its Hugging Face name), its mean
    square: what a checkpoint that holds only the trained weights records of the base, to
    know it again (a changed --init-from folder)."""
    from torch.distributed.tensor import DTensor  # start-up

    names, values = [], []
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.requires_grad:
                continue
            stack, stacked, rest = name.partition(f".{STACKED}.")
            square = param.float().square()
            if stacked:
                names += [f"{stack}.{i}.{rest}" for i in range(param.shape[0])]
                value = square.flatten(1).mean(1)
            else:
                names.append(name)
                value = square.mean().reshape(1)
            values.append(value.full_tensor() if isinstance(value, DTensor) else value)
        return dict(zip(names, torch.cat(values).cpu().tolist())) if values else {}


def same_fingerprint(saved: dict[str, float], found: dict[str, float]) -> bool:
    """The same weights, up to summation order (another slice reduces in another order)."""
    return saved.keys() == found.keys() and all(
        math.isclose(saved[name], found[name], rel_tol=1e-4, abs_tol=1e-12) for name in saved)
