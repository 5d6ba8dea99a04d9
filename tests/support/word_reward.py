"""A reward for the GRPO tests (tests/e2e/test_grpo.py), as a user writes one: TRL's
signature, one float per completion."""

WORD = "on"  # in about 6% of the shipped tokenizer's tokens: an untrained model's 4-token
# completions hold it about one time in five, so the first rollouts already compare


def says_the_word(prompts, completions, **columns):
    """1 for a completion with `WORD` in it, else 0."""
    return [float(WORD in text) for text in completions]
