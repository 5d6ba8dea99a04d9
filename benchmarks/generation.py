"""Generation entries of `zoo bench` (a suite entry with `max_new_tokens`, e.g. the `generate`
suite): prefill and decode tokens/s of the device sampler (core/sampler) on the entry's
devices, and with `--compare hf` of transformers' `generate` on the host CPU, on the same
weights, prompts and new tokens.

An entry asks for `global_batch_size` prompts of `seq_len` random ids each (seeded, so every
process draws the same ones), greedy, and exactly `max_new_tokens` new tokens a prompt: no
stop id on either side, so no row ends early. The weights are the entry's model initialised
from its seed on the host; the sampler loads them as `zoo generate` loads a run's, and
transformers' class loads them as `zoo generate --host` does. With `--compare hf` both sides
run in the zoo worker's process, their calls alternating, so a neighbour's load falls on both
alike. One untimed call each first (the sampler compiles its prefill and its decode step),
then `steps` timed calls each, every call split in two:

- zoo: the sampler's own timings. Prefill: the prompts' forward and each row's first token,
  waited for; decode: the `max_new_tokens - 1` decode steps after it.
- hf: one `generate` call whose logits processor notes the time it is first called, right
  after the prompts' forward. Prefill: the call's start to that moment; decode: that moment
  to the call's end, the `max_new_tokens - 1` forwards after the first.

Prefill tokens/s = prompt tokens / prefill s; decode tokens/s = the tokens decode steps made
(prompts x (max_new_tokens - 1)) / decode s. Each record carries a digest of the generated ids:
equal digests say both sides did the same work, which a ratio needs to mean anything."""

from __future__ import annotations

import abc
import hashlib
import json
import statistics
import time

import torch

from benchmarks.suite import Entry
from core import topology
from core.errors import UserError

KIND = "generate"  # a record's `kind`: what it measured (training records have none)


def prompts(entry: Entry, vocab_size: int) -> list[list[int]]:
    """The entry's prompts: `global_batch_size` x `seq_len` ids drawn from a fixed seed."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab_size, (entry.global_batch_size, entry.seq_len),
                        generator=generator)
    return ids.tolist()


def host_weights(run) -> dict[str, torch.Tensor]:
    """The entry's model initialised from its seed on the host, as a run's checkpoint holds it
    (Hugging Face names): what both sides load."""
    family, cfg = run.family, run.config
    if family.cache_layout is None:
        raise UserError(f"{family.name} has no device sampler (no cache layout): it cannot be "
                        "a generation entry")
    return family.build(cfg.model, seed=cfg.seed).state_dict()


def measure(entry: Entry, steps: int, peer: str | None, profile_dir: str | None = None,
            beside: str | None = None) -> dict:
    """The worker's raw measurements of a generation entry: zoo's sampler (an XLA profile of
    its timed calls in `profile_dir` when given), or `peer` hf alone. With `beside` hf, both
    in this process, their calls alternating, so a neighbour's load falls on both alike:
    {"sides": {"zoo": raw, "hf": raw}}."""
    run = entry.run()
    ids = prompts(entry, run.config.model.vocab_size)
    weights = host_weights(run)
    sides = {"hf": _HFSide(run, weights, ids, entry)} if peer == "hf" else \
        {"zoo": _ZooSide(run, weights, ids, entry)}
    if peer is None and beside == "hf":
        sides["hf"] = _HFSide(run, weights, ids, entry)
    for side in sides.values():
        side.warm()
    profiled = profile_dir and "zoo" in sides
    if profiled:
        from core.backends.xla.profile import start_trace  # torch_xla

        start_trace(profile_dir)
    for _ in range(steps):
        for side in sides.values():
            side.call()
    if profiled:
        from core.backends.xla.profile import stop_trace  # torch_xla

        stop_trace()
    common = {"parameters": sum(w.numel() for w in weights.values()),
              "prompt_tokens": sum(map(len, ids)),
              "decode_tokens": len(ids) * (entry.max_new_tokens - 1)}
    raws = {impl: {**side.facts(), **common} for impl, side in sides.items()}
    return {"sides": raws} if len(raws) > 1 else next(iter(raws.values()))


class _Side(abc.ABC):
    """One implementation's calls: `warm` once (untimed), then `call` per timed call, then
    `facts`: the times of every timed call, the last call's tokens checked and digested."""

    def __init__(self, entry: Entry):
        self.entry = entry
        self.prefill_s: list[float] = []
        self.decode_s: list[float] = []
        self.tokens: list[list[int]] = []
        self.warmup_s = 0.0

    def warm(self) -> None:
        started = time.perf_counter()
        self._generate()
        self.warmup_s = time.perf_counter() - started

    def call(self) -> None:
        prefill_s, decode_s, self.tokens = self._generate()
        self.prefill_s.append(prefill_s)
        self.decode_s.append(decode_s)

    def facts(self) -> dict:
        return {"prefill_s": self.prefill_s, "decode_s": self.decode_s,
                "warmup_s": self.warmup_s, **_tokens_facts(self.tokens, self.entry)}

    @abc.abstractmethod
    def _generate(self) -> tuple[float, float, list[list[int]]]:
        """(prefill s, decode s, each prompt's new tokens) of one call."""


class _ZooSide(_Side):
    """The device sampler on the entry's devices, built as `zoo generate` builds it
    (zoo/app/generate.py load_sampler) from the host weights."""

    def __init__(self, run, weights, ids, entry: Entry):
        from core.sampler import SamplingParams
        from zoo.app.generate import SamplerRows, device_sampler

        super().__init__(entry)
        family, cfg, topo = run.family, run.config, run.topology
        model_config = family.model_for(cfg.model, topo, cfg.mesh)
        model = family.build(model_config, init=False)
        model.load_state_dict(weights)
        self.sampler, self.backend = device_sampler(
            run, model, model_config, topo,
            SamplerRows(len(ids), entry.max_new_tokens, entry.seq_len))
        self.bf16 = cfg.runs_in_bf16(topo)
        self.params = SamplingParams(max_new_tokens=entry.max_new_tokens)  # greedy, no stop
        self.ids = ids
        self.warm_compiles = 0

    def warm(self) -> None:
        super().warm()
        self.warm_compiles = self.sampler.compiles[0]

    def _generate(self):
        out = self.sampler.generate(self.ids, self.params)
        return out.timings.prefill_s, out.timings.decode_s, out.tokens

    def facts(self) -> dict:
        compiles, compile_s = self.sampler.compiles
        return {**super().facts(), "compiles_warmup": self.warm_compiles,
                "compile_s": compile_s, "compiles_timed": compiles - self.warm_compiles,
                "devices": self.backend.device_count(), "bf16": self.bf16}


class _HFSide(_Side):
    """transformers' `generate` on the host CPU, fp32, on the zoo weights loaded into the
    family's transformers class as `zoo generate --host` loads a run's. Its untimed call
    pays the first call's one-off costs (allocations, lazy imports)."""

    def __init__(self, run, weights, ids, entry: Entry):
        import transformers  # transformers

        super().__init__(entry)
        family, cfg = run.family, run.config
        if family.hf_class is None:
            raise UserError(f"{family.name} has no transformers class to compare with")
        transformers.utils.logging.disable_progress_bar()
        self.model = getattr(transformers, family.hf_class).from_pretrained(
            None, config=family.hf_config(cfg.model), state_dict=weights).eval()
        self.model.generation_config.eos_token_id = None  # every row makes all its tokens
        self.batch = torch.tensor(ids)
        self.processors = transformers.LogitsProcessorList

    def _generate(self):
        stamps = FirstCall()
        started = time.perf_counter()
        out = self.model.generate(
            self.batch, attention_mask=torch.ones_like(self.batch), do_sample=False,
            max_new_tokens=self.entry.max_new_tokens, pad_token_id=0,
            logits_processor=self.processors([stamps]))
        ended = time.perf_counter()
        return stamps.at - started, ended - stamps.at, out[:, self.batch.shape[1]:].tolist()

    def facts(self) -> dict:
        return {**super().facts(), "compiles_warmup": 0, "compile_s": 0.0,
                "compiles_timed": 0, "devices": 1, "bf16": False}


class FirstCall:
    """A logits processor that notes when `generate` first calls it: after the prompts'
    forward, before any decode step."""

    def __init__(self):
        self.at: float | None = None

    def __call__(self, input_ids, scores):
        if self.at is None:
            self.at = time.perf_counter()
        return scores


def _tokens_facts(tokens: list[list[int]], entry: Entry) -> dict:
    """The generated ids' digest, refusing a call whose rows did not all make
    `max_new_tokens` (its tokens/s would count work not done)."""
    lengths = sorted({len(row) for row in tokens})
    if lengths != [entry.max_new_tokens]:
        raise UserError(f"{entry.name}: rows made {lengths} new tokens, not "
                        f"{entry.max_new_tokens} each")
    return {"tokens_sha256": hashlib.sha256(json.dumps(tokens).encode()).hexdigest()}


def summarize(entry: Entry, impl: str, raw: dict) -> dict:
    """One results record of a generation entry. `step_time_median_s` is the median decode
    step (all rows, one token each), which the regression gate relates to the suite's
    reference entry as it does a training step."""
    prefill = statistics.median(raw["prefill_s"])
    decode = statistics.median(raw["decode_s"])
    return {
        "kind": KIND,
        "name": entry.name,
        "impl": impl,
        "model": entry.model,
        "tpu": entry.tpu,
        "slices": topology.parse(entry.tpu).slices,
        "sharding": entry.sharding,
        "overrides": entry.overrides,
        "prompts": entry.global_batch_size,
        "prompt_len": entry.seq_len,
        "max_new_tokens": entry.max_new_tokens,
        "parameters": raw["parameters"],
        "devices": raw["devices"],
        "precision": "bf16" if raw["bf16"] else "fp32",
        "compile_s": raw["compile_s"],
        "compiles_warmup": raw["compiles_warmup"],
        "compiles_timed": raw["compiles_timed"],
        "warmup_s": raw["warmup_s"],
        "timed_calls": len(raw["decode_s"]),
        "prefill_s_median": prefill,
        "decode_s_median": decode,
        # every timed call's: a neighbour's load shows as a spread
        "prefill_s": raw["prefill_s"],
        "decode_s": raw["decode_s"],
        "prefill_tokens_per_s": raw["prompt_tokens"] / prefill,
        "decode_tokens_per_s": raw["decode_tokens"] / decode,
        "step_time_median_s": decode / (entry.max_new_tokens - 1),
        "mfu": None,
        "peak_flops": None,
        "peak_source": None,
        "tokens_sha256": raw["tokens_sha256"],
        "crashed_logs": raw.get("crashed_logs", []),
    }


def ratios(records: list[dict]) -> list[dict]:
    """Per generation entry run by zoo and a peer: prefill and decode tokens/s zoo / peer
    (above 1.0 the zoo is faster) and whether both generated the same ids."""
    zoo = {r["name"]: r for r in records if r.get("kind") == KIND and r["impl"] == "zoo"}
    return [{"name": r["name"], "peer": r["impl"],
             "prefill": zoo[r["name"]]["prefill_tokens_per_s"] / r["prefill_tokens_per_s"],
             "decode": zoo[r["name"]]["decode_tokens_per_s"] / r["decode_tokens_per_s"],
             "same_tokens": zoo[r["name"]]["tokens_sha256"] == r["tokens_sha256"]}
            for r in records
            if r.get("kind") == KIND and r["impl"] != "zoo" and r["name"] in zoo]


def ratio_line(ratio: dict) -> str:
    """What `zoo bench` prints for one generation ratio."""
    same = ("the same greedy tokens" if ratio["same_tokens"] else
            "WARNING: different tokens, so the two did different work")
    return (f"{ratio['name']}: tokens/s zoo / {ratio['peer']}: prefill {ratio['prefill']:.2f}, "
            f"decode {ratio['decode']:.2f} ({same})")
