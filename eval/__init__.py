"""Checkpoints out of training: Hugging Face export and lm-eval evaluation."""
