"""DeepSeekMoE: fine-grained routed experts (zoo/common/moe.py's stacked experts and dispatch) plus
shared experts every token runs through, routed by sigmoid scores: each token's experts
are chosen among its best `topk_group` of `n_group` expert groups by score plus a per-expert
bias (`e_score_correction_bias`, what auxiliary-loss-free balancing moves), and weighted by
their scores alone, renormalised and times `routed_scaling_factor`. Names are transformers'
`DeepseekV3MoE`'s.

Auxiliary-loss-free balancing (DeepSeek-V3, section 2.1.2): each training forward adds the
tokens routed to each expert to the router's `expert_load` (the model does, from the
statistics its layer stack returns: zoo/deepseek3/model.py); after each optimizer update
(core/step.py) the bias of an expert busier than the layer's mean goes down by
`bias_update_rate`, of one less busy up, and the load starts again. Under scan one router
holds every routed layer's bias and load, [layers, E]; the mean is each layer's. MaxText's
`routed_bias_update_rate`, torchtitan's `load_balance_coeff`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.common.feed_forward import SwiGLU
from zoo.common.masks import one_hot, picked
from zoo.common.moe import SparseMoeBlock


class SigmoidGroupRouter(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.top_k, self.renormalise = config.num_experts_per_tok, config.norm_topk_prob
        self.groups, self.top_groups = config.n_group, config.topk_group
        self.scaling = config.routed_scaling_factor
        experts = config.num_local_experts
        self.weight = nn.Parameter(torch.empty(experts, config.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(experts))
        self.bias_update_rate = config.bias_update_rate
        # tokens routed to each expert since the last update (not saved: a step's own)
        self.register_buffer("expert_load", torch.zeros(experts), persistent=False)

    def forward(self, x):
        """(fp32 scores [..., E], top-k expert ids, their weights), as zoo/common's TopKRouter's."""
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
        biased = scores + self.e_score_correction_bias
        by_group = biased.unflatten(-1, (self.groups, -1))
        group_scores = by_group.topk(min(2, by_group.shape[-1]), dim=-1)[0].sum(-1)
        best_groups = group_scores.topk(self.top_groups, dim=-1)[1]
        in_best = one_hot(best_groups, self.groups, torch.bool).any(-2)
        allowed = in_best.unsqueeze(-1).expand_as(by_group).flatten(-2)
        choice = torch.where(allowed, biased, torch.full_like(biased, float("-inf")))
        experts = choice.topk(self.top_k, dim=-1)[1]
        weights = picked(scores, experts)
        if self.renormalise:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return scores, experts, weights * self.scaling

    def count(self, tokens_per_expert: torch.Tensor) -> None:
        """Add a training forward's assignments per expert (`expert_load`'s shape) to the
        step's load."""
        if self.step_buffers() and torch.is_grad_enabled():
            # a new tensor, not in place: a scan saved the old one (with the stacked weights
            # it slices) for its backward
            self.expert_load = self.expert_load + tokens_per_expert.detach().float()

    def step_buffers(self) -> list[torch.Tensor]:
        """What `after_optimizer_step` writes (core/step.py); none when the bias is held or
        the router frozen (a LoRA run's base model)."""
        if not self.bias_update_rate or not self.weight.requires_grad:
            return []
        return [self.e_score_correction_bias, self.expert_load]

    @torch.no_grad()
    def after_optimizer_step(self, total) -> None:
        """Each expert's bias one step toward an even load, rate x sign(mean - load), the
        load summed over every process's rows by `total` (the backend's)."""
        load = total(self.expert_load)
        mean = load.mean(-1, keepdim=True)
        self.e_score_correction_bias += self.bias_update_rate * torch.sign(mean - load)
        self.expert_load.zero_()


class DeepseekMoE(SparseMoeBlock):
    """The routed block with DeepSeek's router, plus the shared experts (one SwiGLU of
    n_shared_experts x the expert width)."""

    router_cls = SigmoidGroupRouter

    def __init__(self, config):
        super().__init__(config)
        self.shared_experts = SwiGLU(config, config.intermediate_size * config.n_shared_experts)

    def forward(self, x):
        y, stats = super().forward(x)
        return y + self.shared_experts(x), stats
