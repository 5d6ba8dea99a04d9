"""What the tests share and are not tests themselves: the XLA worker scripts (*_worker.py,
run as `python -m tests.support.NAME` from the repo root) and their harness (xla_harness.py),
the toy model, the families' parity cases (*_cases.py) and shared preset tests
(family_presets.py), helpers that run `zoo` in a subprocess (runs.py), a custom optimizer,
sharding rule files (data/) and a fake gcloud (fake_gcloud/)."""
