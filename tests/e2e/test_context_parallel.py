"""Context parallelism end to end: `zoo train` with every sequence split over the
`sequence` axis gives the losses of whole sequences (the acceptance run, at seq_len=1024
and 20 steps, is in the README; this is its small twin)."""

import pytest

from tests.support.runs import losses, zoo

RUN = ["llama-tiny", "--tpu", "cpu-4", "--steps", "6", "seq_len=256", "log_every=1",
       "model.num_hidden_layers=2", "optim.lr=1e-3"]


@pytest.mark.slow  # by default: the fsdp_context presets in tests/multidevice (every family)
def test_sequence_split_over_two_devices_trains_like_whole_sequences(tmp_path):
    runs = {}
    for sharding, extra in (("fsdp", []), ("fsdp_context", ["mesh.sequence=2"])):
        out = tmp_path / sharding
        result = zoo("train", *RUN, f"sharding={sharding}", *extra, "--out", str(out))
        assert result.returncode == 0, result.stderr[-3000:]
        runs[sharding] = losses(out)
    whole, split = runs["fsdp"], runs["fsdp_context"]
    assert list(split) == list(range(1, 7))
    for step, loss in whole.items():
        assert abs(split[step] - loss) <= 1e-5 * abs(loss), (step, split[step], loss)
    assert whole[6] < whole[1]
