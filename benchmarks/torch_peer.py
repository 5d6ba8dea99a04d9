"""transformers' LlamaForCausalLM trained the way its users train it on one GPU: SDPA
attention, `torch.compile` of the whole model, bf16 autocast over fp32 weights, fused
AdamW. The peer a `zoo train --backend dtensor` step time is set beside, at the same shape
on the same device, with the same FLOPs per token (the family's formula) for MFU:

    python -m benchmarks.torch_peer llama-1b seq_len=2048 global_batch_size=8 --steps 30

Tokens are random ids (the step time does not depend on them). Prints one JSON line."""

from __future__ import annotations

import json
import statistics
import sys
import time

import click
import torch

from benchmarks.peers import hf_llama
from core.backends.dtensor import gpu_bf16_peak
from core.flops import train_flops
from zoo.app.run import resolve_run

WARMUP_STEPS = 3  # compile, then the optimizer's first steps


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("model_name")
@click.argument("overrides", nargs=-1)
@click.option("--steps", default=30, show_default=True)
@click.option("--compile/--no-compile", "compiled", default=True, show_default=True)
def main(model_name, overrides, steps, compiled):
    run = resolve_run(model_name, list(overrides))
    family, cfg = run.family, run.config
    if family.name != "llama":
        raise click.UsageError(f"the torch peer is transformers' Llama; {model_name} is not one")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = hf_llama(cfg.model, seed=cfg.seed).to(device)
    model.config._attn_implementation = "sdpa"
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr,
                                  fused=device.type == "cuda")
    step_fn = torch.compile(model) if compiled else model
    ids = torch.randint(0, cfg.model.vocab_size, (cfg.global_batch_size, cfg.seq_len),
                        device=device)
    times = []
    for _ in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = step_fn(ids)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(),
                                                 ids[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        float(loss.detach())  # waits for the step
        times.append(time.perf_counter() - start)
    step_time = statistics.median(times[WARMUP_STEPS:])
    tokens = cfg.global_batch_size * cfg.seq_len
    flops = train_flops(family.forward_flops(cfg)) * tokens
    result = {"peer": "transformers LlamaForCausalLM, sdpa, torch.compile" if compiled else
              "transformers LlamaForCausalLM, sdpa", "model": model_name,
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "tokens_per_step": tokens,
              "median_step_time_s": step_time, "tokens_per_s": tokens / step_time,
              "flops_per_step": flops, "loss": float(loss)}
    if device.type == "cuda":
        result["mfu"] = flops / step_time / gpu_bf16_peak(result["device"])
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
