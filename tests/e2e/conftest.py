"""Fixtures the end-to-end tests share across files."""

import pytest

from tests.support.runs import side_by_side, trained_run, zoo


@pytest.fixture(scope="session")
def pretrained_run(tmp_path_factory):
    """A short pretraining run of llama-tiny: where the fine-tuning tests start from (SFT,
    LoRA, DPO), trained once for all of them."""
    return trained_run(tmp_path_factory, ["llama-tiny", "--tpu", "cpu-1", "--steps", "2",
                                          "seq_len=128", "checkpoint_every=2"])


LORA_TARGETS = "lora.targets=[q_proj,v_proj,o_proj,down_proj]"
TUNED_WITH_ADAPTERS = ["task=sft", "lora.rank=8", LORA_TARGETS, "log_every=1", "seq_len=128",
                       "checkpoint_every=2", "optim.lr=1e-2"]  # 4 steps, all in the warm-up


@pytest.fixture(scope="session")
def tuned_with_adapters(pretrained_run, tmp_path_factory):
    """The pretrained run tuned on the shipped instructions (`task=sft`) with LoRA adapters,
    4 steps on each backend side by side: xla on 4 devices with 2 micro-batches a step,
    stopped after step 2 and resumed (LoRA under a scanned stack: qwen3moe's experts in
    tests/e2e/test_hf_families.py) (the lr is all warm-up, so --steps
    does not change it); dtensor with 2 processes, unrolled. {backend: (run folder, the
    last command's result)}: tests/e2e/test_sft.py and tests/e2e/test_lora.py read them."""
    folder = tmp_path_factory.mktemp("tuned")
    runs = {"xla": ["--tpu", "cpu-4", "grad_accum=2"],
            "dtensor": ["--backend", "dtensor", "--nproc", "2"]}

    def train(name, *args):
        common = ("train", "--init-from", str(pretrained_run), *TUNED_WITH_ADAPTERS, *args,
                  "--out", str(folder / name))
        if name == "xla":
            first = zoo(*common, "--steps", "2")
            assert first.returncode == 0, first.stderr[-3000:]
        return zoo(*common, "--steps", "4")

    results = side_by_side([(name, *args) for name, args in runs.items()], run=train)
    assert "resuming from step 2" in results[0].stdout
    return {name: (folder / name, result) for name, result in zip(runs, results)}
