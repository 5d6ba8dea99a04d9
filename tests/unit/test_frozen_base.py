"""The checkpointer leaves frozen weights (a LoRA run's base) out of a checkpoint, records
their fingerprint itself and refuses to restore over other ones (core/store/frozen_base.py):
the loop that calls it knows nothing of which weights train."""

import pytest
import torch

from core.store.checkpoint import Checkpointer
from core.store.checkpoint_reader import CheckpointError, load_checkpoint, saved_extra
from core.store.frozen_base import BASE_FINGERPRINT


class HostBackend:
    """What the checkpointer asks of a backend, for a model in host memory."""

    def materialize(self):
        return None

    def rng_state(self):
        return {"torch": torch.get_rng_state()}

    def set_rng_state(self, state):
        torch.set_rng_state(state["torch"])

    def device_count(self):
        return 1

    def host_copy(self, state):
        return {name: value.detach().clone() for name, value in state.items()}

    def save_planner(self):
        return None

    def load_planner(self):
        return None


def with_frozen_base():
    """(a model whose first layer is frozen, an optimizer of the rest)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    with torch.no_grad():
        for index, param in enumerate(model.parameters()):
            param.copy_(torch.linspace(-1, 1, param.numel()).view(param.shape) * (index + 1))
    model[0].requires_grad_(False)
    return model, torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])


def test_the_checkpointer_records_and_checks_the_frozen_base(tmp_path):
    model, optimizer = with_frozen_base()
    folder = Checkpointer(tmp_path, backend=HostBackend()).save(1, model, optimizer,
                                                                extra={"note": 1})
    extra = saved_extra(folder.url)
    assert extra["note"] == 1 and set(extra[BASE_FINGERPRINT]) == {"0.weight", "0.bias"}
    assert set(load_checkpoint(folder.url)) == {"1.weight", "1.bias"}  # the trained alone

    same, same_optimizer = with_frozen_base()
    restored = Checkpointer(tmp_path, backend=HostBackend()).restore(same, same_optimizer)
    assert restored["step"] == 1

    other, other_optimizer = with_frozen_base()
    with torch.no_grad():
        other[0].weight.mul_(1.01)
    with pytest.raises(CheckpointError, match="the checkpoint at step 1 trained adapters on "
                                              "other frozen weights than this run starts from"):
        Checkpointer(tmp_path, backend=HostBackend()).restore(other, other_optimizer)


def test_a_checkpoint_of_a_model_that_trains_every_weight_records_no_fingerprint(tmp_path):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    folder = Checkpointer(tmp_path, backend=HostBackend()).save(1, model, optimizer)
    assert saved_extra(folder.url) == {}
