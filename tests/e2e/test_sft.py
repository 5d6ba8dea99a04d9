"""`zoo train --init-from RUN task=sft` as a user runs it (with LoRA adapters, which
tests/e2e/test_lora.py checks on the same runs: tests/e2e/conftest.py): no model name (the
run's own), the run's weights and tokenizer, the shipped instruction set; the xla backend
with micro-batches (grad_accum=2, 4 devices) and the dtensor backend with 2 processes give
the same losses, which holds only when every micro-batch and process weighs its loss by its
trained tokens (packed rows hold different numbers of them). `zoo generate` prompts the tuned
run through its chat template, as its end-of-run sample did."""

import json
import re
import shutil

import pytest
import yaml

from tests.e2e.test_dtensor import assert_same_losses
from tests.support.runs import losses, zoo


def test_tuning_a_run_needs_no_model_name_and_starts_from_its_weights(tuned_with_adapters,
                                                                      pretrained_run):
    out, result = tuned_with_adapters["xla"]
    assert f"init: weights of {pretrained_run}/checkpoints/step-00000002" in result.stdout
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert (config["model_name"], config["task"]) == ("llama-tiny", "sft")
    assert config["data"]["row_format"] == "chat"  # recorded for zoo generate
    assert "sft data: zoo/assets/instructions/train.jsonl (chat" in result.stderr
    assert "of row tokens are examples" in result.stderr
    assert "sample: '" in result.stdout and "Assistant:" in result.stdout


def test_micro_batches_and_processes_average_as_one_batch(tuned_with_adapters):
    (dtensor, _), (xla, _) = tuned_with_adapters["dtensor"], tuned_with_adapters["xla"]
    assert_same_losses(losses(dtensor), losses(xla), range(1, 5))


@pytest.mark.slow  # exports write the run's tokenizer files by default (tests/e2e/test_eval.py)
def test_the_tuned_run_exports_with_its_chat_template(tuned_with_adapters, tmp_path):
    out, _ = tuned_with_adapters["xla"]
    result = zoo("export", str(out), str(tmp_path / "hf"))
    assert result.returncode == 0, result.stderr[-2000:]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                             add_generation_prompt=True, tokenize=False)
    assert rendered.endswith("User: hi\nAssistant:\n")


def test_zoo_generate_prompts_the_chat_run_as_its_end_of_run_sample_did(tuned_with_adapters):
    out, result = tuned_with_adapters["xla"]
    sample = next(line for line in result.stdout.splitlines() if line.startswith("sample: "))
    prompt = 'Repeat the word "zoo".'  # the task's sample prompt, 40 tokens, seed 0
    generated = zoo("generate", str(out), "--prompt", prompt, "--max-new-tokens", "40",
                    "--host")
    assert generated.returncode == 0, generated.stderr[-2000:]
    text = generated.stdout.removesuffix("\n")
    assert f"sample: {text!r}" == sample
    from zoo.app.generate import generate, load_for_generation, prompt_ids

    model, chat = load_for_generation(out, prompt, 40)
    assert prompt_ids(chat, prompt) == chat.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True,
        return_dict=False)
    _, raw = load_for_generation(out, prompt, 40, raw=True)  # `zoo generate --raw`
    assert prompt_ids(raw, prompt) == raw(prompt).input_ids
    assert generate(model, chat, prompt, 40) == text
    assert generate(model, raw, prompt, 40) != text


def test_a_run_whose_data_moved_still_generates_through_its_template(tuned_with_adapters,
                                                                    tmp_path):
    """zoo generate reads what the trainer recorded (data.row_format), not the data, which
    may be gone: a copy of the run whose data.source names nothing generates as it does."""
    out, _ = tuned_with_adapters["xla"]
    moved = tmp_path / "run"
    shutil.copytree(out, moved)
    text = (moved / "config.yaml").read_text()
    assert "  source: default\n" in text
    (moved / "config.yaml").write_text(text.replace("  source: default\n",
                                                    f"  source: {tmp_path}/gone.jsonl\n"))
    from zoo.app.generate import generate, load_for_generation

    prompt = 'Repeat the word "zoo".'
    model, chat = load_for_generation(moved, prompt, 10)
    assert chat.chat_template is not None
    original, _ = load_for_generation(out, prompt, 10)
    assert generate(model, chat, prompt, 10) == generate(original, chat, prompt, 10)


def test_zoo_generate_on_the_devices_is_the_host_paths_greedy_text(pretrained_run, tmp_path):
    """`zoo generate` on 2 XLA devices (the device sampler) and `--host` (transformers, as the
    end-of-run sample) continue the same prompts with the same greedy text; the device path
    ends with its timings, two compiles for prompts in one bucket (a prefill and a step)."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"Once upon a time"\n{"prompt": "The zoo has"}\n')
    common = ("generate", str(pretrained_run), "--prompts", str(prompts), "--temperature", "0",
              "--max-new-tokens", "8")
    device, host = zoo(*common, "--tpu", "cpu-2"), zoo(*common, "--host")
    assert device.returncode == 0, device.stderr[-2000:]
    assert host.returncode == 0, host.stderr[-2000:]
    rows = [json.loads(line) for line in device.stdout.splitlines()]
    assert [row["prompt"] for row in rows] == ["Once upon a time", "The zoo has"]
    assert all(row["completion"] and row["finish"] in ("stop", "length") for row in rows)
    assert device.stdout == host.stdout
    assert re.fullmatch(r"prefill [\d.]+ s, decode [\d.]+ s, \d+ new tokens \(\d+ tokens/s\), "
                        r"2 compiles \([\d.]+ s\) on 2 devices",
                        device.stderr.splitlines()[-1]), device.stderr[-500:]
