"""The token embedding table, with a lookup whose gradient reads the ids once."""

from __future__ import annotations

import torch
from torch import nn


class TokenEmbedding(nn.Embedding):
    """nn.Embedding whose lookup and gradient read one int32 copy of the flattened ids.
    Under FSDP the table is split on its hidden dim, so the partitioner gathers every id for
    the lookup; torch's embedding backward re-derives the ids for its scatter, and they were
    gathered a second time (4 MiB a step on llama-8b, v5p-128, 128 x 8192)."""

    def forward(self, input_ids):
        ids = input_ids.reshape(-1).to(torch.int32)
        return _Lookup.apply(self.weight, ids).view(*input_ids.shape, -1)


class _Lookup(torch.autograd.Function):
    """Rows of `table` at `ids`; the gradient adds each row's gradient at the same ids."""

    @staticmethod
    def forward(ctx, table, ids):
        ctx.save_for_backward(ids)
        ctx.rows = table.shape[0]
        return table.index_select(0, ids)

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        return grad.new_zeros(ctx.rows, grad.shape[-1]).index_add(0, ids, grad), None
