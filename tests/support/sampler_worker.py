"""The device-side half of tests/multidevice/test_sampler.py: the sampler on llama's tiny
parity config, prepared by the xla backend under a sharding preset that fits the process's
XLA:CPU devices.

By default (the default suite's), per device count one mesh (1: fsdp; 4: fsdp=2 x tensor=2,
both batch and head splits) and four calls of one sampler, each with the graphs it
compiled: greedy, greedy with fewer new tokens, sampled (temperature, top-k, top-p, seed)
and sampled again with another temperature, seed and length. `slow` adds the rest: on 4
devices fsdp=4 (greedy twice), on 1 a greedy call in bf16 (the run's evaluation precision)
on the four short prompts. T5 (an encoder-decoder: zoo/t5/generation.py) on the same meshes,
greedy twice, on the prompts folded into its vocabulary. Few calls: every graph is a
compile, the suite's CPU is tight.

    python -m tests.support.sampler_worker OUT.pt [slow]   # PJRT_DEVICE=CPU CPU_NUM_DEVICES=N
    torchrun --nproc-per-node 2 -m tests.support.sampler_worker OUT.pt dtensor   # greedy, + t5
"""

import dataclasses
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402

from core import backends  # noqa: E402
from core.backends.xla.runtime import start  # noqa: E402
from core.mesh import MeshConfig  # noqa: E402
from core.sampler import Sampler, SamplerShape, SamplingParams  # noqa: E402
from core.sharding import ShardingRules  # noqa: E402
from tests.support import llama_cases, t5_cases  # noqa: E402

# six prompts, four rows a call on 1 and 4 devices: the four shortest in bucket 8, then the
# two longest in bucket 16 beside two padding rows
PROMPTS = [[5, 17, 42], [7, 3, 99, 150, 23, 8, 61], [11, 12, 13, 14, 15], [30, 40, 50, 60, 70, 80],
           [200, 1, 9, 77, 31, 64, 12, 5, 88, 19, 2, 4], [9, 8, 7, 6, 5, 4, 3, 2, 1, 100]]
ROWS = 4
BUCKETS = (8, 16)
NEW_TOKENS = 12
CALLS = {
    "greedy": SamplingParams(max_new_tokens=NEW_TOKENS),
    "greedy_shorter": SamplingParams(max_new_tokens=NEW_TOKENS - 4),
    "sampled": SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.8, top_k=20, top_p=0.9,
                              seed=3),
    "sampled_again": SamplingParams(max_new_tokens=NEW_TOKENS - 2, temperature=0.6, top_k=20,
                                    top_p=0.9, seed=5),
}
GREEDY = ("greedy", "greedy_shorter")
SHORT = [prompt for prompt in PROMPTS if len(prompt) <= BUCKETS[0]]
MESHES = {1: {"fsdp": MeshConfig()}, 4: {"fsdp_tensor": MeshConfig(tensor=2)}}
SLOW_MESHES = {1: {}, 4: {"fsdp": MeshConfig()}}
T5_PROMPTS = [[3 + token % 90 for token in prompt] for prompt in PROMPTS]


def config():
    return dataclasses.replace(llama_cases.CONFIG, attention="plain")


def sampler(backend, preset: str, mesh_config: MeshConfig, bf16: bool,
            family=llama_cases.FAMILY, model_config=None) -> Sampler:
    model_config = model_config or config()
    rules = ShardingRules.from_yaml(family.preset("sharding", preset))
    model, plan, mesh, sizes = backend.prepare(family.build(model_config, seed=0), rules,
                                               mesh_config, bf16)
    shape = SamplerShape.for_model(model_config, ROWS, NEW_TOKENS, max(map(len, PROMPTS)),
                                   sizes, BUCKETS)
    return Sampler(model, family.cache_layout(model_config), shape=shape, backend=backend,
                   mesh=mesh, plan=plan, bf16=bf16)


def outputs(completions) -> dict:
    return {"tokens": completions.tokens, "logprobs": completions.logprobs,
            "finish": completions.finish, "compiles": completions.timings.compiles}


def run_mesh(backend, preset: str, mesh_config: MeshConfig, calls) -> dict:
    fp32 = sampler(backend, preset, mesh_config, bf16=False)
    found = {name: outputs(fp32.generate(PROMPTS, CALLS[name])) for name in calls}
    found["sampler_compiles"] = fp32.compiles[0]
    found["rows"] = fp32.shape.rows
    return found


def main(out: str, mode: str = "default"):
    if mode == "dtensor":  # each process its contiguous rows, FSDP2 gathering weights
        backend = backends.get("dtensor")
        found = {"llama": outputs(sampler(backend, "fsdp", MeshConfig(), bf16=False).generate(
            PROMPTS, CALLS["greedy"]))}
        t5 = sampler(backend, "fsdp", MeshConfig(), False, t5_cases.FAMILY, t5_cases.CONFIG)
        found["t5"] = outputs(t5.generate(T5_PROMPTS, CALLS["greedy"]))
        if backend.process_index() == 0:
            torch.save(found, out)
        return
    start()
    backend = backends.get("xla")
    devices = backend.device_count()
    meshes, calls = (SLOW_MESHES, GREEDY) if mode == "slow" else (MESHES, tuple(CALLS))
    results = {preset: run_mesh(backend, preset, mesh_config, calls)
               for preset, mesh_config in meshes[devices].items()}
    if mode == "default":
        for preset, mesh_config in MESHES[devices].items():
            t5 = sampler(backend, preset, mesh_config, False, t5_cases.FAMILY, t5_cases.CONFIG)
            results[f"t5 {preset}"] = {name: outputs(t5.generate(T5_PROMPTS, CALLS[name]))
                                       for name in GREEDY}
    if mode == "slow" and devices == 1:
        bf16 = sampler(backend, "fsdp", MeshConfig(), bf16=True)
        results["bf16"] = outputs(bf16.generate(SHORT, CALLS["greedy"]))
    torch.save(results, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
