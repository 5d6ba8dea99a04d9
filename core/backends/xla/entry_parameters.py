"""Which entry parameter of a traced graph each of its inputs becomes: torch_xla numbers a
graph's device data (placeholders included) in the order it finds them from the outputs, the
numbering of the HLO text `_get_xla_tensors_hlo` gives for the same outputs. The plans read a
compiled program's per-chip bytes of chosen inputs (a decode step's KV cache) by it."""

from __future__ import annotations

import torch


def entry_parameter_numbers(outputs: list[torch.Tensor]) -> dict[int, int]:
    """torch_xla tensor id -> entry parameter number, in the graph computing `outputs`."""
    import torch_xla  # torch_xla

    ids, _ = torch_xla._XLAC._get_tensors_xla_device_data_node(outputs)
    return {tensor_id: number for number, tensor_id in enumerate(ids)}
