"""tools/options.py's PathArg, the one check of every path a command takes, on what the
damage matrix cannot make here: a path this user may not read or write (root may), a bucket
whose host does not resolve or does, and the values that are names, not paths."""

import os

import click
import pytest
from click.testing import CliRunner

from tools import options
from tools.options import PathArg, hub_name


def answer(kind, reads, value, **extra):
    """(exit code, output) of a one-option command taking `value` as a PathArg."""

    @click.command()
    @click.option("--path", type=PathArg(kind, reads=reads, what="a thing", **extra))
    def command(path):
        click.echo(f"got {path}")

    result = CliRunner().invoke(command, ["--path", str(value)])
    return result.exit_code, result.output


def test_a_path_this_user_may_not_read_or_write_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "config.yaml").write_text("steps: 1\n")
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    code, said = answer("file", True, tmp_path / "config.yaml")
    assert code == 2 and "config.yaml: cannot be read (permission denied)" in said
    code, said = answer("folder", False, tmp_path / "new" / "out")
    assert code == 2 and f"cannot write {tmp_path} (permission denied)" in said


def test_a_bucket_is_taken_once_its_host_resolves(monkeypatch):
    def unresolved(host, port):
        raise OSError(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(options.socket, "getaddrinfo", unresolved)
    code, said = answer("folder", True, "gs://b/run", urls=True)
    assert code == 2 and "cannot reach storage.googleapis.com (Temporary failure" in said
    monkeypatch.setattr(options.socket, "getaddrinfo", lambda host, port: [("resolved",)])
    assert answer("folder", True, "gs://b/run", urls=True) == (0, "got gs://b/run\n")
    code, said = answer("folder", True, "s3://b/run", urls=True)
    assert code == 2 and "not s3:// URLs" in said
    code, said = answer("folder", False, "gs://b/out")
    assert code == 2 and "this writes a local folder; give a local path" in said


def test_names_pass_unchecked_and_paths_do_not(tmp_path):
    assert answer("folder", True, "org/model", name=hub_name) == (0, "got org/model\n")
    code, said = answer("folder", True, tmp_path / "org" / "model", name=hub_name)
    assert code == 2 and "no such folder; give a thing" in said


@pytest.mark.parametrize("given, written", [("plots", "plots/goodput.png"),
                                            ("new/g.png", "new/g.png")])
def test_a_written_file_in_a_folder_gets_its_default_name(tmp_path, given, written):
    (tmp_path / "plots").mkdir()
    code, said = answer("file", False, tmp_path / given, suffix=".png",
                        file_in_folder="goodput.png")
    assert (code, said) == (0, f"got {tmp_path / written}\n")
