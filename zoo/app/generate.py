"""Sample text from a trained run or checkpoint: on the run's devices through the device
sampler (core/sampler; `load_sampler`, `sample_on_devices`), or on the host CPU (no torch_xla
needed: `load_for_generation`, `generate`), which `zoo train`'s end-of-run sample uses and
`zoo generate --host` keeps.

On the host, a family with a Hugging Face class generates through transformers' `generate`, whose KV
cache makes each new token cost one position (a long generation is linear in its length);
a family without one (a new model before its export is written) runs its own model over the
whole sequence for every token.

A run tuned on conversations (SFT on chat rows, DPO on chat pairs, as its trainer recorded
in the run's config: data.row_format) is prompted as it was trained: the prompt is a user's
turn rendered by the run's chat template (its tokenizer's), tokenized by the rule its data
was (zoo/data/chat_tokens.py); the data itself is not read again. `zoo train`'s end-of-run
sample and `zoo generate` resolve that the same way (`load_for_generation`), so for the same
prompt and seed they print the same text; `raw` prompts the model with the text alone."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import torch

from core.data import load_tokenizer
from core.errors import UserError
from core.hf import misfit
from core.sampler import Sampler, SamplerShape, SamplingParams
from core.store.checkpoint_reader import first_misfit
from zoo.app.init_from import model_weights
from zoo.app.saved_run import load_run, refuse_misfit
from zoo.data import chat_tokens


def load_for_generation(path: str | Path, prompt: str = "", max_new_tokens: int = 0,
                        raw: bool = False):
    """(model in eval mode, tokenizer) from a run folder or one of its checkpoints: the
    family's transformers class where it has one, else its own model. The tokenizer's
    `chat_template` is the one the run's prompts go through: its own for a run tuned on
    conversations, None (prompts are raw) for any other run or with `raw`. Before any
    weights are read, refused unless the model makes text and has positions for the
    prompt as prompted and `max_new_tokens` more."""
    run, tokenizer = run_and_tokenizer(path, raw)
    family, cfg = run.family, run.config
    check_positions(cfg.model, len(prompt_ids(tokenizer, prompt)), max_new_tokens)
    checkpoint, weights = model_weights(path)
    if family.hf_class is None:
        model = family.build(cfg.model, init=False)
        refuse_misfit(checkpoint, first_misfit(
            {k: list(v.shape) for k, v in model.state_dict().items()},
            {k: list(v.shape) for k, v in weights.items()}))
        model.load_state_dict(weights)
        return model.eval(), tokenizer
    import transformers  # transformers

    transformers.utils.logging.disable_progress_bar()  # weights from memory: no progress
    hf_config = family.hf_config(cfg.model)
    refuse_misfit(checkpoint, misfit(family.hf_class, hf_config, weights))
    hf_class = getattr(transformers, family.hf_class)
    model = hf_class.from_pretrained(None, config=hf_config, state_dict=weights)
    return model.eval(), tokenizer


def run_and_tokenizer(path: str | Path, raw: bool = False):
    """(the saved run, the tokenizer its prompts go through: with its chat template for a
    run tuned on conversations, without one for any other run or with `raw`), refusing a
    run whose model makes no text."""
    run, _ = load_run(path)
    family, cfg = run.family, run.config
    if not family.task.generates_text:
        raise UserError(f"{path} is a {cfg.model_name} run ({family.task.name}); zoo generate "
                        "continues prompts with causal language models only")
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    if raw or not tuned_on_chats(run, path):
        tokenizer.chat_template = None
    else:
        chat_tokens.check_template(tokenizer, f"data.tokenizer={cfg.data.tokenizer} of {path}")
    return run, tokenizer


def tuned_on_chats(run, path: str | Path) -> bool:
    """Whether the run trained on conversations rendered by its chat template: a task that
    prompts in chat (task.chat) on rows its trainer recorded as chats (data.row_format; a
    chat task's data without that key holds nothing but conversations)."""
    if not run.task.chat:
        return False
    row_format = getattr(run.config.data, "row_format", "chat")
    if row_format is None:
        raise UserError(f"cannot tell whether {path} was tuned on chats: its config records no "
                        "data.row_format (a run trained before zoo recorded it); prompt it raw "
                        "(--raw), or add `row_format: chat` (or prompt-completion, what its "
                        "rows held) under `data:` in its config.yaml")
    return row_format == "chat"


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """The prompt's ids: through the tokenizer's chat template when it has one (a chat-tuned
    run's, see load_for_generation), else the text with the tokenizer's own BOS; either
    way a special-token string the user typed stays text."""
    if tokenizer.chat_template:
        return chat_tokens.prompt_ids(tokenizer, prompt)
    return tokenizer(prompt, split_special_tokens=True, verbose=False)["input_ids"]


def check_positions(model_config, prompt_tokens: int, max_new_tokens: int) -> None:
    """Refuse a prompt and continuation longer than the model's positions (when its config
    names them: model.max_position_embeddings)."""
    positions = getattr(model_config, "max_position_embeddings", None)
    if positions and prompt_tokens + max_new_tokens > positions:
        room = positions - prompt_tokens
        fix = f"use --max-new-tokens {room} or less" if room > 0 else "shorten the prompt"
        raise UserError(f"the prompt's {prompt_tokens} tokens and --max-new-tokens "
                        f"{max_new_tokens} need more positions than the model has "
                        f"({positions}, model.max_position_embeddings); {fix}")


def check_sampling(max_new_tokens: int, temperature: float, top_k: int) -> None:
    """Refuse options that sampling would fail on mid-way (the CLI's option types refuse
    them before a model is loaded; this guards other callers)."""
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be at least 1, not {max_new_tokens}")
    if not math.isfinite(temperature) or temperature < 0:
        raise UserError(f"--temperature must be a finite number >= 0 (0: greedy), "
                        f"not {temperature}")
    if top_k < 0:
        raise UserError(f"--top-k must be >= 0 (0: no top-k cut), not {top_k}")


def generate(
    model,
    tokenizer,
    prompt: str,
    max_new_tokens: int = 50,
    temperature: float = 0.8,
    top_k: int = 40,
    seed: int = 0,
) -> str:
    """Greedy when temperature is 0, else top-k (0 = all) sampling at that temperature. The
    defaults (`zoo generate`'s too) sample: greedy decoding of a freshly trained small model
    repeats one token, often a blank line, where sampling shows what it learned. The prompt
    goes through the tokenizer's chat template when it has one (`prompt_ids`)."""
    ids = prompt_ids(tokenizer, prompt)
    new = host_new_tokens(model, tokenizer, ids, max_new_tokens, temperature, top_k, seed)
    return tokenizer.decode(ids + new, skip_special_tokens=True)


@torch.no_grad()
def host_new_tokens(model, tokenizer, prompt: list[int], max_new_tokens: int,
                    temperature: float, top_k: int, seed: int) -> list[int]:
    """The new tokens `generate` samples after the prompt's ids, up to and including EOS."""
    check_sampling(max_new_tokens, temperature, top_k)
    ids = torch.tensor([prompt])
    torch.manual_seed(seed)
    if hasattr(model, "generate"):  # a transformers model: with its KV cache
        from transformers import GenerationConfig, LogitsProcessorList  # transformers

        sampling = {"do_sample": True, "temperature": temperature, "top_k": top_k} \
            if temperature > 0 else {"do_sample": False}
        ids = model.generate(
            ids, attention_mask=torch.ones_like(ids),
            generation_config=GenerationConfig(
                max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id, **sampling),
            logits_processor=LogitsProcessorList([_refuse_non_finite]))
    else:
        for _ in range(max_new_tokens):
            logits = _refuse_non_finite(ids, model(ids)[:, -1].float())[0]
            if temperature <= 0:
                token = logits.argmax()
            else:
                if top_k:
                    threshold = logits.topk(min(top_k, logits.numel())).values[-1]
                    logits = logits.masked_fill(logits < threshold, float("-inf"))
                token = torch.multinomial((logits / temperature).softmax(-1), 1)[0]
            ids = torch.cat([ids, token.view(1, 1)], dim=1)
            if token.item() == tokenizer.eos_token_id:
                break
    new = ids[0, len(prompt):].tolist()
    if tokenizer.eos_token_id in new:  # transformers pads the rows it ended early
        new = new[:new.index(tokenizer.eos_token_id) + 1]
    return new


def _refuse_non_finite(ids, scores):
    """The next token's scores, unless they are not finite numbers (weights that diverged)."""
    if not scores.isfinite().all():
        raise UserError("the model's outputs are not finite numbers (its weights "
                        "diverged?); sample from an earlier checkpoint")
    return scores


def sample_after_training(run_folder: str, prompt: str) -> str:
    """The sample line `zoo train` ends with, prompted as `zoo generate` prompts the run; a
    run that went well but cannot be sampled says why instead."""
    try:
        model, tokenizer = load_for_generation(run_folder)
        sample = generate(model, tokenizer, prompt, max_new_tokens=40)
    except UserError as error:
        return f"sample: none, {error}"
    return f"sample: {sample!r}"



@dataclasses.dataclass(frozen=True)
class Asked:
    """What `zoo generate` asks for, the same on either path."""

    max_new_tokens: int = 50
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 1.0
    seed: int = 0
    stops: tuple[str, ...] = ()
    batch_size: int = 8


@dataclasses.dataclass
class Generated:
    """Per prompt: the prompt and its continuation as one text (what `--prompt` prints),
    the continuation alone, and why it ended ("stop": EOS or a stop string, "length")."""

    text: list[str]
    completion: list[str]
    finish: list[str]
    stats: str | None = None  # the device sampler's timings line
    note: str | None = None  # why it ran on the host when the device was not asked against


def read_prompts(path: str) -> list[str]:
    """The prompts of a JSON-lines file: each line a JSON string or {"prompt": TEXT}. The
    file is the CLI's checked path (tools/options.py PathArg: there, readable, UTF-8)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise UserError(f"--prompts {path} line {number} is not JSON; give a string or "
                            '{"prompt": TEXT} a line') from None
        prompt = row.get("prompt") if isinstance(row, dict) else row
        if not isinstance(prompt, str) or not prompt:
            raise UserError(f'--prompts {path} line {number} has no prompt; give a string or '
                            '{"prompt": TEXT} a line')
        prompts.append(prompt)
    if not prompts:
        raise UserError(f"--prompts {path} holds no prompt; give a string or "
                        '{"prompt": TEXT} a line')
    return prompts


def generate_texts(path: str, prompts: list[str], asked: Asked, *, tpu: str | None = None,
                   raw: bool = False, host: bool = False) -> Generated:
    """Every prompt continued by the run at `path`: on its devices (the device sampler), or
    on the host with `host` or where the device sampler cannot run (a note says why)."""
    run, tokenizer = run_and_tokenizer(path, raw)
    ids = [prompt_ids(tokenizer, prompt) for prompt in prompts]
    check_positions(run.config.model, max(map(len, ids)), asked.max_new_tokens)
    note = None
    if not host:
        from core.backends.xla.runtime import installed  # start-up

        if run.family.cache_layout is None:
            note = (f"{run.family.name} has no device sampler yet (no cache layout): "
                    "generating on the host")
        elif not installed():
            note = "torch_xla is not installed: generating on the host"
    if host or note:
        if asked.top_p < 1:
            raise UserError("--top-p needs the device sampler; drop --top-p or --host")
        model, _ = load_for_generation(path, prompts[0], asked.max_new_tokens, raw=raw)
        news = [host_new_tokens(model, tokenizer, prompt, asked.max_new_tokens,
                                asked.temperature, asked.top_k, asked.seed) for prompt in ids]
        done = _texts(tokenizer, ids, news, asked.stops,
                      ["stop" if new and new[-1] == tokenizer.eos_token_id else "length"
                       for new in news])
        done.note = note
        return done
    sampler, devices = load_sampler(run, path, tpu, min(asked.batch_size, len(ids)),
                                    asked.max_new_tokens, max(map(len, ids)))
    eos = () if tokenizer.eos_token_id is None else (tokenizer.eos_token_id,)
    params = SamplingParams(asked.max_new_tokens, asked.temperature, asked.top_k, asked.top_p,
                            asked.seed, stop_token_ids=eos, stop_strings=asked.stops)
    out = sampler.generate(ids, params, decode=lambda new: tokenizer.decode(
        new, skip_special_tokens=True))
    done = _texts(tokenizer, ids, out.tokens, asked.stops, out.finish)
    timings = out.timings
    done.stats = (f"prefill {timings.prefill_s:.2f} s, decode {timings.decode_s:.2f} s, "
                  f"{timings.new_tokens} new tokens ({timings.tokens_per_s:.0f} tokens/s), "
                  f"{timings.compiles} compiles ({timings.compile_s:.1f} s) on {devices} "
                  f"device{'s' if devices > 1 else ''}")
    return done


def load_sampler(run, path: str, tpu: str | None, rows: int, max_new_tokens: int,
                 longest_prompt: int):
    """(a device sampler on the run's weights, the devices it runs on): the model built for
    the slice (`tpu`, else the run's own), its weights (LoRA adapters merged) loaded and
    sharded by the run's preset on the xla backend, in the run's evaluation precision."""
    from core import topology

    topo = topology.parse(tpu) if tpu else run.topology
    # the weights read and checked on the host first: a damaged run is refused before XLA
    checkpoint, weights = model_weights(path)
    model_config = run.family.model_for(run.config.model, topo, run.config.mesh)
    model = run.family.build(model_config, init=False)
    refuse_misfit(checkpoint, first_misfit(
        {k: list(v.shape) for k, v in model.state_dict().items()},
        {k: list(v.shape) for k, v in weights.items()}))
    model.load_state_dict(weights)
    sampler, backend = device_sampler(run, model, model_config, topo,
                                      SamplerRows(rows, max_new_tokens, longest_prompt))
    return sampler, backend.device_count()


@dataclasses.dataclass(frozen=True)
class SamplerRows:
    rows: int
    max_new_tokens: int
    longest_prompt: int


def device_sampler(run, model, model_config, topo, asked: SamplerRows):
    """(a sampler on `model`, host weights loaded, placed by the run's preset on the xla
    backend for `topo` in the run's evaluation precision; that backend)."""
    from core import backends  # torch_xla
    from core.backends.xla.runtime import start  # torch_xla
    from zoo.app.train import select_runtime  # the trainer's runtime selection

    select_runtime(topo)
    start()
    backend = backends.get("xla")
    model, plan, mesh, sizes = backend.prepare(model, run.rules, run.config.mesh, False)
    shape = SamplerShape.for_model(model_config, asked.rows, asked.max_new_tokens,
                                   asked.longest_prompt, sizes)
    sampler = Sampler(model, run.family.cache_layout(model_config), shape=shape,
                      backend=backend, mesh=mesh, plan=plan,
                      bf16=run.config.runs_in_bf16(topo))
    return sampler, backend


def _texts(tokenizer, prompts: list[list[int]], news: list[list[int]], stops: tuple[str, ...],
           finish: list[str]) -> Generated:
    """Each prompt with its new tokens as text, cut before the first stop string."""
    done = Generated([], [], [])
    for prompt, new, why in zip(prompts, news, finish, strict=True):
        text = tokenizer.decode(prompt + new, skip_special_tokens=True)
        start = len(tokenizer.decode(prompt, skip_special_tokens=True))
        cut = min((at for stop in stops if (at := text.find(stop, start)) >= 0),
                  default=None)
        if cut is not None:
            text, why = text[:cut], "stop"
        done.text.append(text)
        done.completion.append(text[start:])
        done.finish.append(why)
    return done
