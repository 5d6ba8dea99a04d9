"""Micro-benchmarks (pytest-benchmark) on one XLA device; not part of the default test run:

    .venv/bin/python -m pytest -n 0 tests/benchmarks -m benchmark --benchmark-only

Each round runs forward+backward, syncs and waits for the device, so a round is one step.
Compilation happens in the warm-up call before timing.
"""

import os

import pytest

pytestmark = pytest.mark.benchmark

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import torch  # noqa: E402

from core.attention import causal_attention  # noqa: E402
from core.backends.xla.runtime import device, sync_and_wait  # noqa: E402
from zoo.common.feed_forward import SwiGLU  # noqa: E402
from zoo.llama.config import LlamaConfig  # noqa: E402
from zoo.llama.model import LlamaDecoderLayer  # noqa: E402

CONFIG = LlamaConfig()  # llama-tiny: hidden 256, 8 heads, 4 KV heads
BATCH, SEQ = 8, 256


def device_step(fn, *inputs):
    def run():
        out = fn(*inputs)
        out.float().pow(2).mean().backward()
        sync_and_wait()

    run()  # compile outside the timed rounds
    return run


def xla(*shape):
    return torch.randn(*shape, device=device(), requires_grad=True)


@pytest.mark.parametrize("impl", ["zoo", "sdpa"])
def test_attention(benchmark, impl):
    heads, dim = CONFIG.num_attention_heads, CONFIG.dim_per_head
    q, k, v = (xla(BATCH, heads, SEQ, dim) for _ in range(3))
    fn = causal_attention if impl == "zoo" else (
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    benchmark(device_step(fn, q, k, v))


def test_mlp_block(benchmark):
    mlp = SwiGLU(CONFIG).to(device())
    benchmark(device_step(mlp, xla(BATCH, SEQ, CONFIG.hidden_size)))


def test_decoder_layer(benchmark):
    layer = LlamaDecoderLayer(CONFIG).to(device())
    dim = CONFIG.dim_per_head
    cos = torch.ones(SEQ, dim, device=device())
    sin = torch.zeros(SEQ, dim, device=device())
    benchmark(device_step(layer, xla(BATCH, SEQ, CONFIG.hidden_size), cos, sin))


def test_tiny_train_step(benchmark):
    from zoo.llama.family import FAMILY

    model = FAMILY.build(CONFIG).to(device())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, CONFIG.vocab_size, (BATCH, SEQ)).to(device())

    def step():
        from zoo.tasks.causal_lm import causal_lm_loss

        causal_lm_loss(model(ids), ids).backward()
        optimizer.step()
        optimizer.zero_grad()
        sync_and_wait()

    step()
    step()  # optimizer state appears: second compile
    benchmark(step)
