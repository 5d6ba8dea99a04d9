"""core/nan_guard.py: a bad step is undone in the graph (skip) or named (stop)."""

import torch

from core.nan_guard import describe_non_finite, undone_unless, weights_finite


def test_a_step_is_undone_only_where_it_was_not_finite():
    for finite in (True, False):
        weights, state = torch.ones(3), torch.zeros(2)
        with undone_unless(torch.tensor(finite), [weights, state]):
            weights.mul_(float("nan") if not finite else 2.0)
            state.add_(5.0)
        expected = (torch.full((3,), 2.0), torch.full((2,), 5.0)) if finite else (
            torch.ones(3), torch.zeros(2))
        torch.testing.assert_close((weights, state), expected)


def test_non_finite_values_are_named():
    assert describe_non_finite({"loss": 2.5, "grad_norm": 1.0}) is None
    assert describe_non_finite({"loss": float("nan"), "grad_norm": float("inf")}) == (
        "loss nan, grad_norm inf")


def test_weights_finite():
    model = torch.nn.Linear(2, 2)
    assert weights_finite(model)
    with torch.no_grad():
        model.bias[0] = float("inf")
    assert not weights_finite(model)
