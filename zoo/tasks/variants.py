"""The tasks a family's models can be trained for besides their own, chosen with
`task=NAME`: every causal LM (llama, mixtral, a family a user adds whose task is a
zoo.tasks.causal_lm.CausalLM) can be fine-tuned on instructions (`task=sft`) and tuned on
preferences (`task=dpo`)."""

from __future__ import annotations

from core.task import Task
from zoo.tasks.causal_lm import CausalLM
from zoo.tasks.dpo import DirectPreference
from zoo.tasks.sft import SupervisedFineTuning


def variants_of(task: Task, model_cls: type) -> dict[str, Task]:
    """{name: task} built on the family's own `task` for its models (`model_cls`)."""
    if isinstance(task, CausalLM):
        return {"sft": SupervisedFineTuning(task, model_cls), "dpo": DirectPreference(task)}
    return {}
