"""`zoo bench`'s generation entries on hand-made records and suites: the tokens/s ratios and
whether both sides made the same tokens, the report's second table, the suite's checks."""

import dataclasses

import pytest

from benchmarks import generation, report
from benchmarks.harness import compare_ratios, runs_peer
from benchmarks.suite import Entry, load_suite
from core.errors import UserError

ENTRY = Entry(name="g", model="llama-tiny", global_batch_size=2, seq_len=16, max_new_tokens=8)


def raw(prefill_s, decode_s, tokens_sha256="same", devices=1):
    return {"prefill_s": prefill_s, "decode_s": decode_s, "warmup_s": 3.0, "compile_s": 2.5,
            "compiles_warmup": 2, "compiles_timed": 0, "devices": devices, "bf16": False,
            "tokens_sha256": tokens_sha256, "parameters": 1000, "prompt_tokens": 32,
            "decode_tokens": 14}


def test_a_record_counts_prompt_tokens_over_prefill_and_decode_step_tokens_over_decode():
    record = generation.summarize(ENTRY, "zoo", raw([0.5, 0.2, 0.4], [1.4, 0.7, 2.1]))
    assert record["prefill_tokens_per_s"] == pytest.approx(32 / 0.4)  # the median call
    assert record["decode_tokens_per_s"] == pytest.approx(14 / 1.4)
    # one decode step of all rows: what the gate relates to the reference entry
    assert record["step_time_median_s"] == pytest.approx(1.4 / 7)
    assert record["timed_calls"] == 3 and record["mfu"] is None


def test_ratios_are_zoo_over_peer_and_say_whether_the_tokens_agreed():
    zoo = generation.summarize(ENTRY, "zoo", raw([0.2], [0.7]))
    same = generation.summarize(ENTRY, "hf", raw([0.4], [1.4]))
    second = dataclasses.replace(ENTRY, name="h")
    other = generation.summarize(second, "hf", raw([0.4], [1.4], "other"))
    other_zoo = generation.summarize(second, "zoo", raw([0.2], [0.7]))
    ratios = generation.ratios([zoo, same, other_zoo, other])
    assert [(r["name"], r["prefill"], r["decode"], r["same_tokens"]) for r in ratios] == [
        ("g", pytest.approx(2.0), pytest.approx(2.0), True),
        ("h", pytest.approx(2.0), pytest.approx(2.0), False)]
    assert "(the same greedy tokens)" in generation.ratio_line(ratios[0])
    assert "WARNING: different tokens" in generation.ratio_line(ratios[1])
    # the step-time ratio is the training entries' alone
    assert compare_ratios([zoo, same]) == []


def test_a_call_whose_rows_stopped_early_is_refused():
    with pytest.raises(UserError, match=r"g: rows made \[7, 8\] new tokens, not 8 each"):
        generation._tokens_facts([[1] * 8, [2] * 7], ENTRY)


def test_the_report_puts_generation_entries_in_their_own_table():
    trained = {"name": "t", "impl": "zoo", "devices": 1, "compile_s": 1.0,
               "step_time_median_s": 0.1, "step_time_mean_s": 0.1, "step_time_min_s": 0.1,
               "step_time_max_s": 0.1, "host_time_median_s": None, "items_per_s": 10.0,
               "throughput_unit": "tokens", "items_per_s_per_chip": 10.0,
               "model_tflops_per_s_per_chip": 0.0, "mfu": None, "compiles_timed": 0,
               "peak_memory_bytes": None, "peak_source": None}
    generated = generation.summarize(ENTRY, "zoo", raw([0.2], [0.7]))
    text = report.table([trained, generated])
    assert "step s (med/mean/min/max)" in text and "decode tokens/s" in text
    results = {"environment": {"torch": "2.9.0", "torch_xla": "2.9.0", "machine": "x86_64",
                               "host_cpus": 2, "git_commit": "abc"},
               "records": [generated]}
    markdown = report.markdown(results, [], generation.ratios([generated]))
    assert "| g | zoo | 1 | 2 x 16 | 8 | 2.5 (2) | 0.200 | 160 | 0.700 | 20 | 0 |" in markdown
    assert "MFU" not in markdown  # no training entry, no MFU note


def test_generation_entries_compare_with_transformers_generate_only():
    assert runs_peer(ENTRY, "hf")
    assert not runs_peer(ENTRY, "maxtext") and not runs_peer(ENTRY, "dtensor")


def test_the_generate_suite_resolves():
    entries = load_suite("generate")
    assert entries and all(e.max_new_tokens and e.seq_len for e in entries)
    for entry in entries:
        entry.run()


@pytest.mark.parametrize("line, message", [
    ("max_new_tokens: 1, seq_len: 16", "max_new_tokens must be a whole number >= 2, not 1"),
    ("max_new_tokens: 8", r"a generation entry \(max_new_tokens\) needs `seq_len:`"),
])
def test_a_generation_entry_without_a_decode_step_or_prompt_length_is_refused(
        tmp_path, line, message):
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"- {{name: g, model: llama-tiny, {line}}}\n")
    with pytest.raises(UserError, match=message):
        load_suite(str(suite))


def test_the_gate_judges_a_decode_step_against_the_reference_entry():
    from benchmarks.gate import judge
    from benchmarks.harness import relate_to_reference

    def results(decode_s):
        records = [generation.summarize(dataclasses.replace(ENTRY, name=name), "zoo",
                                        raw([0.2], [seconds]))
                   for name, seconds in (("g", 0.7), ("h", decode_s))]
        relate_to_reference(records, records[0])
        return {"reference_entry": "g", "records": records}

    assert judge(results(1.4), results(1.4), tolerance=0.2) == {}
    assert judge(results(2.1), results(1.4), tolerance=0.2) == {
        ("h", "zoo"): "h (zoo): step time 3.00x g's vs baseline 2.00x"}


def test_calls_slowed_by_a_neighbour_make_the_run_say_the_host_was_busy():
    def results(decode_s):
        return {"calibration": None,
                "records": [generation.summarize(ENTRY, "hf", raw([0.1] * 3, decode_s))]}

    assert report.busy_host_warning(results([0.8, 0.9, 0.85])) is None
    warning = report.busy_host_warning(results([0.8, 17.6, 0.85]))
    assert "decode times of a generation entry's calls lay far apart (g (hf) 1976%)" in warning
