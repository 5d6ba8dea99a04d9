"""The damage matrix: every `zoo` command (found from the click CLI itself, subgroups
included) x every path it takes (its `PathArg` parameters, tools/options.py) x every kind of
damage a path can have: missing, under a file, a file where a folder is expected and the
reverse, empty, cut short, garbage bytes, valid JSON of the wrong type, unreadable, a loop of
symbolic links, a bucket URL with no network; and for a folder holding a run or a Hugging
Face model, each file zoo reads inside it damaged the same ways.

Each case: a non-zero exit, one "Error:" line, no traceback, no model built on the way (a
refusal before any work: what "within seconds" means on a machine however busy; a bucket
URL with no network, whose wait is not work, within OFFLINE_SECONDS), and nothing created
or removed outside the command's own output. A new command or path is tried with
no edit here; a parameter whose name or help says "path" but whose type is not a PathArg
fails `test_every_path_parameter_is_declared`. Each command is a fork of one process that
has imported the CLI (tests/support/forked_cli.py); the valid inputs are one run trained
for a step and a tiny Hugging Face folder written here."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest

from tests.support.paths import ROOT
from tests.support.runs import forked_zoo, zoo
from tools.cli import cli
from tools.options import PathArg

OFFLINE_SECONDS = 30  # the DNS wait a URL's refusal allows (it was 51 s), with room for load
ROOT_USER = os.geteuid() == 0  # root reads and writes a chmod-000 path: no such damage
OFFLINE_URL = "gs://zoo-damage-matrix/run"  # this machine has no network
STEP = "checkpoints/step-00000001"
# the files zoo reads in a run folder and in a Hugging Face folder, by command and parameter
RUN_FILES = ("config.yaml", f"{STEP}/manifest.json", f"{STEP}/.metadata",
             f"{STEP}/__0_0.distcp", f"{STEP}/meta.json", f"{STEP}/trainer.pt")
HF_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")
CONTENT = {  # (command, parameter) -> {kind of folder: the files inside it the command reads}
    ("train", "out"): {"run": (*RUN_FILES, "checkpoints/owner.json", "run-id", "goodput.json")},
    ("train", "init_from"): {"run": RUN_FILES, "hf": HF_FILES},
    ("generate", "run_or_checkpoint"): {"run": RUN_FILES},
    ("export", "checkpoint"): {"run": RUN_FILES},
    ("eval", "checkpoint"): {"run": ("config.yaml",), "hf": HF_FILES},
    ("goodput", "run"): {"run": ("goodput.json",)},  # config.yaml: only when that is missing
}
# each command's other arguments, valid, chosen so that no case trains or scores for real:
# "@" is the damaged path, {run}/{hf}/{out} a valid run, HF folder and fresh output folder
BASES = {
    ("train", "out"): ["train", "llama-tiny", "--steps", "1", "--out", "@"],
    ("train", "init_from"): ["train", "--init-from", "@", "--steps", "1", "--out", "{out}",
                             "mesh.tensor=3"],
    ("train", "config_files"): ["train", "llama-tiny", "--config", "@", "--out", "{out}",
                                "mesh.tensor=3"],
    ("generate", "run_or_checkpoint"): ["generate", "@", "--prompt", "hi",
                                        "--max-new-tokens", "1"],
    ("generate", "prompts_file"): ["generate", "{run}", "--prompts", "@",
                                   "--max-new-tokens", "1"],
    ("export", "checkpoint"): ["export", "@", "{out}"],
    ("export", "out"): ["export", "{run}", "@"],
    ("eval", "checkpoint"): ["eval", "@", "--tasks", "arc_easy_sample", "--limit", "1",
                             "--out", "{out}"],
    ("eval", "tasks"): ["eval", "{run}", "--tasks", "@", "--limit", "1", "--out", "{out}"],
    ("eval", "data"): ["eval", "{run}", "--data", "@", "--out", "{out}"],
    ("eval", "out"): ["eval", "{run}", "--tasks", "arc_easy_sample", "--limit", "1",
                      "--out", "@"],
    ("bench", "suite"): ["bench", "--suite", "@", "--models", "nosuch", "--out", "{out}"],
    ("bench", "baseline"): ["bench", "--baseline", "@", "--models", "llama-tiny", "--out",
                            "{out}"],
    ("bench", "out"): ["bench", "--out", "@", "--models", "nosuch"],
    ("bench", "profile_dir"): ["bench", "--profile", "@", "--models", "nosuch", "--out",
                               "{out}"],
    ("goodput", "run"): ["goodput", "@", "--plot", "{out}/goodput.png"],
    ("goodput", "plot_path"): ["goodput", "{run}", "--plot", "@"],
    ("new-model", "parent"): ["new-model", "matrixfamily", "--dir", "@"],
}
# strings whose name or help reads like a path but which are not local paths
NOT_PATHS = {
    ("tpu", "create", "data_disk"): "a GCE persistent disk (projects/P/zones/Z/disks/D)",
    ("tpu", "babysit", "data_disk"): "a GCE persistent disk (projects/P/zones/Z/disks/D)",
}
PATH_NAME = re.compile(r"(^|_)(path|dir|folder|file|files|out|run|checkpoint|plot|suite|"
                       r"baseline|profile|config|init|disk|data|tasks)($|_)")
PATH_HELP = re.compile(r"\b(path|paths|dir|directory|folder|folders|file|files|yaml|json|"
                       r"png|checkpoints?)\b", re.IGNORECASE)



def commands(group: click.Group = cli, prefix: tuple = ()):
    """(command path, command) for every command of the CLI, subgroups included."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def path_params():
    return [(path, param) for path, command in commands() for param in command.params
            if isinstance(param.type, PathArg)]


def test_every_path_parameter_is_declared():
    """A string parameter named or described as a path is a PathArg (or in NOT_PATHS): the
    matrix below then tries it."""
    undeclared, seen = [], set()
    for path, command in commands():
        for param in command.params:
            key = (*path, param.name)
            if isinstance(param.type, PathArg) or key in NOT_PATHS:
                seen.add(key)
                continue
            if not isinstance(param.type, (click.types.StringParamType, click.Path)):
                continue
            if PATH_NAME.search(param.name) or PATH_HELP.search(getattr(param, "help", None)
                                                                 or ""):
                undeclared.append(" ".join(key))
    assert undeclared == [], f"path parameters that are plain strings: {undeclared}"
    assert set(NOT_PATHS) <= seen, "NOT_PATHS names a parameter the CLI no longer has"


# --- the damages: each makes the thing at `target` (never writing through a hard link) ---

def _replace(target: Path, data: bytes) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def missing(target: Path, valid: bytes | None) -> None:
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()


def under_file(target: Path, valid: bytes | None) -> Path:
    _replace(target, b"a file\n")
    return target / "inside"


def file_for_folder(target: Path, valid: bytes | None) -> None:
    _replace(target, valid if valid is not None else b"model_name: llama-tiny\n")


def folder_for_file(target: Path, valid: bytes | None) -> None:
    missing(target, valid)
    target.mkdir(parents=True)
    (target / "inside.txt").write_text("a file in a folder\n")


def empty(target: Path, valid: bytes | None) -> None:
    if valid is None:  # a folder
        missing(target, valid)
        target.mkdir(parents=True)
    else:
        _replace(target, b"")


def cut_short(target: Path, valid: bytes) -> None:
    _replace(target, valid[: len(valid) // 2])


def garbage(target: Path, valid: bytes) -> None:
    _replace(target, bytes(range(256))[::-1] * 8)


def wrong_json(target: Path, valid: bytes) -> None:
    _replace(target, b"42\n")


def unreadable(target: Path, valid: bytes | None) -> None:
    if target.is_file():  # its own copy: the valid run's files are linked, not copied
        _replace(target, target.read_bytes())
    target.chmod(0)


def symlink_loop(target: Path, valid: bytes | None) -> None:
    missing(target, valid)
    target.symlink_to(target.name)


FILE_DAMAGE = (missing, under_file, folder_for_file, empty, cut_short, garbage, wrong_json,
               unreadable, symlink_loop)
FOLDER_DAMAGE = (missing, under_file, file_for_folder, empty, unreadable, symlink_loop)
INNER_DAMAGE = (missing, folder_for_file, empty, cut_short, garbage, wrong_json, unreadable,
                symlink_loop)
OUT_FOLDER_DAMAGE = (under_file, file_for_folder, unreadable, symlink_loop)
OUT_FILE_DAMAGE = (under_file, unreadable, symlink_loop)

@dataclass
class Case:
    id: str
    command: list[str]
    damage: object  # which damage, for the root skip
    out: list[str] = field(default_factory=list)  # what the command may write
    inner: str | None = None  # the damaged file inside a folder, which the line must name


def base_command(path: tuple, param: click.Parameter) -> list[str]:
    """The command line trying `param` (its path "@"): BASES, or, for a command new since,
    its required arguments filled in and the path given."""
    if (*path, param.name) in BASES:
        return list(BASES[(*path, param.name)])
    command = next(c for p, c in commands() if p == path)
    line = [*path]
    for other in command.params:
        if isinstance(other, click.Argument) and other.required and other is not param:
            line.append("x")
        elif other is param and isinstance(param, click.Argument):
            line.append("@")
    if isinstance(param, click.Option):
        line += [param.opts[0], "@"]
    return line


def valid_bytes(name: str, valid_file: Path | None) -> bytes | None:
    return valid_file.read_bytes() if valid_file is not None else None


def file_example(path: tuple, param: click.Parameter) -> bytes:
    """The valid contents of an input file the command reads (a config, a suite, a
    results.json)."""
    if param.name == "suite":
        return b"- name: tiny\n  model: llama-tiny\n"
    if param.name == "baseline":
        return json.dumps({"records": []}).encode()
    if param.name == "prompts_file":
        return b'"hi"\n'
    return b"steps: 1\n"


def build_cases(scratch: Path, run: Path, hf: Path) -> list[Case]:
    cases = []

    def case(name: str, line: list[str], damage, damaged: Path | str, out: list[str],
             inner: str | None = None):
        folder = scratch / name
        line = [a.replace("@", str(damaged)).replace("{run}", str(run)).replace(
            "{hf}", str(hf)).replace("{out}", str(folder / "out")) for a in line]
        cases.append(Case(name, line, damage, [str(folder / "out"), *out], inner))

    for path, param in path_params():
        kind, line = param.type, base_command(path, param)
        name = "-".join((*path, param.name))
        if kind.urls or kind.reads:
            case(f"{name}-offline_url", line, None, OFFLINE_URL, [])
        if kind.reads:
            damages = FILE_DAMAGE if kind.kind == "file" else FOLDER_DAMAGE
            for damage in damages:
                target = scratch / f"{name}-{damage.__name__}" / "target"
                target.parent.mkdir(parents=True)
                valid = file_example(path, param) if kind.kind == "file" else None
                if valid is not None:
                    target.write_bytes(valid)
                else:
                    target.mkdir()
                damaged = damage(target, valid) or target
                case(f"{name}-{damage.__name__}", line, damage, damaged, [])
            for content, files in CONTENT.get((*path, param.name), {}).items():
                source = run if content == "run" else hf
                for inner in files:
                    for damage in INNER_DAMAGE:
                        if damage is wrong_json and not inner.endswith((".json", ".yaml")):
                            continue
                        label = f"{name}-{content}-{inner.rsplit('/', 1)[-1]}-{damage.__name__}"
                        copy = scratch / label / content
                        copy.parent.mkdir(parents=True)
                        shutil.copytree(source, copy, copy_function=os.link)
                        valid = (source / inner).read_bytes()
                        damage(copy / inner, valid)
                        case(label, line, damage, copy, [str(copy / "hf")],
                             inner.rsplit("/", 1)[-1])
        else:
            damages = OUT_FILE_DAMAGE if kind.kind == "file" else OUT_FOLDER_DAMAGE
            for damage in damages:
                target = scratch / f"{name}-{damage.__name__}" / "target"
                target.parent.mkdir(parents=True)
                if damage is unreadable:
                    target.mkdir()
                damaged = damage(target, None) or target
                case(f"{name}-{damage.__name__}", line, damage, damaged, [])
            if kind.suffix:
                wrong = scratch / f"{name}-wrong_suffix" / f"target{kind.suffix}.txt"
                wrong.parent.mkdir(parents=True)
                case(f"{name}-wrong_suffix", line, None, wrong, [])
    return cases


def tiny_hf_folder(folder: Path) -> None:
    """A Llama of one small layer in Hugging Face's layout, with zoo's shipped tokenizer."""
    import numpy as np
    from safetensors.numpy import save_file

    hidden, inner, vocab, heads, kv, head_dim = 64, 128, 4096, 2, 1, 32
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": hidden, "intermediate_size": inner, "num_hidden_layers": 1,
              "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
              "vocab_size": vocab, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
              "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
              "tie_word_embeddings": False, "torch_dtype": "float32"}
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,),
              "lm_head.weight": (vocab, hidden),
              "model.layers.0.input_layernorm.weight": (hidden,),
              "model.layers.0.post_attention_layernorm.weight": (hidden,),
              "model.layers.0.self_attn.q_proj.weight": (heads * head_dim, hidden),
              "model.layers.0.self_attn.k_proj.weight": (kv * head_dim, hidden),
              "model.layers.0.self_attn.v_proj.weight": (kv * head_dim, hidden),
              "model.layers.0.self_attn.o_proj.weight": (hidden, heads * head_dim),
              "model.layers.0.mlp.gate_proj.weight": (inner, hidden),
              "model.layers.0.mlp.up_proj.weight": (inner, hidden),
              "model.layers.0.mlp.down_proj.weight": (hidden, inner)}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    rng = np.random.default_rng(0)
    save_file({name: (rng.standard_normal(shape) * 0.02).astype(np.float32)
               for name, shape in shapes.items()}, str(folder / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ROOT / "core" / "assets" / "tokenizer" / name, folder / name)


def snapshot(top: Path) -> dict[str, tuple]:
    """Every path under `top` with its kind, size and modification time (links not
    followed)."""
    found = {}
    for directory, folders, files in os.walk(top):
        for name in folders + files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            found[path] = (info.st_mode >> 12, info.st_size, info.st_mtime_ns)
    return found


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """Every case's command, forked; {case id: (case, result)}, and what each case changed."""
    root = tmp_path_factory.mktemp("matrix")
    base, scratch = root / "base", root / "cases"
    trained = zoo("train", "llama-tiny", "--steps", "1", "seq_len=64", "--out", str(base / "run"))
    assert trained.returncode == 0, trained.stderr[-3000:]
    tiny_hf_folder(base / "hf")
    scratch.mkdir()
    cases = [c for c in build_cases(scratch, base / "run", base / "hf")
             if not (ROOT_USER and c.damage is unreadable)]
    before, repo_before = snapshot(root), sorted(os.listdir(ROOT))
    results = forked_zoo([c.command for c in cases])
    after = snapshot(root)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert sorted(os.listdir(ROOT)) == repo_before, "a case wrote into the repository"
    return {c.id: (c, r) for c, r in zip(cases, results)}, changed, root


def case_ids() -> list[str]:
    """The case ids, built in a throwaway folder (the real cases need the trained run)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "base"
        for content in ("run", "hf"):
            for inner in (*RUN_FILES, *HF_FILES, "checkpoints/owner.json", "run-id",
                          "goodput.json"):
                (base / content / inner).parent.mkdir(parents=True, exist_ok=True)
                (base / content / inner).write_text("x")
        (Path(scratch) / "cases").mkdir()
        return [c.id for c in build_cases(Path(scratch) / "cases", base / "run", base / "hf")]


@pytest.mark.parametrize("case_id", case_ids())
def test_damage_gives_one_line(matrix, case_id):
    answers, changed, root = matrix
    if case_id not in answers:
        pytest.skip("root reads and writes a chmod-000 path: no such damage for root")
    case, result = answers[case_id]
    said = result["stderr"] + result["stdout"]
    assert "Traceback" not in said, said[-3000:]
    assert result["returncode"] not in (0, None), said[-3000:]
    errors = [line for line in result["stderr"].splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, said[-3000:]
    assert result["modules_built"] == 0, f"{result['modules_built']} torch modules built"
    if case.id.endswith("-offline_url"):
        assert result["seconds"] < OFFLINE_SECONDS, (result["seconds"], errors)
    if case.inner:  # named, not masked by a later refusal; a file gone may be said absent
        said_here = errors[0].replace(str(root / "cases" / case_id), "CASE")
        absent = case.damage in (missing, folder_for_file, symlink_loop) and re.search(
            r"\bno\b|neither|missing", said_here)
        assert case.inner in said_here or absent, said_here
    folder = str(root / "cases" / case_id)
    ours = [p for p in changed if p.startswith(folder + os.sep)
            and not any(p == o or p.startswith(o + os.sep) for o in case.out)]
    assert ours == [], ours
