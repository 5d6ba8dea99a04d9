"""The GRPO objective (zoo/tasks/grpo_objective.py) is TRL's GRPOTrainer's.

The loss: TRL's own `GRPOTrainer._compute_loss` is called, unbound, on a minimal stand-in
for the trainer whose `_get_per_token_logps_and_entropies` returns the given per-token
log-probs (no model), with the same old and reference log-probs, advantages and completion
mask; its loss, gradient and logged metrics (clip ratios, KL) equal `policy_loss`'s for
each loss type. The advantages: TRL computes them inside `_generate_and_score_completions`,
which needs a model and a generation, so its lines are reproduced here from trl 1.16's source
(with TRL's own `nanstd`) and compared for scale_rewards group, batch and none. Micro-batches
weighed by `loss_weight` give the whole batch's loss, as the engine combines them."""

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from zoo.tasks.grpo_objective import (
    GRPOConfig,
    completion_lengths,
    group_advantages,
    loss_weight,
    policy_loss,
)

G, PROMPTS, T = 4, 2, 6


@pytest.fixture(scope="module")
def trl():
    """TRL's GRPO module, imported here: its import (transformers' Trainer, accelerate) takes
    about 7 s, paid by the worker that runs this file only, not at every worker's collection."""
    from trl.trainer import grpo_trainer

    return grpo_trainer


def rollout(seed: int = 1) -> dict:
    """Per-token log-probs of 8 completions (2 prompts x 4) of up to 6 tokens: the policy's
    moved from the sampler's far enough that some ratios leave the clip range both ways."""
    generator = torch.Generator().manual_seed(seed)
    rows = G * PROMPTS
    old = -torch.rand(rows, T, generator=generator) * 3
    lengths = torch.tensor([6, 3, 1, 5, 6, 2, 4, 6])
    return {
        "old": old,
        "new": old + torch.randn(rows, T, generator=generator) * 0.3,
        "ref": old + torch.randn(rows, T, generator=generator) * 0.2,
        "mask": (torch.arange(T) < lengths[:, None]).int(),
        "advantages": torch.randn(rows, generator=generator),
    }


def trls(trl, data: dict, config: GRPOConfig, old: bool) -> tuple[float, torch.Tensor, dict]:
    """TRL's loss, its gradient on the policy's log-probs, and the metrics it logs."""
    logps = data["new"].clone().requires_grad_(True)
    identity = SimpleNamespace(reduce=lambda x, reduction: x, gather=lambda x: x,
                               gather_for_metrics=lambda x: x, num_processes=1)
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (
            logps, torch.zeros_like(logps), None),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level="token", beta=config.beta, loss_type=config.loss_type,
        epsilon_low=config.epsilon, epsilon_high=config.upper_epsilon, use_vllm=False,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1,
        max_completion_length=T, accelerator=identity, _entropy_bonus_enabled=False,
        aux_loss_enabled=False, _metrics={"train": defaultdict(list)})
    rows = data["mask"].shape[0]
    inputs = {
        "prompt_ids": torch.zeros(rows, 2, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
        "completion_ids": torch.zeros(rows, T, dtype=torch.long),
        "completion_mask": data["mask"], "advantages": data["advantages"],
        "ref_per_token_logps": data["ref"], "num_items_in_batch": data["mask"].sum(),
        **({"old_per_token_logps": data["old"]} if old else {}),
    }
    loss = trl.GRPOTrainer._compute_loss(trainer, None, inputs)
    loss.backward()
    return loss.item(), logps.grad, {k: v[-1] for k, v in trainer._metrics["train"].items()}


def ours(data: dict, config: GRPOConfig, old: bool) -> tuple[float, torch.Tensor, dict]:
    logps = data["new"].clone().requires_grad_(True)
    loss, metrics = policy_loss(logps, data["old"] if old else None, data["advantages"],
                                data["mask"], config, data["ref"])
    loss.backward()
    return loss.item(), logps.grad, {k: v.item() for k, v in metrics.items()}


@pytest.mark.parametrize("loss_type, beta, epsilon_high, old", [
    ("grpo", 0.0, None, False),  # a rollout's first update: the ratio is 1
    ("grpo", 0.04, 0.28, True),
    ("bnpo", 0.04, None, True),
    ("dapo", 0.0, 0.28, True),
    ("dapo", 0.04, 0.28, True),
    ("dr_grpo", 0.04, 0.28, True),
])
def test_the_loss_is_trls(trl, loss_type, beta, epsilon_high, old):
    config = GRPOConfig(loss_type=loss_type, beta=beta, epsilon_high=epsilon_high)
    data = rollout()
    their_loss, their_grad, their_metrics = trls(trl, data, config, old)
    our_loss, our_grad, our_metrics = ours(data, config, old)
    assert our_loss == pytest.approx(their_loss, rel=1e-6, abs=1e-7)
    torch.testing.assert_close(our_grad, their_grad, rtol=1e-5, atol=1e-7)
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert our_metrics[name] == pytest.approx(their_metrics[name], abs=1e-7), name
    assert ("kl" in our_metrics) == (beta != 0)
    if beta:
        assert our_metrics["kl"] == pytest.approx(their_metrics["kl"], rel=1e-6)
    if old:  # the data really clips on both sides, so the clip terms were compared
        assert our_metrics["clip_ratio/low_mean"] > 0 and our_metrics["clip_ratio/high_mean"] > 0


def trl_advantages(nanstd, rewards: torch.Tensor,
                   scale_rewards: str) -> tuple[torch.Tensor, float]:
    """trl 1.16 GRPOTrainer._generate_and_score_completions, sum_then_normalize (one reward
    function of weight 1, every completion scored), as written there."""
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, G), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(G, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = nanstd(rewards.view(-1, G), dim=1)
        std_rewards = std_rewards.repeat_interleave(G, dim=0)
    else:
        std_rewards = nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))
    return advantages, is_std_zero.float().mean().item()


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_advantages_are_trls(trl, scale_rewards):
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.2, 0.2, 0.2, 0.2, 3.0, -1.0, 0.0, 2.0])
    theirs, tied_share = trl_advantages(trl.nanstd, rewards, scale_rewards)
    found = group_advantages(rewards, G, scale_rewards)
    torch.testing.assert_close(found.values, theirs, rtol=1e-6, atol=1e-6)
    assert found.tied.tolist() == [False, True, False]  # the second group's rewards all tie
    if scale_rewards != "batch":  # TRL's share counts tied groups (batch: the batch's std)
        assert found.tied_share.item() == pytest.approx(tied_share) == pytest.approx(1 / 3)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_micro_batches_weighed_by_loss_weight_give_the_whole_batchs_loss(loss_type):
    config, data = GRPOConfig(loss_type=loss_type, beta=0.04), rollout(seed=2)
    whole, _ = policy_loss(data["new"], data["old"], data["advantages"], data["mask"], config,
                           data["ref"])
    halves = [slice(0, 3), slice(3, 8)]  # unequal parts, as a split of uneven lengths
    parts = [(policy_loss(data["new"][h], data["old"][h], data["advantages"][h],
                          data["mask"][h], config, data["ref"][h])[0],
              loss_weight(data["mask"][h], loss_type)) for h in halves]
    combined = sum(loss * weight for loss, weight in parts) / sum(w for _, w in parts)
    assert combined.item() == pytest.approx(whole.item(), rel=1e-6)


@pytest.mark.parametrize("setting, line", [
    ({"num_generations": 1}, "grpo.num_generations must be >= 2"),
    ({"epsilon": -0.1}, "grpo.epsilon must be a number >= 0, not -0.1"),
    ({"epsilon": 1.0}, "grpo.epsilon must be below 1"),
    ({"epsilon_high": float("nan")}, "grpo.epsilon_high must be a number >= 0, not nan"),
    ({"beta": -1.0}, "grpo.beta must be a number >= 0"),
    ({"loss_type": "ppo"}, "grpo.loss_type must be one of grpo, bnpo, dapo, dr_grpo, not 'ppo'"),
    ({"scale_rewards": "yes"}, "grpo.scale_rewards must be one of group, batch, none"),
    ({"num_iterations": 0}, "grpo.num_iterations must be >= 1, not 0"),
])
def test_a_bad_setting_is_one_line(setting, line):
    with pytest.raises(ValueError, match="^" + line.replace("(", r"\(").replace(")", r"\)")) \
            as raised:
        GRPOConfig(**setting)
    assert "\n" not in str(raised.value)


def test_completion_lengths_are_counted_from_the_mask():
    lengths = completion_lengths(rollout()["mask"])
    assert {k: v.item() for k, v in lengths.items()} == {
        "completions/mean_length": 33 / 8, "completions/min_length": 1.0,
        "completions/max_length": 6.0}
