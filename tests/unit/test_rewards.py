"""Rewards as data (zoo/data/rewards.py): each built-in scores text and chat completions as
it says; the user's module:function is called with TRL's arguments and weighed; and every
way a reward can fail is refused in one line naming the reward (and the row it failed on)."""

import dataclasses
import math
import sys
import textwrap

import pytest
import torch

from core.config import ConfigError, load
from core.errors import UserError
from zoo.data.rewards import check_reward_specs, final_number, load_rewards, score
from zoo.tasks.grpo_objective import GRPOConfig

FORMAT = GRPOConfig().format_regex


def scored(specs, completions, answers, weights=None, **columns):
    rewards = load_rewards(specs, weights, "answer", ["answer", *columns], FORMAT)
    prompts = ["Q?"] * len(completions)
    return score(rewards, prompts, completions, {"answer": answers, **columns})


def test_exact_match_compares_stripped_text_of_strings_and_chats():
    completions = [" cat\n", "cats", [{"role": "assistant", "content": "cat "}], "48"]
    found = scored(["exact_match"], completions, ["cat", "cat", " cat", 48])
    assert found.per_reward[:, 0].tolist() == [1.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("text, number", [
    ("So the total is 1,250.\n#### 1,250", "1250"),
    ("First 3 then 4. The answer is 7.", "7"),  # no ####: the last number
    ("#### 12 apples, 3 left over", "12"),  # after ####: its first number
    ("a #### 5 then #### -2.5", "-2.5"),  # the last ####
    ("no digits here", None),
])
def test_final_number_reads_gsm8k_answers(text, number):
    assert final_number(text) == (None if number is None else final_number(number))


def test_final_number_pays_an_equal_final_number():
    answers = ["48 - 6 = 42\n#### 42"] * 4 + ["#### 1000"]
    completions = ["so 42", "#### 42.0", "#### 41", "no idea", "It is 1,000 dollars."]
    found = scored(["final_number"], completions, answers)
    assert found.per_reward[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0]


def test_format_matches_the_whole_completion():
    completions = ["6 * 7 = 42\n#### 42", "42", "#### 42 and more words", "  #### -3  "]
    found = scored(["format"], completions, [""] * 4)
    assert found.per_reward[:, 0].tolist() == [1.0, 0.0, 0.0, 1.0]


def test_weighted_rewards_sum_and_their_metrics():
    completions = ["#### 42", "42", "#### 7", "7"]
    found = scored(["final_number", "format"], completions, ["#### 42"] * 4, [1.0, 0.5])
    assert found.per_reward.tolist() == [[1, 1], [1, 0], [0, 1], [0, 0]]
    assert found.total.tolist() == [1.5, 1.0, 0.5, 0.0]
    metrics = found.metrics()
    assert metrics["rewards/final_number/mean"] == 0.5
    assert metrics["rewards/format/std"] == pytest.approx(torch.tensor([1.0, 0, 1, 0]).std())
    assert metrics["reward"] == 0.75
    assert metrics["reward_std"] == pytest.approx(torch.tensor([1.5, 1, 0.5, 0]).std())


MODULE = '''
import math

def brevity(prompts, completions, completion_ids, answer, **kwargs):
    rows = zip(completions, completion_ids, answer)
    return [1.0 / (1 + len(ids)) + (c == a) for c, ids, a in rows]

def picky(prompts, completions, **kwargs):
    return [1.0 / (c != "bad") for c in completions]  # "bad": ZeroDivisionError alone

def pair_only(prompts, completions, **kwargs):
    if len(completions) > 2:
        raise ValueError("at most two at a time")
    return [0.0] * len(completions)

def words(prompts, completions, **kwargs):
    return ["1.0" for c in completions]

def nothing(prompts, completions, **kwargs):
    return [None for c in completions]

def not_a_number(prompts, completions, **kwargs):
    return [math.nan for c in completions]

def short(prompts, completions, **kwargs):
    return [1.0]

def scalar(prompts, completions, **kwargs):
    return 1.0

threshold = 0.5
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A reward module in the working directory, as a user writes one."""
    (tmp_path / "zoo_test_user_rewards.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "zoo_test_broken_rewards.py").write_text("import not_a_module_anywhere\n")
    monkeypatch.chdir(tmp_path)
    yield "zoo_test_user_rewards"
    for name in ("zoo_test_user_rewards", "zoo_test_broken_rewards"):
        sys.modules.pop(name, None)


def test_a_user_function_gets_trls_arguments_and_its_weight(user_module):
    rewards = load_rewards([f"{user_module}:brevity", "exact_match"], [2.0, 1.0], "answer",
                           ["answer"], FORMAT)
    found = score(rewards, ["Q?", "Q?"], ["yes", "no"], {"answer": ["yes", "yes"]},
                  completion_ids=[[5, 6, 7], [8]])
    assert found.names == [f"{user_module}:brevity", "exact_match"]
    assert found.per_reward.tolist() == [[1.25, 1.0], [0.5, 0.0]]
    assert found.total.tolist() == [3.5, 1.0]


@pytest.mark.parametrize("function, line", [
    ("picky", "reward {m}:picky raised on data.jsonl row 2, completion 1: ZeroDivisionError: "
              "float division by zero"),
    ("pair_only", "reward {m}:pair_only raised on the batch of 3 completions (on no single "
                  "one alone): ValueError: at most two at a time"),
    ("words", "reward {m}:words returned '1.0' (str) for data.jsonl row 1, completion 1; "
              "return a number for every completion"),
    ("nothing", "reward {m}:nothing returned None (NoneType) for data.jsonl row 1, "
                "completion 1; return a number for every completion"),
    ("not_a_number", "reward {m}:not_a_number returned nan for data.jsonl row 1, completion "
                     "1; return a finite number for every completion"),
    ("short", "reward {m}:short returned 1 rewards for 3 completions; return one per "
              "completion"),
    ("scalar", "reward {m}:scalar returned a float, not a list of 3 numbers (one per "
               "completion)"),
])
def test_a_function_that_fails_on_a_row_is_one_line(user_module, function, line):
    rewards = load_rewards([f"{user_module}:{function}"], None, "answer", ["answer"], FORMAT)
    where = ["data.jsonl row 1, completion 1", "data.jsonl row 2, completion 1",
             "data.jsonl row 2, completion 2"]
    with pytest.raises(UserError) as raised:
        score(rewards, ["Q?"] * 3, ["good", "bad", "good"], {"answer": ["x"] * 3},
              where=where)
    assert str(raised.value) == line.format(m=user_module)


def test_an_answer_with_no_number_names_its_row():
    rewards = load_rewards(["final_number"], None, "answer", ["answer"], FORMAT)
    with pytest.raises(UserError, match=r"^reward final_number raised on p.jsonl row 2: "
                                        r"ValueError: its answer \('answer': 'seven'\) holds no "
                                        "number; fix the row or use another reward$"):
        score(rewards, ["Q?"] * 2, ["7", "7"], {"answer": ["#### 7", "seven"]},
              where=["p.jsonl row 1", "p.jsonl row 2"])


@pytest.mark.parametrize("spec, line", [
    ("zoo_test_missing_rewards:fn", "reward zoo_test_missing_rewards:fn: module "
     "zoo_test_missing_rewards does not import (ModuleNotFoundError: No module named "
     "'zoo_test_missing_rewards')"),
    ("zoo_test_broken_rewards:fn", "reward zoo_test_broken_rewards:fn: module "
     "zoo_test_broken_rewards does not import (ModuleNotFoundError: No module named "
     "'not_a_module_anywhere')"),
    ("zoo_test_user_rewards:absent", "reward zoo_test_user_rewards:absent: module "
     "zoo_test_user_rewards has no 'absent'; check the name after the colon"),
    ("zoo_test_user_rewards:threshold", "reward zoo_test_user_rewards:threshold: threshold "
     "is a float, not a function of (prompts, completions, **columns)"),
    ("exact_match", "reward exact_match compares with the answer column 'answer', which the "
     "prompt data lacks (columns: solution); set data.answer_field=..."),
])
def test_a_reward_that_does_not_load_is_one_line(user_module, spec, line):
    with pytest.raises(UserError) as raised:
        load_rewards([spec], None, "answer", ["solution"], FORMAT)
    assert str(raised.value) == line


@pytest.mark.parametrize("specs, weights, regex, line", [
    ([], None, FORMAT, "grpo.rewards is empty"),
    (["exact"], None, FORMAT, "grpo.rewards: 'exact' is neither a built-in reward "
     "(exact_match, final_number, format) nor module:function"),
    (["my mod:fn"], None, FORMAT, "grpo.rewards: 'my mod:fn' is neither"),
    (["format", "format"], None, FORMAT, "grpo.rewards names format twice"),
    (["format", "m:f"], [1.0], FORMAT, "grpo.reward_weights has 1 weights for 2 rewards"),
    (["format"], [math.inf], FORMAT, "grpo.reward_weights must be finite numbers, not inf"),
    (["format"], None, "(", "grpo.format_regex '(' is not a regular expression"),
])
def test_a_bad_reward_setting_is_one_line(specs, weights, regex, line):
    with pytest.raises(ValueError) as raised:
        check_reward_specs(specs, weights, regex)
    assert str(raised.value).startswith(line) and "\n" not in str(raised.value)
    with pytest.raises(ValueError):  # the config refuses it as it is read
        GRPOConfig(rewards=specs, reward_weights=weights, format_regex=regex)


@dataclasses.dataclass
class Run:
    grpo: GRPOConfig = dataclasses.field(default_factory=GRPOConfig)


def test_rewards_and_weights_are_read_from_config_strings():
    run = load(Run, overrides=["grpo.rewards=[final_number, my_rewards:brevity]",
                               "grpo.reward_weights=[1,0.25]"])
    assert run.grpo.rewards == ["final_number", "my_rewards:brevity"]
    assert run.grpo.reward_weights == [1.0, 0.25]
    with pytest.raises(ConfigError, match=r"^grpo.rewards: 'exact' is neither a built-in"):
        load(Run, overrides=["grpo.rewards=[exact]"])
    with pytest.raises(ConfigError, match=r"^grpo.num_generations must be >= 2 .*, not 1$"):
        load(Run, overrides=["grpo.num_generations=1"])
