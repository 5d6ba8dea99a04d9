"""Export and evaluation end to end: the export loads in transformers with the zoo model's
logits and generates as it does; `zoo eval`'s XLA and hf backends agree (lm-eval's CLI too,
slow); a tiny llama trained on text that teaches the sample tasks' answers scores well above
chance, an untrained one near chance (slow: 200 steps)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.paths import ROOT
from tests.support.runs import env, zoo, zoo_here

# two of llama-tiny's four layers learn the teaching text as well (arc_easy_sample 0.94 after
# 200 steps, measured) in three quarters of the time
TEACH = ["data.source=eval/tasks/data/teach.jsonl", "seq_len=64", "log_every=50",
         "checkpoint_every=1000", "model.num_hidden_layers=2"]
TASKS = "arc_easy_sample,hellaswag_sample"


def run(*args, timeout=900):
    return subprocess.run(list(args), env=env(), capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def accuracies(results_file: Path) -> dict:
    results = json.loads(results_file.read_text())["results"]
    return {task: results[task]["acc,none"] for task in results}


@pytest.fixture(scope="module")
def runs(pretrained_run, tmp_path_factory):
    """What the export, generation and backend checks read: llama-tiny after 2 steps
    (tests/e2e/conftest.py), near chance on the sample tasks."""
    return {"untrained": pretrained_run, "tmp": tmp_path_factory.mktemp("eval")}


@pytest.fixture(scope="module")
def trained_run(runs):
    """200 steps on the teaching text."""
    result = zoo("train", "llama-tiny", "--tpu", "cpu-1", "--steps", "200", "--out",
                 str(runs["tmp"] / "trained"), "optim.lr=3e-3", *TEACH, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return runs["tmp"] / "trained"


def cpu_eval(run: Path, out: Path) -> Path:
    """`zoo eval RUN --tasks TASKS` with lm-eval's hf backend: its results file."""
    result = zoo("eval", str(run), "--tasks", TASKS, "--out", str(out))
    assert result.returncode == 0 and "arc_easy_sample   acc" in result.stdout, result.stderr
    return out / "eval_results.json"


@pytest.fixture(scope="module")
def untrained_scores(runs):
    return cpu_eval(runs["untrained"], runs["tmp"] / "untrained_eval")


@pytest.mark.slow  # 200 steps; by default the fine-tuning tests train and export, and the
# eval backends are compared on the untrained run (below)
def test_training_on_the_teaching_text_is_measured_by_eval(trained_run, untrained_scores):
    trained = accuracies(cpu_eval(trained_run, trained_run / "eval"))
    untrained = accuracies(untrained_scores)
    # 48 four-way questions: chance is 0.25 +- 0.06
    assert trained["arc_easy_sample"] >= 0.6
    assert untrained["arc_easy_sample"] <= 0.45
    assert trained["hellaswag_sample"] > untrained["hellaswag_sample"]


def zoo_model(run):
    """The zoo family's own model with the run's latest weights."""
    from core.store.checkpoint_reader import load_checkpoint
    from zoo.app.saved_run import checkpoint_of, load_run

    resolved, _ = load_run(run)
    model = resolved.family.build(resolved.config.model, init=False)
    model.load_state_dict(load_checkpoint(checkpoint_of(run)))
    return model.eval()


def test_export_loads_in_transformers_and_gives_the_zoo_logits(runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = runs["tmp"] / "export"
    result = zoo_here("export", str(runs["untrained"]), str(out))
    assert result.exit_code == 0, result.output[-2000:]
    assert result.output.startswith("exported step 2 (") and "LlamaForCausalLM" in result.output
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} <= files
    hf = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>")
    ids = tokenizer("Question: What color is a glimmerbeak?", return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, zoo_model(runs["untrained"])(ids),
                                   rtol=1e-4, atol=1e-4)
    again = zoo_here("export", str(runs["untrained"]), str(out))
    assert again.exit_code != 0 and "already exists" in again.stderr


def test_generation_with_the_kv_cache_continues_as_the_zoo_model_does(runs):
    """zoo generate runs transformers' cached generation: the same tokens, greedy or sampled
    with one seed, as the zoo model recomputing the whole sequence for every token."""
    from zoo.app.generate import generate, load_for_generation

    cached, tokenizer = load_for_generation(runs["untrained"])
    assert type(cached).__name__ == "LlamaForCausalLM"
    own = zoo_model(runs["untrained"])
    for temperature, top_k in ((0.0, 0), (0.8, 40)):
        texts = [generate(model, tokenizer, "Question: What color", 24, temperature, top_k,
                          seed=3) for model in (cached, own)]
        assert texts[0] == texts[1] and len(texts[0]) > len("Question: What color")


@pytest.mark.slow  # lm-eval's CLI on our export; by default our two backends are compared
def test_lm_eval_cli_on_the_export_gives_the_same_numbers(runs, untrained_scores):
    folder = json.loads(untrained_scores.read_text())["model_folder"]
    out = runs["tmp"] / "lm_eval_out"
    result = run(str(Path(sys.executable).parent / "lm_eval"), "--model", "hf", "--model_args",
                 f"pretrained={folder}", "--tasks", TASKS, "--include_path", "eval/tasks",
                 "--device", "cpu", "--batch_size", "8", "--output_path", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    results_file = next(out.rglob("results_*.json"))
    theirs = json.loads(results_file.read_text())["results"]
    ours = json.loads(untrained_scores.read_text())["results"]
    for task in TASKS.split(","):
        for metric in ("acc,none", "acc_norm,none"):
            assert theirs[task][metric] == ours[task][metric], (task, metric)


def test_xla_backend_matches_the_hf_backend(runs, untrained_scores):
    out = runs["tmp"] / "xla_eval"
    result = zoo("eval", str(runs["untrained"]), "--tasks", TASKS, "--device", "xla",
                 "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    xla = json.loads((out / "eval_results.json").read_text())
    hf = json.loads(untrained_scores.read_text())
    for task in TASKS.split(","):
        # fp32 on both; XLA:CPU fuses and reorders sums: log-likelihoods of ~-100 agree to 1e-3
        assert len(xla["loglikelihoods"][task]) == 48
        for ours, theirs in zip(xla["loglikelihoods"][task], hf["loglikelihoods"][task]):
            assert ours == pytest.approx(theirs, abs=1e-3)
        assert xla["results"][task]["acc,none"] == hf["results"][task]["acc,none"]
        assert xla["results"][task]["acc_norm,none"] == hf["results"][task]["acc_norm,none"]


def test_large_exports_are_sharded_with_an_index(runs, monkeypatch):
    from transformers import AutoModelForCausalLM

    from eval import export as export_module

    monkeypatch.setattr(export_module, "MAX_SHARD_SIZE", "5MB")
    out = export_module.export(runs["untrained"], runs["tmp"] / "sharded").folder
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    AutoModelForCausalLM.from_pretrained(out)
