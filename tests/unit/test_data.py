import json
import os
import sys
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch

from core import data
from core.data import load_tokenizer
from core.errors import UserError
from zoo.data import packed_text
from zoo.data.packed_text import DataConfig, TokenBatches, describe

DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "Packing keeps document boundaries:\n    def f(x):\n        return x  # code too",
    "Unicode survives: héllo, 日本語, 🙂 and a literal <|end_of_text|> stays text.",
    "short",
]


@pytest.fixture(autouse=True)
def _isolated_datasets_cache(tmp_path_factory, monkeypatch):
    """HF datasets writes Arrow caches; keep them out of ~/.cache and out of the data dirs."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("default")


def write_jsonl(path: Path, docs, field="text"):
    path.write_text("".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)))
    return path


def one_epoch(batches: TokenBatches):
    """All rows of epoch 0 (the batch size must divide the row count)."""
    n = batches.num_sequences // batches.global_batch_size
    parts = [batches.batch(i) for i in range(n)]
    return {k: torch.cat([p[k] for p in parts]) for k in ("input_ids", "labels")}


def assert_one_line_user_error(excinfo, *fragments):
    message = str(excinfo.value)
    assert isinstance(excinfo.value, UserError) and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


# ---------------------------------------------------------------- tokenizer


def test_default_tokenizer_round_trips_and_has_special_tokens(tok):
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (data.BOS, data.EOS, data.PAD)
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id}) == 3
    assert len(tok) == 4096
    for text in DOCS[:2] + ["  leading spaces,\ttabs and   runs .  ", "ünïcödé ✓ 中文"]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text and max(ids) < len(tok)
    prose = "The return statement leaves the current function call with the expression list."
    assert len(tok(prose, add_special_tokens=False)["input_ids"]) < len(prose) / 4  # merges
    with_specials = tok("hello")["input_ids"]
    assert with_specials[0] == tok.bos_token_id  # like Llama 3: BOS on every encode
    assert tok.decode(with_specials, skip_special_tokens=True) == "hello"


def test_tokenizer_folder_is_small_and_loads_with_auto_tokenizer():
    from transformers import AutoTokenizer

    folder = data.DEFAULT_TOKENIZER
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in folder.iterdir()}
    assert sum(p.stat().st_size for p in folder.iterdir()) < 1_000_000
    auto = AutoTokenizer.from_pretrained(str(folder))
    assert auto.pad_token == data.PAD and auto.eos_token_id == 1


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11), reason="shipped tokenizer was trained on 3.11's help topics"
)
def test_build_script_reproduces_the_shipped_tokenizer(tok):
    from core.assets import make_tokenizer

    rebuilt = make_tokenizer.build(data.default_documents())
    assert rebuilt.get_vocab() == tok.backend_tokenizer.get_vocab()


def test_missing_tokenizer_dir_and_unreachable_hub_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError) as excinfo:
        load_tokenizer(str(tmp_path / "no_such_tokenizer"))
    assert_one_line_user_error(excinfo, "no_such_tokenizer", "does not exist")
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=5.0: False)  # never touch the net
    with pytest.raises(UserError) as excinfo:
        load_tokenizer("zoo-test-org/no-such-tokenizer")
    assert_one_line_user_error(excinfo, "could not be reached", "local tokenizer dir", "default")
    config = DataConfig(source="zoo-test-org/no-such-dataset")
    with pytest.raises(UserError) as excinfo:
        TokenBatches(config, load_tokenizer("default"), seq_len=8, global_batch_size=2)
    assert_one_line_user_error(excinfo, "no-such-dataset", "could not be reached")


# ---------------------------------------------------------------- default corpus and packing


def test_default_corpus_is_python_help_topics_and_tokenizes_in_rust(tok):
    """Speed is a benchmark's business (tests/benchmarks); here: the Rust tokenizer."""
    from pydoc_data.topics import topics

    docs = data.default_documents()
    assert docs == [topics[k] for k in sorted(topics)] and len(docs) > 50
    assert tok.is_fast
    packed_text._CORPORA.clear()
    batches = TokenBatches(DataConfig(), tok, seq_len=256, global_batch_size=8)
    assert batches.num_documents == len(docs)
    assert batches.tokens_per_epoch > 50_000
    assert batches.num_sequences == -(-batches.tokens_per_epoch // 256)
    line = describe(DataConfig())
    assert line.startswith("default corpus (Python ") and f"{len(docs)} docs" in line
    assert "\n" not in line and line.endswith("tokens)")


def test_packing_keeps_eos_at_boundaries_and_rows_are_exactly_seq_len(tmp_path, tok):
    config = DataConfig(source=str(write_jsonl(tmp_path / "docs.jsonl", DOCS)))
    seq_len = 16
    stream = []
    for doc in DOCS:  # expected: BOS doc EOS, document after document
        ids = tok(doc, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        stream += [tok.bos_token_id, *ids, tok.eos_token_id]
    rows = -(-len(stream) // seq_len)
    batches = TokenBatches(config, tok, seq_len=seq_len, global_batch_size=rows)
    assert batches.num_sequences == rows and batches.tokens_per_epoch == len(stream)
    assert rows * seq_len > len(stream)  # the test needs a padded tail
    epoch = one_epoch(batches)
    assert epoch["input_ids"].shape == (rows, seq_len)
    padded = stream + [tok.pad_token_id] * (rows * seq_len - len(stream))
    expected = {tuple(padded[i : i + seq_len]) for i in range(0, len(padded), seq_len)}
    assert {tuple(r) for r in epoch["input_ids"].tolist()} == expected  # a shuffled epoch
    ids = epoch["input_ids"]
    assert (ids == tok.eos_token_id).sum() == len(DOCS)  # the literal "<|end_of_text|>" is text
    assert (ids == tok.bos_token_id).sum() == len(DOCS)


def test_labels_are_inputs_except_padding_which_is_masked(tmp_path, tok):
    config = DataConfig(source=str(write_jsonl(tmp_path / "docs.jsonl", DOCS)))
    batches = TokenBatches(config, tok, seq_len=16, global_batch_size=1)
    epoch = one_epoch(batches)
    ids, labels = epoch["input_ids"], epoch["labels"]
    assert ids.dtype == labels.dtype == torch.long
    masked = labels == data.IGNORE_INDEX
    assert torch.equal(masked, ids == tok.pad_token_id)  # masked exactly where padded
    assert masked.sum() == batches.num_sequences * 16 - batches.tokens_per_epoch > 0
    assert torch.equal(labels[~masked], ids[~masked])


def test_tiny_corpus_repeats_to_fill_a_batch(tmp_path, tok):
    (tmp_path / "one.txt").write_text("hello world")
    batches = TokenBatches(DataConfig(source=str(tmp_path / "one.txt")), tok, 64, 4)
    assert batches.num_sequences == 1
    batch = batches.batch(3)
    assert batch["input_ids"].shape == (4, 64)
    assert all(torch.equal(row, batch["input_ids"][0]) for row in batch["input_ids"])
    assert (batch["labels"][0] != -100).sum() == batches.tokens_per_epoch


# ---------------------------------------------------------------- order, resume, hosts


def make(tok, tmp_path, **kwargs):
    docs = [f"Document {i}: " + "some words here " * (i % 5 + 1) for i in range(40)]
    config = DataConfig(source=str(write_jsonl(tmp_path / "many.jsonl", docs)))
    config.shuffle_seed = kwargs.pop("shuffle_seed", 0)
    return TokenBatches(config, tok, **{"seq_len": 8, "global_batch_size": 6, **kwargs})


def test_batches_are_deterministic_and_resume_matches_an_uninterrupted_run(tmp_path, tok):
    run = make(tok, tmp_path)
    assert run.num_sequences % 6  # batches straddle epoch boundaries
    uninterrupted = list(islice(iter(run), 3 * run.num_sequences // 6))
    resumed = make(tok, tmp_path)
    resumed.start = 7
    for expected, got in zip(uninterrupted[7:], islice(iter(resumed), 10)):
        assert torch.equal(expected["input_ids"], got["input_ids"])
        assert torch.equal(expected["labels"], got["labels"])
    assert torch.equal(run.batch(5)["input_ids"], make(tok, tmp_path).batch(5)["input_ids"])
    other_seed = make(tok, tmp_path, shuffle_seed=1)
    assert not torch.equal(run.batch(0)["input_ids"], other_seed.batch(0)["input_ids"])


def test_each_epoch_is_a_fresh_shuffle_of_all_rows(tmp_path, tok):
    run = make(tok, tmp_path, global_batch_size=1)
    n = run.num_sequences
    rows = torch.cat([run.batch(i)["input_ids"] for i in range(2 * n)])
    first, second = rows[:n], rows[n:]
    key = [tuple(r) for r in first.tolist()]
    assert sorted(key) == sorted(tuple(r) for r in second.tolist())  # same rows...
    assert key != [tuple(r) for r in second.tolist()]  # ...in another order


def test_hosts_split_the_same_global_batch(tmp_path, tok):
    single = make(tok, tmp_path, global_batch_size=6)
    hosts = [
        make(tok, tmp_path, global_batch_size=6, process_index=k, process_count=2) for k in (0, 1)
    ]
    assert hosts[0].local_batch_size == 3
    for index in (0, 1, single.num_sequences // 6 + 1):
        parts = [h.batch(index) for h in hosts]
        for key in ("input_ids", "labels"):
            assert parts[0][key].shape == (3, 8)
            assert torch.equal(torch.cat([p[key] for p in parts]), single.batch(index)[key])


def test_held_out_rows_are_never_trained_on_and_validate_in_fixed_shapes(tmp_path, tok):
    whole = make(tok, tmp_path, global_batch_size=1)
    held = make(tok, tmp_path, global_batch_size=4, held_out=6)
    n = held.num_sequences
    assert n == whole.num_sequences - 6
    tokens = torch.from_numpy(held.corpus.tokens.astype(np.int64))
    # one epoch of training is exactly the first n rows of the stream, shuffled
    epoch = torch.cat([held.batch(i)["input_ids"] for i in range(n // 4)])
    head = tokens[: n * 8].view(n, 8)
    assert set(map(tuple, epoch.tolist())) <= set(map(tuple, head.tolist()))
    validation = list(held.validation_batches())
    assert [b["input_ids"].shape for b in validation] == [(4, 8), (4, 8)]  # 6 rows, padded
    labels = torch.cat([b["labels"] for b in validation])
    assert (labels[6:] == -100).all()  # the padding rows are masked out of the loss
    kept = labels[:6].flatten()
    assert torch.equal(kept[kept != -100], tokens[n * 8:])  # the rest of the stream
    with pytest.raises(UserError, match="too few to hold out"):
        make(tok, tmp_path, global_batch_size=4, held_out=whole.num_sequences)


def test_a_streamed_source_tokenizes_as_it_reads_and_matches_the_whole_read(tmp_path, tok):
    docs = [f"Document {i}: " + "some words here " * (i % 5 + 1) for i in range(40)]
    source = str(write_jsonl(tmp_path / "many.jsonl", docs))
    whole = packed_text.tokenize_corpus(
        DataConfig(source=source, max_documents=25, cache_dir=str(tmp_path / "a")), tok)
    streamed_config = DataConfig(source=source, streaming=True, max_documents=25,
                                 cache_dir=str(tmp_path / "b"))
    texts, _ = packed_text.load_documents(streamed_config, data.Tally())
    assert not isinstance(texts, list)  # an iterator: nothing is read ahead
    streamed = packed_text._tokenize(streamed_config, tok)
    assert whole.num_documents == streamed.num_documents == 25
    assert np.array_equal(whole.tokens, streamed.tokens)


def test_non_divisible_global_batch_is_a_one_line_error(tok):
    with pytest.raises(UserError) as excinfo:
        TokenBatches(DataConfig(), tok, seq_len=8, global_batch_size=5, process_count=2)
    assert_one_line_user_error(excinfo, "global batch size 5", "multiple of 2")


def test_tokenizer_larger_than_the_model_vocab_is_an_error(tok):
    with pytest.raises(UserError) as excinfo:
        TokenBatches(DataConfig(), tok, seq_len=8, global_batch_size=2, vocab_size=1000)
    assert_one_line_user_error(excinfo, "vocab size is 1000")


# ---------------------------------------------------------------- local files


def test_jsonl_with_custom_field_folder_and_glob(tmp_path, tok):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", DOCS[:2], field="content")
    write_jsonl(folder / "b.jsonl", DOCS[2:], field="content")
    for source in (folder, folder / "*.jsonl"):
        config = DataConfig(source=str(source), text_field="content")
        assert packed_text.load_documents(config, data.Tally())[0] == DOCS
        assert f"{len(DOCS)} docs" in describe(config)
    with pytest.raises(UserError) as excinfo:
        # text_field "text" is not there
        packed_text.load_documents(DataConfig(source=str(folder)), data.Tally())
    assert_one_line_user_error(excinfo, "no column 'text'", "content, id")


def test_an_edited_file_is_tokenized_again(tmp_path, tok):
    config = DataConfig(source=str(write_jsonl(tmp_path / "d.jsonl", DOCS)))
    before = TokenBatches(config, tok, seq_len=8, global_batch_size=2)
    write_jsonl(tmp_path / "d.jsonl", DOCS[:1])
    after = TokenBatches(config, tok, seq_len=8, global_batch_size=2)
    assert (before.num_documents, after.num_documents) == (len(DOCS), 1)


def test_txt_files_are_one_document_each(tmp_path, tok):
    for i, doc in enumerate(["line one\nline two\n\nafter a blank line\n", "second file"]):
        (tmp_path / f"{i}.txt").write_text(doc)
    glob_source = DataConfig(source=str(tmp_path / "*.txt"))
    texts, _ = packed_text.load_documents(glob_source, data.Tally())
    assert len(texts) == 2 and "after a blank line" in texts[0] and texts[1] == "second file"
    batches = TokenBatches(DataConfig(source=str(tmp_path)), tok, seq_len=8, global_batch_size=2)
    assert batches.num_documents == 2
    assert (batches.corpus.tokens == tok.eos_token_id).sum() == 2


def test_parquet_loads(tmp_path, tok):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": DOCS, "n": list(range(len(DOCS)))}), tmp_path / "d.parquet")
    config = DataConfig(source=str(tmp_path / "d.parquet"))
    assert packed_text.load_documents(config, data.Tally())[0] == DOCS
    batch = TokenBatches(config, tok, seq_len=32, global_batch_size=2).batch(0)
    assert batch["input_ids"].shape == (2, 32)


def test_missing_path_is_a_one_line_error_naming_it(tmp_path, tok):
    for source in (tmp_path / "nope.jsonl", tmp_path / "nothing_here" / "*.txt"):
        with pytest.raises(UserError) as excinfo:
            TokenBatches(DataConfig(source=str(source)), tok, seq_len=8, global_batch_size=2)
        assert_one_line_user_error(excinfo, str(source))


# ---------------------------------------------------------------- synthetic


def test_synthetic_batches_shapes_ranges_and_determinism():
    config = DataConfig(source="synthetic", shuffle_seed=3)
    run = TokenBatches(config, None, seq_len=32, global_batch_size=4, vocab_size=50)
    batch = run.batch(2)
    assert batch["input_ids"].shape == (4, 32) and batch["input_ids"].dtype == torch.long
    assert 0 <= batch["input_ids"].min() and batch["input_ids"].max() < 50
    assert torch.equal(batch["labels"], batch["input_ids"])
    assert torch.equal(batch["input_ids"], run.batch(2)["input_ids"])
    assert not torch.equal(batch["input_ids"], run.batch(3)["input_ids"])
    assert len(np.unique(batch["input_ids"].numpy())) > 40  # spread over the vocab
    host1 = TokenBatches(config, None, 32, 4, process_index=1, process_count=2, vocab_size=50)
    assert torch.equal(host1.batch(2)["input_ids"], batch["input_ids"][2:])
    assert run.num_sequences is None and "synthetic" in describe(config, run)
    with pytest.raises(UserError, match="vocab size"):
        TokenBatches(config, None, seq_len=8, global_batch_size=2)


# ---------------------------------------------------------------- the token cache


def test_a_source_is_tokenized_once_then_memory_mapped(tok, tmp_path, monkeypatch):
    source = tmp_path / "corpus.txt"
    source.write_text("one two three\n\nfour five\n")
    config = DataConfig(source=str(source), cache_dir=str(tmp_path / "cache"))
    packed_text._CORPORA.clear()
    first = TokenBatches(config, tok, seq_len=4, global_batch_size=2)
    cached = list((tmp_path / "cache" / "tokens").iterdir())
    assert sorted(p.suffix for p in cached) == [".json", ".npy"]

    packed_text._CORPORA.clear()
    monkeypatch.setattr(packed_text, "_tokenize", lambda *a: pytest.fail("tokenized again"))
    again = TokenBatches(config, tok, seq_len=4, global_batch_size=2)
    assert isinstance(again.corpus.tokens, np.memmap)
    assert np.array_equal(again.corpus.tokens, first.corpus.tokens)
    assert all(np.array_equal(again.batch(i)["input_ids"], first.batch(i)["input_ids"])
               for i in range(3))


def test_a_changed_source_or_tokenizer_is_tokenized_afresh(tok, tmp_path):
    source = tmp_path / "corpus.txt"
    source.write_text("one two three\n")
    config = DataConfig(source=str(source), cache_dir=str(tmp_path / "cache"))
    packed_text._CORPORA.clear()
    before = TokenBatches(config, tok, seq_len=4, global_batch_size=1).corpus
    source.write_text("one two three four five six seven\n")
    os.utime(source, ns=(1, 1))  # a different mtime even within the clock's resolution
    packed_text._CORPORA.clear()
    after = TokenBatches(config, tok, seq_len=4, global_batch_size=1).corpus
    assert len(after.tokens) > len(before.tokens)
    assert len(list((tmp_path / "cache" / "tokens").glob("*.npy"))) == 2
