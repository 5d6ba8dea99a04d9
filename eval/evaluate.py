"""`zoo eval`: score a training run, checkpoint or Hugging Face folder.

Language models go through lm-eval: tasks are resolved (and Hub datasets checked) before any
model is loaded; `--device xla` scores with the zoo model on the XLA device
(eval/xla_lm.py); cpu/cuda use lm-eval's own `hf` backend (eval/hf_lm.py). Both handle
causal and seq2seq models. Families with
their own evaluation (image classifiers: top-1) provide `evaluate`. A training checkpoint is
exported once to RUN/hf/step-N and reused.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

from core.errors import UserError
from core.hf import TOKENIZER_REMEDY, check_tokenizer, check_weights, read_config
from core.json_file import read_json_object
from core.store.location import local_folder
from core.store.run_folder import WANDB_ID
from core.table import format_table
from eval.export import adapter_base, tokenizer_folder
from eval.tasks_check import resolve_tasks

RESULTS_FILE = "eval_results.json"


def model_folder(checkpoint: str | Path) -> Path:
    """An HF folder (or a PEFT adapter folder) as is; a run or checkpoint folder (a path or
    a URL) through the export cache."""
    if adapter_base(checkpoint) or (
            _hf_folder(checkpoint) and list(Path(checkpoint).glob("*.safetensors"))):
        check_weights(Path(checkpoint))
        return Path(checkpoint)
    from eval.export import cached_export  # start-up

    return cached_export(checkpoint)


def evaluate(checkpoint: str, tasks: str | None, *, num_fewshot: int | None = None,
             limit: int | None = None, batch_size: int = 8, device: str = "cpu",
             out: str | None = None, data: str | None = None,
             chat_template: bool = False) -> tuple[list[tuple], str]:
    """Score the model; returns (task, metric, value, stderr) rows and where the results
    file is (in the run's bucket for a run there). `chat_template`: each prompt goes
    through the model's own chat template (few-shot examples as earlier turns)."""
    if out:
        local_folder(out, "--out")  # before the model is scored, not after
    # a run in a bucket (gs://, file://) is read where it is, exported into its local copy
    path = checkpoint if "://" in checkpoint else Path(checkpoint)
    if isinstance(path, Path) and not path.exists():
        raise UserError(f"{checkpoint} does not exist")
    if not out and isinstance(path, Path) and not os.access(path, os.W_OK):
        raise UserError(f"{path} is read-only, and zoo eval writes its results there; pass "
                        "--out DIR for them")
    family = family_of(path)
    backend = family.task.eval_backend if family else "causal"
    if backend is None:
        if chat_template:
            raise UserError(f"{checkpoint} is scored by its task's own evaluation, not "
                            "lm-eval prompts; drop --chat-template")
        options = {"data": data, "limit": limit, "batch_size": batch_size, "device": device}
        folder = model_folder(path)
        rows, record = family.task.evaluate(path, folder, options)
    else:
        if not tasks:
            raise UserError("--tasks is required for language models, e.g. --tasks "
                            "arc_easy_sample,hellaswag_sample")
        names, manager = resolve_tasks(tasks)
        if device == "xla" and adapter_base(path):
            raise UserError(f"{path} is a LoRA adapter, and --device xla scores zoo's own "
                            "models; score it with --device cpu or cuda, or export the run "
                            "merged (zoo export RUN OUT) and score that")
        folder = model_folder(path)
        tokenizer = Path(tokenizer_folder(folder))  # an adapter's base may be a Hub name
        if tokenizer.is_dir():
            check_tokenizer(tokenizer)
        if tokenizer.is_dir() and not (tokenizer / "tokenizer_config.json").is_file():
            raise UserError(f"{tokenizer} has no tokenizer (a run trained on "
                            "data.source=synthetic has none), and lm-eval scores text; "
                            "evaluate a run trained on text")
        if chat_template and tokenizer.is_dir() and not has_chat_template(tokenizer):
            raise UserError(f"{tokenizer} has no chat template (no chat_template in "
                            "tokenizer_config.json, no chat_template.jinja), and "
                            "--chat-template renders every prompt with it; save the "
                            "tokenizer with one (tokenizer.chat_template = ...; "
                            "tokenizer.save_pretrained(folder)) or drop --chat-template")
        results = _lm_eval(folder, backend, device, batch_size, tasks=names,
                           task_manager=manager, num_fewshot=num_fewshot, limit=limit,
                           log_samples=True, apply_chat_template=chat_template,
                           fewshot_as_multiturn=chat_template)
        rows = metric_rows(results["results"])
        record = {
            "tasks": names, "num_fewshot": num_fewshot, "limit": limit,
            "chat_template": chat_template,
            "results": results["results"], "versions": results.get("versions"),
            "loglikelihoods": per_choice_loglikelihoods(results.get("samples", {})),
            "generations": generations(results.get("samples", {})),
        }
    # scored from the export cache: results go to the run folder, scores to its W&B run
    from zoo.app.saved_run import load_run  # start-up

    run, home = (None, None) if folder == path else load_run(path)
    target = Path(out) if out else (home.local if home else folder)
    target.mkdir(parents=True, exist_ok=True)
    record = {"checkpoint": str(path), "model_folder": str(folder), "device": device, **record}
    # the default place is shared by every eval of this model: a partial score (--limit) is
    # written beside the full one, never over it
    name = RESULTS_FILE if out or limit is None else f"eval_results-limit{limit}.json"
    results_file = target / name
    results_file.write_text(json.dumps(record, indent=1, default=str))
    if home:
        _log_wandb(path, run.config.wandb, home, rows)
        if not out:
            home.push(name)
            return rows, home.path(name)
    return rows, str(results_file)


def _hf_folder(path: str | Path) -> bool:
    """A Hugging Face model folder on this disk (zoo's exports, or any other)."""
    return "://" not in str(path) and (Path(path) / "config.json").is_file()


def has_chat_template(folder: Path) -> bool:
    """Whether transformers gives the folder's tokenizer a chat template: in
    tokenizer_config.json, or in the files transformers 5 saves it to."""
    config = read_json_object(folder / "tokenizer_config.json", TOKENIZER_REMEDY)
    return bool(config.get("chat_template")) or any(
        (folder / name).exists()
        for name in ("chat_template.jinja", "chat_template.json", "additional_chat_templates"))


def family_of(path: str | Path):
    """The zoo family of a run, checkpoint or exported folder; None for other HF folders."""
    from zoo.registry import FAMILIES, family  # start-up

    base = adapter_base(path)
    if base:  # scored as its base model is
        return family_of(base) if _hf_folder(base) else None
    if _hf_folder(path):
        architectures = read_config(str(path)).get("architectures") or []
        for name in FAMILIES:
            if family(name).hf_class in architectures:
                return family(name)
        _check_causal(path, architectures)
        return None
    from zoo.app.saved_run import load_run  # start-up

    return load_run(path)[0].family


def _check_causal(path, architectures: list[str]) -> None:
    """Refuse, before lm-eval loads it, a folder that is no causal language model
    transformers knows (lm-eval scores those, and zoo's own families)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # lm_eval

    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    if not any(name in causal for name in architectures):
        found = ", ".join(architectures) or "no architecture"
        raise UserError(f"{path} holds {found}, not a causal language model transformers "
                        "knows (e.g. LlamaForCausalLM); zoo eval scores those and zoo's runs")


def _lm_eval(folder: Path, backend: str, device: str, batch_size: int, **common) -> dict:
    import datasets  # lm_eval
    import lm_eval  # lm_eval
    import lm_eval.evaluator  # lm_eval
    import transformers  # lm_eval
    from lm_eval.utils import setup_logging  # lm_eval

    # lm-eval's progress on the console, not datasets' bars per split, transformers' over the
    # weights, nor lm-eval's notes and warnings on how it runs (errors stay;
    # LMEVAL_LOG_LEVEL=INFO brings the rest back), nor git's complaint in a folder not a
    # checkout
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    setup_logging(logging.ERROR)
    lm_eval.evaluator.get_git_commit_hash = _git_commit_hash
    if device == "xla":
        from eval.xla_lm import ZooXLALM  # lm_eval

        model = ZooXLALM(pretrained=str(folder), batch_size=batch_size, backend=backend)
        return lm_eval.simple_evaluate(model=model, **common)
    from eval.hf_lm import hf_lm  # lm_eval

    return lm_eval.simple_evaluate(model=hf_lm(folder, backend, device, batch_size), **common)


def _git_commit_hash() -> str | None:
    """lm-eval's get_git_commit_hash (the working directory's commit, recorded in the
    results) with git's stderr captured: outside a checkout, lm-eval's own lets "fatal: not a
    git repository" onto the console of every eval."""
    try:
        found = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True)
    except OSError:  # no git
        return None
    return (found.stdout.strip() or None) if found.returncode == 0 else None


def metric_rows(results: dict) -> list[tuple]:
    rows = []
    for task, metrics in sorted(results.items()):
        for key, value in metrics.items():
            metric, _, filter_name = key.partition(",")
            if metric.endswith("_stderr") or metric == "sample_len" or not isinstance(
                value, int | float
            ):
                continue
            stderr = metrics.get(f"{metric}_stderr,{filter_name}")
            rows.append((task, metric, value, stderr if isinstance(stderr, float) else None))
    return rows


def per_choice_loglikelihoods(samples: dict) -> dict:
    """{task: [[log-likelihood of each choice] per document, in doc order]}, for the tasks
    scored by log-likelihood (a response is (log-likelihood, is greedy))."""
    return {task: [[float(resp[0][0]) for resp in doc["resps"]] for doc in _in_order(docs)]
            for task, docs in samples.items() if not _generated(docs)}


def generations(samples: dict) -> dict:
    """{task: [the model's answer per document, in doc order, as scored]}, for the tasks
    scored on generated text."""
    return {task: [doc["filtered_resps"][0] for doc in _in_order(docs)]
            for task, docs in samples.items() if _generated(docs)}


def _in_order(docs: list[dict]) -> list[dict]:
    return sorted(docs, key=lambda d: d["doc_id"])


def _generated(docs: list[dict]) -> bool:
    return any(isinstance(resp[0], str) for doc in docs for resp in doc["resps"])


def _log_wandb(path: str | Path, wandb, home, rows: list[tuple]) -> None:
    """When the run being evaluated logs to wandb, its eval scores go to its W&B run."""
    from core.metrics import start_wandb  # start-up

    home.fetch(WANDB_ID)  # a run in a bucket: the id its training used
    run = start_wandb(wandb, home.local, {"eval_of": str(path)})
    home.push(WANDB_ID)
    if run is not None:
        run.log({f"zoo/eval/{task}/{metric}": value for task, metric, value, _ in rows})
        run.finish()


def describe(rows: list[tuple], results_file: Path) -> str:
    """`zoo eval`'s console answer: a table of the scores and where they were written."""
    table = [(task, metric, f"{value:.4f}", f"{stderr:.4f}" if stderr is not None else "-")
             for task, metric, value, stderr in rows]
    return f"{format_table(('task', 'metric', 'value', 'stderr'), table)}\nwrote {results_file}"

