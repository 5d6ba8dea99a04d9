"""Remat as data: which layer classes recompute their activations in backward, and which
layer stacks run as one compiled `scan` body instead of an unrolled Python loop.

Models build their repeated blocks as a `LayerStack`; everything else is decided by a
`RematConfig` applied after the model is built, so model code never changes for memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import torch
from torch import nn

from core.backends.xla.ops import checkpoint as xla_checkpoint
from core.backends.xla.ops import register_offload_ops, scan
from core.backends.xla.scan_backward import wait_before_backward
from core.errors import UserError
from core.sharding import STACKED


class RematError(UserError):
    """A remat config that names layers or stacks the model does not have."""


# Names a remat preset may hold in place of a model's own, so that one preset file serves
# every model family (zoo/common/presets/remat): the family fills in the class names of
# its layers and the module names of its layer stacks (`RematConfig.filled`).
LAYERS = "$layers"
STACKS = "$stacks"


@dataclasses.dataclass
class RematConfig:
    # Class names of layers whose forward is recomputed in backward (activation checkpointing).
    checkpoint: list[str] = dataclasses.field(default_factory=list)
    # Module names of LayerStacks to run with torch_xla's scan (compile one layer once).
    scan: list[str] = dataclasses.field(default_factory=list)
    # What a checkpointed layer of a scanned stack keeps for its backward (MaxText's names):
    # `full`: its inputs only, everything recomputed (what an unrolled checkpointed layer
    # always does); `minimal`: also the output of every weight matmul, so only attention
    # and elementwise work is recomputed; `save_qkv_proj`: also the tensors the layer
    # names query_proj, key_proj and value_proj; `offload`: as full, with the layer input
    # kept in host memory (TPU) until backward.
    policy: str = "full"

    def __post_init__(self):
        if self.policy not in SCAN_POLICIES:
            raise RematError(f"remat policy '{self.policy}' is not one of "
                             f"{', '.join(SCAN_POLICIES)}")

    def filled(self, layers: tuple[str, ...], stacks: tuple[str, ...]) -> RematConfig:
        """This config with `$layers` and `$stacks` replaced by a model's layer classes and
        layer stacks."""
        return dataclasses.replace(self, checkpoint=_fill(self.checkpoint, LAYERS, layers),
                                   scan=_fill(self.scan, STACKS, stacks))

    def check_device(self, on_tpu: bool) -> None:
        """Host offloading is a TPU memory space; XLA:CPU refuses its annotations."""
        if self.policy == "offload" and self.scan and not on_tpu:
            raise RematError("remat policy 'offload' keeps layer inputs in a TPU's host memory "
                             "and runs on a TPU only; here use scan_checkpoint (the same "
                             "recompute, inputs kept on the device)")


def _fill(names: list[str], placeholder: str, values: tuple[str, ...]) -> list[str]:
    if placeholder in names and not values:
        raise RematError(f"this remat preset names {placeholder}, which the model family "
                         "does not declare (ModelFamily.layer_classes, layer_stacks)")
    return [value for name in names for value in (values if name == placeholder else [name])]


class LayerStack(nn.ModuleList):
    """Layers applied in sequence: `h = layer(h, *extras)` for each layer.

    `extras` (e.g. rotary tables, masks) are the same for every layer; what differs between
    alike layers besides weights is a layer's buffers (Gemma 3's attention window), which
    the scan slices like the weights. A layer may also return per-layer outputs,
    `(h, *outputs)` (e.g. a router's statistics): the stack then returns
    `(h, *outputs stacked over layers)`, scanned or not.

    The scan takes the stack's alike tail: the longest run of layers at the end with the
    same weight names and shapes. Leading layers that differ (DeepSeek's dense layers
    before the routed ones, T5's first block holding the position bias) stay their own
    modules and run unrolled before it. A ModuleList subclass, so parameter names stay
    `<stack>.<i>.<...>` (Hugging Face compatible) until the stack is scanned: then
    `stack_weights` keeps the tail's as `<stack>.*.<...>`, one [layers, ...] tensor per
    name, and `unstack_weights` turns a state dict back into per-layer names.
    """

    scan: bool = False
    scan_policy: str | None = None  # remat policy inside the scan; None: keep everything
    depth: int | None = None  # the number of stacked layers, once their weights are stacked
    _step_fn = None
    _extra_dtypes: tuple = ()  # the dtypes of the extras the scan carries as fp32
    _unrolled = 0  # > 0 while some caller needs each layer called on its own (`unrolled`)

    def forward(self, hidden: torch.Tensor, *extras):
        if self.scan and hidden.device.type == "xla" and not LayerStack._unrolled:
            return self._scan(hidden, extras)
        return self._run(self._head_calls() + self._tail_calls(), hidden, extras)

    @staticmethod
    @contextlib.contextmanager
    def unrolled():
        """Every stack runs its layers one call each (stacked weights kept, sliced per
        layer) while in this context: a sampler's cache is handed to the layers in call
        order, which one scan body cannot follow."""
        LayerStack._unrolled += 1
        try:
            yield
        finally:
            LayerStack._unrolled -= 1

    def stack_weights(self) -> None:
        """Keep each weight of the alike tail's layers as one [layers, ...] parameter of
        its first layer's module tree, registered as child `*` after the leading layers.
        The scan then reads them in place (no stacking copy per step, gradients arrive
        stacked) and the optimizer updates one tensor per name instead of one per name and
        layer."""
        layers = list(self)
        first = alike_tail_start(layers)
        tail = layers[first:]
        template = tail[0]
        for name, param in list(template.named_parameters()):
            per_layer = [layer.get_parameter(name).detach() for layer in tail]
            owner, _, leaf = name.rpartition(".")
            module = template.get_submodule(owner)
            module._parameters[leaf] = nn.Parameter(torch.stack(per_layer),
                                                    requires_grad=param.requires_grad)
        for name, _ in list(template.named_buffers()):
            owner, _, leaf = name.rpartition(".")
            template.get_submodule(owner)._buffers[leaf] = torch.stack(
                [layer.get_buffer(name) for layer in tail])
        self._modules.clear()
        for index, layer in enumerate(layers[:first]):
            self._modules[str(index)] = layer
        self._modules[STACKED] = template
        self.depth = len(tail)

    def _head(self) -> list[nn.Module]:
        """The leading layers that run on their own (none until the weights are stacked)."""
        return [] if self.depth is None else [m for n, m in self._modules.items() if n != STACKED]

    def _head_calls(self) -> list:
        if not self.scan_policy:
            return self._head()
        return [functools.partial(checkpointed, layer.forward) for layer in self._head()]

    def _tail_calls(self) -> list:
        if self.depth is None:
            return list(self)
        template, weights = self._modules[STACKED], self._stacked()
        return [functools.partial(_call_with, template, {n: v[i] for n, v in weights.items()})
                for i in range(self.depth)]

    def _stacked(self) -> dict[str, torch.Tensor]:
        """Each weight and buffer of the stacked layers, [layers, ...]."""
        template = self._modules[STACKED]
        return {**dict(template.named_parameters()), **dict(template.named_buffers())}

    @staticmethod
    def _run(calls, hidden, extras):
        per_layer = []
        for call in calls:
            hidden, *outputs = _as_tuple(call(hidden, *extras))
            per_layer.append(outputs)
        if not per_layer[0]:
            return hidden
        return (hidden, *(torch.stack(values) for values in zip(*per_layer, strict=True)))

    def _scan(self, hidden, extras):
        """The leading layers unrolled, then the stacked ones as one loop."""
        head = self._head_calls()
        if head:
            hidden, *head_outputs = _as_tuple(self._run(head, hidden, extras))
        hidden, *outputs = _as_tuple(self._scan_tail(hidden, extras))
        if head and outputs:
            outputs = [torch.cat([h, o]) for h, o in zip(head_outputs, outputs, strict=True)]
        return (hidden, *outputs) if outputs else hidden

    def _scan_tail(self, hidden, extras):
        """One XLA while loop over the stacked layers. The layer is traced (forward and
        backward, by AOTAutograd) on the first step only: torch_xla's scan cache
        (`is_fn_pure`) replays the trace while it is given the same function object, which
        is kept here (the cache holds it weakly, so a fresh bound method would miss every
        step). Its backward waits for the previous step's execution before it is lowered
        (core/backends/xla/scan_backward.py: without the wait it crashes now and then)."""
        from functorch.compile import default_partition  # start-up

        partition = SCAN_POLICIES[self.scan_policy] if self.scan_policy else default_partition
        if self._step_fn is None:
            self._step_fn = functools.partial(LayerStack._layer_step, self)
        carry = (hidden, *self.carried_extras(extras))
        carry, outputs = scan(self._step_fn, carry, self._stacked(), partition)
        hidden = wait_before_backward(carry[0])
        return (hidden, *outputs) if outputs is not None else hidden

    def carried_extras(self, extras) -> tuple:
        """The extras as the scan carries them. torch_xla's scan makes every carried tensor
        require grad, which an integer one (packed rows' segment ids) cannot: it rides as
        fp32 (exact below 2**24) and `_layer_step` gives each layer its own dtype back."""
        self._extra_dtypes = tuple(extra.dtype for extra in extras)
        return tuple(e if e.is_floating_point() else e.float() for e in extras)

    def _layer_step(self, carry, weights):
        """The template's code on one layer's weights; extras ride along in the carry, and
        per-layer outputs leave as the scan's stacked ys."""
        hidden, *extras = carry
        hidden = checkpoint_name(hidden, LAYER_INPUT)
        given = [extra.to(dtype) for extra, dtype in zip(extras, self._extra_dtypes, strict=True)]
        output, *outputs = _as_tuple(_call_with(self._modules[STACKED], weights, hidden, *given))
        return (output, *extras), (tuple(outputs) if outputs else None)


def _partition_saving(keep):
    """A scan partition function (AOTAutograd joint graph -> forward, backward) that saves
    the layer's inputs and the forward nodes `keep(node)` selects; the backward recomputes
    every other forward value it needs from those. Inputs that are the layer's weights
    cost nothing: torch_xla's scan reads them from the stacked weights, not a saved copy."""

    def partition(joint_module, _joint_inputs, *, num_fwd_outputs, **_):
        # start-up
        from torch._functorch.partitioners import (
            _extract_fwd_bwd_modules,
            _is_primal,
            _is_tangent,
        )

        backward = set()
        for node in joint_module.graph.nodes:
            if _is_tangent(node) or any(arg in backward for arg in node.all_input_nodes):
                backward.add(node)
        saved = [node for node in joint_module.graph.nodes
                 if _is_primal(node) or (node.op == "call_function" and node not in backward
                                         and keep(node))]
        return _extract_fwd_bwd_modules(joint_module, saved, saved_sym_nodes=[],
                                        num_fwd_outputs=num_fwd_outputs)

    return partition


@torch.library.custom_op("zoo::checkpoint_name", mutates_args=())
def checkpoint_name(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """`tensor`, named for remat policies (MaxText's `checkpoint_name`): a scanned layer's
    policy keeps or offloads it by name. An identity; XLA elides the copy."""
    return tensor.clone()


@checkpoint_name.register_fake
def _(tensor, name):
    return torch.empty_like(tensor)


checkpoint_name.register_autograd(lambda ctx, grad: (grad, None),
                                  setup_context=lambda ctx, inputs, output: None)
LAYER_INPUT = "decoder_layer_input"  # what LayerStack names each layer's input


def _named(node, names: tuple[str, ...]) -> bool:
    return node.target is torch.ops.zoo.checkpoint_name.default and node.args[1] in names


def _offloading(partition, names: tuple[str, ...]):
    """`partition`, with the saved tensors that feed `checkpoint_name(_, name)` nodes of
    `names` moved to host memory after the forward and back before the backward uses them
    (torch_xla's place_to_host / place_to_device: TPU memory-space annotations)."""

    def offloading_partition(joint_module, joint_inputs, **kwargs):
        register_offload_ops()
        offloaded = {node.args[0].name for node in joint_module.graph.nodes
                     if _named(node, names)}
        forward, backward = partition(joint_module, joint_inputs, **kwargs)
        output = next(node for node in forward.graph.nodes if node.op == "output")
        results = list(output.args[0])
        with forward.graph.inserting_before(output):
            for index, value in enumerate(results):
                if getattr(value, "name", None) in offloaded:
                    results[index] = forward.graph.call_function(
                        torch.ops.xla.place_to_host.default, (value,))
        output.args = (tuple(results),)
        for node in list(backward.graph.nodes):
            if node.op == "placeholder" and node.name in offloaded:
                with backward.graph.inserting_after(node):
                    on_device = backward.graph.call_function(
                        torch.ops.xla.place_to_device.default, (node,))
                node.replace_all_uses_with(
                    on_device, delete_user_cb=lambda user, moved=on_device: user is not moved)
        forward.recompile()
        backward.recompile()
        return forward, backward

    return offloading_partition


def _weight_matmul(op) -> bool:
    """A 2-D matmul: a linear layer's product over flattened tokens (attention's batched
    products are `bmm`)."""
    return op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)


# Policy name -> the scan partition function that keeps what the policy names.
QKV = ("query_proj", "key_proj", "value_proj")
SCAN_POLICIES = {
    "full": _partition_saving(lambda node: False),
    "minimal": _partition_saving(lambda node: _weight_matmul(node.target)),
    "save_qkv_proj": _partition_saving(lambda node: _named(node, QKV)),
    "offload": _offloading(_partition_saving(lambda node: False), (LAYER_INPUT,)),
}


def _call_with(module, weights, *args):
    return torch.func.functional_call(module, weights, args)


def _as_tuple(output) -> tuple:
    return output if isinstance(output, tuple) else (output,)


def alike_tail_start(layers: list[nn.Module]) -> int:
    """The index from which every layer has the last one's class and weight names and
    shapes (and buffers'): the layers one scan can run."""

    def signature(layer):
        tensors = [*layer.named_parameters(), *layer.named_buffers()]
        return type(layer), [(name, tuple(t.shape), t.dtype) for name, t in tensors]

    last = signature(layers[-1])
    first = len(layers) - 1
    while first > 0 and signature(layers[first - 1]) == last:
        first -= 1
    return first


def first_stacked_layer(names) -> dict[str, int]:
    """Each scanned stack among state-dict `names` (`<stack>.*.<...>`) -> the index of its
    first stacked layer: the number of leading layers kept under their own `<stack>.<i>.`."""
    stacks = {name.partition(f".{STACKED}.")[0] for name in names if f".{STACKED}." in name}
    return {stack: len({name[len(stack) + 1:].partition(".")[0] for name in names
                        if name.startswith(f"{stack}.")} - {STACKED})
            for stack in stacks}


def unstack_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict with per-layer (Hugging Face) names: `<stack>.*.<name>` [layers, ...]
    becomes `<stack>.<first + i>.<name>` for each stacked layer. Other entries pass
    unchanged."""
    first = first_stacked_layer(state)
    out = {}
    for name, value in state.items():
        stack, stacked, rest = name.partition(f".{STACKED}.")
        if not stacked:
            out[name] = value
            continue
        for i, layer_value in enumerate(value.unbind(0)):
            out[f"{stack}.{first[stack] + i}.{rest}"] = layer_value.clone()
    return out


def apply_remat(model: nn.Module, config: RematConfig) -> None:
    """Turn on checkpointing / scan in place; names that match nothing are errors."""
    modules = dict(model.named_modules())
    for path in config.scan:
        stack = modules.get(path)
        if not isinstance(stack, LayerStack):
            stacks = [n for n, m in modules.items() if isinstance(m, LayerStack)]
            raise RematError(
                f"remat.scan: '{path}' is not a LayerStack of this model; "
                f"stacks: {', '.join(stacks) or 'none'}"
            )
        stack.scan = True
    classes = {type(m).__name__ for m in modules.values()}
    for cls_name in config.checkpoint:
        if cls_name not in classes:
            raise RematError(
                f"remat.checkpoint: no layer of class '{cls_name}' in this model; "
                f"classes: {', '.join(sorted(classes))}"
            )
    scanned = {id(layer) for p in config.scan for layer in modules[p]}
    for path, module in modules.items():
        if type(module).__name__ not in config.checkpoint:
            continue
        if id(module) in scanned:
            # Inside scan the layer is traced once; remat is chosen by the scan partitioner.
            stack = modules[path.rsplit(".", 1)[0]]
            stack.scan_policy = config.policy
        else:
            module.forward = functools.partial(checkpointed, module.forward)
    for path in config.scan:
        modules[path].stack_weights()


def checkpointed(forward, *args, **kwargs):
    """Recompute `forward` in backward when gradients flow; plain call otherwise."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors):
        return forward(*args, **kwargs)
    if tensors[0].device.type != "xla":
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return xla_checkpoint(forward, *args, **kwargs)
