"""Every numeric option of every command is checked, before any work, against a range that
`--help` shows; a value outside it is one line. Suites are checked as they are read, and
`zoo generate` samples as `zoo train`'s end-of-run sample does."""

import inspect

import click
import pytest
from click.testing import CliRunner

from benchmarks.suite import load_suite
from core.errors import UserError
from tools.cli import cli


def options(group, path=()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from options(command, (*path, name))
        else:
            for param in command.params:
                yield (*path, name, param.name), param


def test_every_numeric_option_has_a_range_shown_in_help():
    numbers = (click.types.IntParamType, click.types.FloatParamType)
    unranged = {key for key, param in options(cli) if isinstance(param.type, numbers)
                and not isinstance(param.type, click.IntRange | click.FloatRange)}
    assert unranged == set()
    help_text = CliRunner().invoke(cli, ["eval", "--help"]).output
    assert "--limit INTEGER RANGE" in help_text and "x>=1" in help_text


@pytest.mark.parametrize("args, message", [
    (["eval", "run", "--limit", "0"], "Invalid value for '--limit': 0 is not in the range x>=1."),
    (["eval", "run", "--batch-size", "-3"], "'--batch-size': -3 is not in the range x>=1."),
    (["eval", "run", "--num-fewshot", "-1"], "'--num-fewshot': -1 is not in the range x>=0."),
    (["bench", "--steps", "0"], "'--steps': 0 is not in the range x>=1."),
    (["bench", "--tolerance", "nan"], "'--tolerance': nan is not a finite number."),
    (["plan", "llama-tiny", "--tpu", "v4-8", "--target-mfu", "0"], "not in the range 0<x<=1."),
    (["generate", "run", "--prompt", "hi", "--temperature", "inf"], "inf is not a finite"),
    (["train", "llama-tiny", "--steps", "0"], "'--steps': 0 is not in the range x>=1."),
])
def test_an_option_out_of_range_is_one_line(args, message):
    result = CliRunner().invoke(cli, args, prog_name="zoo")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: ")
    assert message in lines[0] and lines[0].endswith(f"(see zoo {args[0]} --help)")


def test_generate_samples_as_the_end_of_run_sample_does():
    """`zoo train`'s sample calls generate() with its defaults; so does `zoo generate`."""
    from zoo.app.generate import generate

    sampling = ("temperature", "top_k", "seed")
    library = {p.name: p.default for p in inspect.signature(generate).parameters.values()}
    command = {p.name: p.default for p in cli.commands["generate"].params}
    assert {k: command[k] for k in sampling} == {k: library[k] for k in sampling}
    assert library["temperature"] > 0


@pytest.mark.parametrize("text, message", [
    ("", "has no entries"),
    ("[]\n", "has no entries"),
    ("- name: a\n", "entry 1 (a) needs a `model:`, e.g. model: llama-tiny"),
    ("- {name: a, model: llama-tiny}\n- model: llama-tiny\n", "entry 2 (unnamed) needs a `name:`"),
    ("- {name: a, model: llama-tiny, global_batch_size: 0}\n",
     "entry 1 (a): global_batch_size must be a whole number >= 1, not 0"),
    ("- {name: a, model: llama-tiny, seq_len: x}\n", "seq_len must be a whole number >= 1"),
    ("- {name: a, model: llama-tiny, overrides: steps=3}\n", "overrides must be a list"),
])
def test_a_bad_suite_is_refused_naming_the_file_and_entry(tmp_path, text, message):
    suite = tmp_path / "suite.yaml"
    suite.write_text(text)
    with pytest.raises(UserError, match=str(suite)) as error:
        load_suite(str(suite))
    assert message in str(error.value)


def test_lm_evals_git_hash_says_nothing_outside_a_checkout(tmp_path, monkeypatch, capfd):
    from eval.evaluate import _git_commit_hash

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert _git_commit_hash() is None
    assert capfd.readouterr().err == ""
