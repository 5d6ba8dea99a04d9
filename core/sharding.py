"""Sharding as data: name patterns -> partition specs over named mesh axes.

A rules file (YAML) has up to three sections, each an ordered map of pattern -> spec:

    params:                       # parameter names (model.named_parameters())
      embed.weight: [fsdp, null]
      layers.*.mlp.up.weight: [tensor, fsdp]
    activations:                  # module names; the spec applies to the module's output
      layers.*: [batch, null, null]       # and to its gradient
    gathered:                     # module names whose output is a weight as a layer uses it
      layers.*.attn.o.by_head: [null, null, null]   # forward only

An activation's gradient is pinned as the activation is. A `gathered` point pins a weight's
layout where it is used (e.g. whole, so the backward reuses the forward's gather) and leaves
its gradient free, so the partitioner reduces it straight into the parameter's shards: with
the gradient pinned whole too, libtpu all-reduced the whole gradient of qwen3-8b's output
projection on v5p-64 (1.13 GiB a step that MaxText's step does not move).

In a pattern `*` matches one dotted name component and `**` any run of them; the first rule
that matches a name wins. A leading `?` marks a rule that may match nothing (e.g. an LM head
that tied-embedding sizes lack). A spec lists, per tensor dimension, null (replicated), a mesh axis,
a list of mesh axes, or a logical axis (`batch`: the axes the inputs' batch is split over,
core/mesh.py LOGICAL_AXES). Matching is strict both ways: a parameter that no rule covers and a
rule that matches nothing (including one shadowed by an earlier rule) are errors naming them.
A LoRA adapter (`x.lora_A.weight`, `x.lora_A.gate_up_proj`; core/lora.py) needs no rule: it is
split as the weight it adapts (`x.weight`, `x.gate_up_proj`) along the dimension the two share.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import yaml

from core.errors import UserError
from core.mesh import LOGICAL_AXES
from core.table import format_table

Spec = tuple  # per-dimension: None | axis name | tuple of axis names
# the child under which a scanned layer stack (core/remat.py) keeps its layers' weights
# stacked: a parameter under it has one more leading dimension than its rule's spec names
STACKED = "*"
# LoRA's matrices (core/lora.py), children of what they adapt: `x.lora_A.weight` (a linear
# layer's), `x.lora_A.gate_up_proj` (an experts module's stacked weight)
ADAPTER_MATRICES = ("lora_A", "lora_B")


class ShardingError(UserError):
    """A rules file that does not fit the model or the mesh."""


@dataclasses.dataclass(frozen=True)
class Rule:
    pattern: str
    spec: Spec

    @property
    def optional(self) -> bool:
        return self.pattern.startswith("?")

    @property
    def regex(self) -> re.Pattern:
        parts = re.split(r"(\*\*|\*)", self.pattern.removeprefix("?"))
        wildcard = {"**": r".+", "*": r"[^.]+"}
        return re.compile("".join(wildcard.get(part, re.escape(part)) for part in parts))

    def matches(self, name: str) -> bool:
        return self.regex.fullmatch(name) is not None


@dataclasses.dataclass(frozen=True)
class ShardingRules:
    params: tuple[Rule, ...]
    activations: tuple[Rule, ...] = ()
    gathered: tuple[Rule, ...] = ()

    @classmethod
    def from_dict(cls, data: dict, source: str = "sharding rules") -> ShardingRules:
        sections = [field.name for field in dataclasses.fields(cls)]
        unknown = set(data or {}) - set(sections)
        if unknown:
            raise ShardingError(
                f"{source}: unknown section(s) {sorted(unknown)}; valid: {', '.join(sections)}"
            )
        return cls(**{name: _parse_section((data or {}).get(name), f"{source}: {name}")
                      for name in sections})

    @classmethod
    def from_yaml(cls, path: str | Path) -> ShardingRules:
        path = Path(path)
        if not path.is_file():
            raise ShardingError(f"sharding rules file {path} does not exist")
        return cls.from_dict(yaml.safe_load(path.read_text()), source=str(path))


def _parse_section(section, where: str) -> tuple[Rule, ...]:
    if section is None:
        return ()
    if not isinstance(section, dict):
        raise ShardingError(f"{where} must be a map of name pattern -> spec list")
    rules = []
    for pattern, spec in section.items():
        if not isinstance(spec, list):
            raise ShardingError(f"{where}: '{pattern}' spec must be a list, got {spec!r}")
        rules.append(Rule(str(pattern), tuple(_parse_dim(d, pattern, where) for d in spec)))
    return tuple(rules)


def _parse_dim(dim, pattern, where):
    """null, a mesh axis, a list of mesh axes, or a logical axis (LOGICAL_AXES: `batch`),
    which becomes the mesh axes it names."""
    if dim is None or isinstance(dim, str):
        return LOGICAL_AXES.get(dim, dim)
    if isinstance(dim, list) and all(isinstance(axis, str) for axis in dim):
        return tuple(dim)
    raise ShardingError(
        f"{where}: '{pattern}' has a bad dimension {dim!r}; use null, an axis name, a list "
        f"of axis names, or a logical axis ({', '.join(LOGICAL_AXES)})"
    )


@dataclasses.dataclass(frozen=True)
class ParamPlan:
    """Where one parameter lives: its rule, global shape and what each device holds."""

    name: str
    rule: str
    spec: Spec
    shape: tuple[int, ...]
    shard_shape: tuple[int, ...]
    shard_bytes: int


def match(names: list[str], rules: tuple[Rule, ...], kind: str) -> dict[str, Rule]:
    """name -> first matching rule; strict: every name covered, every rule used."""
    chosen: dict[str, Rule] = {}
    for name in names:
        rule = next((r for r in rules if r.matches(name)), None)
        if rule is None:
            raise ShardingError(
                f"no sharding rule covers {kind} '{name}': add a pattern for it "
                f"under '{kind}s' (e.g. '{name}: [...]')"
            )
        chosen[name] = rule
    used = set(chosen.values())
    unused = [r.pattern for r in rules if r not in used and not r.optional]
    if unused:
        raise ShardingError(
            f"sharding rule '{unused[0]}' matches no {kind} (or an earlier rule "
            f"takes all its matches): fix or remove it"
        )
    return chosen


def check_spec(spec: Spec, shape: tuple[int, ...], mesh_axes: dict[str, int], where: str):
    if len(spec) != len(shape):
        raise ShardingError(
            f"{where}: spec {list(spec)} has {len(spec)} dims but the tensor "
            f"has shape {list(shape)}"
        )
    seen = []
    for dim in spec:
        for axis in axes_of(dim):
            if axis not in mesh_axes:
                raise ShardingError(
                    f"{where}: unknown mesh axis '{axis}'; mesh axes: {', '.join(mesh_axes)}"
                )
            if axis in seen:
                raise ShardingError(f"{where}: mesh axis '{axis}' is used twice in {list(spec)}")
            seen.append(axis)


def axes_of(dim) -> tuple[str, ...]:
    """The mesh axes one dimension of a spec is split over."""
    if dim is None:
        return ()
    return (dim,) if isinstance(dim, str) else tuple(dim)


# the axes FSDP splits weights over: the xla backend's sampler reads its weights gathered
# over them, once a call (core/backends/xla/sampler_weights.py); tensor and expert splits stay
GATHERED_AXES = ("data", "fsdp")


def gathered_spec(spec: Spec) -> Spec:
    """`spec` without the FSDP axes: each dim keeps its other axes (None when none left)."""
    kept = [tuple(a for a in axes_of(dim) if a not in GATHERED_AXES) for dim in spec]
    return tuple(None if not axes else axes[0] if len(axes) == 1 else axes for axes in kept)


def shard_shape(shape: tuple[int, ...], spec: Spec, mesh_axes: dict[str, int]) -> tuple[int, ...]:
    """Per-device shape; XLA pads a dimension that the axes do not divide evenly."""
    return tuple(
        -(-size // math.prod(mesh_axes[a] for a in axes_of(dim))) for size, dim in zip(shape, spec)
    )


def plan_params(model, rules: ShardingRules, mesh_axes: dict[str, int]) -> list[ParamPlan]:
    """The per-parameter plan; pure bookkeeping, works on a meta-device model."""
    params = dict(model.named_parameters())
    # a LoRA adapter is sharded as the weight it adapts (core/lora.py): no rule of its own
    adapted = {name: base for name in params if (base := base_weight_of(name)) in params}
    chosen = match([name for name in params if name not in adapted], rules.params, "param")
    plan = []
    for name, param in params.items():
        rule = chosen[adapted.get(name, name)]
        spec = _adapter_spec(name, rule.spec) if name in adapted else rule.spec
        # A scanned stack's weights are [layers, ...]: the layer dim is never split.
        spec = (None, *spec) if f".{STACKED}." in name else spec
        shape = tuple(param.shape)
        check_spec(spec, shape, mesh_axes, f"param '{name}' (rule '{rule.pattern}')")
        local = shard_shape(shape, spec, mesh_axes)
        size = math.prod(local) * param.element_size()
        plan.append(ParamPlan(name, rule.pattern, spec, shape, local, size))
    return plan


def match_activations(model, rules: ShardingRules) -> dict[str, Rule]:
    return match_modules(model, rules.activations, "activation")


def match_gathered(model, rules: ShardingRules) -> dict[str, Rule]:
    return match_modules(model, rules.gathered, "gathered")


def match_modules(model, section: tuple[Rule, ...], kind: str) -> dict[str, Rule]:
    """module name -> first matching rule of a section; a rule that matches nothing is an
    error (a module no rule covers is left to the partitioner)."""
    if not section:
        return {}
    names = [name for name, _ in model.named_modules() if name]
    covered = {n: r for n in names if (r := next((r for r in section if r.matches(n)), None))}
    used = set(covered.values())
    unused = [r.pattern for r in section if r not in used and not r.optional]
    if unused:
        raise ShardingError(
            f"{kind} rule '{unused[0]}' matches no module (or an earlier "
            "rule takes all its matches): fix or remove it"
        )
    return covered


def format_plan(plan: list[ParamPlan]) -> str:
    """A readable table: name, global shape, spec, per-device shard shape and bytes."""
    rows = [
        (
            p.name,
            "x".join(map(str, p.shape)) or "scalar",
            _fmt_spec(p.spec),
            "x".join(map(str, p.shard_shape)) or "scalar",
            f"{p.shard_bytes:,}",
        )
        for p in plan
    ]
    header = ("parameter", "shape", "spec", "per-device shard", "bytes/device")
    total = sum(p.shard_bytes for p in plan)
    return format_table(header, rows) + (
        f"\ntotal per device: {total:,} bytes in {len(plan)} parameters"
    )


def _fmt_spec(spec: Spec) -> str:
    def dim(d):
        return "-" if d is None else d if isinstance(d, str) else "(" + ",".join(d) + ")"

    return "[" + ", ".join(dim(d) for d in spec) + "]"


def base_weight_of(name: str) -> str | None:
    """`x.lora_A.weight` -> `x.weight` (a linear layer's), `x.lora_B.gate_up_proj` ->
    `x.gate_up_proj` (expert weights'): the weight an adapter adapts; None for others."""
    owner, _, leaf = name.rpartition(".")
    stem, _, matrix = owner.rpartition(".")
    return f"{stem}.{leaf}" if matrix in ADAPTER_MATRICES else None


def _adapter_spec(name: str, base_spec: tuple) -> tuple:
    """An adapter matrix's sharding from its base weight's ([..., out, in]): lora_A
    ([..., rank, in]) is split as the base's input dim, lora_B ([..., out, rank]) as its
    output dim; the rank dim is replicated (it is small)."""
    if name.rpartition(".")[0].endswith(".lora_A"):
        return (*base_spec[:-2], None, base_spec[-1])
    return (*base_spec[:-1], None)
