"""Kinds of training (core/task.py says what a task provides): a family names the one its
models train, e.g. `task=CAUSAL_LM`; a module here declaring `VARIANT` (variant.py) adds one
picked with `task=NAME` on top of it (sft.py, dpo.py). Their data is zoo/data's."""
