"""No document is dropped in silence: what a text source leaves out is counted per reason,
reported in one line, and refused past data.max_skipped_share."""

import json

import pytest

from core.config import ConfigError, load
from core.data import Tally, load_tokenizer
from core.errors import UserError
from zoo.data import packed_text
from zoo.data.packed_text import DataConfig, TokenBatches
from zoo.tasks.causal_lm import LMTrainConfig


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf"))
    monkeypatch.setattr(packed_text, "_CORPORA", {})


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("default")


def half_jsonl(path):
    """200 rows: 100 with text, 60 without the field, 40 whose text is a number."""
    rows = [{"text": f"document {i}"} if i % 2 == 0 else
            {"body": "x"} if i % 10 in (1, 3, 5) else {"text": i} for i in range(200)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def batches(tok, tmp_path, source, **data):
    config = DataConfig(source=source, cache_dir=str(tmp_path / "cache"), **data)
    return TokenBatches(config, tok, seq_len=8, global_batch_size=2)


def test_too_many_skipped_documents_are_refused_naming_each_reason(tmp_path, tok, capsys):
    source = half_jsonl(tmp_path / "half.jsonl")
    with pytest.raises(UserError) as excinfo:
        batches(tok, tmp_path, source)
    message = str(excinfo.value)
    assert "\n" not in message
    assert (f"data.source {source}: skipped 100 of 200 documents (50%), more than "
            "data.max_skipped_share=0.1: 60 without field 'text', 40 whose 'text' is not a "
            "string but int;") in message
    assert capsys.readouterr().err == ""  # the refusal is the one line


def test_skipped_documents_under_the_limit_are_reported_once_in_one_line(tmp_path, tok, capsys):
    source = half_jsonl(tmp_path / "half.jsonl")
    run = batches(tok, tmp_path, source, max_skipped_share=0.5)
    assert run.num_documents == 100
    assert capsys.readouterr().err == ("data: 200 documents in 1 file; skipped 100: 60 without "
                                       "field 'text', 40 whose 'text' is not a string but int\n")
    packed_text._CORPORA.clear()  # a later start reads the token cache: the same report
    batches(tok, tmp_path, source, max_skipped_share=0.5)
    assert "skipped 100: 60 without field 'text'" in capsys.readouterr().err
    packed_text._CORPORA.clear()  # and the same refusal under a lower limit
    with pytest.raises(UserError, match="more than data.max_skipped_share=0.1"):
        batches(tok, tmp_path, source)


def test_a_clean_source_reports_nothing(tmp_path, tok, capsys):
    (tmp_path / "a.txt").write_text("hello world")
    batches(tok, tmp_path, str(tmp_path / "a.txt"))
    assert capsys.readouterr().err == ""


def test_files_of_unsupported_type_in_a_folder_are_counted(tmp_path, tok, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.txt").write_text(f"text file {i}")
    (folder / "notes.csv").write_text("a,b\n")
    (folder / "more.csv").write_text("c,d\n")
    with pytest.raises(UserError) as excinfo:
        batches(tok, tmp_path, str(folder))
    assert "skipped 2 of 5 documents (40%)" in str(excinfo.value)
    assert "2 files of unsupported type .csv" in str(excinfo.value)
    batches(tok, tmp_path, str(folder), max_skipped_share=0.4)
    assert capsys.readouterr().err == ("data: 5 documents in 5 files; skipped 2: 2 files of "
                                       "unsupported type .csv\n")


def test_a_parquet_column_of_integers_says_so(tmp_path, tok):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [1, 2, 3]}), tmp_path / "ints.parquet")
    for limit in (0.1, 1.0):  # refused for the share, or for having no document at all
        with pytest.raises(UserError) as excinfo:
            batches(tok, tmp_path, str(tmp_path / "ints.parquet"), max_skipped_share=limit)
        assert "3 whose 'text' is not a string but int" in str(excinfo.value)


def test_a_stream_is_tallied_as_it_is_read(tmp_path):
    config = DataConfig(source=half_jsonl(tmp_path / "half.jsonl"), streaming=True)
    tally = Tally()
    texts, _ = packed_text.load_documents(config, tally)
    assert len(list(texts)) == 100
    assert (tally.files, tally.kept, tally.skipped) == (1, 100, 100)
    assert tally.reasons == {"without field 'text'": 60, "whose 'text' is not a string but int": 40}


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan"])
def test_max_skipped_share_is_checked_with_the_config(value):
    with pytest.raises(ConfigError, match=f"data.max_skipped_share must be in \\[0, 1\\], "
                                          f"not {float(value)}"):
        load(LMTrainConfig, overrides=[f"data.max_skipped_share={value}"])
