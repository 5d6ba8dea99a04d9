"""The GRPO objective (Shao et al., 2024) as TRL's GRPOTrainer computes it, in pure torch: the
task (rollouts, rewards, the step) calls these on tensors it already holds.

A rollout is G completions per prompt, laid out as TRL lays them: the G completions of a
prompt are consecutive rows, so rewards `view(-1, G)` are the groups. Each completion's
advantage is its reward less its group's mean, divided by the group's standard deviation
(scale_rewards=group), the whole batch's (batch) or nothing (none, as Dr. GRPO says). The
policy loss is PPO's clipped surrogate per completion token,

    ratio = exp(logp - logp_old)      (logp_old: the policy that sampled; equal to logp,
                                       detached, on a rollout's first update)
    loss_t = -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)
             + beta * (exp(ref - logp) - (ref - logp) - 1)      (k3 KL, when beta > 0)

summed over the completion tokens and normalised as `loss_type` says:

    grpo     each completion's mean over its tokens, then the mean over completions
    bnpo     the mean over the micro-batch's tokens
    dapo     the mean over the whole step's tokens (loss_weight: the tokens)
    dr_grpo  the sum over tokens / (completions x max_completion_length)
"""

from __future__ import annotations

import dataclasses

import torch

from core.errors import UserError
from core.sampler.params import SamplingParams
from zoo.data.rewards import check_reward_specs

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
SCALE_REWARDS = ("group", "batch", "none")
STD_FLOOR = 1e-4  # TRL's: added to the standard deviation an advantage is divided by


@dataclasses.dataclass
class GRPOConfig:
    num_generations: int = 8  # G: completions sampled per prompt, compared with each other
    loss_type: str = "dapo"  # grpo | bnpo | dapo | dr_grpo (TRL's default: dapo)
    epsilon: float = 0.2  # the ratio is clipped below at 1 - epsilon
    epsilon_high: float | None = None  # ... and above at 1 + epsilon_high (None: epsilon)
    beta: float = 0.0  # weight of the KL term to the reference (0: no reference kept)
    scale_rewards: str = "group"  # divide advantages by the std of the group | batch | none
    num_iterations: int = 1  # policy updates per rollout (the ratio is to the sampler's policy)
    # reward functions: built-ins (exact_match, final_number, format) or module:function
    rewards: list[str] = dataclasses.field(default_factory=lambda: ["exact_match"])
    reward_weights: list[float] | None = None  # one per reward (None: each 1.0)
    # what the `format` reward asks of a whole completion (default: ends with "#### N")
    format_regex: str = r".*#### *-?[\d,]*\.?\d+\s*"
    # the rollout's sampling (core/sampler): each completion's length cap, temperature (the
    # policy's log-probs are of logits / temperature, as TRL's), top_k (0: no cut), top_p,
    # and texts that end a completion (besides EOS)
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop_strings: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if self.num_generations < 2:
            raise ValueError(f"grpo.num_generations must be >= 2 (a group compares its "
                             f"completions with each other), not {self.num_generations}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"grpo.loss_type must be one of {', '.join(LOSS_TYPES)}, "
                             f"not {self.loss_type!r}")
        if self.scale_rewards not in SCALE_REWARDS:
            raise ValueError(f"grpo.scale_rewards must be one of {', '.join(SCALE_REWARDS)}, "
                             f"not {self.scale_rewards!r}")
        for key in ("epsilon", "epsilon_high", "beta"):
            value = getattr(self, key)
            if value is not None and not 0 <= value < float("inf"):  # NaN fails too
                raise ValueError(f"grpo.{key} must be a number >= 0, not {value}")
        if self.epsilon >= 1:
            raise ValueError(f"grpo.epsilon must be below 1 (the ratio is clipped below at "
                             f"1 - epsilon), not {self.epsilon}")
        if self.num_iterations < 1:
            raise ValueError(f"grpo.num_iterations must be >= 1, not {self.num_iterations}")
        check_reward_specs(self.rewards, self.reward_weights, self.format_regex)
        if not 0 < self.temperature < float("inf"):
            raise ValueError(f"grpo.temperature must be above 0 (a rollout samples; 0 would "
                             f"be greedy, every completion of a group alike), not "
                             f"{self.temperature}")
        try:
            self.sampling(seed=0)
        except UserError as error:  # "top_p 2 is outside (0, 1]" or "a stop string is empty"
            message = str(error)
            key = message.split()[0]
            raise ValueError(f"grpo.{message}" if hasattr(self, key)
                             else f"grpo.stop_strings: {message}") from None

    def sampling(self, seed: int, stop_token_ids: tuple[int, ...] = ()) -> SamplingParams:
        """The rollout's sampler settings, drawing from `seed`."""
        return SamplingParams(self.max_new_tokens, temperature=self.temperature,
                              top_k=self.top_k, top_p=self.top_p, seed=seed,
                              stop_token_ids=stop_token_ids,
                              stop_strings=tuple(self.stop_strings))

    @property
    def upper_epsilon(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


@dataclasses.dataclass(frozen=True)
class Advantages:
    """Each completion's advantage [B*G] and, per group, whether its rewards all tie [B]
    (such a group teaches nothing: its advantages are 0)."""

    values: torch.Tensor
    tied: torch.Tensor

    @property
    def tied_share(self) -> torch.Tensor:
        """The share of groups whose rewards all tie (TRL's frac_reward_zero_std)."""
        return self.tied.float().mean()


def group_advantages(rewards: torch.Tensor, num_generations: int,
                     scale_rewards: str) -> Advantages:
    """TRL's advantages of [B*G] rewards (each prompt's G completions consecutive): the
    reward less its group's mean, over the group's (or batch's) std + 1e-4 unless "none"."""
    groups = rewards.view(-1, num_generations)
    mean = groups.mean(dim=1).repeat_interleave(num_generations)
    group_std = groups.std(dim=1)  # Bessel-corrected, as TRL's nanstd
    values = rewards - mean
    if scale_rewards == "group":
        values = values / (group_std.repeat_interleave(num_generations) + STD_FLOOR)
    elif scale_rewards == "batch":
        values = values / (rewards.std() + STD_FLOOR)
    return Advantages(values, torch.isclose(group_std, torch.zeros_like(group_std)))


def policy_loss(logps: torch.Tensor, old_logps: torch.Tensor | None, advantages: torch.Tensor,
                mask: torch.Tensor, config: GRPOConfig, ref_logps: torch.Tensor | None = None,
                max_completion_length: int | None = None) -> tuple[torch.Tensor, dict]:
    """(loss, metrics) of completion tokens [B, T]: `logps` under the policy being trained,
    `old_logps` under the policy that sampled them (None: this policy, the first update of a
    rollout), `ref_logps` under the reference (needed when beta > 0), `mask` 1 on the
    completion's tokens; `advantages` [B]. dr_grpo divides by `max_completion_length`
    (default T). The metrics are scalar tensors (nothing leaves the device)."""
    mask = mask.to(logps.dtype)
    advantages = advantages.view(-1, 1)
    old_logps = logps.detach() if old_logps is None else old_logps
    ratio = torch.exp(logps - old_logps)
    low, high = 1 - config.epsilon, 1 + config.upper_epsilon
    per_token = -torch.min(ratio * advantages, torch.clamp(ratio, low, high) * advantages)
    metrics = {}
    if config.beta != 0:
        if ref_logps is None:
            raise ValueError("grpo.beta > 0 needs the reference's log-probs (ref_logps)")
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + config.beta * kl
        metrics["kl"] = token_mean(kl, mask)
    loss = _normalised(per_token * mask, mask, config.loss_type, max_completion_length)
    low_clipped = ((ratio < low) & (advantages < 0)).to(mask.dtype)
    high_clipped = ((ratio > high) & (advantages > 0)).to(mask.dtype)
    metrics |= {
        "clip_ratio/low_mean": token_mean(low_clipped, mask),
        "clip_ratio/high_mean": token_mean(high_clipped, mask),
        "clip_ratio/region_mean": token_mean(torch.maximum(low_clipped, high_clipped), mask),
    }
    return loss, metrics


def _normalised(losses: torch.Tensor, mask: torch.Tensor, loss_type: str,
                max_completion_length: int | None) -> torch.Tensor:
    if loss_type == "grpo":
        return (losses.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type in ("bnpo", "dapo"):
        return losses.sum() / mask.sum().clamp(min=1.0)
    return losses.sum() / (losses.shape[0] * (max_completion_length or losses.shape[-1]))


def loss_weight(mask: torch.Tensor, loss_type: str) -> torch.Tensor:
    """What `policy_loss` is a mean over in this micro-batch (Task.loss_weight), so a step of
    several micro-batches (or processes) averages as TRL's objective does: completions for
    grpo and dr_grpo, tokens for dapo (the whole step's token mean), 1 for bnpo (each
    micro-batch's token mean counts the same)."""
    if loss_type == "dapo":
        return mask.sum()
    if loss_type == "bnpo":
        return torch.ones((), device=mask.device)
    return torch.tensor(float(mask.shape[0]), device=mask.device)


def token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of `values` over the completion tokens `mask` holds."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def completion_lengths(mask: torch.Tensor) -> dict:
    """The rollout's completion lengths in tokens: mean, min and max (TRL logs these)."""
    lengths = mask.sum(-1).float()
    return {"completions/mean_length": lengths.mean(),
            "completions/min_length": lengths.min(), "completions/max_length": lengths.max()}
