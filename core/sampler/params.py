"""What a generation asks for (`SamplingParams`) and the shapes that fix its compiled graphs
(`SamplerShape`), each refusing bad values with one line (core.errors.UserError)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from core.errors import UserError
from core.mesh import BATCH_AXES

DEFAULT_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


@dataclasses.dataclass(frozen=True)
class SamplerShape:
    """Everything that is a shape: `rows` prompts per call, `slots` cache columns a row holds
    (its prompt's bucket plus the new tokens), the prompt lengths a prefill is compiled for."""

    rows: int
    slots: int
    buckets: tuple[int, ...] = DEFAULT_BUCKETS

    def __post_init__(self):
        if self.rows < 1:
            raise UserError(f"the sampler's batch size {self.rows} is below 1")
        if not self.buckets or list(self.buckets) != sorted(set(self.buckets)) \
                or self.buckets[0] < 1:
            raise UserError(f"prompt buckets {self.buckets} must be increasing and positive")

    @classmethod
    def for_model(cls, config, rows: int, max_new_tokens: int, longest_prompt: int,
                  mesh_sizes: dict[str, int] | None = None,
                  buckets: tuple[int, ...] = DEFAULT_BUCKETS) -> SamplerShape:
        """The shape for `rows` prompts of up to `longest_prompt` tokens and `max_new_tokens`
        on a model of `config` (its `max_position_embeddings` bounds the two) whose batch is
        split over the batch axes of `mesh_sizes`: rows rounded up to a multiple of those
        axes' devices (the extra rows are padding, done from the start), slots for the
        longest prompt's bucket and the new tokens."""
        max_positions = getattr(config, "max_position_embeddings", None)
        if max_positions is not None and longest_prompt + max_new_tokens > max_positions:
            raise UserError(f"a prompt of {longest_prompt} tokens and {max_new_tokens} new "
                            f"tokens pass the model's {max_positions} positions")
        split = math.prod((mesh_sizes or {}).get(axis, 1) for axis in BATCH_AXES)
        shape = cls(-(-max(rows, 1) // split) * split, 1, buckets)
        return dataclasses.replace(shape, slots=shape.bucket(longest_prompt) + max_new_tokens)

    def bucket(self, length: int) -> int:
        """The padded length a prompt of `length` tokens is prefilled at."""
        for bucket in self.buckets:
            if length <= bucket:
                return bucket
        raise UserError(f"a prompt of {length} tokens is longer than the longest prompt "
                        f"bucket ({self.buckets[-1]} tokens)")


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Temperature 0 is greedy (argmax); top_k 0 and top_p 1 cut nothing. `stop_token_ids`
    (EOS) are checked on the device every step, `stop_strings` on the host every
    `check_every` tokens. `seed` with each row's sample id fixes its random stream."""

    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    check_every: int = 16

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise UserError(f"max_new_tokens {self.max_new_tokens} is below 1; ask for at "
                            "least one new token")
        if self.temperature < 0:
            raise UserError(f"temperature {self.temperature} is below 0; give 0 (greedy) "
                            "or more")
        if self.top_k < 0:
            raise UserError(f"top_k {self.top_k} is below 0; give 0 (no cut) or more")
        if not 0 < self.top_p <= 1:
            raise UserError(f"top_p {self.top_p} is outside (0, 1]")
        if any(stop == "" for stop in self.stop_strings):
            raise UserError("a stop string is empty; give the text to stop at")
        if self.check_every < 1:
            raise UserError(f"check_every {self.check_every} is below 1")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def check(self, shape: SamplerShape, prompt_lengths: Sequence[int],
              max_positions: int | None = None) -> None:
        """Refuse a batch with an empty prompt, or whose longest prompt and new tokens do
        not fit the cache or the model's positions (nothing has run yet)."""
        if not prompt_lengths or min(prompt_lengths) < 1:
            raise UserError("a prompt is empty; give at least one token")
        longest_prompt = max(prompt_lengths)
        needed = shape.bucket(longest_prompt) + self.max_new_tokens
        if needed > shape.slots:
            raise UserError(f"a prompt of {longest_prompt} tokens (bucket "
                            f"{shape.bucket(longest_prompt)}) and {self.max_new_tokens} new "
                            f"tokens need {needed} cache slots; the sampler has {shape.slots}")
        if max_positions is not None and longest_prompt + self.max_new_tokens > max_positions:
            raise UserError(f"a prompt of {longest_prompt} tokens and {self.max_new_tokens} "
                            f"new tokens pass the model's {max_positions} positions")
