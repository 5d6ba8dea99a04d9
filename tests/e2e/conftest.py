"""Fixtures the end-to-end tests share across files."""

import pytest

from tests.support.runs import trained_run


@pytest.fixture(scope="session")
def pretrained_run(tmp_path_factory):
    """A short pretraining run of llama-tiny: where the fine-tuning tests start from (SFT,
    LoRA, DPO), trained once for all of them."""
    return trained_run(tmp_path_factory, ["llama-tiny", "--tpu", "cpu-1", "--steps", "2",
                                          "seq_len=128", "checkpoint_every=2"])
