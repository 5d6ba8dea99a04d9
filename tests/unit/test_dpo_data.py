"""Preference rows become pairs of examples with exactly the ids SFT gives the same prompt and
response (TRL's three row shapes), the loss on the responses only; a pair fits seq_len
with both its examples or is dropped or cut the same on both sides; a row that cannot be
used is refused in one line naming its file and row. The shipped set loads and its script
rewrites it byte for byte."""

import json

import numpy as np
import pytest

from core.data import DataError, load_tokenizer
from tests.support.paths import ROOT
from zoo.assets.preferences import make_preferences
from zoo.data.dpo_data import DPODataConfig, load_pairs
from zoo.data.sft_data import SFTDataConfig, load_examples

SYSTEM = {"role": "system", "content": "Answer in one word."}
QUESTIONS = ["What is the capital of France?", "Name a color.", "Say hi."]
CHOSEN = ["Paris.", "Blue", " hello there\n"]
REJECTED = ["I don't know.", "The sky is often blue, and so is the sea.", "No."]


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


STRING_ROWS = [{"prompt": f"Q: {q}\nA:", "chosen": f" {c}", "rejected": f" {r}"}
               for q, c, r in zip(QUESTIONS, CHOSEN, REJECTED)]
PROMPTS = [[SYSTEM, user(QUESTIONS[0])], [user(QUESTIONS[1])],
           [user("Hello?"), assistant("Yes?"), user(QUESTIONS[2])]]  # an earlier answer
EXPLICIT_ROWS = [{"prompt": p, "chosen": [assistant(c)], "rejected": [assistant(r)]}
                 for p, c, r in zip(PROMPTS, CHOSEN, REJECTED)]
IMPLICIT_ROWS = [{"chosen": p + [assistant(c)], "rejected": p + [assistant(r)]}
                 for p, c, r in zip(PROMPTS, CHOSEN, REJECTED)]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("default")


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def load(tmp_path, tokenizer, rows, seq_len=512, name="pairs.jsonl", **config):
    source = write_jsonl(tmp_path / name, rows)
    return load_pairs(DPODataConfig(source=source, cache_dir=str(tmp_path / "cache"), **config),
                      tokenizer, seq_len)


def sft(tmp_path, tokenizer, rows, name):
    source = write_jsonl(tmp_path / name, rows)
    return load_examples(SFTDataConfig(source=source, cache_dir=str(tmp_path / "cache")),
                         tokenizer, 512)


def examples_of(loaded):
    """[(ids, trained)] per example, as lists."""
    return [(loaded.tokens[a:b].tolist(), loaded.trained[a:b].tolist())
            for a, b in zip(loaded.starts[:-1], loaded.starts[1:])]


def trained_ids(example):
    ids, trained = example
    return [token for token, on in zip(ids, trained) if on]


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def refusal(excinfo, *fragments):
    message = str(excinfo.value)
    assert isinstance(excinfo.value, DataError) and "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message


# ---------------------------------------------------------------- the three row shapes


def test_string_rows_are_sft_prompt_completion_examples_trained_on_the_responses(
        tmp_path, tok):
    pairs = load(tmp_path, tok, STRING_ROWS)
    assert (pairs.format, pairs.rows, pairs.pairs, pairs.dropped, pairs.truncated) == (
        "prompt-completion", 3, 3, 0, 0)
    assert pairs.label == f"{tmp_path / 'pairs.jsonl'} (prompt-completion, 3 rows"
    assert pairs.tokens.dtype == np.int32 and pairs.trained.dtype == bool
    assert pairs.starts.dtype == np.int64 and len(pairs.starts) == 2 * 3 + 1
    examples = examples_of(pairs)
    for side, field in enumerate(("chosen", "rejected")):
        rows = [{"prompt": row["prompt"], "completion": row[field]} for row in STRING_ROWS]
        assert examples[side::2] == examples_of(sft(tmp_path, tok, rows, f"{field}.jsonl"))
        for example, row in zip(examples[side::2], STRING_ROWS):
            assert trained_ids(example) == encode(tok, row[field]) + [tok.eos_token_id]


def test_explicit_chat_rows_are_sft_chats_trained_on_the_response_alone(tmp_path, tok):
    pairs = load(tmp_path, tok, EXPLICIT_ROWS)
    assert (pairs.format, pairs.rows, pairs.pairs) == ("chat", 3, 3)
    assert pairs.label == f"{tmp_path / 'pairs.jsonl'} (chat, 3 rows"
    examples = examples_of(pairs)
    for side, field in enumerate(("chosen", "rejected")):
        chats = [{"messages": row["prompt"] + row[field]} for row in EXPLICIT_ROWS]
        sft_examples = examples_of(sft(tmp_path, tok, chats, f"{field}.jsonl"))
        assert [ids for ids, _ in examples[side::2]] == [ids for ids, _ in sft_examples]
        for example, reference, row in zip(examples[side::2], sft_examples, EXPLICIT_ROWS):
            assert example[0] == tok.apply_chat_template(row["prompt"] + row[field],
                                                         tokenize=True, return_dict=False)
            answer = encode(tok, row[field][0]["content"]) + [tok.eos_token_id]
            assert trained_ids(example) == answer  # "Yes?" in the third prompt is not trained
            assert trained_ids(reference)[-len(answer):] == answer


def test_implicit_prompt_chats_equal_explicit_prompt_chats(tmp_path, tok):
    explicit = load(tmp_path, tok, EXPLICIT_ROWS, name="explicit.jsonl")
    implicit = load(tmp_path, tok, IMPLICIT_ROWS, name="implicit.jsonl")
    assert implicit.format == "chat" and implicit.pairs == 3
    for field in ("tokens", "trained", "starts"):
        assert np.array_equal(getattr(implicit, field), getattr(explicit, field))


def test_other_column_names_are_read_where_the_config_says(tmp_path, tok):
    rows = [{"question": row["prompt"], "good": row["chosen"], "bad": row["rejected"]}
            for row in STRING_ROWS]
    renamed = load(tmp_path, tok, rows, name="renamed.jsonl", prompt_field="question",
                   chosen_field="good", rejected_field="bad")
    plain = load(tmp_path, tok, STRING_ROWS)
    assert np.array_equal(renamed.tokens, plain.tokens)
    assert np.array_equal(renamed.trained, plain.trained)


def test_a_parquet_file_loads_as_its_jsonl_twin_and_names_its_rows(tmp_path, tok, monkeypatch):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pylist([{**row, "score": 1.0} for row in IMPLICIT_ROWS]), path)
    config = DPODataConfig(source=str(path), cache_dir=str(tmp_path / "cache"))
    pairs = load_pairs(config, tok, 512)
    twin = load(tmp_path, tok, IMPLICIT_ROWS)
    assert pairs.label == f"{path} (chat, 3 rows"
    assert np.array_equal(pairs.tokens, twin.tokens)
    assert np.array_equal(pairs.trained, twin.trained)
    pq.write_table(pa.Table.from_pylist([{"chosen": "A", "score": 1.0}]), path)
    with pytest.raises(DataError) as excinfo:
        load_pairs(config, tok, 512)
    refusal(excinfo, f"{path} row 1 has no column 'prompt' (columns: chosen, score)")


# ---------------------------------------------------------------- seq_len


def pair_lengths(pairs):
    lengths = np.diff(pairs.starts)
    return lengths[0::2] + lengths[1::2]


def test_cut_prompt_cuts_both_prompts_alike_and_keeps_both_responses(tmp_path, tok):
    row = {"prompt": "a long question " * 20, "chosen": " the answer", "rejected": " no idea"}
    chosen, rejected = examples_of(load(tmp_path, tok, [row], name="full.jsonl"))
    seq_len = 40
    pairs = load(tmp_path, tok, [row], seq_len=seq_len, truncation="cut_prompt")
    assert (pairs.rows, pairs.truncated, pairs.dropped) == (1, 1, 0)
    assert pair_lengths(pairs)[0] <= seq_len
    cut_chosen, cut_rejected = examples_of(pairs)
    cut = len(chosen[0]) - len(cut_chosen[0])
    assert cut > 0 and len(rejected[0]) - len(cut_rejected[0]) == cut
    for whole, kept in ((chosen, cut_chosen), (rejected, cut_rejected)):
        assert kept[0] == [tok.bos_token_id] + whole[0][1 + cut:]
        assert kept[1] == [False] + whole[1][1 + cut:]
        assert trained_ids(kept) == trained_ids(whole)

    responses = sum(chosen[1]) + sum(rejected[1]) + 2  # with both BOS: no prompt left
    short = {**row, "chosen": " yes", "rejected": " no"}  # fits once its prompt is cut
    pairs = load(tmp_path, tok, [row] * 9 + [short], seq_len=responses - 1,
                 truncation="cut_prompt", max_skipped_share=1.0)
    assert (pairs.rows, pairs.dropped, pairs.truncated, pairs.pairs) == (10, 9, 1, 1)


def test_drop_counts_pairs_longer_than_seq_len_and_refuses_past_the_share(
        tmp_path, tok, capsys):
    short = {"prompt": "Q:", "chosen": " yes", "rejected": " no"}
    long = {"prompt": "Q:", "chosen": " yes", "rejected": " a long wrong answer" * 4}
    rows = [short] * 9 + [long]
    pairs = load(tmp_path, tok, rows, seq_len=16)
    assert (pairs.rows, pairs.dropped, pairs.truncated, pairs.pairs) == (10, 1, 0, 9)
    assert max(pair_lengths(pairs)) <= 16
    assert capsys.readouterr().err == "data: 10 rows; dropped 1 longer than seq_len 16\n"
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, rows, seq_len=16, max_skipped_share=0.05)
    refusal(excinfo, "dropped 1 of 10 rows (10%) longer than seq_len 16",
            "data.max_skipped_share=0.05", "data.truncation=cut_prompt")


# ---------------------------------------------------------------- refusals


SHORT_PROMPT = [user("Q")]


def chat_row(chosen, rejected, prompt=SHORT_PROMPT):
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


GOOD_STRING = {"prompt": "Q", "chosen": " A", "rejected": " B"}
GOOD_CHAT = chat_row([assistant("A")], [assistant("B")])
BAD_ROWS = {
    "empty chosen text": ({"prompt": "Q", "chosen": "  ", "rejected": " B"},
                          "'chosen' is empty (no text), nothing to prefer"),
    "empty rejected text": ({"prompt": "Q", "chosen": " A", "rejected": ""},
                            "'rejected' is empty (no text)"),
    "identical texts": ({"prompt": "Q", "chosen": " A", "rejected": " A"},
                        "'chosen' and 'rejected' are identical"),
    "rejected not text": ({"prompt": "Q", "chosen": " A", "rejected": [assistant("B")]},
                          "'rejected' holds a list of messages, not a string as in the file's "
                          "first row: its format differs from the file's"),
    "missing column": ({"prompt": "Q", "chosen": " A"},
                       "has no column 'rejected' (columns: prompt, chosen); "
                       "set data.rejected_field="),
    "empty chosen chat": (chat_row([], [assistant("B")]),
                          "'chosen' is empty (no assistant message with content)"),
    "blank chosen answer": (chat_row([assistant(" ")], [assistant("B")]),
                            "'chosen' is empty (no assistant message with content)"),
    "identical chats": (chat_row([assistant("A")], [assistant("A")]),
                        "'chosen' and 'rejected' are identical"),
    "two answers": (chat_row([assistant("A"), assistant("C")], [assistant("B")]),
                    "'chosen' holds 2 messages (assistant, assistant), not one assistant"),
    "prompt not messages": (chat_row([assistant("A")], [assistant("B")], prompt="Q"),
                            "'prompt' is a str; give each row a list of messages"),
    "unknown role": (chat_row([assistant("A")], [assistant("B")],
                              prompt=[{"role": "tool", "content": "42"}, user("Q")]),
                     "refuses it: unknown role tool; use system, user or assistant"),
}


@pytest.mark.parametrize("case", BAD_ROWS)
def test_a_bad_row_is_one_line_naming_its_file_and_row(tmp_path, tok, case):
    bad, fragment = BAD_ROWS[case]
    good = GOOD_CHAT if isinstance(bad["chosen"], list) else GOOD_STRING
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [good, good, bad])
    refusal(excinfo, f"{tmp_path / 'pairs.jsonl'} row 3", fragment)


IMPLICIT_BAD = {
    "differ at a user turn": ([user("Q"), assistant("A")], [user("R"), assistant("B")],
                              "'chosen' after the 0 messages it shares with 'rejected' "
                              "(the prompt) holds 2 messages (user, assistant)"),
    "one goes on": ([user("Q"), assistant("A")],
                    [user("Q"), assistant("A"), user("More?"), assistant("B")],
                    "'chosen' after the 2 messages it shares with 'rejected' (the prompt) "
                    "holds 0 messages (none)"),
    "no answer": ([user("Q")], [user("Q"), assistant("B")],
                  "'chosen' is empty (no assistant message with content)"),
    "identical": ([user("Q"), assistant("A")], [user("Q"), assistant("A")],
                  "'chosen' and 'rejected' are identical"),
}


@pytest.mark.parametrize("case", IMPLICIT_BAD)
def test_implicit_prompts_must_differ_in_the_last_answer_only(tmp_path, tok, case):
    chosen, rejected, fragment = IMPLICIT_BAD[case]
    good = {"chosen": [user("Q"), assistant("A")], "rejected": [user("Q"), assistant("B")]}
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [good, {"chosen": chosen, "rejected": rejected}])
    refusal(excinfo, f"{tmp_path / 'pairs.jsonl'} row 2", fragment)


def test_a_missing_prompt_column_names_the_columns_and_the_key_to_set(tmp_path, tok):
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [{"question": "Q", "chosen": " A", "rejected": " B"}])
    refusal(excinfo, f"{tmp_path / 'pairs.jsonl'} row 1 has no column 'prompt'",
            "(columns: question, chosen, rejected)", "set data.prompt_field=")
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, tok, [{"prompt": "Q", "good": " A", "rejected": " B"}])
    refusal(excinfo, "row 1 has no column 'chosen'", "data.chosen_field=")


def test_chat_rows_need_a_tokenizer_with_a_chat_template(tmp_path):
    plain = load_tokenizer("default")
    plain.chat_template = None
    with pytest.raises(DataError) as excinfo:
        load(tmp_path, plain, [GOOD_CHAT])
    refusal(excinfo, "has no chat template", "data.tokenizer=")


def test_config_choices_are_checked():
    for key, value, fragment in (("truncation", "cut", "data.truncation must be one of"),
                                 ("max_skipped_share", -0.5, "data.max_skipped_share must be"),
                                 ("shuffle_seed", -1, "data.shuffle_seed must be >= 0")):
        with pytest.raises(ValueError, match=fragment):
            DPODataConfig(**{key: value})


# ---------------------------------------------------------------- cache and shipped set


def test_a_source_is_encoded_once_and_again_when_its_file_or_template_changes(tmp_path, tok):
    cache = tmp_path / "cache" / "tokens"
    first = load(tmp_path, tok, EXPLICIT_ROWS)
    entries = sorted(cache.iterdir())
    again = load(tmp_path, tok, EXPLICIT_ROWS[:2], name="other.jsonl")  # another source
    assert again.pairs == 2 and len(list(cache.iterdir())) == 2 * len(entries)
    same = load_pairs(DPODataConfig(source=str(tmp_path / "pairs.jsonl"),
                                    cache_dir=str(tmp_path / "cache")), tok, 512)
    assert isinstance(same.tokens, np.memmap) and np.array_equal(same.tokens, first.tokens)
    assert len(list(cache.iterdir())) == 2 * len(entries)  # read, not written

    templated = load_tokenizer("default")
    templated.chat_template = tok.chat_template.replace("User: ", "Human: ")
    other = load_pairs(DPODataConfig(source=str(tmp_path / "pairs.jsonl"),
                                     cache_dir=str(tmp_path / "cache")), templated, 512)
    assert len(list(cache.iterdir())) == 3 * len(entries)
    assert not np.array_equal(other.tokens, first.tokens)


def test_the_shipped_set_loads_by_default_and_its_script_rewrites_it(tmp_path, tok):
    pairs = load_pairs(DPODataConfig(cache_dir=str(tmp_path / "cache")), tok, 256)
    assert pairs.label == "zoo/assets/preferences/train.jsonl (chat, 2,000 rows"
    assert (pairs.pairs, pairs.dropped) == (2000, 0)
    make_preferences.main(tmp_path)
    shipped = ROOT / "zoo/assets/preferences"
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), (
            f"{name} is stale: .venv/bin/python -m zoo.assets.preferences.make_preferences")
    assert (shipped / "train.jsonl").stat().st_size < 1_000_000
    test = load_pairs(DPODataConfig(source=str(shipped / "test.jsonl"),
                                    cache_dir=str(tmp_path / "cache")), tok, 256)
    assert (test.format, test.pairs) == ("chat", 150)
