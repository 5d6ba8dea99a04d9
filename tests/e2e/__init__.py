"""End-to-end runs of the `zoo` CLI: train, export, eval, bench and new-model."""
