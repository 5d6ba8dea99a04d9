"""Kinds of training (core/task.py says what a task provides): a family names the one its
models train, e.g. `task=CAUSAL_LM`."""
