"""A full-tune DPO step compiled by libtpu (compile-only) for v5p-8 holds its frozen
reference copy among the program's arguments, as many bytes per chip as the analytic plan
counts for it: analytic and compiled agree on what the task places (core.task.Task.placed).
Before the trace bound the task as `zoo train` does, the compiled step read the policy's
own weights as its reference and its arguments were the plain step's (15.05 MiB here
against 20.04 analytic with the copy)."""

from tests.multidevice.test_tpu_compile import compile_cases

REFERENCE = "reference model (frozen copy)"


def test_the_compiled_dpo_step_holds_the_reference_the_plan_counts(tmp_path):
    (record,) = compile_cases([("v5p-8", [["llama-tiny", ["task=dpo", "sharding=fsdp",
                                                          "remat=none"]]])], tmp_path)["v5p-8"]
    analytic, compiled = record["hbm_per_chip"]["analytic"], record["hbm_per_chip"]["compiled"]
    persistent = sum(v for k, v in analytic.items()
                     if k.startswith(("parameters", "optimizer")) or k == REFERENCE)
    assert analytic[REFERENCE] == analytic["parameters (fp32)"]
    # the arguments: the persistent state and the batch (a few KiB of token ids)
    assert 0 <= compiled["arguments"] - persistent < 2**20, (compiled, analytic)
    assert record["fits"]
