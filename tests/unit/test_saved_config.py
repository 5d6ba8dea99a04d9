"""A saved run config ends with the line zoo writes last, so one cut short between two keys
(still valid YAML, a shorter config) is refused as damaged instead of read with defaults;
a config the user writes (--config) needs no such line."""

import pytest

from core.config import SAVED_CONFIG_END, load, parse_saved, write_resolved
from core.json_file import DamagedFile
from core.run_config import TrainConfig


def test_a_saved_config_ends_with_the_closing_line_and_reads_back_whole(tmp_path):
    cfg = load(TrainConfig, overrides=["seed=7", "steps=9"])
    path = write_resolved(cfg, tmp_path / "run")
    text = path.read_text()
    assert text.endswith(f"\n{SAVED_CONFIG_END}\n")
    saved = parse_saved(text, str(path))
    assert (saved["seed"], saved["steps"]) == (7, 9)
    assert load(TrainConfig, files=[(str(path), saved)]) == cfg


@pytest.mark.parametrize("cut", ["between_keys", "in_the_closing_line", "empty"])
def test_a_saved_config_cut_short_is_damaged_in_one_line(tmp_path, cut):
    text = write_resolved(load(TrainConfig), tmp_path / "run").read_text()
    lines = text.splitlines(keepends=True)
    keys = [i for i, line in enumerate(lines) if i and line[:1].isalpha()]
    cut_text = {"between_keys": "".join(lines[:keys[len(keys) // 2]]),
                "in_the_closing_line": text[:-5], "empty": ""}[cut]
    with pytest.raises(DamagedFile) as excinfo:
        parse_saved(cut_text, "RUN/config.yaml")
    message = str(excinfo.value)
    assert message.startswith("RUN/config.yaml is damaged (cut short: it does not end with "
                              f"the line zoo writes last, '{SAVED_CONFIG_END}')")
    assert "restore it from a copy" in message and "add that line" in message
    assert "\n" not in message


def test_a_config_the_user_writes_needs_no_closing_line(tmp_path):
    (tmp_path / "mine.yaml").write_text("seed: 3\n")
    assert load(TrainConfig, files=[tmp_path / "mine.yaml"]).seed == 3
