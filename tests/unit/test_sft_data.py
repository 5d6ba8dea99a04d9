"""Instruction rows become exactly the ids a chat template or prompt/completion layout gives,
with the loss on the answers and their end markers only; a row that cannot be used is
refused in one line naming its file and row."""

import json

import numpy as np
import pytest

from core.assets import make_tokenizer
from core.data import DataError, load_tokenizer
from tests.support.chatml import chatml_tokenizer
from tests.support.paths import ROOT
from zoo.data import packed_text, sft_data
from zoo.data.sft_data import SFTDataConfig, load_examples

CHAT = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
    {"role": "assistant", "content": " Rome, of course.\n"},
]
SHORT_CHAT = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]


@pytest.fixture(autouse=True)
def _isolated_datasets_cache(tmp_path_factory, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("default")


@pytest.fixture(scope="module")
def chatml(tmp_path_factory):
    return chatml_tokenizer(tmp_path_factory.mktemp("chatml"))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def load(tmp_path, tokenizer, rows, seq_len=512, name="rows.jsonl", **config):
    source = write_jsonl(tmp_path / name, rows)
    return load_examples(SFTDataConfig(source=source, **config), tokenizer, seq_len)


def examples_of(loaded):
    """[(ids, trained)] per example, as lists."""
    return [(loaded.tokens[a:b].tolist(), loaded.trained[a:b].tolist())
            for a, b in zip(loaded.starts[:-1], loaded.starts[1:])]


def trained_runs(ids, trained):
    """The trained stretches of an example, each as its ids."""
    runs, current = [], []
    for token, on in zip(ids, trained):
        if on:
            current.append(token)
        elif current:
            runs, current = runs + [current], []
    return runs + [current] * bool(current)


def encode(tokenizer, text, split_special_tokens=False):
    return tokenizer(text, add_special_tokens=False,
                     split_special_tokens=split_special_tokens)["input_ids"]


def refusal(excinfo, *fragments):
    message = str(excinfo.value)
    assert isinstance(excinfo.value, DataError) and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ---------------------------------------------------------------- prompt/completion


def test_prompt_completion_is_bos_prompt_completion_eos_trained_on_the_completion(tmp_path, tok):
    rows = [{"prompt": "Q: capital of France?\nA:", "completion": " Paris"},
            {"prompt": "Say the stop word:", "completion": " <|end_of_text|> is text here"}]
    loaded = load(tmp_path, tok, rows)
    assert (loaded.format, loaded.train_on, loaded.rows, loaded.dropped) == (
        "prompt-completion", "completion", 2, 0)
    assert loaded.label == f"{tmp_path / 'rows.jsonl'} (prompt-completion, 2 rows"
    assert loaded.tokens.dtype == np.int32 and loaded.trained.dtype == bool
    assert loaded.starts.dtype == np.int64 and loaded.starts[0] == 0
    for (ids, trained), row in zip(examples_of(loaded), rows):
        prompt, completion = (encode(tok, row[key], split_special_tokens=True)
                              for key in ("prompt", "completion"))
        assert ids == [tok.bos_token_id, *prompt, *completion, tok.eos_token_id]
        assert trained == [False] * (1 + len(prompt)) + [True] * (len(completion) + 1)
    assert loaded.tokens.tolist().count(tok.eos_token_id) == 2  # a literal EOS stays text

    everything = load(tmp_path, tok, rows, train_on="all")
    assert everything.train_on == "all" and everything.trained.all()
    assert everything.tokens.tolist() == loaded.tokens.tolist()


# ---------------------------------------------------------------- chat


def test_default_template_is_shipped_and_kept_by_the_build_script(tok):
    assert tok.chat_template == make_tokenizer.CHAT_TEMPLATE
    assert make_tokenizer.CHAT_TEMPLATE in (ROOT / "docs" / "sft-data.md").read_text()
    assert tok.apply_chat_template(CHAT[:2], tokenize=False, add_generation_prompt=True) == (
        "<|begin_of_text|>System: Answer in one word.\nUser: What is the capital of France?\n"
        "Assistant:\n")
    assert len(tok) == 4096  # the vocabulary, hence the pretraining token cache, is unchanged
    plain = load_tokenizer("default")
    plain.chat_template = None
    assert packed_text.tokenizer_fingerprint(plain) == packed_text.tokenizer_fingerprint(tok)


def test_default_template_chat_ids_equal_apply_chat_template_and_train_each_answer(
        tmp_path, tok):
    loaded = load(tmp_path, tok, [{"messages": CHAT}, {"messages": SHORT_CHAT}])
    assert (loaded.format, loaded.train_on, loaded.rows) == ("chat", "assistant", 2)
    assert loaded.label == f"{tmp_path / 'rows.jsonl'} (chat, 2 rows"
    eos = tok.eos_token_id
    for (ids, trained), messages in zip(examples_of(loaded), [CHAT, SHORT_CHAT]):
        assert ids == tok.apply_chat_template(messages, tokenize=True, return_dict=False)
        # each answer's own tokens and EOS, nothing of "Assistant:\n" (no straddling token)
        answers = [m["content"] for m in messages if m["role"] == "assistant"]
        assert trained_runs(ids, trained) == [encode(tok, a) + [eos] for a in answers]

    everything = load(tmp_path, tok, [{"messages": CHAT}], train_on="all")
    assert everything.train_on == "all" and everything.trained.all()


def test_chatml_template_ids_equal_apply_chat_template_and_train_answer_end_and_newline(
        tmp_path, chatml):
    im_end, newline = chatml.convert_tokens_to_ids("<|im_end|>"), encode(chatml, "\n")
    # the second conversation has no system turn: the template adds its default one
    loaded = load(tmp_path, chatml, [{"messages": CHAT}, {"messages": SHORT_CHAT}])
    for (ids, trained), messages in zip(examples_of(loaded), [CHAT, SHORT_CHAT]):
        assert ids == chatml.apply_chat_template(messages, tokenize=True, return_dict=False)
        answers = [m["content"] for m in messages if m["role"] == "assistant"]
        # the turn as the template closes it: answer, <|im_end|> and the newline after it
        assert trained_runs(ids, trained) == [encode(chatml, a) + [im_end, *newline]
                                              for a in answers]


def test_train_on_must_match_the_rows(tmp_path, tok):
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [{"messages": SHORT_CHAT}], train_on="completion")
    refusal(excinfo, "data.train_on=completion needs prompt/completion rows",
            "has chat rows ('messages')", "data.train_on=assistant")
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [{"prompt": "a", "completion": "b"}], train_on="assistant")
    refusal(excinfo, "data.train_on=assistant needs chat rows", "prompt/completion rows",
            "data.train_on=completion")


# ---------------------------------------------------------------- seq_len


def test_drop_counts_too_long_rows_and_refuses_past_the_share(tmp_path, tok, capsys):
    short = {"prompt": "Q:", "completion": " yes"}
    long = {"prompt": "a long question " * 20, "completion": " no"}
    rows = [short] * 9 + [long]
    loaded = load(tmp_path, tok, rows, seq_len=16, max_skipped_share=0.1)
    assert (loaded.rows, loaded.dropped, loaded.truncated) == (10, 1, 0)
    assert len(loaded.starts) == 10 and max(np.diff(loaded.starts)) <= 16
    assert capsys.readouterr().err == "data: 10 rows; dropped 1 longer than seq_len 16\n"
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, rows, seq_len=16, max_skipped_share=0.05)
    refusal(excinfo, "dropped 1 of 10 rows (10%) longer than seq_len 16",
            "data.max_skipped_share=0.05", "data.truncation=cut_prompt")
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [long], seq_len=16, max_skipped_share=1.0)
    refusal(excinfo, "no row fits seq_len 16 (1 read)", "data.truncation=cut_prompt")


def test_cut_prompt_keeps_bos_and_the_whole_completion(tmp_path, tok):
    row = {"prompt": "a long question " * 20, "completion": " the answer"}
    full = examples_of(load(tmp_path, tok, [row], name="full.jsonl"))[0]
    loaded = load(tmp_path, tok, [row], seq_len=16, truncation="cut_prompt")
    assert (loaded.rows, loaded.truncated, loaded.dropped) == (1, 1, 0)
    ids, trained = examples_of(loaded)[0]
    assert ids == [tok.bos_token_id] + full[0][-15:] and trained == [False] + full[1][-15:]
    assert sum(trained) == len(encode(tok, " the answer")) + 1

    needed = sum(trained) + 1  # with BOS
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [row], seq_len=needed - 1, truncation="cut_prompt")
    refusal(excinfo, f"{tmp_path / 'rows.jsonl'} row 1: its completion takes {needed} tokens",
            f"seq_len {needed - 1}", "data.truncation=drop")


def test_cut_prompt_on_a_chat_keeps_its_last_assistant_turn(tmp_path, tok):
    full = tok.apply_chat_template(CHAT, tokenize=True, return_dict=False)
    last = len(encode(tok, CHAT[-1]["content"])) + 1
    seq_len = last + 4
    loaded = load(tmp_path, tok, [{"messages": CHAT}], seq_len=seq_len, truncation="cut_prompt")
    ids, trained = examples_of(loaded)[0]
    assert loaded.truncated == 1 and ids == [tok.bos_token_id] + full[-(seq_len - 1):]
    assert trained == [False] * 4 + [True] * last


# ---------------------------------------------------------------- refusals


BAD_ROWS = {
    "empty completion": ({"prompt": "Q", "completion": "  "}, "empty completion ('completion')"),
    "completion not a string": ({"prompt": "Q", "completion": 3},
                                "'completion' is not a string but int"),
    "messages not a list": ({"messages": "hello"}, "'messages' is a str; give each row a list"),
    "message not a dict": ({"messages": ["hello"]}, "message 1 is a str, not a {role, content}"),
    "role not a string": ({"messages": [{"role": 1, "content": "x"}]},
                          "message 1's role is not a string but int"),
    "content missing": ({"messages": [{"role": "user"}]}, "message 1's content is missing"),
    "empty assistant content": ({"messages": [SHORT_CHAT[0], {"role": "assistant",
                                                              "content": ""}]},
                                "message 2 (assistant) has empty content"),
    "unknown role": ({"messages": [{"role": "tool", "content": "42"}, *SHORT_CHAT]},
                     "refuses it: unknown role tool; use system, user or assistant"),
    "assistant first": ({"messages": SHORT_CHAT[::-1]}, "opens with an assistant message"),
    "no assistant": ({"messages": SHORT_CHAT[:1]}, "has no assistant message"),
}


@pytest.mark.parametrize("case", BAD_ROWS)
def test_a_bad_row_is_one_line_naming_its_file_and_row(tmp_path, tok, case):
    bad, fragment = BAD_ROWS[case]
    good = {"messages": SHORT_CHAT} if "messages" in bad else {"prompt": "Q", "completion": "A"}
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [good, good, bad])
    refusal(excinfo, f"{tmp_path / 'rows.jsonl'} row 3", fragment)


def test_a_line_that_is_not_a_json_object_names_its_line(tmp_path, tok):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "Q", "completion": "A"}\n\n{"prompt": "Q", \n')
    with pytest.raises(DataError) as excinfo:
        load_examples(SFTDataConfig(source=str(path)), tok, 64)
    refusal(excinfo, f"{path} row 3 is not valid JSON")
    path.write_text('["Q", "A"]\n')
    with pytest.raises(DataError) as excinfo:
        load_examples(SFTDataConfig(source=str(path)), tok, 64)
    refusal(excinfo, f"{path} row 1 is a JSON list, not an object")
    path.write_text("\n")
    with pytest.raises(DataError) as excinfo:
        load_examples(SFTDataConfig(source=str(path)), tok, 64)
    refusal(excinfo, f"{path} has no rows")


def test_a_bad_row_in_a_folder_names_its_own_file(tmp_path, tok):
    folder = tmp_path / "rows"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [{"messages": SHORT_CHAT}] * 2)
    write_jsonl(folder / "b.jsonl", [{"messages": SHORT_CHAT}, {"messages": []}])
    with pytest.raises(DataError) as excinfo:
        load_examples(SFTDataConfig(source=str(folder)), tok, 64)
    refusal(excinfo, f"{folder / 'b.jsonl'} row 2: 'messages' is an empty list")
    write_jsonl(folder / "b.jsonl", [{"messages": SHORT_CHAT}] * 2)
    loaded = load_examples(SFTDataConfig(source=str(folder), split="train[:75%]"), tok, 64)
    assert loaded.rows == 3 and loaded.label == f"{folder} (2 files, chat, 3 rows"


def test_a_parquet_file_names_its_rows_too(tmp_path, tok):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    table = pa.table({"question": ["Q1", "Q2"], "answer": [" A1", ""], "id": [1, 2]})
    pq.write_table(table, path)
    config = SFTDataConfig(source=str(path), prompt_field="question", completion_field="answer")
    with pytest.raises(DataError) as excinfo:
        load_examples(config, tok, 64)
    refusal(excinfo, f"{path} row 2: empty completion ('answer')")


def test_a_missing_column_names_the_columns_there_and_the_key_to_set(tmp_path, tok):
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [{"prompt": "Q", "answer": "A"}])
    refusal(excinfo, f"{tmp_path / 'rows.jsonl'} has no column 'completion'",
            "columns: prompt, answer", "data.completion_field=")
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [{"instruction": "Q", "output": "A"}])
    refusal(excinfo, "neither a 'messages' column", "columns: instruction, output",
            "data.messages_field=", "data.prompt_field=")


def test_chat_rows_need_a_tokenizer_with_a_chat_template(tmp_path):
    plain = load_tokenizer("default")
    plain.chat_template = None
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, plain, [{"messages": SHORT_CHAT}])
    refusal(excinfo, "has no chat template", "data.tokenizer=", "prompt/completion columns")


def test_a_template_that_renders_turns_unlike_the_whole_is_refused(tmp_path):
    unstable = load_tokenizer("default")  # like templates that drop earlier reasoning
    unstable.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
        "{{ 'assistant: (answered)\n' }}{% else %}{{ m['role'] + ': ' + m['content'] + '\n' }}"
        "{% endif %}{% endfor %}")
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, unstable, [{"messages": SHORT_CHAT}, {"messages": CHAT}])
    refusal(excinfo, "row 2: the chat template of tokenizer", "through message 3 as the "
            "start of the whole", "prompt/completion columns")


def test_config_choices_are_checked():
    for key, value, fragment in (("train_on", "prompt", "data.train_on must be one of"),
                                 ("truncation", "cut", "data.truncation must be one of"),
                                 ("max_skipped_share", 2.0, "data.max_skipped_share must be"),
                                 ("shuffle_seed", -1, "data.shuffle_seed must be >= 0")):
        with pytest.raises(ValueError, match=fragment):
            SFTDataConfig(**{key: value})


# ---------------------------------------------------------------- sources and cache


def test_a_source_is_encoded_once_then_read_from_the_cache(tmp_path, tok, monkeypatch):
    rows = [{"messages": SHORT_CHAT}] * 3
    first = load(tmp_path, tok, rows)
    monkeypatch.setattr(sft_data, "_encode_source", lambda *args: pytest.fail("encoded again"))
    again = load_examples(SFTDataConfig(source=str(tmp_path / "rows.jsonl")), tok, 512)
    for field in ("tokens", "trained", "starts"):
        assert np.array_equal(getattr(again, field), getattr(first, field))
    assert again.label == first.label and (again.rows, again.dropped) == (first.rows, 0)
    monkeypatch.undo()
    changed = load(tmp_path, tok, rows[:2])  # a changed file is encoded again
    assert changed.rows == 2


def test_the_default_source_is_the_instruction_file(tmp_path, tok, monkeypatch):
    monkeypatch.setattr(sft_data, "DEFAULT_SOURCE", tmp_path / "missing.jsonl")
    with pytest.raises(DataError) as excinfo:
        load_examples(SFTDataConfig(), tok, 64)
    refusal(excinfo, f"data.source=default reads {tmp_path / 'missing.jsonl'}, which is missing")
    monkeypatch.setattr(sft_data, "DEFAULT_SOURCE", tmp_path / "train.jsonl")
    write_jsonl(tmp_path / "train.jsonl", [{"messages": SHORT_CHAT}])
    loaded = load_examples(SFTDataConfig(), tok, 64)
    assert loaded.format == "chat" and loaded.label == f"{tmp_path / 'train.jsonl'} (chat, 1 row"
