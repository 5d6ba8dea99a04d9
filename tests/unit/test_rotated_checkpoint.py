"""A reader (zoo export, eval, generate) of a run that is still training: the trainer,
keeping only its newest checkpoints, may remove the one being read. The reader then reads
the newest again and says so, never a traceback nor a message blaming the folder."""

import shutil

import pytest
import safetensors.torch
import torch

from core.errors import UserError
from core.store import location as location_lib
from core.store.checkpoint_reader import WEIGHTS_FILE
from core.store.location import Store
from core.store.manifest import write_manifest
from tests.support.runs import saved_config
from zoo.app.saved_run import newest_weights


def saved(run, step: int, value: float) -> Store:
    folder = Store(run / "checkpoints" / f"step-{step:08d}")
    folder.write_bytes(WEIGHTS_FILE, safetensors.torch.save({"w": torch.full((2,), value)}))
    write_manifest(folder)
    return folder


@pytest.fixture
def run(tmp_path):
    (tmp_path / "config.yaml").write_text(saved_config("model_name: llama-tiny\n"))
    saved(tmp_path, 2, 2.0)
    return tmp_path


def rotate_while_reading(monkeypatch, run, rotations: int):
    """The trainer saves step N+2 and removes step N (manifest first, as it does) just as
    the reader opens step N's weights, `rotations` times."""
    read = location_lib.Store.read_bytes
    done = []

    def read_during_rotation(store, name):
        if name == WEIGHTS_FILE and len(done) < rotations:
            step = int(store.name.removeprefix("step-"))
            saved(run, step + 2, step + 2.0)
            store.remove("manifest.json")
            shutil.rmtree(store.path())
            done.append(step)
        return read(store, name)

    monkeypatch.setattr(location_lib.Store, "read_bytes", read_during_rotation)


def test_a_checkpoint_rotated_away_is_read_again_from_the_newest(run, monkeypatch, capsys):
    rotate_while_reading(monkeypatch, run, rotations=1)
    folder, weights = newest_weights(run)
    assert folder.endswith("step-00000004") and weights["w"].tolist() == [4.0, 4.0]
    assert "was replaced by a newer checkpoint" in capsys.readouterr().err


def test_a_trainer_rotating_faster_than_reads_is_one_line(run, monkeypatch):
    rotate_while_reading(monkeypatch, run, rotations=10)
    with pytest.raises(UserError, match="were replaced 3 times while being read"):
        newest_weights(run)


def test_a_named_checkpoint_rotated_away_says_so(run, monkeypatch):
    rotate_while_reading(monkeypatch, run, rotations=1)
    with pytest.raises(UserError, match="was removed while it was read"):
        newest_weights(run / "checkpoints" / "step-00000002")
