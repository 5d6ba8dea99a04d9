"""GRPO's batches: each is a rollout of the policy as it is when the batch is asked for. A
step's prompts (global_batch_size / G of them, in an order shuffled per epoch) are each
continued G times by the sampler, the completions scored on the host (zoo/data/rewards.py),
and the rows handed to the step hold prompt + completion with what the loss needs:

    input_ids        [N, seq_len] prompt, completion, padding
    completion_mask  [N, seq_len] 1 at the completion's tokens (EOS included, as TRL's)
    old_logps        [N, seq_len] the sampler's log-probs of those tokens
    advantages       [N]          group-relative (zoo/tasks/grpo_objective.py)

Completion g of the step's prompt j draws from sample id j * G + g with a seed made of the
run's seed and the rollout's number, so a resumed run samples what the run it resumes would
have. With num_iterations k, batches k*r .. k*r + k - 1 are rollout r's rows (the first
asked for samples it; the others reuse it)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
import torch

from core.sampler import Completions, SamplingParams
from zoo.data.grpo_data import Prompts
from zoo.data.rewards import Reward, score
from zoo.tasks.grpo_objective import GRPOConfig, completion_lengths, group_advantages

# (prompts' ids, sampling, sample ids, ids -> text, pad id) -> the sampler's completions
Generate = Callable[[list[list[int]], SamplingParams, list[int], Callable, int], Completions]


@dataclasses.dataclass(frozen=True)
class Rollout:
    number: int
    batch: dict[str, torch.Tensor]
    metrics: dict[str, float]
    forwarded_tokens: int  # prompt and new tokens the sampler ran the model over
    sampling_s: float  # the sampler's seconds (the rewards' not counted)


class GRPOBatches:
    """Rollouts as `Task.data` batches; `generate` is attached once the model is placed.
    Made on demand: a batch prefetched during the step before would be sampled from the
    policy before that step's update."""

    on_demand = True

    def __init__(self, prompts: Prompts, ids: list[list[int]], rewards: list[Reward],
                 config: GRPOConfig, *, seq_len: int, global_batch_size: int, seed: int,
                 shuffle_seed: int, tokenizer, stop_token_ids: tuple[int, ...]):
        self.prompts, self.ids, self.rewards, self.config = prompts, ids, rewards, config
        self.seq_len, self.seed, self.shuffle_seed = seq_len, seed, shuffle_seed
        self.per_step = global_batch_size // config.num_generations  # prompts per rollout
        self.tokenizer, self.stop_token_ids = tokenizer, stop_token_ids
        pad = tokenizer.pad_token_id
        self.pad_id = tokenizer.eos_token_id if pad is None else pad
        self.generate: Generate | None = None
        self.latest: Rollout | None = None
        self.fetched_at = time.perf_counter()  # when the step's batch was handed out

    def describe(self) -> str:
        return (f"{self.per_step} prompts x {self.config.num_generations} completions per "
                f"rollout, {len(self.ids):,} prompts "
                f"({len(self.ids) / self.per_step:.1f} rollouts an epoch)")

    def batch(self, index: int) -> dict[str, torch.Tensor]:
        number = index // self.config.num_iterations
        if self.latest is None or self.latest.number != number:
            self.latest = self._rollout(number)
        self.fetched_at = time.perf_counter()
        return self.latest.batch

    def rollout_seed(self, number: int) -> int:
        """Rollout `number`'s sampling seed: the run's seed and the number, mixed."""
        return int(np.random.SeedSequence([self.seed, number]).generate_state(1)[0] >> 1)

    def prompt_indices(self, number: int) -> list[int]:
        """The rows rollout `number` continues: consecutive places in an order of all rows
        shuffled anew each epoch (data.shuffle_seed and the epoch)."""
        count, first = len(self.ids), number * self.per_step
        chosen = []
        for place in range(first, first + self.per_step):
            epoch, offset = divmod(place, count)
            order = torch.randperm(count, generator=torch.Generator().manual_seed(
                self.shuffle_seed * 1_000_003 + epoch))
            chosen.append(int(order[offset]))
        return chosen

    def _rollout(self, number: int) -> Rollout:
        if self.generate is None:
            raise RuntimeError("GRPOBatches.generate is attached when the model is placed")
        began = time.perf_counter()
        group = self.config.num_generations
        rows = [index for index in self.prompt_indices(number) for _ in range(group)]
        sample_ids = list(range(len(rows)))  # prompt j's completion g: j * G + g
        params = self.config.sampling(self.rollout_seed(number), self.stop_token_ids)
        done = self.generate([self.ids[i] for i in rows], params, sample_ids, self._text,
                             self.pad_id)
        sampled = time.perf_counter()
        scores = score(self.rewards, [self.prompts.prompts[i] for i in rows],
                       [self._completion(tokens) for tokens in done.tokens],
                       {name: [values[i] for i in rows]
                        for name, values in self.prompts.columns.items()},
                       completion_ids=done.tokens,
                       where=[f"{self.prompts.where[i]}, completion {n % group + 1}"
                              for n, i in enumerate(rows)])
        advantages = group_advantages(scores.total, group, self.config.scale_rewards)
        batch = self._rows([self.ids[i] for i in rows], done, advantages.values)
        seconds = time.perf_counter() - began
        new_tokens = sum(map(len, done.tokens))
        lengths = completion_lengths(batch["completion_mask"])
        metrics = {**scores.metrics(), "frac_reward_zero_std": float(advantages.tied_share),
                   **{key: float(value) for key, value in lengths.items()},
                   "completions/stopped_share": done.finish.count("stop") / len(rows),
                   "rollout_s": seconds, "reward_s": time.perf_counter() - sampled,
                   "rollout_compiles": done.timings.compiles,
                   "rollout_tokens_per_s": new_tokens / max(sampled - began, 1e-9)}
        forwarded = new_tokens + sum(len(self.ids[i]) for i in rows)
        return Rollout(number, batch, metrics, forwarded, sampled - began)

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _completion(self, tokens: list[int]):
        """What a reward reads: the text, or for chat prompts one assistant message."""
        text = self._text(tokens)
        if self.prompts.format == "chat":
            return [{"role": "assistant", "content": text}]
        return text

    def _rows(self, prompts: list[list[int]], done: Completions,
              advantages: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = len(prompts)
        input_ids = torch.full((rows, self.seq_len), self.pad_id, dtype=torch.long)
        mask = torch.zeros(rows, self.seq_len, dtype=torch.float32)
        old_logps = torch.zeros(rows, self.seq_len, dtype=torch.float32)
        for row, (prompt, tokens, logps) in enumerate(zip(prompts, done.tokens, done.logprobs)):
            end = len(prompt) + len(tokens)
            input_ids[row, :end] = torch.tensor(prompt + tokens)
            mask[row, len(prompt):end] = 1
            old_logps[row, len(prompt):end] = torch.tensor(logps)
        return {"input_ids": input_ids, "completion_mask": mask, "old_logps": old_logps,
                "advantages": advantages.float()}
