"""The sparse mixture-of-experts MLP: a router and stacked SwiGLU experts, with static
shapes throughout (no data-dependent indexing, no host syncs), so one XLA graph serves every
batch and the SPMD partitioner can place experts on their own mesh axis.

Parameter names are transformers 5's `MixtralSparseMoeBlock`: `gate.weight` [E, H],
`experts.gate_up_proj` [E, 2I, H], `experts.down_proj` [E, H, I].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from core import lora
from zoo.common.masks import one_hot
from zoo.common.moe_config import MoeConfig
from zoo.common.routers import TopKRouter


class ExpertProduct(nn.Module):
    """Each expert's tokens times its own matrix, [E, groups, capacity, in] x [E, out, in]:
    a module of its own (it holds no weights), so a sharding preset can pin its output like
    any layer's and the partitioner gathers the expert weights, not every token."""

    def forward(self, tokens, weights):
        return torch.einsum("egci,eoi->egco", tokens, weights)


class Experts(nn.Module):
    """Every expert's SwiGLU on its own tokens: [E, groups, capacity, H] -> the same shape.
    Its output (and its gate/up product's) is where a sharding preset pins the expert
    layout (experts over `expert`). Both weights take LoRA adapters (`lora.targets`), one per
    expert, as PEFT's `target_parameters` does."""

    lora_parameters = ("gate_up_proj", "down_proj")

    def __init__(self, config: MoeConfig):
        super().__init__()
        experts, hidden, inner = (config.num_local_experts, config.hidden_size,
                                  config.intermediate_size)
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * inner, hidden))
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, inner))
        self.gate_up, self.down = ExpertProduct(), ExpertProduct()

    def forward(self, tokens):
        gate_up = self.gate_up(tokens, self.gate_up_proj)
        gate, up = lora.expert_adapter_output(self, "gate_up_proj", tokens, gate_up).chunk(2, -1)
        hidden = F.silu(gate) * up
        return lora.expert_adapter_output(self, "down_proj", hidden,
                                          self.down(hidden, self.down_proj))


class SparseMoeBlock(nn.Module):
    """forward(x [B, S, H]) -> (y [B, S, H], router statistics of this layer [2E + 1]):
    tokens per expert (top-k assignments, E), router probability summed per expert (E;
    differentiable: the load-balancing loss flows through it) and assignments kept (1), in
    one vector because torch_xla's scan differentiates every per-layer output. A family sets
    its router (`router_cls`: deepseek3's) and names its experts (`experts_cls`)."""

    router_cls: type[nn.Module] = TopKRouter
    experts_cls: type[nn.Module] = Experts
    # Its own einsums (one-hot dispatch and combine) move tokens: FLOPs that are not model
    # FLOPs (the router's and the experts' are), as MaxText and torchprime count MoE FLOPs.
    routes_by_matmul = True

    def __init__(self, config: MoeConfig):
        super().__init__()
        self.config = config
        self.gate = self.router_cls(config)
        self.experts = self.experts_cls(config)
        # where tokens reach their experts and come back: named points (identities) that a
        # sharding preset can pin, so the partitioner moves tokens (all-to-all) instead of
        # gathering every expert's tokens on every device
        self.to_experts, self.from_experts = nn.Identity(), nn.Identity()

    def forward(self, x):
        probs, experts, weights = self.gate(x)
        num_experts = self.config.num_local_experts
        chosen = one_hot(experts, num_experts, probs.dtype)  # [B, S, k, E]
        if self.config.dispatch == "dense" or not self.training:  # eval: dropless, as HF
            y, kept = self._dense(x, chosen, weights), chosen.sum()
        else:
            y, kept = self._capacity(x, chosen, weights)
        return y, torch.cat((chosen.sum((0, 1, 2)), probs.sum((0, 1)), kept.reshape(1)))

    def _dense(self, x, chosen, weights):
        """Every expert on every token; the router's weights zero the unchosen ones."""
        combine = torch.einsum("bske,bsk->bse", chosen, weights).to(x.dtype)
        out = self.experts(x.unsqueeze(0).expand(self.config.num_local_experts, -1, -1, -1))
        return torch.einsum("ebsh,bse->bsh", out, combine)

    def _capacity(self, x, chosen, weights):
        """GShard dispatch with one group per sequence: an expert takes its first `capacity`
        assignments, every token's first choice ahead of any second choice; the rest are
        dropped. Returns y and the number of assignments kept."""
        batch, seq, top_k, num_experts = chosen.shape
        capacity = self.config.expert_capacity(seq)
        by_rank = chosen.transpose(1, 2).reshape(batch, top_k * seq, num_experts)
        slot = by_rank.cumsum(1) - 1  # position of each assignment in its expert's queue
        kept = by_rank * (slot < capacity)
        # a token reaches an expert once at most: its slot in that expert's queue and whether
        # it is kept, per (token, expert), so no mask is [.., top-k x tokens, experts, capacity]
        kept = kept.reshape(batch, top_k, seq, num_experts)
        slot = (slot.reshape(batch, top_k, seq, num_experts) * kept).sum(1)
        reached = kept.sum(1).bool()
        # each kept token's slot as a 0/1 mask [rows, tokens, experts, capacity], made by
        # comparison, not F.one_hot (an int64 tensor of that size, cast after)
        positions = torch.arange(capacity, device=x.device)
        dispatch = ((slot.unsqueeze(-1) == positions) & reached.unsqueeze(-1)).to(x.dtype)
        # the dispatch mask times each token's router weight for the expert (MaxText's
        # combine mask)
        expert_weights = torch.einsum("bske,bsk->bse", chosen, weights).to(x.dtype)
        combine = dispatch * expert_weights.unsqueeze(-1)
        out = self.experts(self.to_experts(torch.einsum("bsec,bsh->ebch", dispatch, x)))
        return torch.einsum("bsec,ebch->bsh", combine, self.from_experts(out)), kept.sum()
