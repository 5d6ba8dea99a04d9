"""Trace a train step of any size without allocating it: every parameter, buffer, optimizer
state and batch tensor is a torch_xla placeholder (a shape with no buffer), so llama-70b
traces in a few GB of host memory. The step's HLO text then gets the sharding of each
placeholder written onto its entry parameter, and the updated parameters and optimizer
state aliased to their inputs (what torch_xla's buffer donation does on a real run).

torch_xla cannot `mark_sharding` a placeholder (it has no data to shard), so the sharding
goes into the HLO text instead; activations, which are IR values, are marked as usual.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re

import torch

from core.sharding import Spec


@dataclasses.dataclass
class Placeholders:
    """Placeholder tensor id -> the sharding it stands for on the slice."""

    specs: dict[int, Spec] = dataclasses.field(default_factory=dict)
    tensors: list[torch.Tensor] = dataclasses.field(default_factory=list)
    # placeholder id -> the id of the copy over its data that scan passes into its loop
    copies: dict[int, int] = dataclasses.field(default_factory=dict)

    def make(self, shape, dtype, spec: Spec | None = None) -> torch.Tensor:
        import torch_xla  # torch_xla
        from torch_xla.core.xla_builder import create_placeholder_tensor  # torch_xla

        tensor = create_placeholder_tensor(tuple(shape), dtype)
        self.specs[torch_xla._XLAC._xla_get_tensor_id(tensor)] = spec or (None,) * len(shape)
        self.tensors.append(tensor)
        return tensor

    def spec_of(self, tensor: torch.Tensor) -> Spec | None:
        import torch_xla  # torch_xla

        return self.specs.get(torch_xla._XLAC._xla_get_tensor_id(tensor))


@contextlib.contextmanager
def follow_hoisted_placeholders(holders: Placeholders):
    """torch_xla's scan lowers the layer body on its own and passes every tensor the body
    reads (weights in the backward, among others) into its loop as a new tensor over the
    same data, under a new id. Give each such copy of a placeholder the placeholder's
    sharding; unfollowed, they reach the compiler replicated."""
    import torch_xla  # torch_xla

    context = torch_xla._XLAC.lowering.LoweringContext
    original = context.device_parameter_id_tensor_mapping

    def mapping(self):
        hoisted = original(self)
        for tensor in holders.tensors:
            param_id = self.tensor_parameter_id(tensor)
            if param_id in hoisted:
                copy_id = torch_xla._XLAC._xla_get_tensor_id(hoisted[param_id])
                holders.specs[copy_id] = holders.spec_of(tensor)
                holders.copies[torch_xla._XLAC._xla_get_tensor_id(tensor)] = copy_id
        return hoisted

    context.device_parameter_id_tensor_mapping = mapping
    try:
        yield
    finally:
        context.device_parameter_id_tensor_mapping = original


def placeholder_model(model: torch.nn.Module, param_specs: dict[str, Spec],
                      holders: Placeholders) -> None:
    """Swap every parameter and buffer of a meta-device model for a placeholder, in place.
    Parameters carry their planned sharding; buffers (rotary tables and the like) are
    replicated, as `shard_model` leaves them."""
    for module_name, module in model.named_modules():
        prefix = f"{module_name}." if module_name else ""
        for name, param in list(module._parameters.items()):
            if param is not None:
                spec = param_specs[prefix + name]
                data = holders.make(param.shape, param.dtype, spec)
                module._parameters[name] = torch.nn.Parameter(data, param.requires_grad)
        for name, buffer in list(module._buffers.items()):
            if buffer is not None:
                module._buffers[name] = holders.make(buffer.shape, buffer.dtype)


def placeholder_optimizer_state(optimizer: torch.optim.Optimizer, holders: Placeholders) -> None:
    """Give the optimizer the state it has from step 2 on, as placeholders: one
    throw-away step on zero gradients creates it (any optimizer, built-in or custom), then
    every device tensor of it (and each parameter it updated) becomes a fresh placeholder
    with its parameter's sharding. The step traced next is the steady-state one."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    specs = {id(p): holders.spec_of(p) for p in params}
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    for p in params:
        p.data = holders.make(p.shape, p.dtype, specs[id(p)])
        state = optimizer.state.get(p, {})
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device.type == "xla":
                same = tuple(value.shape) == tuple(p.shape)
                state[key] = holders.make(value.shape, value.dtype, specs[id(p)] if same else None)


def placeholder_batch(batch: dict, spec_of, holders: Placeholders) -> dict:
    """A host batch's shapes and dtypes as placeholders, split as the loader splits them
    (`spec_of(shape)`)."""
    return {k: holders.make(v.shape, v.dtype, spec_of(v.shape)) for k, v in batch.items()}


def state_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """What a step updates in place: parameters, then the optimizer's device state."""
    tensors = list(model.parameters())
    for state in optimizer.state.values():
        tensors += [v for v in state.values()
                    if isinstance(v, torch.Tensor) and v.device.type == "xla"]
    return tensors


def tensor_ids(tensors: list[torch.Tensor]) -> list[int]:
    import torch_xla  # torch_xla

    return [torch_xla._XLAC._xla_get_tensor_id(t) for t in tensors]


def sharded_hlo_text(outputs: list[torch.Tensor], updated: list[torch.Tensor],
                     sources: list[int], holders: Placeholders, sharding_text) -> tuple[str, int]:
    """HLO text of the graph computing `outputs` and `updated` (tensors the step changed in
    place; `sources`: the placeholder ids they held before it), with each placeholder
    parameter's sharding written in, and each updated tensor's output sharded like its
    input and aliased to it (or to its scan copy's parameter: the same data, donated
    alike). `sharding_text(spec)` gives the HLO sharding of a spec.
    Also the bytes of entry parameters that are not placeholders (nor their copies, see
    `follow_hoisted_placeholders`): device data the step made itself, such as constants,
    which reach the compiler unsharded."""
    import torch_xla  # torch_xla

    everything = [*outputs, *updated]
    text = torch_xla._XLAC._get_xla_tensors_hlo(everything)
    # torch_xla writes its memory-space annotations (place_to_host / place_to_device) with
    # no API version, which XLA's HLO parser refuses; they take the original one
    text = text.replace("api_version=API_VERSION_UNSPECIFIED", "api_version=API_VERSION_ORIGINAL")
    ids, values = torch_xla._XLAC._get_tensors_xla_device_data_node(everything)
    position = entry_parameter_numbers(everything, ids)
    input_sharding = {}
    unplanned = 0
    for index, (tensor_id, value) in enumerate(zip(ids, values)):
        if tensor_id in holders.specs:
            input_sharding[index] = sharding_text(holders.specs[tensor_id])
        else:
            unplanned += value.numel() * value.element_size()
    text = _shard_parameters(text, input_sharding)

    output_sharding = ["{replicated}"] * len(outputs)
    aliases = {}
    for offset, source in enumerate(sources):
        output_sharding.append(sharding_text(holders.specs[source]))
        # a weight only scan reads enters the program as its copy (same data, so donated)
        read_as = source if source in position else holders.copies.get(source)
        if read_as in position:
            aliases[len(outputs) + offset] = position[read_as]
    text = _shard_root(text, output_sharding)
    return _alias_outputs(text, aliases), unplanned


def entry_parameter_numbers(outputs: list[torch.Tensor],
                            ids: list[int] | None = None) -> dict[int, int]:
    """torch_xla tensor id -> entry parameter number in the graph computing `outputs` (in
    `sharded_hlo_text`'s text for the same outputs): torch_xla numbers a graph's device data,
    placeholders included, in the order it finds them from the outputs. `ids`: that order,
    when the caller has it already. The plans read a compiled program's per-chip bytes of
    chosen inputs (a decode step's KV cache) by it."""
    if ids is None:
        import torch_xla  # torch_xla

        ids, _ = torch_xla._XLAC._get_tensors_xla_device_data_node(outputs)
    return {tensor_id: number for number, tensor_id in enumerate(ids)}


_PARAMETER = re.compile(r"^(\s*%\S+ = [^=]*? parameter\((\d+)\))(.*)$")


def _shard_parameters(text: str, shardings: dict[int, str]) -> str:
    lines = text.split("\n")
    entry = next(i for i, line in enumerate(lines) if line.startswith("ENTRY"))
    for i in range(entry, len(lines)):
        match = _PARAMETER.match(lines[i])
        if match and int(match.group(2)) in shardings and "sharding=" not in match.group(3):
            lines[i] = f"{match.group(1)}, sharding={shardings[int(match.group(2))]}" \
                       f"{match.group(3)}"
    return "\n".join(lines)


def _shard_root(text: str, shardings: list[str]) -> str:
    lines = text.split("\n")
    entry = next(i for i, line in enumerate(lines) if line.startswith("ENTRY"))
    root = next(i for i in range(entry, len(lines)) if lines[i].lstrip().startswith("ROOT"))
    lines[root] += ", sharding={" + ", ".join(shardings) + "}"
    return "\n".join(lines)


def _alias_outputs(text: str, aliases: dict[int, int]) -> str:
    if not aliases:
        return text
    pairs = ", ".join(f"{{{out}}}: ({arg}, {{}}, may-alias)" for out, arg in aliases.items())
    header, rest = text.split("\n", 1)
    name, _, tail = header.partition(", ")
    return f"{name}, input_output_alias={{ {pairs} }}, {tail}\n{rest}"


def hlo_sharding_text(mesh, spec: Spec) -> str:
    """The HLO sharding (e.g. `{devices=[4,1]0,1,2,3}`) torch_xla gives `spec` on `mesh`,
    read off a tiny tensor with one element per shard."""
    import torch_xla  # torch_xla
    import torch_xla.distributed.spmd as xs  # torch_xla

    if all(dim is None for dim in spec):
        return "{replicated}"
    sizes = dict(zip(mesh.axis_names, mesh.mesh_shape))
    shape = [math.prod(sizes[a] for a in ((d,) if isinstance(d, str) else d or ())) for d in spec]
    probe = torch.zeros(shape, device=torch_xla.device())
    xs.mark_sharding(probe, mesh, spec)
    return torch_xla._XLAC._get_xla_sharding_spec(probe) or "{replicated}"
