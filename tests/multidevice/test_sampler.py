"""The sampler on the xla backend (core/sampler with backend/mesh), llama's tiny parity config
on 1 and 4 XLA:CPU devices (fsdp=2 x tensor=2: rows and heads split): greedy tokens equal
transformers' `generate`, log-probs equal the eager sampler's, sampled tokens equal on 1
and 4 devices, and a call compiles one prefill per prompt bucket it uses plus one decode
step, while another call that changes only the number of new tokens, the temperature or the
seed compiles nothing. Slow: the same greedy checks under fsdp=4; bf16 run as the run's
evaluation pass does, its log-probs in fp32; on the dtensor backend with 2 processes (each
its contiguous rows) greedy tokens are transformers' too. T5 (an encoder-decoder) on the
same meshes and on dtensor: greedy tokens transformers', one decode step compiled. The worker:
tests/support/sampler_worker.py (one process per device count)."""

import subprocess
import sys

import pytest
import torch
import transformers

from core.precision import compute_in
from core.sampler import Sampler, SamplerShape
from tests.support import llama_cases, sampler_worker, t5_cases
from tests.support.paths import ROOT
from tests.support.runs import env
from tests.support.xla_harness import run_workers

FAMILY = llama_cases.FAMILY
RUNS = [(1, "fsdp"), (4, "fsdp_tensor")]  # the default suite's; slow: (4, "fsdp")
# each call's prompts in groups of ROWS by length, each group prefilled at its bucket
BUCKETS_USED = len({min(b for b in sampler_worker.BUCKETS if b >= len(p))
                    for p in sampler_worker.PROMPTS})


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_workers("tests.support.sampler_worker", (1, 4),
                       tmp_path_factory.mktemp("sampler"))


@pytest.fixture(scope="module")
def slow_results(tmp_path_factory):
    return run_workers("tests.support.sampler_worker", (1, 4),
                       tmp_path_factory.mktemp("sampler-slow"), args=("slow",))


@pytest.fixture(scope="module")
def model():
    return FAMILY.build(sampler_worker.config(), seed=0).eval()


@pytest.fixture(scope="module")
def eager(model):
    """The eager sampler's greedy completions on the host (backend=None)."""
    shape = SamplerShape(rows=sampler_worker.ROWS, slots=16 + sampler_worker.NEW_TOKENS,
                         buckets=sampler_worker.BUCKETS)
    sampler = Sampler(model, FAMILY.cache_layout(sampler_worker.config()), shape=shape)
    return sampler.generate(sampler_worker.PROMPTS, sampler_worker.CALLS["greedy"])


def hf_greedy(model) -> list[list[int]]:
    config = sampler_worker.config()
    theirs = getattr(transformers, FAMILY.hf_class)(FAMILY.hf_config(config)).eval()
    theirs.load_state_dict(model.state_dict())
    theirs.generation_config.eos_token_id = None
    found = []
    for prompt in sampler_worker.PROMPTS:
        out = theirs.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)),
                              do_sample=False, max_new_tokens=sampler_worker.NEW_TOKENS,
                              pad_token_id=0)
        found.append(out[0, len(prompt):].tolist())
    return found


def check_greedy(found: dict, expected, eager, label) -> None:
    """Greedy tokens are transformers', log-probs the eager sampler's, a shorter call's
    tokens the first of them."""
    greedy = found["greedy"]
    assert greedy["tokens"] == expected, label
    assert greedy["finish"] == ["length"] * len(expected)
    for ours, theirs in zip(greedy["logprobs"], eager.logprobs, strict=True):
        torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), atol=1e-5,
                                   rtol=0, msg=f"{label}")
    shorter = found["greedy_shorter"]["tokens"]
    assert shorter == [tokens[:sampler_worker.NEW_TOKENS - 4] for tokens in expected]


def check_compiles(found: dict, label) -> None:
    """A call compiles its buckets and one step; one that changes only lengths,
    temperature or seed compiles nothing (sampling is another graph, once)."""
    assert found["rows"] == sampler_worker.ROWS  # 4: a multiple of 1 and of fsdp=4
    assert found["greedy"]["compiles"] == BUCKETS_USED + 1, label
    assert found["greedy_shorter"]["compiles"] == 0, label
    if "sampled" in found:  # temperature, top-k, top-p: another graph, once
        assert found["sampled"]["compiles"] == BUCKETS_USED + 1, label
        assert found["sampled_again"]["compiles"] == 0, label
    calls = [name for name in sampler_worker.CALLS if name in found]
    assert found["sampler_compiles"] == sum(found[name]["compiles"] for name in calls)


def test_greedy_tokens_equal_transformers_and_logprobs_the_eager_samplers(results, model,
                                                                           eager):
    expected = hf_greedy(model)
    assert eager.tokens == expected
    for devices, preset in RUNS:
        check_greedy(results[devices][preset], expected, eager, (devices, preset))


def test_a_call_compiles_its_buckets_and_one_step_and_the_next_call_nothing(results):
    assert BUCKETS_USED == 2
    for devices, preset in RUNS:
        check_compiles(results[devices][preset], (devices, preset))


@pytest.mark.slow  # another mesh of 4 devices: 3 more compiles
def test_fsdp_over_four_devices_is_greedy_as_transformers_and_compiles_as_few(
        slow_results, model, eager):
    found = slow_results[4]["fsdp"]
    check_greedy(found, hf_greedy(model), eager, (4, "fsdp"))
    check_compiles(found, (4, "fsdp"))


def test_sampled_tokens_equal_on_one_and_four_devices(results):
    one, four = results[1]["fsdp"], results[4]["fsdp_tensor"]
    for call in ("sampled", "sampled_again"):
        assert four[call]["tokens"] == one[call]["tokens"], call
        torch.testing.assert_close(torch.tensor(four[call]["logprobs"]),
                                   torch.tensor(one[call]["logprobs"]), atol=1e-5, rtol=0)
    # a different seed and temperature draw different tokens, not the greedy ones
    assert one["sampled"]["tokens"] != one["greedy"]["tokens"]
    shorter = sampler_worker.CALLS["sampled_again"].max_new_tokens
    assert one["sampled_again"]["tokens"] != [t[:shorter] for t in one["sampled"]["tokens"]]


@pytest.mark.slow  # two more compiles, beside the fp32 checks above
def test_bf16_logprobs_are_the_bf16_forwards_in_fp32(slow_results, model):
    """The bf16 sampler (weights cast as the evaluation pass casts them) compiles as fp32
    does; each token's log-prob is log_softmax of that forward's logits taken in fp32."""
    found = slow_results[1]["bf16"]
    assert found["compiles"] == 1 + 1  # the short prompts: one bucket
    for prompt, tokens, logprobs in zip(sampler_worker.SHORT, found["tokens"],
                                        found["logprobs"], strict=True):
        with torch.no_grad(), compute_in(model, torch.bfloat16):
            logits = model(torch.tensor([prompt + tokens]))[0, len(prompt) - 1:-1]
        expected = torch.log_softmax(logits.float(), -1).gather(
            -1, torch.tensor(tokens)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(logprobs), expected, atol=0.05, rtol=0)


@pytest.mark.slow  # two more interpreters and a process group: the default suite is tight
def test_dtensor_processes_each_generate_their_rows(model, tmp_path):
    out = tmp_path / "dtensor.pt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "-m", "tests.support.sampler_worker", str(out), "dtensor"]
    result = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = torch.load(out, weights_only=False)
    assert found["llama"]["tokens"] == hf_greedy(model)
    assert found["t5"]["tokens"] == t5_hf_greedy()


def t5_hf_greedy() -> list[list[int]]:
    """transformers' greedy new tokens for the worker's T5 prompts."""
    theirs = t5_cases.hf_model(t5_cases.FAMILY.build(t5_cases.CONFIG, seed=0))
    return t5_cases.hf_greedy(theirs, sampler_worker.T5_PROMPTS, sampler_worker.NEW_TOKENS)


def test_t5_is_greedy_as_transformers_and_compiles_one_decode_step(results):
    expected = t5_hf_greedy()
    for devices, preset in RUNS:
        found = results[devices][f"t5 {preset}"]
        assert found["greedy"]["tokens"] == expected, (devices, preset)
        assert found["greedy"]["compiles"] == BUCKETS_USED + 1, (devices, preset)
        assert found["greedy_shorter"]["compiles"] == 0, (devices, preset)
        shorter = [tokens[:sampler_worker.NEW_TOKENS - 4] for tokens in expected]
        assert found["greedy_shorter"]["tokens"] == shorter, (devices, preset)
