"""The in-process half of tests/e2e/test_lora.py: a LoRA run of llama-tiny trained by the
engine itself, so the test sees what the run changed on the device, which its checkpoints
(adapters only) cannot show: every base weight bit for bit, the gradients, the optimizer.

    python -m tests.support.lora_worker OUT_DIR REPORT.json KEY=VALUE...
"""

import json
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402

from zoo.app.run import resolve_run  # noqa: E402
from zoo.app.train import build_engine  # noqa: E402


def main(out: str, report: str, overrides: list[str]) -> None:
    run = resolve_run("llama-tiny", [f"out={out}", *overrides])
    run, engine = build_engine(run)
    model = engine.model
    before = {name: param.detach().cpu().clone() for name, param in model.named_parameters()}
    engine.fit()
    trained = {name for name, param in model.named_parameters() if param.requires_grad}
    after = {name: param.detach().cpu() for name, param in model.named_parameters()}
    state = engine.optimizer.state
    names = {id(param): name for name, param in model.named_parameters()}
    found = {
        "trained": sorted(trained),
        "changed": sorted(n for n in after if not torch.equal(before[n], after[n])),
        "frozen": len(after) - len(trained),
        "optimizer_holds": sorted(names[id(p)] for p in state),
        "frozen_grads": [n for n, p in model.named_parameters()
                         if not p.requires_grad and p.grad is not None],
    }
    with open(report, "w") as file:
        json.dump(found, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
