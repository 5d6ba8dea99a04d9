"""Llama on XLA CPU devices, for tests/test_llama.py: on 1 device, every parity config with
scan off and on; on any count, every sharding x remat preset of zoo/llama.
Usage: python tests/llama_worker.py OUT.pt"""

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
from zoo.llama.config import LlamaConfig, RopeScaling  # noqa: E402
from zoo.llama.family import FAMILY  # noqa: E402
from zoo.tasks.causal_lm import causal_lm_loss  # noqa: E402

SMALL = dict(
    vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4
)
PARITY_CONFIGS = {
    "mha": LlamaConfig(**SMALL, num_key_value_heads=4),
    "gqa": LlamaConfig(**SMALL, num_key_value_heads=2),
    "tied": LlamaConfig(**SMALL, num_key_value_heads=2, tie_word_embeddings=True),
    "rope_scaling": LlamaConfig(
        **SMALL,
        num_key_value_heads=1,
        rope_scaling=RopeScaling(factor=8.0, original_max_position_embeddings=16),
    ),
}
PRESET_CONFIG = PARITY_CONFIGS["gqa"]
MESHES = {"fsdp": MeshConfig(), "fsdp_tensor": MeshConfig(tensor=2)}
REMATS = ["none", "checkpoint", "scan", "scan_checkpoint"]


def batch(vocab: int):
    ids = torch.randint(0, vocab, (8, 32), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, :5] = -100  # masked positions must not count
    return {"input_ids": ids, "labels": labels}


def run(cfg: LlamaConfig, preset: str, remat: RematConfig) -> dict:
    single = xr.global_runtime_device_count() == 1
    logits = {}

    def loss_fn(model, b):
        logits["value"] = model(b["input_ids"])
        return causal_lm_loss(logits["value"], b["labels"])

    result = sharded_loss_and_grads(
        FAMILY.build(cfg, seed=0),
        loss_fn,
        batch(cfg.vocab_size),
        ShardingRules.from_yaml(FAMILY.preset("sharding", preset)),
        remat,
        MeshConfig() if single else MESHES[preset],
    )
    result["logits"] = logits["value"].detach().cpu()
    return result


def remat_preset(name: str) -> RematConfig:
    return config.load(RematConfig, files=[FAMILY.preset("remat", name)])


def main(out: str):
    xr.use_spmd()
    results = {
        ("preset", p, r): run(PRESET_CONFIG, p, remat_preset(r)) for p in MESHES for r in REMATS
    }
    if xr.global_runtime_device_count() == 1:
        for name, cfg in PARITY_CONFIGS.items():
            for remat in ("none", "scan"):
                results[("parity", name, remat)] = run(cfg, "fsdp", remat_preset(remat))
    torch.save({"devices": xr.global_runtime_device_count(), "results": results}, out)


if __name__ == "__main__":
    main(sys.argv[1])
