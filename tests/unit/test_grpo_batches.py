"""GRPO's batches (zoo/tasks/grpo_batches.py) around a stand-in sampler: what each rollout
asks the sampler for (its prompts G times, sample ids j * G + g, a seed of the run's seed
and the rollout's number), the rows it hands the step, and which steps share a rollout."""

import pytest

from core.data import load_tokenizer
from core.sampler import Completions, Timings
from zoo.data.grpo_data import Prompts
from zoo.data.rewards import load_rewards
from zoo.tasks.grpo_batches import GRPOBatches
from zoo.tasks.grpo_objective import GRPOConfig

PROMPTS = Prompts(["one", "two", "three"], {"answer": ["a", "b", "c"]},
                  ["p.jsonl row 1", "p.jsonl row 2", "p.jsonl row 3"], "text", "p.jsonl")
IDS = [[1, 11], [1, 12, 13], [1, 14]]


class StandIn:
    """A sampler that answers prompt j's completion g with g + 1 copies of token 40 + g
    (log-prob -0.5 each) and records what it was asked."""

    def __init__(self):
        self.calls = []

    def __call__(self, prompts, params, sample_ids, decode, pad_id):
        self.calls.append((prompts, params, sample_ids))
        tokens = [[40 + i % 2] * (i % 2 + 1) for i in sample_ids]
        return Completions(tokens, [[-0.5] * len(t) for t in tokens], ["length"] * len(tokens),
                           Timings())


@pytest.fixture
def batches():
    config = GRPOConfig(num_generations=2, num_iterations=2, max_new_tokens=4,
                        rewards=["exact_match"])
    tokenizer = load_tokenizer("default")
    made = GRPOBatches(PROMPTS, IDS, load_rewards(["exact_match"], None, "answer", ["answer"],
                                                  config.format_regex),
                       config, seq_len=8, global_batch_size=4, seed=7, shuffle_seed=0,
                       tokenizer=tokenizer, stop_token_ids=(tokenizer.eos_token_id,))
    made.generate = StandIn()
    return made


def test_a_rollout_asks_for_each_prompt_g_times_with_its_sample_ids_and_seed(batches):
    batches.batch(0)
    (prompts, params, sample_ids), = batches.generate.calls
    chosen = batches.prompt_indices(0)
    assert prompts == [IDS[i] for i in chosen for _ in range(2)]
    assert sample_ids == [0, 1, 2, 3]
    assert params.seed == batches.rollout_seed(0) != batches.rollout_seed(1)
    assert params.max_new_tokens == 4 and params.temperature == 1.0


def test_the_rows_hold_prompt_completion_and_what_the_loss_needs(batches):
    batch = batches.batch(0)
    first = IDS[batches.prompt_indices(0)[0]]
    row = batch["input_ids"][1]  # completion 2 of the first prompt: two 41s
    assert row[:len(first) + 2].tolist() == first + [41, 41]
    assert (row[len(first) + 2:] == batches.pad_id).all()
    assert batch["completion_mask"][1].tolist() == [0.0] * len(first) + [1.0, 1.0] + [0.0] * (
        8 - len(first) - 2)
    assert batch["old_logps"][1].sum() == -1.0
    assert batch["advantages"].tolist() == [0.0] * 4  # exact_match pays nothing: groups tie
    assert batches.latest.metrics["frac_reward_zero_std"] == 1.0
    assert batches.latest.metrics["completions/mean_length"] == 1.5


def test_steps_of_one_rollout_share_it_and_the_next_samples_anew(batches):
    first, again = batches.batch(0), batches.batch(1)
    assert again is first and len(batches.generate.calls) == 1
    batches.batch(2)
    assert len(batches.generate.calls) == 2


def test_every_prompt_is_asked_once_an_epoch_in_an_order_made_anew_each():
    config = GRPOConfig(num_generations=2)
    made = GRPOBatches(PROMPTS, IDS, [], config, seq_len=8, global_batch_size=2, seed=0,
                       shuffle_seed=3, tokenizer=load_tokenizer("default"), stop_token_ids=())
    epochs = [[made.prompt_indices(n)[0] for n in range(e * 3, e * 3 + 3)] for e in range(4)]
    assert all(sorted(epoch) == [0, 1, 2] for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) > 1
    assert made.prompt_indices(5) == made.prompt_indices(5)  # a pure function of the number
