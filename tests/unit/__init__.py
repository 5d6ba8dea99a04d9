"""Fast tests: in-process checks and quick CLI calls; no multi-device workers, no training."""
