"""Runs inside MaxText's environment (its Python, JAX and libtpu; no zoo, no torch): compiles
MaxText's own train step with its `train_compile` for a TPU topology, then zoo's traced step
(an HLO text file) on the same compile-only devices, so ONE libtpu compiles both programs.
Prints one JSON record: versions, and per side the compiler's figures and the file its
optimized HLO text went to (zoo counts both texts with one piece of code).

    python -P maxtext_compile_worker.py SPEC.json   (-P: nothing in this folder shadows a
                                                      module of MaxText's environment)
    SPEC: {"zoo_hlo": file, "maxtext_args": [base.yml, key=value, ...], "out": folder}
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import json
import sys
import time
from pathlib import Path

LIBTPU_COMPILE = Path(__file__).resolve().parent / "libtpu_compile.py"


def load_libtpu_compile():
    """benchmarks/plan/libtpu_compile.py by path: zoo is not installed here."""
    spec = importlib.util.spec_from_file_location("libtpu_compile", LIBTPU_COMPILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_maxtext(args: list[str], compiler) -> tuple[dict, str, list]:
    """MaxText's train step compiled by its own `train_compile` (its `jit_and_compile`
    wrapped to keep the compiled object and time the compile proper, not the tracing):
    (figures or the compiler's refusal, optimized HLO text, the topology's devices)."""
    import jax  # jax
    from maxtext.trainers.pre_train import train_compile  # maxtext

    original, lower_compile = train_compile.jit_and_compile, jax.stages.Lowered.compile
    seen: dict = {}

    def timed_compile(self, *a, **k):
        seen["start"] = time.perf_counter()
        return lower_compile(self, *a, **k)

    def capture(*a, **k):
        mesh = inspect.signature(original).bind(*a, **k).arguments["mesh"]
        seen["devices"] = sorted(mesh.devices.flat, key=lambda device: device.id)
        seen["compiled"] = original(*a, **k)
        return seen["compiled"]

    train_compile.jit_and_compile, jax.stages.Lowered.compile = capture, timed_compile
    try:
        train_compile.main(["train_compile", *args])
    except Exception as error:  # the compiler's refusal (out of HBM) is a result
        if "start" not in seen:
            raise
        return ({"error": str(error), "compile_seconds": time.perf_counter() - seen["start"]},
                "", seen["devices"])
    finally:
        train_compile.jit_and_compile, jax.stages.Lowered.compile = original, lower_compile
    seconds = time.perf_counter() - seen["start"]
    compiled = seen["compiled"]
    stats = compiler.executable_stats(compiled.memory_analysis(), compiled.cost_analysis(),
                                      seconds)
    return stats, compiled.as_text(), seen["devices"]


def main(spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text())
    out = Path(spec["out"])
    compiler = load_libtpu_compile()
    # MaxText first: it sets its libtpu flags before the compiler starts
    maxtext, maxtext_text, devices = compile_maxtext(spec["maxtext_args"], compiler)
    zoo, zoo_text = compiler.compile_text(Path(spec["zoo_hlo"]).read_text(), devices)
    record = {"versions": {name: importlib.metadata.version(name)
                           for name in ("libtpu", "jax", "jaxlib", "maxtext")},
              "platform_version": devices[0].client.platform_version}
    for side, stats, text in (("zoo", zoo, zoo_text), ("maxtext", maxtext, maxtext_text)):
        (out / f"{side}.compiled.hlo").write_text(text)
        record[side] = {**stats, "hlo_file": str(out / f"{side}.compiled.hlo")}
    print(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1])
