"""Rewards as data: what GRPO (zoo/tasks/grpo_objective.py) pays each completion, named in
the config and scored on the host.

    grpo.rewards=[final_number,format] grpo.reward_weights=[1.0,0.2]
    grpo.rewards=[exact_match,my_rewards:brevity]

A reward is a built-in or the user's `module:function` (the module imported from the working
directory or the Python path) with TRL's signature, so TRL reward functions work unchanged:

    def brevity(prompts, completions, completion_ids, **columns) -> list[float]: ...

one float per completion; `prompts` and `completions` are strings, or for chat prompts lists
of messages (a completion: one assistant message); `columns` are the data rows' other
columns, each a list aligned with the completions. The built-ins:

    exact_match   1 when the completion, stripped, is the answer column's value, stripped
    final_number  1 when the completion's final number is the answer's: the number after
                  the last "####" (as GSM8K writes it), else the last number in the text;
                  commas dropped, 42.0 == 42
    format        1 when the whole completion (stripped) matches grpo.format_regex

The step's reward is the weighted sum. A module that does not import, a name that is not a
function, a function that raises on a row (named), or returns anything but one finite number
per completion is refused in one line.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import numbers
import re
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import torch

from core.errors import UserError

NUMBER = re.compile(r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")
SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class RewardError(UserError):
    """A reward that cannot be loaded, or that fails to score a batch of completions."""


@dataclasses.dataclass(frozen=True)
class Reward:
    name: str  # as the config names it: a built-in, or module:function
    function: Callable  # TRL's signature: (prompts, completions, completion_ids, **columns)
    weight: float


def text_of(message) -> str:
    """A prompt's or completion's text: itself, or a list of messages' last content."""
    return message[-1]["content"] if isinstance(message, list) else message


def final_number(text: str) -> Decimal | None:
    """The number after the last "####", else the last number in `text`, commas dropped;
    None when there is none."""
    head, mark, tail = str(text).rpartition("####")
    found = NUMBER.findall(tail)
    if not found:
        return None
    return Decimal(found[0 if mark else -1].replace(",", ""))


def exact_match(completions: list, answers: list) -> list[float]:
    return [float(text_of(c).strip() == str(a).strip()) for c, a in zip(completions, answers)]


def same_final_number(completions: list, answers: list, field: str) -> list[float]:
    expected = [final_number(answer) for answer in answers]
    if None in expected:
        answer = str(answers[expected.index(None)])
        raise ValueError(f"its answer ('{field}': {answer[:60]!r}) holds no number; fix the "
                         "row or use another reward")
    return [float(final_number(text_of(c)) == e) for c, e in zip(completions, expected)]


def matches_format(completions: list, pattern: str) -> list[float]:
    compiled = re.compile(pattern, re.DOTALL)
    return [float(compiled.fullmatch(text_of(c).strip()) is not None) for c in completions]


BUILT_IN = ("exact_match", "final_number", "format")


def check_reward_specs(specs: list[str], weights: list[float] | None, format_regex: str) -> None:
    """The config's reward names, weights and format regex, as written (the functions are
    loaded later, by `load_rewards`); ValueError with one line otherwise."""
    if not specs:
        raise ValueError("grpo.rewards is empty; name at least one reward: "
                         f"{', '.join(BUILT_IN)} or module:function")
    for spec in specs:
        if spec not in BUILT_IN and not SPEC.fullmatch(spec):
            raise ValueError(f"grpo.rewards: {spec!r} is neither a built-in reward "
                             f"({', '.join(BUILT_IN)}) nor module:function (e.g. "
                             "my_rewards:brevity)")
    repeated = next((spec for spec in specs if specs.count(spec) > 1), None)
    if repeated:
        raise ValueError(f"grpo.rewards names {repeated} twice; give it once (with a weight "
                         "in grpo.reward_weights)")
    if weights is not None:
        if len(weights) != len(specs):
            raise ValueError(f"grpo.reward_weights has {len(weights)} weights for "
                             f"{len(specs)} rewards ({', '.join(specs)}); give one each")
        bad = next((w for w in weights if not math.isfinite(w)), None)
        if bad is not None:
            raise ValueError(f"grpo.reward_weights must be finite numbers, not {bad}")
    try:
        re.compile(format_regex)
    except re.error as error:
        raise ValueError(f"grpo.format_regex {format_regex!r} is not a regular expression "
                         f"({error})") from None


def load_rewards(specs: list[str], weights: list[float] | None, answer_field: str,
                 columns: list[str], format_regex: str) -> list[Reward]:
    """The configured rewards, ready to score rows with `columns`: a built-in that reads the
    answer column needs it there; a module:function must import and be callable."""
    weights = [1.0] * len(specs) if weights is None else weights
    return [Reward(spec, _function(spec, answer_field, columns, format_regex), float(weight))
            for spec, weight in zip(specs, weights)]


def _function(spec: str, answer_field: str, columns: list[str], format_regex: str) -> Callable:
    if spec == "format":
        return lambda prompts, completions, **_: matches_format(completions, format_regex)
    if spec in BUILT_IN:
        if answer_field not in columns:
            raise RewardError(f"reward {spec} compares with the answer column "
                              f"'{answer_field}', which the prompt data lacks (columns: "
                              f"{', '.join(columns) or 'none'}); set data.answer_field=...")
        if spec == "exact_match":
            return lambda prompts, completions, **row: exact_match(completions, row[answer_field])
        return lambda prompts, completions, **row: same_final_number(
            completions, row[answer_field], answer_field)
    module_name, _, name = spec.partition(":")
    module = _imported(module_name, spec)
    if not hasattr(module, name):
        raise RewardError(f"reward {spec}: module {module_name} has no {name!r}; check the "
                          "name after the colon")
    function = getattr(module, name)
    if not callable(function):
        raise RewardError(f"reward {spec}: {name} is a {type(function).__name__}, not a "
                          "function of (prompts, completions, **columns)")
    return function


def _imported(module_name: str, spec: str):
    """The user's module, imported with the working directory first on the path (where a
    user's reward file usually is)."""
    here = str(Path.cwd())
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        return importlib.import_module(module_name)
    except Exception as error:  # the user's module: whatever it raises is its one line
        raise RewardError(f"reward {spec}: module {module_name} does not import "
                          f"({_first_line(error)})") from None
    finally:
        if added:
            sys.path.remove(here)


@dataclasses.dataclass(frozen=True)
class Scores:
    """Every reward's score of every completion, and their weighted sum."""

    names: list[str]
    per_reward: torch.Tensor  # float32 [N, R]
    total: torch.Tensor  # float32 [N]: sum of weight x score

    def metrics(self) -> dict[str, float]:
        """TRL's reward metrics: each reward's mean and std, the total's mean and std."""
        found = {}
        for i, name in enumerate(self.names):
            found[f"rewards/{name}/mean"] = self.per_reward[:, i].mean().item()
            found[f"rewards/{name}/std"] = self.per_reward[:, i].std().item()
        return found | {"reward": self.total.mean().item(), "reward_std": self.total.std().item()}


def score(rewards: list[Reward], prompts: list, completions: list, columns: dict[str, list],
          completion_ids: list[list[int]] | None = None,
          where: list[str] | None = None) -> Scores:
    """Each reward of each completion: `prompts` (repeated, one per completion), `columns`
    (the rows' other columns, aligned the same), `where` one label per completion for
    errors (e.g. "data.jsonl row 12, completion 3"; default its place in the batch)."""
    count = len(completions)
    where = where or [f"completion {i + 1} of the batch" for i in range(count)]
    per_reward = torch.tensor(
        [_scored(reward, prompts, completions, completion_ids, columns, where)
         for reward in rewards], dtype=torch.float64).T.reshape(count, len(rewards))
    weights = torch.tensor([reward.weight for reward in rewards], dtype=torch.float64)
    return Scores([reward.name for reward in rewards], per_reward.float(),
                  (per_reward * weights).sum(dim=1).float())


def _scored(reward: Reward, prompts: list, completions: list,
            completion_ids: list[list[int]] | None, columns: dict[str, list],
            where: list[str]) -> list[float]:
    try:
        found = _called(reward, prompts, completions, completion_ids, columns)
    except Exception as error:  # the user's function: whatever it raises is its one line
        raise _raised_on(reward, prompts, completions, completion_ids, columns, where,
                         error) from None
    if isinstance(found, torch.Tensor):
        found = found.tolist()
    if isinstance(found, str | bytes) or not hasattr(found, "__len__"):
        raise RewardError(f"reward {reward.name} returned a {type(found).__name__}, not a "
                          f"list of {len(completions)} numbers (one per completion)")
    if len(found) != len(completions):
        raise RewardError(f"reward {reward.name} returned {len(found)} rewards for "
                          f"{len(completions)} completions; return one per completion")
    for value, label in zip(found, where):
        if not isinstance(value, numbers.Real):
            raise RewardError(f"reward {reward.name} returned {value!r} "
                              f"({type(value).__name__}) for {label}; return a number for "
                              "every completion")
        if not math.isfinite(value):
            raise RewardError(f"reward {reward.name} returned {value} for {label}; return a "
                              "finite number for every completion")
    return [float(value) for value in found]


def _called(reward: Reward, prompts, completions, completion_ids, columns) -> list:
    ids = {} if completion_ids is None else {"completion_ids": completion_ids}
    return reward.function(prompts=prompts, completions=completions, **ids, **columns)


def _raised_on(reward: Reward, prompts, completions, completion_ids, columns, where,
               error: Exception) -> RewardError:
    """The error naming the first completion the function raises on alone (called one row
    at a time to find it), or the batch when no single row makes it raise."""
    for i, label in enumerate(where):
        try:
            _called(reward, _row(prompts, i), _row(completions, i), _row(completion_ids, i),
                    {key: _row(values, i) for key, values in columns.items()})
        except Exception as alone:  # the user's function again
            return RewardError(f"reward {reward.name} raised on {label}: {_first_line(alone)}")
    return RewardError(f"reward {reward.name} raised on the batch of {len(where)} completions "
                       f"(on no single one alone): {_first_line(error)}")


def _row(values: list | None, i: int) -> list | None:
    return None if values is None else values[i:i + 1]


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
