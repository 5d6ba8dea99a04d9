"""task=grpo's own parts (zoo/tasks/grpo.py): the loss reads each completion token's
log-prob at the rollout's temperature exactly as the sampler drew it (so the first update's
ratio is 1), and text prompts are asked as a user turn only of a starting point tuned on
chats."""

import torch

from core.sampler import Sampler, SamplerShape, SamplingParams
from tests.support.runs import saved_config
from zoo.llama.config import LlamaConfig
from zoo.registry import resolve
from zoo.tasks.grpo import completion_logps, tuned_on_chats

TEMPERATURE = 0.7


def test_the_loss_reads_the_log_probs_the_sampler_drew_with():
    family = resolve("llama-tiny")[0]
    config = LlamaConfig()  # llama-tiny
    model = family.build(config, seed=0)
    prompts = [[1, 50, 60, 70], [1, 80]]
    done = Sampler(model, family.cache_layout(config),
                   shape=SamplerShape(rows=2, slots=16, buckets=(8,))).generate(
        prompts, SamplingParams(5, temperature=TEMPERATURE, seed=3))
    for prompt, tokens, logps in zip(prompts, done.tokens, done.logprobs):
        ids = torch.tensor([prompt + tokens])
        with torch.no_grad():
            read = completion_logps(model, {"input_ids": ids}, TEMPERATURE)[0]
        # the log-prob of token t is read at position t - 1 of the shifted targets
        assert torch.allclose(read[len(prompt) - 1:], torch.tensor(logps), atol=1e-5)


def test_text_prompts_are_asked_as_a_chat_only_of_a_run_tuned_on_chats(tmp_path):
    chats, texts = tmp_path / "chats", tmp_path / "texts"
    for folder, rows in ((chats, "chat"), (texts, "prompt-completion")):
        folder.mkdir()
        (folder / "config.yaml").write_text(saved_config(
            f"model_name: llama-tiny\ntask: sft\ndata:\n  row_format: {rows}\n"))
    assert tuned_on_chats(str(chats))
    assert not tuned_on_chats(str(texts))
    assert not tuned_on_chats(None)  # a random start
