"""LazyTracedAdamW (core/optim.py) is torch's AdamW: same parameters, same state, same
checkpoints; only the ops its update is written in differ."""

import pytest
import torch

from core.optim import LazyTracedAdamW

SHAPES = [(8, 4), (4,), (3, 5, 2)]


def run(optimizer_class, steps: int = 6, **options):
    """`steps` updates from fixed parameters and gradients under a changing lr (a warmup)."""
    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=generator)) for s in SHAPES]
    optimizer = optimizer_class(params, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1,
                                foreach=True, **options)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: (step + 1) / 4)
    for _ in range(steps):
        for param in params:
            param.grad = torch.randn(param.shape, generator=generator)
        optimizer.step()
        schedule.step()
    return params, optimizer


def test_updates_match_torch_adamw():
    expected, torch_optimizer = run(torch.optim.AdamW)
    got, optimizer = run(LazyTracedAdamW)
    for want, have in zip(expected, got):
        torch.testing.assert_close(have, want, rtol=1e-6, atol=1e-6)
    want_state, have_state = torch_optimizer.state_dict(), optimizer.state_dict()
    assert want_state["param_groups"] == have_state["param_groups"]
    for index, state in want_state["state"].items():
        assert state.keys() == have_state["state"][index].keys()
        for key, value in state.items():
            torch.testing.assert_close(have_state["state"][index][key], value,
                                       rtol=1e-6, atol=1e-6)


def test_a_torch_adamw_checkpoint_resumes_in_it():
    _, torch_optimizer = run(torch.optim.AdamW, steps=3)
    trained = torch_optimizer.param_groups[0]["params"]
    params = [p.detach().clone().requires_grad_() for p in trained]
    optimizer = LazyTracedAdamW(params, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    optimizer.load_state_dict(torch_optimizer.state_dict())
    for param in params:
        param.grad = torch.ones_like(param)
    optimizer.step()
    assert all(optimizer.state[p]["step"].item() == 4 for p in params)


@pytest.mark.parametrize("option", ["amsgrad", "maximize"])
def test_options_beyond_the_defaults_get_torchs_update(option):
    expected, _ = run(torch.optim.AdamW, **{option: True})
    got, _ = run(LazyTracedAdamW, **{option: True})
    for want, have in zip(expected, got):
        torch.testing.assert_close(have, want)
