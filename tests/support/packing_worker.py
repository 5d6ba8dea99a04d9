"""The device-side half of tests/multidevice/test_packing.py: packed documents kept apart on
a sharded model, on either backend.

For the tiny size of each causal-LM family named, the same weights score, in one forward
each: rows packing three documents each (segment ids and positions), every document alone
in its own row, and the packed rows again without segment ids. The test compares each
document's logits across the three.

    python -m tests.support.packing_worker OUT.pt xla FAMILY...       # PJRT_DEVICE=CPU
    torchrun --nproc-per-node 2 -m tests.support.packing_worker OUT.pt dtensor FAMILY...
"""

import dataclasses
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from core import backends  # noqa: E402
from core.mesh import MeshConfig  # noqa: E402
from core.sharding import ShardingRules  # noqa: E402
from zoo.data.packing import pack, rows_of  # noqa: E402
from zoo.registry import family  # noqa: E402

ROWS, SEQ = 4, 32
LENGTHS = (9, 14, 7)  # three documents per row: 30 of 32 tokens


def documents(vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, starts) of ROWS x 3 random documents, seeded."""
    generator = np.random.default_rng(0)
    lengths = np.tile(LENGTHS, ROWS)
    tokens = generator.integers(0, vocab, lengths.sum())
    return tokens, np.concatenate(([0], np.cumsum(lengths)))


def batches(vocab: int) -> dict:
    """The packed rows, every document alone in a row, and the packed rows unmasked."""
    tokens, starts = documents(vocab)
    trained = np.ones(len(tokens), dtype=bool)
    lengths = np.diff(starts)
    together = rows_of(tokens, trained, starts, pack(lengths, SEQ), np.arange(ROWS), SEQ, 0)
    alone = rows_of(tokens, trained, starts, pack(lengths, SEQ, packed=False),
                    np.arange(len(lengths)), SEQ, 0, segments=False)
    return {"packed": together, "alone": alone,
            "unmasked": {"input_ids": together["input_ids"]}, "starts": starts}


def logits(backend, model, batch: dict) -> torch.Tensor:
    keys = ("input_ids", "segment_ids", "positions")
    inputs = [batch[k] for k in keys if k in batch]
    with torch.no_grad():
        out = backend.run(lambda m, *args: m(*args), model, *inputs)
    return out.float().cpu() if backend.name == "xla" else out.float().detach().cpu()


def family_logits(name: str, backend) -> dict:
    fam = family(name)
    config = fam.sizes["tiny"]
    if hasattr(config, "attention"):
        config = dataclasses.replace(config, attention="plain")
    model = fam.build(config, seed=0).eval()
    rules = ShardingRules.from_yaml(fam.preset("sharding", "fsdp"))
    model, _, mesh, _ = backend.prepare(model, rules, MeshConfig(), bf16=False)
    found = batches(config.vocab_size)
    results = {"starts": found.pop("starts")}
    for kind, batch in found.items():
        placed = next(iter(backend.loader([batch], mesh, batch)))
        results[kind] = logits(backend, model, placed)
    return results


def main(out: str, backend_name: str, names: list[str]):
    backend = backends.get(backend_name)
    if backend_name == "xla":
        from core.backends.xla.runtime import start

        start()
    results = {name: family_logits(name, backend) for name in names}
    if backend.process_index() == 0:
        torch.save(results, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
