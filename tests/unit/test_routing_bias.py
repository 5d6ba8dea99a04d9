"""DeepSeek-V3's auxiliary-loss-free balancing (zoo/deepseek3/moe.py): the routing bias moves
after each update toward an even expert load, and the load it reads is the step's."""

import dataclasses

import torch

from core.step import step_state_modules
from zoo.deepseek3.config import SIZES
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


def test_only_training_forwards_count_and_a_held_or_frozen_router_has_no_step_state():
    block = DeepseekMoE(CONFIG)
    torch.nn.init.normal_(block.gate.weight)
    x = torch.randn(2, 8, CONFIG.hidden_size)
    with torch.no_grad():  # evaluation, generation
        block(x)
    assert not block.gate.expert_load.any()
    block(x)
    assert block.gate.expert_load.sum() == 2 * 8 * CONFIG.num_experts_per_tok
    assert step_state_modules(block) == [block.gate]
    assert step_state_modules(DeepseekMoE(dataclasses.replace(CONFIG, bias_update_rate=0))) == []
    block.gate.weight.requires_grad_(False)  # a LoRA run's base model
    assert step_state_modules(block) == []
