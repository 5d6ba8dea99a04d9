"""`zoo train task=grpo` as a user runs it: an untrained llama-tiny learns to say a word its
reward pays for (tests/support/word_reward.py, a user's module:function) on the xla backend
(4 XLA:CPU devices, fsdp), its rollouts compiled once for the run; the same on dtensor (one
process); a run SIGKILLed and rerun samples and trains as one that was not; LoRA adapters
train against the model with them off (the KL term's reference); several dtensor
processes are refused in one line."""

import json

import pytest

from tests.support.runs import kill_after_first_checkpoint_then_rerun, losses, zoo

PROMPTS = ["Once upon a time", "The zoo opened", "A cat sat", "In the morning", "She said",
           "He went to", "We saw", "They ate"]
REWARD = "tests.support.word_reward:says_the_word"
# 4 prompts x 8 completions of 4 tokens a step, a constant lr high enough to learn in a few
GRPO = ["llama-tiny", "task=grpo", f"grpo.rewards=[{REWARD}]",
        "grpo.num_generations=8", "global_batch_size=32", "seq_len=16", "grpo.max_new_tokens=4",
        "log_every=1", "optim.lr=1e-2", "schedule.warmup_steps=0", "schedule.decay=constant"]
XLA = ["--tpu", "cpu-4"]  # cheaper in CPU than cpu-2 here (62 against 66 CPU-s)
DTENSOR = ["--backend", "dtensor"]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("grpo-data") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return path


def records(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def rewards(run) -> dict[int, float]:
    return {r["step"]: r["reward"] for r in records(run) if "reward" in r}


def learns_the_word(backend: list[str], prompts, out) -> tuple[dict[int, dict], str]:
    """Runs 8 steps; asserts the mean reward rises above 0.8 and what each step logs; returns
    the rollout records by step and the run's console."""
    result = zoo("train", *GRPO, *backend, f"data.source={prompts}", "--steps", "8",
                 "checkpoint_every=8", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    reward = rewards(out)
    assert (reward[1] + reward[2]) / 2 < 0.5, reward  # the untrained model, about 0.2-0.3
    assert reward[8] > 0.8, reward
    rollouts = {r["step"]: r for r in records(out) if "reward" in r}
    for key in (f"rewards/{REWARD}/mean", f"rewards/{REWARD}/std", "reward_std",
                "frac_reward_zero_std", "completions/mean_length", "rollout_s", "update_s",
                "update_mfu", "rollout_mfu", "rollout_compiles"):
        assert key in rollouts[8], key
    assert 1 <= rollouts[8]["completions/mean_length"] <= 4
    trained = next(r for r in records(out) if r.get("step") == 8 and "loss" in r)
    assert "clip_ratio/region_mean" in trained
    # `zoo generate` asks it as it trained: raw text prompts
    assert "row_format: prompt-completion" in (out / "config.yaml").read_text()
    return rollouts, result.stdout + result.stderr


def test_the_mean_reward_rises_above_0_8_on_xla_with_one_rollout_compile(prompts, tmp_path):
    """Every prompt fits the one bucket (seq_len 16 less 4 new tokens): the first rollout
    compiles its prefill and the decode step, no later one compiles, and the train step
    compiles once (the rollouts' graphs are not counted as the step's)."""
    out = tmp_path / "run"
    rollouts, console = learns_the_word(XLA, prompts, out)
    assert rollouts[1]["rollout_compiles"] == 1 + 1
    assert all(rollouts[step]["rollout_compiles"] == 0 for step in range(2, 9)), rollouts
    trained = [r for r in records(out) if "loss" in r]
    assert {r["compiles"] for r in trained} == {1}
    assert "recompiled" not in console


@pytest.mark.slow  # ~35 CPU-s: the xla run above is the default suite's
def test_the_mean_reward_rises_above_0_8_on_dtensor(prompts, tmp_path):
    rollouts, _ = learns_the_word(DTENSOR, prompts, tmp_path / "run")
    assert rollouts[1]["rollout_compiles"] == 0  # eager: nothing compiles


@pytest.mark.slow  # ~2.6 min on 2 busy cores: two runs, one of them killed and rerun
def test_a_run_killed_and_resumed_samples_and_trains_as_one_that_was_not(prompts, tmp_path):
    args = [*GRPO, *XLA, f"data.source={prompts}", "--steps", "4", "checkpoint_every=2"]
    whole = tmp_path / "whole"
    result = zoo("train", *args, "--out", str(whole))
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = tmp_path / "resumed"
    kill_after_first_checkpoint_then_rerun(args, resumed, first=2)
    assert rewards(resumed) == rewards(whole)
    assert losses(resumed) == losses(whole)


@pytest.mark.slow  # ~1 min: LoRA adapters, the KL to the model with them off
def test_lora_adapters_train_with_a_kl_term_to_the_model_without_them(prompts, tmp_path):
    out = tmp_path / "run"
    result = zoo("train", *GRPO, *DTENSOR, f"data.source={prompts}", "lora.rank=8",
                 "grpo.beta=0.04",
                 "grpo.num_iterations=2", "--steps", "4", "checkpoint_every=2",
                 "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    trained = {r["step"]: r for r in records(out) if "loss" in r}
    assert trained[1]["kl"] == 0  # adapters start at zero: the policy is its reference
    assert trained[4]["kl"] > 0
    assert all(trained[s]["grad_norm"] > 0 for s in trained)
    sampled = {r["step"]: r["rollout_s"] for r in records(out) if "rollout_s" in r}
    assert sampled[1] > 0 and sampled[2] == 0 and sampled[3] > 0  # a rollout, two updates


@pytest.mark.slow  # two dtensor processes started to be refused
def test_grpo_in_several_dtensor_processes_is_refused_in_one_line(prompts, tmp_path):
    result = zoo("train", *GRPO, *DTENSOR, "--nproc", "2", f"data.source={prompts}",
                 "--steps", "2", "--out", str(tmp_path / "r"))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "task=grpo samples its rollouts in one process for now" in result.stderr
    assert not (tmp_path / "r" / "checkpoints").exists()
