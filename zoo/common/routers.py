"""The top-k softmax router of Mixtral and Qwen3-MoE: which experts each token goes to and
with what weight."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.common.masks import picked
from zoo.common.moe_config import MoeConfig


class TopKRouter(nn.Module):
    def __init__(self, config: MoeConfig):
        super().__init__()
        self.top_k, self.renormalise = config.num_experts_per_tok, config.norm_topk_prob
        self.weight = nn.Parameter(torch.empty(config.num_local_experts, config.hidden_size))

    def forward(self, x):
        """(fp32 router probabilities [..., E], top-k expert ids, their weights: the chosen
        probabilities, renormalised to sum to 1 where the config says so)."""
        probs = F.linear(x, self.weight).float().softmax(-1)
        experts = probs.topk(self.top_k, dim=-1)[1]
        weights = picked(probs, experts)
        if self.renormalise:
            weights = weights / weights.sum(-1, keepdim=True)
        return probs, experts, weights
