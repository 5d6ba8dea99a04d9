"""Sample text from a trained run or checkpoint on the host CPU (no torch_xla needed).

A family with a Hugging Face class generates through transformers' `generate`, whose KV
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

import math
from pathlib import Path

import torch

from core.data import load_tokenizer
from core.errors import UserError
from core.hf import misfit
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


@torch.no_grad()
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
    check_sampling(max_new_tokens, temperature, top_k)
    ids = torch.tensor([prompt_ids(tokenizer, prompt)])
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
    return tokenizer.decode(ids[0], skip_special_tokens=True)


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

