"""A family's parity config under every sharding x remat preset on 8 XLA CPU devices, and
the references on 1, for the family tests (test_vit.py, test_t5.py). The family's
cases module names FAMILY, CONFIG, MESHES (preset -> mesh), REMATS, batch() and
forward(model, batch) -> (loss, logits).
Usage: python tests/preset_worker.py OUT.pt CASES_MODULE"""

import importlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from xla_harness import sharded_loss_and_grads  # noqa: E402

from zoo.core import config  # noqa: E402
from zoo.core.mesh import MeshConfig  # noqa: E402
from zoo.core.remat import RematConfig  # noqa: E402
from zoo.core.sharding import ShardingRules  # noqa: E402

# The 1-device runs the family tests read: transformers parity with scan off and on, and
# the baseline every 8-device preset is compared with.
SINGLE_DEVICE_REFERENCES = [("fsdp", "none"), ("fsdp", "scan")]


def remat_preset(family, name: str) -> RematConfig:
    return config.load(RematConfig, files=[family.preset("remat", name)])


def run(cases, preset: str, remat: str) -> dict:
    logits = {}

    def loss_fn(model, b):
        loss, logits["value"] = cases.forward(model, b)
        return loss

    single = xr.global_runtime_device_count() == 1
    family = cases.FAMILY
    result = sharded_loss_and_grads(
        family.build(cases.CONFIG, seed=0), loss_fn, cases.batch(),
        ShardingRules.from_yaml(family.preset("sharding", preset)), remat_preset(family, remat),
        MeshConfig() if single else cases.MESHES[preset])
    result["logits"] = logits["value"].detach().cpu()
    return result


def main(out: str, cases_module: str):
    xr.use_spmd()
    cases = importlib.import_module(cases_module)
    devices = xr.global_runtime_device_count()
    combos = [(p, r) for p in cases.MESHES for r in cases.REMATS]
    if devices == 1:  # only the references the tests compare with: keeps them fast
        combos = [combo for combo in combos if combo in SINGLE_DEVICE_REFERENCES]
    results = {combo: run(cases, *combo) for combo in combos}
    torch.save({"devices": devices, "results": results}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
