"""zoo: the package, one folder per floor, each path spelling its module (core/engine.py
is core.engine): core (the runtime) <- tasks (kinds of training) <- models (the families)
<- app (runs composed, planned, sampled) <- {benchmarks, eval} <- tools (the `zoo` CLI)."""
