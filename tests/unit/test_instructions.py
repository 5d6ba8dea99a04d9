"""The shipped instruction set and its lm-eval task: the generator writes exactly the shipped
files, the test split is held out (no question, repeated word, number fact or word list of
it in train), the GRPO prompts are in neither split (no question, word list or repeated
word of either), answers are short in the shipped tokenizer, and `zoo_instructions` loads
through zoo eval's task path and builds chat-templated requests offline. `zoo eval
--chat-template` refuses a model without a template in one line, before lm-eval runs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
from click.testing import CliRunner

from tests.support.paths import ROOT
from zoo.assets.instructions import make_instructions

DATA = ROOT / "zoo/assets/instructions"
TOKENIZER = ROOT / "core/assets/tokenizer"
# the shipped tokenizer's template as the SFT data loader renders chats, for a checkout
# where it is not in tokenizer_config.json yet
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}System: "
            "{{ m['content'] }}\n{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n"
            "{% else %}Assistant:\n{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}Assistant:\n{% endif %}")


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def user_turn(row: dict) -> str:
    return next(m["content"] for m in row["messages"] if m["role"] == "user")


def normal(text: str) -> str:
    return " ".join(text.lower().split())


def test_the_generator_writes_the_shipped_files_byte_for_byte():
    rendered = make_instructions.render()
    assert rendered == make_instructions.render()
    for name, text in rendered.items():
        assert (DATA / name).read_bytes() == text.encode(), (
            f"{name} is stale: .venv/bin/python -m zoo.assets.instructions.make_instructions")


def test_rows_are_chats_and_test_rows_carry_question_and_answer():
    train, test = rows("train.jsonl"), rows("test.jsonl")
    assert 2000 <= len(train) <= 5000 and 100 <= len(test) <= 200
    for row in train + test:
        roles = [m["role"] for m in row["messages"]]
        assert roles in (["user", "assistant"], ["system", "user", "assistant"])
        assert all(isinstance(m["content"], str) and m["content"] for m in row["messages"])
    assert any(len(row["messages"]) == 3 for row in train)
    for row in test:
        assert row["messages"] == [{"role": "user", "content": row["question"]},
                                   {"role": "assistant", "content": row["answer"]}]
    kinds = {row["kind"] for row in test}
    assert kinds == {"repeat", "first", "last", "after", "before"}


def test_no_test_question_or_fact_is_in_train():
    train, test = rows("train.jsonl"), rows("test.jsonl")
    train_questions = {normal(user_turn(row)) for row in train}
    assert not [row["question"] for row in test if normal(row["question"]) in train_questions]
    assert len({normal(row["question"]) for row in test}) == len(test)
    train_items, test_items = make_instructions.build()
    # the rule is what carries over: repeated words, number facts and lists are all new
    # (for repeat, after and before, the answer names the fact)
    for kind in ("repeat", "after", "before"):
        seen = {row["answer"] for row in train_items if row["kind"] == kind}
        assert not [row for row in test_items if row["kind"] == kind and row["answer"] in seen]

    words = make_instructions.list_words
    train_lists = {words(row["question"]) for row in train_items if row["kind"] in
                   ("first", "last")}
    assert not [row for row in test_items if row["kind"] in ("first", "last")
                and words(row["question"]) in train_lists]


def test_the_grpo_prompts_are_in_neither_split():
    train, test, grpo = rows("train.jsonl"), rows("test.jsonl"), rows("grpo.jsonl")
    assert 2000 <= len(grpo) <= 5000
    assert {row["kind"] for row in grpo} == {"repeat", "first", "last"}
    for row in grpo:
        assert row["messages"] == [{"role": "user", "content": row["question"]},
                                   {"role": "assistant", "content": row["answer"]}]
    asked = {normal(user_turn(row)) for row in train + test}
    assert not [row["question"] for row in grpo if normal(row["question"]) in asked]
    assert len({normal(row["question"]) for row in grpo}) == len(grpo)
    train_items, test_items = make_instructions.build()
    split_items = train_items + test_items
    # no word of any split question is repeated here, and no list of either split is asked
    split_words = {word for row in split_items
                   for word in make_instructions.list_words(row["question"])}
    repeated = [row["answer"] for row in grpo if row["kind"] == "repeat"]
    assert repeated and not split_words & set(repeated)
    split_lists = {make_instructions.list_words(row["question"]) for row in split_items
                   if row["kind"] in ("first", "last")}
    lists = [make_instructions.list_words(row["question"]) for row in grpo
             if row["kind"] in ("first", "last")]
    assert lists and not split_lists & set(lists)
    for row in grpo:
        if row["kind"] != "repeat":
            words = make_instructions.list_words(row["question"])
            assert row["answer"] == words[0 if row["kind"] == "first" else 2]


def test_answers_are_one_to_three_tokens():
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
    for row in rows("train.jsonl") + rows("test.jsonl") + rows("grpo.jsonl"):
        answer = row["messages"][-1]["content"]
        count = len(tokenizer.encode(answer, add_special_tokens=False).ids)
        assert 1 <= count <= 3, answer


def chat_tokenizer():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER))
    tokenizer.chat_template = tokenizer.chat_template or TEMPLATE
    return tokenizer


@pytest.fixture
def task(tmp_path, monkeypatch):
    """zoo_instructions as `zoo eval` resolves it, its dataset cached in tmp_path."""
    import datasets

    from eval.tasks_check import resolve_tasks

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)
    names, manager = resolve_tasks("zoo_instructions")
    assert names == ["zoo_instructions"]
    return manager.load(names)["tasks"]["zoo_instructions"]


def test_the_task_builds_chat_templated_generation_requests_offline(task):
    tokenizer = chat_tokenizer()

    def template(history, add_generation_prompt=True):
        return tokenizer.apply_chat_template(history, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)

    assert task.OUTPUT_TYPE == "generate_until"
    docs = list(task.test_docs())
    assert docs == rows("test.jsonl")
    task.build_all_requests(limit=5, rank=0, world_size=1, apply_chat_template=True,
                            chat_template=template, rewrite_requests_cache=True)
    assert len(task.instances) == 5
    for instance in task.instances:
        prompt, kwargs = instance.args
        assert prompt == template([{"role": "user", "content": instance.doc["question"]}])
        assert prompt.endswith("Assistant:\n") and "User: " in prompt
        assert kwargs["do_sample"] is False and "\n" in kwargs["until"]
        assert kwargs["max_gen_toks"] <= 16
        assert task.doc_to_target(instance.doc) == instance.doc["answer"]


def test_exact_match_ignores_case_punctuation_and_outer_spaces(task):
    doc = next(d for d in task.test_docs() if d["kind"] == "repeat")
    answer = doc["answer"]
    assert task.process_results(doc, [f" {answer.upper()}. "]) == {"exact_match": 1.0}
    assert task.process_results(doc, [f"{answer}s"]) == {"exact_match": 0.0}


def test_generations_are_recorded_and_loglikelihoods_only_for_choices():
    from eval.evaluate import generations, per_choice_loglikelihoods

    samples = {"gen": [{"doc_id": 1, "resps": [["b"]], "filtered_resps": ["b"]},
                       {"doc_id": 0, "resps": [[""]], "filtered_resps": [""]}],
               "mc": [{"doc_id": 0, "resps": [[(-1.5, False)], [(-0.5, True)]]}]}
    assert generations(samples) == {"gen": ["", "b"]}
    assert per_choice_loglikelihoods(samples) == {"mc": [[-1.5, -0.5]]}


def hf_folder(folder: Path, template: bool, weights: bool = False,
              family: str = "llama") -> Path:
    """A Llama (or T5) folder with the shipped tokenizer; random weights when asked (else a
    stand-in file, whole: a refusal must come before anything loads them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(TOKENIZER / name, folder / name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    if template:
        config["chat_template"] = chat_tokenizer().chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    if weights and family == "t5":
        import torch

        from tests.support.t5_cases import hf_model
        from zoo.t5.family import FAMILY

        config = FAMILY.sizes["tiny"]  # the shipped tokenizer's vocabulary
        hf_model(FAMILY.build(config, seed=0), config).save_pretrained(folder)
    elif weights:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=1,
            pad_token_id=2))
        model.save_pretrained(folder)
    else:
        (folder / "config.json").write_text(json.dumps(
            {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
        from safetensors.numpy import save_file  # a whole file, never loaded

        save_file({"stand_in": numpy.zeros(1, dtype=numpy.float32)},
                  str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("args, message", [
    (["--chat-template"], "has no chat template (no chat_template in tokenizer_config.json, "
                          "no chat_template.jinja), and --chat-template renders every prompt"),
])
def test_eval_refuses_in_one_line_before_lm_eval_runs(tmp_path, monkeypatch, args, message):
    import lm_eval

    from tools.cli import cli

    monkeypatch.setattr(lm_eval, "simple_evaluate", lambda **_: pytest.fail("lm-eval ran"))
    folder = hf_folder(tmp_path / "model", template=False)
    result = CliRunner().invoke(cli, ["eval", str(folder), "--tasks", "zoo_instructions",
                                      "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and message in result.output, result.output


@pytest.mark.slow
def test_zoo_eval_scores_the_task_through_the_chat_template(tmp_path):
    folder = hf_folder(tmp_path / "model", template=True, weights=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    result = subprocess.run(
        [sys.executable, "-c", "from tools.cli import main; main()", "eval", str(folder),
         "--tasks", "zoo_instructions", "--chat-template", "--limit", "8", "--out",
         str(tmp_path / "out")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "zoo_instructions  exact_match" in result.stdout
    record = json.loads((tmp_path / "out/eval_results.json").read_text())
    assert record["chat_template"] is True
    assert len(record["generations"]["zoo_instructions"]) == 8
    assert 0.0 <= record["results"]["zoo_instructions"]["exact_match,none"] <= 1.0


@pytest.mark.slow  # two evals, one of them compiling the sampler's graphs: the suite is tight
@pytest.mark.parametrize("family", ["llama", "t5"])
def test_zoo_eval_on_xla_generates_what_the_cpu_does(tmp_path, family):
    """A generating task with --device xla runs through zoo's device sampler: the same
    greedy answers as transformers' generate with --device cpu (a causal LM and T5)."""
    folder = hf_folder(tmp_path / "model", template=False, weights=True, family=family)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    found = {}
    for device in ("cpu", "xla"):
        result = subprocess.run(
            [sys.executable, "-c", "from tools.cli import main; main()", "eval", str(folder),
             "--tasks", "zoo_instructions", "--limit", "4", "--device", device, "--out",
             str(tmp_path / device)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        record = json.loads((tmp_path / device / "eval_results.json").read_text())
        found[device] = record["generations"]["zoo_instructions"]
    assert len(found["cpu"]) == 4 and any(found["cpu"])
    assert found["xla"] == found["cpu"]
