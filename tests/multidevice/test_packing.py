"""Packed documents never see each other: in a row packing three documents (segment ids and
positions, zoo/data/packing.py), each document's logits equal that document run alone, on
a sharded model on 1 and 4 XLA CPU devices and on the dtensor backend with 2 processes, for
every causal-LM family; without the segment ids the later documents' logits differ (the
test can fail). The worker: tests/support/packing_worker.py."""

import subprocess
import sys

import pytest
import torch

from tests.support.paths import ROOT
from tests.support.runs import env
from tests.support.xla_harness import run_workers

FAMILIES = ("llama", "mixtral")
TOLERANCE = 1e-5  # fp32: the packed and lone rows reduce in different orders


@pytest.fixture(scope="module")
def xla_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("packing-xla")
    return run_workers("tests.support.packing_worker", (1, 4), out, args=("xla", *FAMILIES))


@pytest.fixture(scope="module")
def dtensor_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("packing-dtensor") / "results.pt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "-m", "tests.support.packing_worker", str(out), "dtensor", *FAMILIES]
    result = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(out, weights_only=False)


def per_document(results: dict) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(packed, alone, unmasked) logits of every document, each [length, vocab]."""
    starts = results["starts"]
    found = []
    for document in range(len(starts) - 1):
        row, first = document // 3, starts[document - document % 3]
        length = starts[document + 1] - starts[document]
        at = slice(starts[document] - first, starts[document] - first + length)
        found.append((results["packed"][row, at], results["alone"][document, :length],
                      results["unmasked"][row, at]))
    return found


def assert_kept_apart(results: dict) -> None:
    for document, (packed, alone, unmasked) in enumerate(per_document(results)):
        torch.testing.assert_close(packed, alone, rtol=0, atol=TOLERANCE,
                                   msg=f"document {document}")
        if document % 3:  # a later document of its row: without segment ids it sees the others
            assert (unmasked - alone).abs().max() > 0.1, document


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("devices", (1, 4))
def test_packed_documents_equal_documents_alone_on_xla(xla_results, devices, name):
    assert_kept_apart(xla_results[devices][name])


@pytest.mark.parametrize("name", FAMILIES)
def test_packed_documents_equal_documents_alone_on_dtensor(dtensor_results, xla_results, name):
    assert_kept_apart(dtensor_results[name])
    torch.testing.assert_close(dtensor_results[name]["packed"], xla_results[1][name]["packed"],
                               rtol=0, atol=TOLERANCE)
