"""Each family's preset config under every sharding x remat preset on 8 XLA CPU devices, and
the references on 1, for the family preset tests (tests/multidevice/test_*_presets.py, see
family_presets.py). A family's cases module names FAMILY, CONFIG (the config the presets
run on), PARITY_CONFIGS (name -> config checked against transformers), MESHES (preset ->
mesh), REMATS, batch() and forward(model, batch) -> (loss, logits).

Every family the session selected runs in one process per device count: a process's
start-up (torch, torch_xla, transformers) costs more than a tiny family's runs.
Saves {"devices": N, "families": {CASES_MODULE: {"parity": {(name, remat): result},
"presets": {(preset, remat): result}}}} for the cases the session selected: on 1 device the
selected parity runs and the ("fsdp", "none") baseline of the presets (shared with CONFIG's
parity run when CONFIG is a parity config); on more, the selected presets of CONFIG.
Usage (from the repo root): python -m tests.support.preset_worker OUT.pt SELECTED
(SELECTED: JSON {CASES_MODULE: {"parity": [[name, remat], ...], "presets": [[preset, remat],
...]}})"""

import importlib
import json
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

from core.mesh import MeshConfig  # noqa: E402
from core.sharding import ShardingRules  # noqa: E402
from tests.support.xla_harness import sharded_loss_and_grads  # noqa: E402

# The remat presets of the 1-device transformers parity runs, and the 1-device baseline
# every 8-device preset is compared with.
PARITY_REMATS = ("none", "scan")
BASELINE = ("fsdp", "none")


def run(cases, model_config, preset: str, remat: str) -> dict:
    logits = {}

    def loss_fn(model, b):
        loss, logits["value"] = cases.forward(model, b)
        return loss

    single = xr.global_runtime_device_count() == 1
    family = cases.FAMILY
    result = sharded_loss_and_grads(
        family.build(model_config, seed=0), loss_fn, cases.batch(),
        ShardingRules.from_yaml(family.preset("sharding", preset)), family.remat(remat),
        MeshConfig() if single else cases.MESHES[preset])
    result["logits"] = logits["value"].detach().cpu()
    return result


def single_device_runs(cases, parity_cases: list) -> dict:
    parity = {(name, remat): run(cases, cases.PARITY_CONFIGS[name], BASELINE[0], remat)
              for name, remat in parity_cases}
    same = [name for name, model_config in cases.PARITY_CONFIGS.items()
            if model_config is cases.CONFIG and (name, "none") in parity]
    baseline = parity[(same[0], "none")] if same else run(cases, cases.CONFIG, *BASELINE)
    return {"parity": parity, "presets": {BASELINE: baseline}}


def main(out: str, selected: str):
    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    families = {}
    for cases_module, cases_selected in json.loads(selected).items():
        cases = importlib.import_module(cases_module)
        pairs = {kind: [tuple(pair) for pair in value] for kind, value in cases_selected.items()}
        if devices == 1:  # only the references the tests compare with: keeps them fast
            families[cases_module] = single_device_runs(cases, pairs["parity"])
        else:
            families[cases_module] = {"parity": {}, "presets": {
                (p, r): run(cases, cases.CONFIG, p, r) for p, r in pairs["presets"]}}
    torch.save({"devices": devices, "families": families}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
