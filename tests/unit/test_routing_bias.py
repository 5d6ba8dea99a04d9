"""DeepSeek-V3's auxiliary-loss-free balancing (zoo/deepseek3/moe.py): the routing bias moves
after each update toward an even expert load, and the load it reads is the step's."""

import dataclasses

import pytest
import torch

from core.step import step_state_modules
from zoo.deepseek3.config import SIZES
from zoo.deepseek3.model import DeepseekV3ForCausalLM
from zoo.deepseek3.moe import DeepseekMoE, SigmoidGroupRouter

ONE_PROCESS = torch.clone  # the backend's sum over processes, with one process
CONFIG = dataclasses.replace(SIZES["tiny"], n_group=1, topk_group=1, bias_update_rate=0.01)


def skewed_router(config=CONFIG) -> SigmoidGroupRouter:
    """A router whose scores depend on the token, with every token leaning to the first
    experts: a load far from even."""
    experts, hidden = config.num_local_experts, config.hidden_size
    router = SigmoidGroupRouter(config)
    with torch.no_grad():
        router.weight.copy_(torch.randn(experts, hidden) / hidden ** 0.5
                            + torch.linspace(1, -1, experts)[:, None] / hidden ** 0.5)
    return router


def imbalance(router, tokens) -> float:
    """The busiest expert's assignments over the mean (1.0: even)."""
    experts = router(tokens)[1]
    load = torch.bincount(experts.flatten(), minlength=router.weight.shape[0]).float()
    return (load.max() / load.mean()).item()


def test_the_bias_moves_by_the_rate_toward_the_mean_load_and_the_load_restarts():
    router = SigmoidGroupRouter(CONFIG)
    router.count(torch.tensor([6.0, 0, 1, 1, 0, 0, 0, 0]))
    router.count(torch.tensor([2.0, 0, 1, 1, 0, 1, 1, 1]))  # a second micro-batch adds to it
    router.after_optimizer_step(ONE_PROCESS)
    loads = (8, 0, 2, 2, 0, 1, 1, 1)
    mean = sum(loads) / len(loads)
    expected = [-0.01 if load > mean else 0.01 for load in loads]
    torch.testing.assert_close(router.e_score_correction_bias, torch.tensor(expected))
    assert not router.expert_load.any()


def test_updates_even_out_a_skewed_load():
    torch.manual_seed(0)
    router, tokens = skewed_router(), torch.randn(1024, CONFIG.hidden_size) + 0.2
    before = imbalance(router, tokens)
    for _ in range(100):
        load = torch.bincount(router(tokens)[1].flatten(), minlength=CONFIG.num_local_experts)
        router.count(load.float())
        router.after_optimizer_step(ONE_PROCESS)
    assert before > 3 and imbalance(router, tokens) < 1.4, (before, imbalance(router, tokens))


def test_the_bias_of_a_scanned_stack_moves_by_each_layers_mean():
    """Under scan one router holds every routed layer's bias and load, [layers, E]: an
    expert is busy or idle against its own layer's mean."""
    router = SigmoidGroupRouter(CONFIG)
    router.expert_load = torch.tensor([[4.0, 0, 0, 0, 0, 0, 0, 0], [9.0, 9, 9, 9, 9, 9, 9, 1]])
    router.e_score_correction_bias = torch.zeros(2, 8)
    router.after_optimizer_step(ONE_PROCESS)
    torch.testing.assert_close(router.e_score_correction_bias,
                               torch.tensor([[-0.01] + [0.01] * 7, [-0.01] * 7 + [0.01]]))


@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "stacked"])
def test_only_training_forwards_count_each_routed_layers_tokens(scan):
    """The model gives each router its layer's tokens per expert (from the statistics the
    layer stack returns), stacked layers included; evaluation counts nothing."""
    config = dataclasses.replace(CONFIG, num_hidden_layers=3, first_k_dense_replace=1)
    model = DeepseekV3ForCausalLM(config)
    model.init_weights()
    if scan:
        model.model.layers.stack_weights()  # the weights a scan reads (run unrolled on CPU)
    ids = torch.randint(0, config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # evaluation, generation
        model(ids)
    routers = step_state_modules(model)
    assert routers and not any(router.expert_load.any() for router in routers)
    model(ids)  # a training forward
    load = torch.cat([router.expert_load.reshape(-1, config.num_local_experts)
                      for router in routers])
    assert load.shape == (2, config.num_local_experts)
    assert load.sum(-1).tolist() == [2 * 8 * config.num_experts_per_tok] * 2


def test_a_held_or_frozen_router_has_no_step_state():
    block = DeepseekMoE(CONFIG)
    assert step_state_modules(block) == [block.gate]
    assert step_state_modules(DeepseekMoE(dataclasses.replace(CONFIG, bias_update_rate=0))) == []
    block.gate.weight.requires_grad_(False)  # a LoRA run's base model
    assert step_state_modules(block) == []
