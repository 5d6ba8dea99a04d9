"""The DPO loss (zoo/tasks/dpo.py) is TRL's: on the same log-probabilities, TRL's DPOTrainer
(a test-only reference, in its own process) and `preference_loss` give the same loss and
rewards for sigmoid, hinge and ipo (1e-6; relative for ipo's larger loss); a policy equal to
its reference scores ln 2 with rewards 0; and `response_logps` reads each response of a row
packing two pairs as that response scored alone."""

import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch

from tests.support.paths import ROOT
from tests.support.runs import env
from zoo.data.packing import PackedRows, rows_of
from zoo.registry import family
from zoo.tasks.dpo import DPOConfig, preference_loss, response_logps


@pytest.fixture(scope="module")
def trl_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl") / "found.json"
    worker = subprocess.run([sys.executable, "-m", "tests.support.trl_dpo_worker", str(out)],
                            env=env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert worker.returncode == 0, worker.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo"])
def test_the_loss_is_trls(trl_results, loss_type):
    found = trl_results[loss_type]
    assert found["ours"] == pytest.approx(found["trl"], rel=1e-6, abs=1e-6)  # ipo's is ~24
    assert found["our_rewards"] == pytest.approx(found["trl_rewards"], abs=1e-6)
    assert abs(found["trl_rewards"][0]) > 1e-4  # the policy differs from its reference


def test_a_policy_equal_to_its_reference_scores_ln_2():
    logps = torch.tensor([[-12.0, -15.5], [-3.0, -2.0]])
    losses, chosen, rejected = preference_loss(logps, logps.clone(), DPOConfig())
    assert losses.tolist() == pytest.approx([math.log(2)] * 2, abs=1e-7)
    assert chosen.abs().max() == 0 and rejected.abs().max() == 0


def test_each_response_of_a_packed_row_scores_as_alone():
    fam = family("llama")
    config = dataclasses.replace(fam.sizes["tiny"], num_hidden_layers=2, attention="plain")
    model = fam.build(config, seed=0).eval()
    generator = torch.Generator().manual_seed(0)
    lengths = [7, 9, 5, 6]  # pair 0: examples 0 (chosen), 1 (rejected); pair 1: 2, 3
    tokens = torch.randint(0, config.vocab_size, (sum(lengths),), generator=generator).numpy()
    trained = torch.rand(len(tokens), generator=generator).numpy() > 0.3
    starts = torch.tensor([0, *lengths]).cumsum(0).numpy()

    def scored(members: list[list[int]], seq_len: int):
        firsts = torch.tensor([0, *map(len, members)]).cumsum(0).numpy()
        rows = PackedRows(torch.tensor(sum(members, [])).numpy(), firsts, 0)
        batch = rows_of(tokens, trained, starts, rows, torch.arange(len(members)).numpy(),
                        seq_len, pad_id=0)
        most = max(map(len, members)) // 2
        batch["pairs"] = torch.ones(len(members), most, dtype=torch.bool)
        with torch.no_grad():
            return response_logps(model, batch)

    packed, packed_tokens = scored([[0, 1, 2, 3]], 32)
    alone, alone_tokens = scored([[0, 1], [2, 3]], 16)
    assert torch.allclose(packed[0], alone[:, 0], atol=1e-5, rtol=0)
    assert torch.equal(packed_tokens[0], alone_tokens[:, 0])
    trained_after_first = [int(trained[s + 1:e].sum()) for s, e in zip(starts, starts[1:])]
    assert packed_tokens[0].flatten().tolist() == trained_after_first
