"""A real Hugging Face tokenizer with ChatML's special tokens and chat template (Qwen2-Instruct's,
as its tokenizer_config.json ships it), made from the shipped tokenizer: the chat tests'
tokenizer, with no download."""

from pathlib import Path

from core.data import load_tokenizer

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def chatml_tokenizer(folder: Path):
    """The tokenizer saved into `folder` and loaded back from it, as a run names it."""
    tokenizer = load_tokenizer("default")
    tokenizer.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    return load_tokenizer(str(folder))
