"""Damaged SFT and DPO data and chat templates, as a new user hands them to `zoo train` and
`zoo generate`: a non-UTF-8 byte, a row of the other format inside a file, a broken chat
template. Each is one line on stderr naming what is wrong and where (the file, row and byte;
the template's tokenizer folder), a non-zero exit, no traceback, no model built and no file
changed; forks of one imported CLI, as tests/e2e/test_bad_inputs.py runs its cases.
({d} is a scratch folder holding the files below.)"""

import json
import shutil

import pytest

from core.data import DEFAULT_TOKENIZER
from tests.support.runs import forked_zoo, saved_config, snapshot, write_scratch

CHAT_ROW = json.dumps({"messages": [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "hello"}]}) + "\n"
PAIR_ROW = json.dumps({"prompt": "Say hi.", "chosen": " hi", "rejected": " no"}) + "\n"
FILES = {  # bytes: some are not UTF-8 on purpose
    "latin1_sft.jsonl": CHAT_ROW.encode() + '{"prompt": "caf\xe9", "completion": "x"}\n'.encode(
        "latin-1"),
    "latin1_dpo.jsonl": PAIR_ROW.encode() * 2 + b'{"prompt": "\xff", "chosen": "a", '
                                                b'"rejected": "b"}\n',
    "latin1_sft.json": CHAT_ROW.encode() + CHAT_ROW.replace("hi", "caf\xe9").encode("latin-1"),
    "mixed_dpo.jsonl": (json.dumps({"prompt": [{"role": "user", "content": "hi"}],
                                    "chosen": [{"role": "assistant", "content": "a"}],
                                    "rejected": [{"role": "assistant", "content": "b"}]})
                        + "\n" + PAIR_ROW).encode(),
    "mixed_sft.jsonl": (CHAT_ROW + json.dumps({"prompt": "Q", "completion": "A"}) + "\n"
                        ).encode(),
    "mixed_pc.jsonl": (json.dumps({"prompt": "Q", "completion": "A"}) + "\n"
                       + json.dumps({"text": "a document"}) + "\n").encode(),
    "chat_sft.jsonl": CHAT_ROW.encode(),
    # a starting point for task=dpo: a run whose checkpoint is whole (its manifest lists
    # nothing), refused for its data before its weights are read
    "start/config.yaml": saved_config("model_name: llama-tiny\n").encode(),
    "start/checkpoints/step-00000001/manifest.json": b"{}",
}
BROKEN_TEMPLATE = "{% for message in messages %}{{ message['content'] }"  # never closed

CASES = [
    (["train", "llama-tiny", "task=sft", "data.source={d}/latin1_sft.jsonl"],
     "latin1_sft.jsonl row 2: byte 108 (0xe9) is not UTF-8"),
    (["train", "llama-tiny", "task=sft", "data.source={d}/latin1_sft.json"],
     "latin1_sft.json row 2: byte 0xe9 in a string is not UTF-8"),
    (["train", "--init-from", "{d}/start", "task=dpo", "data.source={d}/latin1_dpo.jsonl"],
     "latin1_dpo.jsonl row 3: byte 128 (0xff) is not UTF-8"),
    (["train", "llama-tiny", "task=sft", "data.source={d}/mixed_sft.jsonl"],
     "mixed_sft.jsonl row 2 has keys 'prompt', 'completion', not 'messages' like the file's "
     "chat rows: its format differs from the file's"),
    (["train", "--init-from", "{d}/start", "task=dpo", "data.source={d}/mixed_dpo.jsonl"],
     "mixed_dpo.jsonl row 2: 'chosen' and 'rejected' each holds a string, not a list of "
     "messages as in the file's first row: its format differs from the file's"),
    (["train", "llama-tiny", "task=sft", "data.source={d}/mixed_pc.jsonl"],
     "mixed_pc.jsonl row 2 has keys 'text', not 'prompt' and 'completion' like the "
     "file's prompt/completion rows: its format differs from the file's"),
    (["train", "llama-tiny", "task=sft", "data.source={d}/chat_sft.jsonl",
      "data.tokenizer={d}/broken_template"],
     "the chat template of tokenizer {d}/broken_template (data.tokenizer: its "
     "tokenizer_config.json 'chat_template' or chat_template.jinja) is broken"),
]


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """Every case run once; the scratch folder's files before and after all of them."""
    scratch = tmp_path_factory.mktemp("scratch")
    write_scratch(scratch, FILES)
    broken = scratch / "broken_template"
    shutil.copytree(DEFAULT_TOKENIZER, broken)
    config = json.loads((broken / "tokenizer_config.json").read_text())
    (broken / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": BROKEN_TEMPLATE}))
    before = snapshot(scratch)
    commands = [[a.format(d=scratch) for a in args] + ["--out", str(scratch / "train-out")]
                for args, _ in CASES]
    results = forked_zoo(commands)
    return {"results": results, "before": before, "after": snapshot(scratch), "scratch": scratch}


@pytest.mark.parametrize("case", range(len(CASES)), ids=[" ".join(a) for a, _ in CASES])
def test_damaged_chat_data_is_one_line_naming_where(answers, case):
    result = answers["results"][case]
    message = CASES[case][1].format(d=answers["scratch"])
    lines = result["stderr"].strip().splitlines()
    assert result["returncode"] != 0
    assert len(lines) == 1 and message in lines[0], result["stderr"][-2000:]
    assert "Traceback" not in result["stderr"] + result["stdout"]
    assert "row" not in lines[0] or "template" not in lines[0]  # a template is not a row's fault
    assert result["modules_built"] == 0, f"{result['modules_built']} torch modules built"


def test_no_damaged_input_changed_or_wrote_a_file(answers):
    assert answers["after"] == answers["before"]
    assert not (answers["scratch"] / "train-out").exists()
