"""GRPO prompt data (zoo/data/grpo_data.py): text and chat prompts with their other columns,
a chat's final assistant turn as its answer (so the shipped instruction set trains GRPO as
it is), prompts encoded as SFT and `zoo generate` encode them, the shipped word problems
(rewritten byte for byte by their script, each answer its own final number), and the
refusals: no prompt column, an empty prompt, a row missing the answer, a prompt too long."""

import json

import pytest

from core.data import DataError, load_tokenizer
from zoo.assets.word_problems import make_word_problems
from zoo.data import chat_tokens
from zoo.data.grpo_data import (
    DEFAULT_SOURCE,
    GRPODataConfig,
    check_lengths,
    encode_prompts,
    load_prompts,
)
from zoo.data.rewards import load_rewards, score
from zoo.tasks.grpo_objective import GRPOConfig


def written(tmp_path, rows, name="prompts.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_text_prompts_keep_their_other_columns(tmp_path):
    source = written(tmp_path, [{"prompt": "2 + 2?", "answer": "#### 4", "level": 1},
                                {"prompt": "3 + 3?", "answer": "#### 6"}])
    prompts = load_prompts(GRPODataConfig(source=source))
    assert prompts.format == "text" and prompts.prompts == ["2 + 2?", "3 + 3?"]
    assert prompts.columns == {"answer": ["#### 4", "#### 6"], "level": [1, None]}
    assert prompts.where == [f"{source} row 1", f"{source} row 2"]
    assert prompts.label == f"{source} (text, 2 rows)"


def test_a_chats_final_assistant_turn_is_its_answer(tmp_path):
    user = {"role": "user", "content": 'Repeat the word "cat".'}
    source = written(tmp_path, [
        {"messages": [user, {"role": "assistant", "content": "cat"}]},
        {"messages": [user], "answer": "dog"},  # no final turn: the row's own answer
        {"messages": [user, {"role": "assistant", "content": "cat"}], "answer": "cow"},
    ])
    prompts = load_prompts(GRPODataConfig(source=source))
    assert prompts.format == "chat" and prompts.prompts == [[user]] * 3
    assert prompts.columns == {"answer": ["cat", "dog", "cow"]}


def test_the_shipped_instruction_set_is_prompts_with_answers():
    prompts = load_prompts(GRPODataConfig())
    rows = len(DEFAULT_SOURCE.read_text().splitlines())
    assert len(prompts.prompts) == rows and prompts.format == "chat"
    assert all(p[-1]["role"] == "user" for p in prompts.prompts)
    assert all(isinstance(a, str) and a.strip() for a in prompts.columns["answer"])


def test_prompts_are_encoded_as_sft_and_generate_encode_them(tmp_path):
    tokenizer = load_tokenizer("default")
    question = 'Say the word "fan" again.'
    text = load_prompts(GRPODataConfig(source=written(tmp_path, [{"prompt": question}])))
    chat = load_prompts(GRPODataConfig(source=written(
        tmp_path, [{"messages": [{"role": "user", "content": question}]}], "chat.jsonl")))
    assert encode_prompts(text, tokenizer) == [
        [tokenizer.bos_token_id] + tokenizer(question, add_special_tokens=False)["input_ids"]]
    assert encode_prompts(chat, tokenizer) == [chat_tokens.prompt_ids(tokenizer, question)]
    assert encode_prompts(text, tokenizer, chat_tuned=True) == encode_prompts(chat, tokenizer)


def test_the_shipped_word_problems_are_their_scripts_and_their_own_answers():
    path = make_word_problems.HERE / "problems.jsonl"
    assert path.read_text() == "".join(
        json.dumps(row) + "\n" for row in make_word_problems.problems())
    prompts = load_prompts(GRPODataConfig(source=str(path)))
    assert len(prompts.prompts) == 40 and prompts.format == "text"
    answers = prompts.columns["answer"]
    rewards = load_rewards(["final_number", "format"], None, "answer", list(prompts.columns),
                           GRPOConfig().format_regex)
    found = score(rewards, prompts.prompts, answers, prompts.columns, where=prompts.where)
    assert found.total.tolist() == [2.0] * 40
    assert any("," in a.split("####")[0] for a in answers)  # thousands written with commas


@pytest.mark.parametrize("rows, line", [
    ([{"question": "2 + 2?", "answer": "4"}],
     "{src} has no prompt column: neither 'prompt' (text prompts) nor 'messages' (chat "
     "prompts); columns: question, answer; set data.prompt_field=... or "
     "data.messages_field=..."),
    ([{"prompt": "  "}], "{src} row 1: empty prompt ('prompt'), nothing to answer; fix or "
                         "remove the row"),
    ([{"prompt": "a?", "answer": "1"}, {"prompt": "b?"}],
     "{src} row 2 has no 'answer' though other rows have one (the answer the rewards check); "
     "fix or remove the row"),
    ([{"messages": [{"role": "system", "content": "Be brief."}]}],
     "{src} row 1: 'messages' has no user message to answer; fix or remove the row"),
])
def test_a_source_that_is_not_prompts_is_one_line(tmp_path, rows, line):
    source = written(tmp_path, rows)
    with pytest.raises(DataError) as raised:
        load_prompts(GRPODataConfig(source=source))
    assert str(raised.value) == line.format(src=source)


def test_a_prompt_too_long_for_its_completions_is_refused(tmp_path):
    source = written(tmp_path, [{"prompt": "short"}, {"prompt": "word " * 40}])
    prompts = load_prompts(GRPODataConfig(source=source))
    ids = encode_prompts(prompts, load_tokenizer("default"))
    check_lengths(ids, prompts, len(ids[1]), "seq_len 64 less max_new_tokens 8")
    with pytest.raises(DataError, match=rf"^{source} row 2: the prompt takes {len(ids[1])} "
                                        r"tokens, more than 20 \(seq_len 28 less "
                                        r"max_new_tokens 8\); shorten it"):
        check_lengths(ids, prompts, 20, "seq_len 28 less max_new_tokens 8")
