"""The families researchers start from, each as a user meets it: a random-initialised
transformers model of a tiny config made here (nothing downloaded), saved with
`save_pretrained` beside the shipped tokenizer, is what `--init-from` loads. zoo's logits
equal transformers' on it; `zoo train --init-from` tunes it on the shipped instructions
(`task=sft`; the mixture of experts with LoRA adapters on its experts, split over the
expert axis and scanned); `zoo export` gives weights transformers loads with zoo's logits;
and `zoo generate --temperature 0` gives transformers' greedy tokens. Export and generate
run in this process (click's runner), the training as its own command."""

import pytest
import torch
import transformers

from tests.support.runs import zoo, zoo_here

# fp32 on the CPU: only summation order differs
TOL = {"rtol": 1e-4, "atol": 1e-4}
TINY = dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
HF_CONFIGS = {
    "qwen3": lambda: transformers.Qwen3Config(**TINY, head_dim=32, tie_word_embeddings=True),
    "qwen3moe": lambda: transformers.Qwen3MoeConfig(
        **TINY, head_dim=32, moe_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
        norm_topk_prob=True),
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **TINY, head_dim=32, sliding_window=8, query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "full_attention"]),
    "deepseek3": lambda: transformers.DeepseekV3Config(
        **{**TINY, "num_key_value_heads": 4}, moe_intermediate_size=32, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
        q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=16),
}
TUNING = {
    "qwen3": ["--tpu", "cpu-1"],
    "qwen3moe": ["--tpu", "cpu-4", "sharding=fsdp_expert", "mesh.expert=2", "remat=scan",
                 "lora.rank=4", "lora.targets=[q_proj,gate_up_proj,down_proj]",
                 "optim.lr=1e-2"],
    "gemma3": ["--tpu", "cpu-1", "remat=scan"],
    "deepseek3": ["--tpu", "cpu-1"],
}


@pytest.fixture(scope="module", params=list(HF_CONFIGS))
def hf_folder(request, tmp_path_factory):
    """(family name, a saved transformers model of it with the shipped tokenizer)."""
    from core.data import load_tokenizer

    folder = tmp_path_factory.mktemp(request.param) / "hf"
    torch.manual_seed(0)
    config = HF_CONFIGS[request.param]()
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    load_tokenizer("default").save_pretrained(folder)
    return request.param, folder


def ids():
    return torch.randint(0, TINY["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(0))


def hf_logits(folder):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(input_ids=ids()).logits


def test_init_from_loads_the_folder_with_transformers_logits(hf_folder):
    from zoo.app.init_from import starting_point

    name, folder = hf_folder
    start = starting_point(str(folder), None)
    assert start.family.name == name
    model = start.family.build(start.model, init=False).eval()
    start.load(model)
    with torch.no_grad():
        torch.testing.assert_close(model(ids()), hf_logits(folder), **TOL)


@pytest.fixture(scope="module")
def exported(hf_folder, tmp_path_factory):
    """(the run `zoo train --init-from` made, its `zoo export`)."""
    name, folder = hf_folder
    out = tmp_path_factory.mktemp(f"{name}-sft")
    tuned = zoo("train", "--init-from", str(folder), *TUNING[name], "--steps", "3",
                "task=sft", "seq_len=128", "log_every=1", "--out", str(out / "run"))
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    result = zoo_here("export", str(out / "run"), str(out / "exported"))
    assert result.exit_code == 0, result.output[-2000:]
    return out / "run", out / "exported"


def test_sft_tunes_it_and_the_export_loads_in_transformers_with_zoo_logits(exported):
    from zoo.app.init_from import model_weights
    from zoo.app.saved_run import load_run

    run_folder, hf = exported
    assert len((run_folder / "metrics.jsonl").read_text().splitlines()) == 3
    run = load_run(run_folder)[0]
    ours = run.family.build(run.config.model, init=False).eval()
    ours.load_state_dict(model_weights(str(run_folder))[1], strict=True)  # LoRA: merged
    with torch.no_grad():
        torch.testing.assert_close(ours(ids()), hf_logits(hf), **TOL)


def test_deepseek_training_moves_the_routing_bias_by_its_rate(exported):
    """Auxiliary-loss-free balancing: after each of the 3 updates each routed expert's bias
    moved by the rate (0.001) toward an even load (up, down, or not at all on a tie), and
    the checkpoint and export hold it. (Grouped routing is checked against transformers in
    tests/multidevice/test_deepseek3_presets.py: here two experts of a group of two tie.)"""
    from safetensors.torch import load_file

    from zoo.app.init_from import model_weights

    run_folder, hf = exported
    if "deepseek3" not in str(run_folder):
        pytest.skip("deepseek3's routing")
    def routing_biases(weights: dict) -> dict:
        return {k: v for k, v in weights.items() if k.endswith("e_score_correction_bias")}

    biases = routing_biases(model_weights(str(run_folder))[1])
    assert biases and any(bias.abs().max() > 0 for bias in biases.values()), biases
    for bias in biases.values():
        moves = bias / 0.001  # 3 steps of +1, -1 or 0
        torch.testing.assert_close(moves, moves.round(), rtol=0, atol=1e-3)
        assert moves.abs().max() <= 3, bias
    # transformers' names are zoo's
    torch.testing.assert_close(routing_biases(load_file(next(hf.glob("*.safetensors")))), biases)


def test_greedy_generation_gives_transformers_tokens(exported):
    from core.data import load_tokenizer

    run_folder, hf = exported
    # --raw: the tuned run is prompted with the text alone, as transformers is below
    result = zoo_here("generate", str(run_folder), "--prompt", "The", "--temperature", "0",
                      "--max-new-tokens", "12", "--raw", "--host")  # in this process
    assert result.exit_code == 0, result.output[-2000:]
    tokenizer = load_tokenizer(str(hf))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    prompt = tokenizer("The", return_tensors="pt").input_ids
    greedy = theirs.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=12, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id)
    assert result.output.strip() == tokenizer.decode(greedy[0], skip_special_tokens=True).strip()
