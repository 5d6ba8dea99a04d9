"""Checkpoints out of the trainer: Hugging Face export and lm-eval evaluation."""
