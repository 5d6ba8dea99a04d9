"""zoo: the package, one folder per floor, each path spelling its module (zoo/core/engine.py
is zoo.core.engine): core (the runtime) <- tasks (kinds of training) <- models (the families)
<- app (runs composed, planned, sampled) <- {benchmarks, eval} <- tools (the `zoo` CLI)."""
