"""Rebuild the shipped default tokenizer (core/assets/tokenizer/) from the default corpus.

    .venv/bin/python -m core.assets.make_tokenizer

A 4096-token byte-level BPE trained on Python's help topics (`pydoc_data.topics`), the
corpus every Python install has, so `data.tokenizer=default` needs no network. Byte-level
means any text encodes (no unknown token). `tokenizer(text)` adds <|begin_of_text|> like
Llama 3; the data pipeline adds BOS/EOS itself when packing. Its chat template
(CHAT_TEMPLATE) is plain text in tokens the vocabulary already has, so supervised fine-tuning
on chat rows (zoo/data/sft_data.py) works with it as shipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from core.data import BOS, DEFAULT_TOKENIZER, EOS, PAD, default_documents

VOCAB_SIZE = 4096
# "Assistant:" ends its line, so an answer starts a new pre-token: its first token never
# straddles the prompt, and the assistant's turn (answer and EOS) maps to whole tokens.
CHAT_TEMPLATE = """\
{{- bos_token -}}
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {{- 'System: ' + message['content'] + '\\n' -}}
  {%- elif message['role'] == 'user' -%}
    {{- 'User: ' + message['content'] + '\\n' -}}
  {%- elif message['role'] == 'assistant' -%}
    {{- 'Assistant:\\n' + message['content'] + eos_token -}}
  {%- else -%}
    {{- raise_exception('unknown role ' + message['role'] + '; use system, user or assistant') -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- 'Assistant:\\n' -}}
{%- endif -%}
"""


def build(documents: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS, EOS, PAD],  # ids 0, 1, 2
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    bos = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A", pair=f"{BOS} $A:0 {BOS}:1 $B:1", special_tokens=[(BOS, bos)]
            ),
        ]
    )
    return tokenizer


def save(tokenizer: Tokenizer, out: Path) -> None:
    """Write an HF tokenizer folder that `AutoTokenizer.from_pretrained` loads as is."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "model_max_length": 1_000_000_000,  # packing decides lengths, not the tokenizer
        "clean_up_tokenization_spaces": False,  # keep decode(encode(text)) == text
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def main(out: str | None = None) -> None:
    out_dir = Path(out) if out else DEFAULT_TOKENIZER
    documents = default_documents()
    tokenizer = build(documents)
    save(tokenizer, out_dir)
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    print(
        f"wrote {out_dir}: vocab {tokenizer.get_vocab_size()}, {size / 1024:.0f} KiB, "
        f"trained on {len(documents)} documents"
    )


if __name__ == "__main__":
    main(*sys.argv[1:2])
