"""A logger never stops a run: the user's WANDB_MODE wins over the key that happens to be
set, and W&B that cannot start at all is one warning, the run going on without it."""

import wandb

from core.metrics import WandbConfig, start_wandb


def test_the_users_wandb_mode_wins_over_a_key(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)  # a real-length key, and no network
    monkeypatch.setenv("WANDB_MODE", "offline")
    modes = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: modes.append(kwargs["mode"]) or "run")
    assert start_wandb(WandbConfig(project="p"), tmp_path, {}) == "run"
    assert modes == ["offline"]


def test_wandb_that_cannot_start_is_a_warning_not_a_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    modes = []

    def refuse(**kwargs):
        modes.append(kwargs["mode"])
        raise wandb.errors.UsageError(f"run ID {kwargs['id']} is in use")

    monkeypatch.setattr(wandb, "init", refuse)
    assert start_wandb(WandbConfig(project="p"), tmp_path, {}) is None
    assert modes == ["online", "offline"]  # online first (a key is set), then offline
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "W&B logging is off for this run (UsageError" in warning[0]
    assert "metrics.jsonl" in warning[0]
