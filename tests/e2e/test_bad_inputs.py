"""Bad input, as a new user types it, across the CLI, config files and keys, model sizes,
optimizer numbers, mesh axes against the model, data sources, checkpoints, run folders,
generation limits, topologies, eval tasks, bench suites, the TPU launcher and new family
names: a non-zero exit, one line on stderr naming what was wrong and what to do, no
traceback, no model built on the way (off the meta device, where building one is only
bookkeeping: the refusal comes before any work, which is what "quick" means on a machine
however busy), and every existing file byte-for-byte unchanged.
({d} is a scratch folder holding the files below.) Each command is a fork of one process
that has imported the CLI, torch and torch_xla (tests/support/forked_cli.py): the ~2 s of
start-up imports every command would repeat are paid once."""

import json

import pytest

from tests.support.runs import forked_zoo, saved_config, snapshot, write_scratch

FILES = {
    "not_yaml.yaml": "steps: [1, 2\n",
    "unknown_key.yaml": "nosuch: 1\n",
    "suite_dict.yaml": "a: 1\n",
    "empty/.keep": "",
    "no_tasks/base.yaml": "output_type: multiple_choice\n",
    "run/config.yaml": saved_config("model_name: llama-tiny\n"),
    # a starting point: a run whose checkpoint is whole (its manifest lists nothing), refused
    # for what comes after it before its weights are read
    "start/config.yaml": saved_config("model_name: llama-tiny\n"),
    "start/checkpoints/step-00000001/manifest.json": "{}",
    "lora_run/config.yaml": saved_config("model_name: llama-tiny\nlora:\n  rank: 8\n"),
    "dpo_same.jsonl": '{"prompt": "Say hi.", "chosen": " hi", "rejected": " hi"}\n',
    "dpo_empty.jsonl": '{"prompt": "Say hi.", "chosen": " hi", "rejected": ""}\n',
    "t5run/config.yaml": saved_config("model_name: t5-tiny\n"),
    "hf_damaged/config.json": "{\n",
    "hf_bert/config.json": '{"architectures": ["BertModel"], "model_type": "bert"}\n',
    "hf_list/config.json": "[]\n",
    "empty_suite.yaml": "",
    "empty_list_suite.yaml": "[]\n",
    "steps_suite.yaml": "- steps: 3\n",
    "no_model_suite.yaml": "- name: a\n",
    "bad_tasks/t.yaml": "task: [x\n",
    "half.jsonl": '{"text": "one document"}\n{"body": "no text field"}\n{"text": "another"}\n'
                  '{"text": 3}\n',
    "mixed/a.txt": "some text\n",
    "mixed/notes.csv": "a,b\n",
    "section.yaml": "optim: 0.001\n",
    "sft_text.jsonl": '{"text": "no prompt"}\n',
    "grpo_question.jsonl": '{"question": "What is 2 + 2?", "answer": "4"}\n',
    "prompts_none.jsonl": "\n",
    "prompts_text.jsonl": '"a prompt"\n{"text": "no prompt"}\n',
    "prompts_latin1.jsonl": b'"caf\xe9"\n',
    "sft_empty.jsonl": '{"messages": [{"role": "user", "content": "hi"}, '
                       '{"role": "assistant", "content": ""}]}\n',
    "sft_role.jsonl": '{"messages": [{"role": "bot", "content": "hi"}, '
                      '{"role": "assistant", "content": "x"}]}\n',
}


def safetensors_text(header: dict, data_bytes: int) -> str:
    """A safetensors file as text (its header's length is under 128: every byte is ASCII),
    holding `data_bytes` zero bytes of tensor data."""
    text = json.dumps(header)
    return "".join(map(chr, len(text).to_bytes(8, "little"))) + text + "\0" * data_bytes


# --init-from folders: weights beside a config.json missing what the architecture is read
# from, weights missing, cut short or garbage (refused before transformers is imported; a
# model name of another size and weights of other shapes: tests/e2e/test_init_from.py)
SMALL_LLAMA = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                          "vocab_size": 8, "hidden_size": 8, "intermediate_size": 16,
                          "num_hidden_layers": 1, "num_attention_heads": 2,
                          "num_key_value_heads": 1})
ONE_TENSOR = {"x.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
FILES.update({
    "hf_empty/config.json": "{}\n",
    "hf_empty/model.safetensors": safetensors_text(ONE_TENSOR, 8),
    "hf_arch_only/config.json": '{"architectures": ["LlamaForCausalLM"]}\n',
    "hf_arch_only/model.safetensors": safetensors_text(ONE_TENSOR, 8),
    "hf_small/config.json": SMALL_LLAMA,
    "hf_cut/config.json": SMALL_LLAMA,
    "hf_cut/model.safetensors": safetensors_text(ONE_TENSOR, 4),
    "hf_garbage/config.json": SMALL_LLAMA,
    "hf_garbage/model.safetensors": "garbage, not safetensors\n",
})
ZONE = ["--zone", "us-central2-b", "--dry-run"]
CASES = [
    # model names, config keys and values
    (["train", "nosuchmodel"], "unknown model 'nosuchmodel'; valid: "),
    (["train", "llama-tiny", "optim.lrr=3"], "unknown config key 'optim.lrr'; valid keys under"),
    (["train", "llama-tiny", "nosuch=1"], "unknown config key 'nosuch'; valid keys at the top"),
    (["train", "llama-tiny", "steps=abc"], "bad value for config key 'steps'"),
    (["train", "llama-tiny", "steps=-5"], "steps must be at least 1, not -5"),
    (["train", "llama-tiny", "--steps", "0"], "'--steps': 0 is not in the range x>=1."),
    (["train", "llama-tiny", "global_batch_size=0"], "global_batch_size must be at least 1"),
    (["train", "llama-tiny", "log_every=0"], "log_every must be at least 1"),
    (["train", "llama-tiny", "precision=fp8"], "precision must be auto, fp32 or bf16, not fp8"),
    (["train", "llama-tiny", "grad_accum=3"], "must be a multiple of grad_accum (3)"),
    (["train", "llama-tiny", "sharding=zigzag"], "llama has no sharding preset 'zigzag'"),
    (["train", "llama-tiny", "remat=zigzag"], "llama has no remat preset 'zigzag'"),
    (["train", "llama-tiny", "mesh.tensor=3"], "cannot fill 1 devices: 3 does not divide 1"),
    (["train", "llama-tiny", "model.num_attention_heads=5"],
     "must be a multiple of model.num_key_value_heads (4)"),
    (["train", "llama-tiny", "seq_len=100000"],
     "longer than the model's max_position_embeddings (8192)"),
    (["train", "llama-tiny", "model.num_key_value_heads=0"],
     "model.num_key_value_heads must be at least 1, not 0"),
    (["train", "llama-tiny", "model.rope_theta=0"], "model.rope_theta must be a finite number > 0"),
    (["train", "mixtral-tiny", "model.capacity_factor=nan"],
     "model.capacity_factor must be a finite number > 0, not nan"),
    (["train", "vit-tiny", "model.patch_size=0"], "model.patch_size must be at least 1, not 0"),
    (["train", "t5-tiny", "source_len=0"], "source_len must be at least 1, not 0"),
    # fine-tuning: the task, its starting point and its rows
    (["train", "llama-tiny", "task=ppo"],
     "task=ppo is not a task llama models train for; choose from causal-lm, sft, dpo, grpo"),
    # GRPO: its rewards, groups, lengths and sampling (a reward failing on a row, or giving
    # a non-number or NaN, is refused at the step that scores it: tests/unit/test_rewards.py)
    (["train", "llama-tiny", "task=grpo", "grpo.rewards=[nosuch_rewards:brevity]"],
     "reward nosuch_rewards:brevity: module nosuch_rewards does not import"),
    (["train", "llama-tiny", "task=grpo", "grpo.rewards=[tests.support.word_reward:WORD]"],
     "reward tests.support.word_reward:WORD: WORD is a str, not a function"),
    (["train", "llama-tiny", "task=grpo", "grpo.num_generations=1"],
     "grpo.num_generations must be >= 2"),
    (["train", "llama-tiny", "task=grpo", "seq_len=32", "grpo.max_new_tokens=24"],
     "more than 8 (seq_len 32 less grpo.max_new_tokens 24); shorten it, raise seq_len"),
    (["train", "llama-tiny", "task=grpo", "grpo.max_new_tokens=8192"],
     "grpo.max_new_tokens 8192 passes the model's 8192 positions"),
    (["train", "llama-tiny", "task=grpo", "grpo.stop_strings=['']"],
     "grpo.stop_strings: a stop string is empty"),
    (["train", "llama-tiny", "task=grpo", "grpo.temperature=-1"],
     "grpo.temperature must be above 0"),
    (["train", "llama-tiny", "task=grpo", "grpo.top_p=2"], "grpo.top_p 2.0 is outside (0, 1]"),
    (["train", "llama-tiny", "task=grpo", "global_batch_size=12"],
     "global_batch_size 12 counts completions, whole groups of grpo.num_generations (8)"),
    (["train", "llama-tiny", "task=grpo", "data.source={d}/grpo_question.jsonl"],
     "grpo_question.jsonl has no prompt column: neither 'prompt' (text prompts) nor"),
    (["train", "t5-tiny", "task=grpo"], "task=grpo is not a task t5 models train for"),
    (["train", "vit-tiny", "task=grpo"], "task=grpo is not a task vit models train for"),
    (["train", "llama-tiny", "task=dpo"],
     "task=dpo tunes a model against itself as it starts (the reference), so it starts"),
    (["train", "llama-tiny", "task=dpo", "dpo.beta=0"], "dpo.beta must be a positive number"),
    (["train", "--init-from", "{d}/start", "task=dpo", "eval_every=10"],
     "task=dpo has no validation pass yet"),
    (["train", "--init-from", "{d}/start", "task=dpo", "data.source={d}/dpo_same.jsonl"],
     "dpo_same.jsonl row 1: 'chosen' and 'rejected' are identical, so there is no preference"),
    (["train", "--init-from", "{d}/start", "task=dpo", "data.source={d}/dpo_empty.jsonl"],
     "dpo_empty.jsonl row 1: 'rejected' is empty"),
    (["train", "llama-tiny", "task=dpo", "dpo.loss_type=kto"],
     "dpo.loss_type must be one of sigmoid, hinge, ipo, not 'kto'"),
    (["train", "vit-tiny", "task=sft"], "task=sft is not a task vit models train for"),
    (["train", "--init-from", "{d}/nosuch", "task=sft"], "no such folder; give a zoo run"),
    (["train", "mixtral-tiny", "--init-from", "{d}/start"],
     "holds a llama-tiny model, not mixtral-tiny"),
    (["train", "--init-from", "{d}/hf_bert", "task=sft"],
     "no zoo model family for Hugging Face class BertModel"),
    (["train", "llama-tiny", "task=sft", "data.source={d}/sft_text.jsonl"],
     "sft_text.jsonl has neither a 'messages' column (chat rows) nor 'prompt' and"),
    (["train", "llama-tiny", "task=sft", "data.source={d}/sft_empty.jsonl"],
     "sft_empty.jsonl row 1: message 2 (assistant) has empty content"),
    (["train", "llama-tiny", "task=sft", "data.source={d}/sft_role.jsonl"],
     "sft_role.jsonl row 1: the chat template of tokenizer"),
    (["train", "llama-tiny", "task=sft", "data.train_on=completion"],
     "data.train_on=completion needs prompt/completion rows"),
    (["train", "llama-tiny", "task=sft", "data.truncation=cut"],
     "data.truncation must be one of drop, cut_prompt, not 'cut'"),
    (["train", "llama-tiny", "data.source=synthetic", "data.document_mask=true"],
     "data.document_mask keeps documents apart, and data.source=synthetic has none"),
    # LoRA adapters
    (["train", "llama-tiny", "lora.rank=8", "lora.targets=[qkv]"],
     "lora.targets: 'qkv' matches nothing in the model; LoRA adapts the linear layers"),
    (["train", "llama-tiny", "lora.rank=8", "lora.targets=[input_layernorm]"],
     "model.layers.0.input_layernorm is a LlamaRMSNorm, not a linear layer"),
    (["train", "llama-tiny", "lora.rank=4096"], "lora.rank=4096 is larger than"),
    (["train", "llama-tiny", "lora.rank=-1"], "lora.rank must be 0 (off) or a positive rank"),
    (["export", "{d}/run", "{d}/adapter_out", "--adapter"],
     "trained every weight (lora.rank=0), so it has no adapter; export it without --adapter"),
    (["export", "{d}/lora_run", "{d}/adapter_out", "--adapter"],
     "trained its adapters on random weights (no --init-from)"),
    # optimizer and schedule numbers
    (["train", "llama-tiny", "optim.lr=inf"], "optim.lr must be a finite number >= 0, not inf"),
    (["train", "llama-tiny", "optim.lr=nan"], "optim.lr must be a finite number >= 0, not nan"),
    (["train", "llama-tiny", "optim.lr=-1"], "optim.lr must be a finite number >= 0, not -1.0"),
    (["train", "llama-tiny", "optim.betas=[1.5,0.9]"],
     "optim.betas must be two numbers in [0, 1), e.g. [0.9, 0.95], not [1.5, 0.9]"),
    (["train", "llama-tiny", "optim.weight_decay=-0.1"],
     "optim.weight_decay must be a finite number >= 0, not -0.1"),
    (["train", "llama-tiny", "optim.grad_clip=nan"], "optim.grad_clip must be a finite number"),
    (["train", "llama-tiny", "schedule.warmup_steps=-1"], "schedule.warmup_steps must be >= 0"),
    (["train", "llama-tiny", "schedule.min_lr_ratio=2"], "schedule.min_lr_ratio must be in [0, 1]"),
    (["train", "llama-tiny", "schedule.decay=step"], "schedule.decay must be cosine, linear or"),
    # mesh axes against the model
    (["train", "mixtral-tiny", "sharding=fsdp_expert", "mesh.expert=3", "--tpu", "cpu-3"],
     "mesh.expert=3 must divide model.num_local_experts (4); on cpu-3 use mesh.expert=1"),
    (["train", "llama-tiny", "sharding=fsdp_tensor", "mesh.tensor=3", "--tpu", "cpu-3"],
     "mesh.tensor=3 must divide model.num_attention_heads (8)"),
    (["train", "llama-tiny", "mesh.fsdp=1", "mesh.tensor=-1", "--tpu", "cpu-6"],
     "mesh.tensor=6 must divide model.num_attention_heads (8); on cpu-6 use mesh.tensor=1 or 2"),
    (["train", "llama-tiny", "sharding=fsdp_context", "mesh.sequence=3", "--tpu", "cpu-3"],
     "mesh.sequence=3 must divide seq_len (256)"),
    (["train", "llama-tiny", "sharding=fsdp_context", "mesh.sequence=2", "model.attention=flash",
      "--tpu", "cpu-2"], "model.attention=flash cannot split sequences (mesh.sequence=2)"),
    (["train", "t5-tiny", "mesh.tensor=3", "--tpu", "cpu-3"],
     "mesh.tensor=3 must divide model.num_heads (4)"),
    (["plan", "mixtral-8x7b", "--tpu", "v5p-128", "mesh.expert=16"],
     "mesh.expert=16 must divide model.num_local_experts (8); on v5p-128 use mesh.expert=1, 2,"),
    (["plan", "llama-8b", "--tpu", "v5p-128", "mesh.tensor=16"],
     "mesh.tensor=16 must divide model.num_key_value_heads (8)"),
    # config files
    (["train", "llama-tiny", "--config", "{d}/not_yaml.yaml"], "is not valid YAML at line 2"),
    (["train", "llama-tiny", "--config", "{d}/unknown_key.yaml"],
     "unknown_key.yaml: unknown config key 'nosuch'"),
    (["train", "llama-tiny", "--config", "{d}/missing.yaml"],
     "missing.yaml: no such file; give a YAML config file"),
    # data sources and tokenizers
    (["train", "llama-tiny", "data.source={d}/missing.txt"], "missing.txt does not exist"),
    (["train", "llama-tiny", "data.source={d}/empty"], "has no .txt/.jsonl/.json/.parquet"),
    (["train", "llama-tiny", "data.tokenizer={d}/missing"], "tokenizer dir"),
    (["train", "vit-tiny", "data.source={d}/empty"], "is not a folder of train/<class>/"),
    (["train", "llama-tiny", "--init-from", "{d}/empty"], "not a Hugging Face checkpoint"),
    (["train", "llama-tiny", "data.source={d}/half.jsonl"],
     "skipped 2 of 4 documents (50%), more than data.max_skipped_share=0.1: 1 without field "
     "'text', 1 whose 'text' is not a string but int"),
    (["train", "llama-tiny", "data.source={d}/mixed"],
     "skipped 1 of 2 documents (50%), more than data.max_skipped_share=0.1: 1 file of "
     "unsupported type .csv"),
    (["train", "llama-tiny", "data.max_skipped_share=2"],
     "data.max_skipped_share must be in [0, 1], not 2.0"),
    (["train", "llama-tiny", "--config", "{d}/section.yaml"],
     "section.yaml: config key 'optim' is a section (keys name, lr, weight_decay, betas, eps, "
     "grad_clip), not a value; write optim: {lr: 0.001}"),
    (["train", "llama-tiny", "optim=0.001"],
     "config key 'optim' is a section (keys name, lr, weight_decay, betas, eps, grad_clip), "
     "not a value; write optim.lr=0.001"),
    (["train", "llama-tiny", "optim.name=json:dumps"],
     "optim.name=json:dumps is a function, not a torch.optim.Optimizer subclass"),
    (["train", "llama-tiny", "optim.name=collections:OrderedDict"],
     "optim.name=collections:OrderedDict is a class but not a torch.optim.Optimizer subclass"),
    (["train", "llama-tiny", "optim.name=zoo_no_such_module:Opt"],
     "optim.name=zoo_no_such_module:Opt: cannot import zoo_no_such_module"),
    (["train", "llama-tiny", "optim.name=torch.optim:NoSuch"],
     "optim.name=torch.optim:NoSuch: module torch.optim has no 'NoSuch'"),
    (["train", "llama-tiny", "optim.name=torch.optim:Optimizer"],
     "optim.name=torch.optim:Optimizer: its constructor takes no lr"),
    (["train", "llama-tiny", "optim.name=adam"],
     "unknown optimizer optim.name=adam; use adamw, sgd or package.module:ClassName"),
    # slices and memory
    (["train", "llama-1b", "--tpu", "v4-32"], "needs that TPU slice, but this machine has no TPU"),
    (["train", "llama-tiny", "--tpu", "v9-8"], "unknown slice type 'v9-8'; valid forms"),
    (["train", "llama-tiny", "--tpu", "v4-7"], "'v4-7' is not a v4 slice"),
    (["train", "llama-70b", "--tpu", "v4-8"], "GiB per chip by `zoo plan` but a v4-8 chip has 32"),
    (["train", "llama-70b", "--tpu", "cpu-1"], "GiB of host memory by `zoo plan`"),
    (["plan", "llama-8b", "--tpu", "v5p-128", "global_batch_size=8"],
     "global batch size 8 does not split over 16 hosts"),
    (["plan", "nosuch", "--tpu", "v4-8"], "unknown model 'nosuch'"),
    (["plan", "llama-70b", "--tpu", "v4-8", "--search", "remat=scan_checkpoint",
      "sharding=fsdp"], "no configuration of llama-70b fits v4-8: the smallest needs"),
    (["plan", "llama-tiny", "--tpu", "v5p-8", "--search", "sharding=fsdp_tensor",
      "model.num_attention_heads=1", "model.num_key_value_heads=1"],
     "every configuration of llama-tiny on v5p-8 that the pinned keys allow is refused"),
    (["plan", "llama-tiny", "--tpu", "v5p-8", "--budget", "5"],
     "--budget and --jobs bound a search: add --search"),
    (["plan", "llama-tiny", "--tpu", "v5p-8", "--search", "--compile", "--compare", "maxtext"],
     "--search ranks zoo's own configurations: drop --compare"),
    (["topology", "nope"], "unknown slice type 'nope'"),
    # run folders and checkpoints
    # command-line usage
    # (each train command is given an --out: a model is needed unless a run is there)
    (["train"], "train-out holds no run to rerun (no config.yaml naming its model); name a "
                "model (see `zoo models`) or --init-from"),
    (["generate", "{d}/run", "--prompt", "hi", "--max-new-tokens", "abc"],
     "'abc' is not a valid integer range. (see zoo generate --help)"),
    (["nosuchcommand"], "No such command 'nosuchcommand'. (see zoo --help)"),
    # outputs and checkpoint locations that are URLs, and how a run treats its numbers
    (["export", "{d}/run", "gs://b/hf"], "zoo export OUT gs://b/hf: this writes a local folder"),
    (["eval", "{d}/run", "--tasks", "arc_easy_sample", "--out", "gs://b/ev"],
     "--out gs://b/ev: this writes a local folder"),
    (["bench", "--out", "gs://b/bench"], "--out gs://b/bench: this writes a local folder"),
    (["train", "llama-tiny", "out=memory://runs/x"], "out memory://runs/x: an in-memory location"),
    (["train", "llama-tiny", "out=nosuch://b/runs/x"], "out nosuch://b/runs/x: Protocol not"),
    (["train", "llama-tiny", "checkpoint_dir=memory://x"], "an in-memory location vanishes"),
    (["train", "llama-tiny", "--init-from", "{d}/hf_damaged"],
     "hf_damaged/config.json is damaged (not JSON"),
    (["train", "llama-tiny", "--init-from", "{d}/hf_bert"],
     "holds a BertModel checkpoint; this model starts from LlamaForCausalLM checkpoints"),
    (["train", "llama-tiny", "data.shuffle_seed=-1"], "data.shuffle_seed must be >= 0, not -1"),
    (["train", "llama-tiny", "nan_policy=ignore"], "nan_policy must be stop or skip, not ignore"),
    (["train", "llama-tiny", "checkpoint_lease_s=0"],
     "checkpoint_lease_s must be a positive number of seconds"),
    (["export", "{d}/missing", "{d}/out"],
     "missing: no such folder; give a run folder or one of its checkpoints"),
    (["goodput", "{d}/missing"], "missing: no such folder; give the --out of a zoo train run"),
    (["goodput", "{d}/run"], "has no goodput.json"),
    (["export", "{d}/run", "{d}/out"], "has no complete checkpoint yet"),
    (["eval", "gs://zoo-nosuch-bucket-1f3a/run", "--tasks", "arc_easy_sample"],
     "gs://zoo-nosuch-bucket-1f3a/run: cannot reach storage.googleapis.com"),
    (["export", "file://{d}/run", "{d}/out"], "has no complete checkpoint yet"),
    (["generate", "file://{d}/empty", "--prompt", "hi"], "is neither a run folder nor a"),
    (["train", "llama-tiny", "checkpoint_dir=nosuch://bucket/x", "--out", "{d}/new"],
     "checkpoint_dir nosuch://bucket/x: Protocol not known"),
    (["train", "llama-tiny", "checkpoint_dir={d}/not_yaml.yaml/ckpt", "--out", "{d}/new2"],
     "cannot write checkpoints to"),
    (["generate", "{d}/empty", "--prompt", "hi"], "is neither a run folder nor a checkpoint"),
    # generation limits
    (["generate", "{d}/run", "--prompt", "hi", "--max-new-tokens", "100000"],
     "need more positions than the model has (8192, model.max_position_embeddings)"),
    (["generate", "{d}/run", "--prompt", "hi", "--max-new-tokens", "0"],
     "'--max-new-tokens': 0 is not in the range x>=1."),
    (["generate", "{d}/run", "--prompt", "hi", "--temperature", "nan"],
     "'--temperature': nan is not a finite number."),
    (["generate", "{d}/run", "--prompt", "hi", "--top-k", "-1"],
     "'--top-k': -1 is not in the range x>=0."),
    (["generate", "{d}/run", "--prompt", "hi", "--seed", "-1"],
     "'--seed': -1 is not in the range x>=0."),
    (["generate", "{d}/run"], "give --prompt TEXT or --prompts FILE.jsonl (one of them)"),
    (["generate", "{d}/run", "--prompts", "{d}/missing.jsonl"], "missing.jsonl: no such file"),
    (["generate", "{d}/run", "--prompts", "{d}/prompts_none.jsonl"], "holds no prompt"),
    (["generate", "{d}/run", "--prompts", "{d}/prompts_text.jsonl"], "line 2 has no prompt"),
    (["generate", "{d}/run", "--prompts", "{d}/prompts_latin1.jsonl"], "not UTF-8 text"),
    (["generate", "{d}/run", "--prompt", "hi", "--top-p", "0"],
     "'--top-p': 0.0 is not in the range 0<x<=1."),
    (["generate", "{d}/run", "--prompt", "hi", "--stop", ""], "--stop '' is empty"),
    (["generate", "{d}/run", "--prompt", "hi", "--batch-size", "0"],
     "'--batch-size': 0 is not in the range x>=1."),
    (["generate", "{d}/t5run", "--prompt", "hi"],
     "t5run is a t5-tiny run (seq2seq); zoo generate continues prompts with causal language"),
    # evaluation
    (["eval", "{d}/missing", "--tasks", "arc_easy_sample"],
     "missing: no such folder; give a run, checkpoint or Hugging Face folder"),
    (["eval", "{d}/run"], "--tasks is required for language models"),
    (["eval", "/proc/sys", "--tasks", "arc_easy_sample"],  # a folder this user cannot write
     "/proc/sys is read-only, and zoo eval writes its results there; pass --out DIR"),
    (["eval", "{d}/run", "--tasks", "nosuchtask"],
     "unknown task 'nosuchtask'; sample tasks (offline): arc_easy_sample, hellaswag_sample"),
    (["eval", "{d}/run", "--tasks", "arc,hellaswag"],
     "task 'arc_easy' needs the Hugging Face Hub dataset 'allenai/ai2_arc', which is "
     "unreachable from here (offline?); use the local sample tasks (arc_easy_sample, "
     "hellaswag_sample, zoo_instructions) or run where the Hub is reachable"),
    (["eval", "{d}/run", "--tasks", "{d}/no_tasks"], "has no YAML declaring a `task:`"),
    (["eval", "{d}/run", "--tasks", ","], "--tasks ',' names no task; give comma-separated"),
    (["eval", "{d}/run", "--tasks", "arc_easy_sample", "--limit", "0"],
     "Invalid value for '--limit': 0 is not in the range x>=1. (see zoo eval --help)"),
    (["eval", "{d}/run", "--tasks", "arc_easy_sample", "--limit", "-3"],
     "'--limit': -3 is not in the range x>=1."),
    (["eval", "{d}/run", "--tasks", "arc_easy_sample", "--batch-size", "0"],
     "'--batch-size': 0 is not in the range x>=1."),
    (["eval", "{d}/run", "--tasks", "arc_easy_sample", "--num-fewshot", "-1"],
     "'--num-fewshot': -1 is not in the range x>=0."),
    (["eval", "{d}/run", "--tasks", "{d}/bad_tasks"],
     "bad_tasks/t.yaml is not valid YAML at line 2"),
    (["eval", "{d}/hf_damaged", "--tasks", "arc_easy_sample"],
     "hf_damaged/config.json is damaged (not JSON"),
    (["eval", "{d}/hf_list", "--tasks", "arc_easy_sample"], "hf_list/config.json holds no model"),
    (["eval", "{d}/hf_bert", "--tasks", "arc_easy_sample"],
     "holds BertModel, not a causal language model transformers knows"),
    # benchmarks
    (["bench", "--suite", "{d}/missing.yaml"],
     "missing.yaml: no such file; give a suite name or a YAML file"),
    (["bench", "--suite", "{d}/not_yaml.yaml"], "is not valid YAML"),
    (["bench", "--suite", "{d}/suite_dict.yaml"], "must be a list of entries"),
    (["bench", "--models", "nosuch"], "no entries of ['nosuch'] in suite default"),
    (["bench", "--baseline", "{d}/not_yaml.yaml"], "is not a zoo bench results.json"),
    (["bench", "--suite", "{d}/empty_suite.yaml"], "empty_suite.yaml has no entries"),
    (["bench", "--suite", "{d}/empty_list_suite.yaml"], "empty_list_suite.yaml has no entries"),
    (["bench", "--suite", "{d}/steps_suite.yaml"],
     "steps_suite.yaml: entry 1 (unnamed) has unknown keys ['steps']"),
    (["bench", "--suite", "{d}/no_model_suite.yaml"],
     "no_model_suite.yaml: entry 1 (a) needs a `model:`, e.g. model: llama-tiny"),
    (["bench", "--steps", "0"], "'--steps': 0 is not in the range x>=1. (see zoo bench --help)"),
    (["bench", "--tolerance", "nan"], "'--tolerance': nan is not a finite number."),
    (["plan", "llama-8b", "--tpu", "v5p-128", "--target-mfu", "0"],
     "'--target-mfu': 0.0 is not in the range 0<x<=1."),
    (["plan", "llama-8b", "--tpu", "v5p-128", "--target-mfu", "nan"],
     "'--target-mfu': nan is not a finite number."),
    # the TPU launcher and scaffolding
    (["tpu", "create", "bad name;rm", "--tpu", "v4-8", *ZONE], "is not a valid TPU VM name"),
    (["tpu", "create", "ok-name", "--tpu", "v4-8"], "no zone: pass --zone"),
    (["tpu", "create", "ok-name", "--tpu", "v9-8", *ZONE], "unknown slice type 'v9-8'"),
    (["tpu", "logs", "Bad_Name", *ZONE], "'Bad_Name' is not a valid TPU VM name"),
    (["tpu", "sync", "Bad_Name", *ZONE], "'Bad_Name' is not a valid TPU VM name"),
    (["tpu", "sync", "node", *ZONE, "--slices", "0"], "0 is not in the range x>=1"),
    (["tpu", "setup", "bad name;rm", *ZONE], "is not a valid TPU VM name"),
    (["train", "llama-tiny", "--on", "node"], "--on needs --tpu TYPE"),
    (["new-model", "Bad-Name"], "must be lowercase letters, digits and underscores"),
    (["new-model", "llama"], "a family called 'llama' is already registered"),
    (["new-model", "core"], "model family name 'core' is already a zoo package or module"),
    (["new-model", "tasks"], "model family name 'tasks' is already a zoo package or module"),
    (["new-model", "json"], "'json' is a Python standard-library module"),
    (["new-model", "class"], "'class' is a Python keyword"),
    # --init-from: the starting point identified whole before anything is built
    (["train", "llama-tiny", "--init-from", "{d}/hf_empty"],
     "hf_empty/config.json has no vocab_size, hidden_size, intermediate_size, "
     "num_hidden_layers, num_attention_heads: the model's architecture is read from it"),
    (["train", "--init-from", "{d}/hf_empty"], "config.json names no architecture"),
    (["train", "--init-from", "{d}/hf_arch_only", "task=sft"],
     "hf_arch_only/config.json has no vocab_size"),
    (["train", "--init-from", "{d}/hf_small"], "hf_small has no *.safetensors weights"),
    (["train", "--init-from", "{d}/hf_cut"], "hf_cut/model.safetensors is cut short (80 of 84 "
     "bytes); download it again"),
    (["train", "--init-from", "{d}/hf_garbage"],
     "hf_garbage/model.safetensors is damaged (not a safetensors file)"),
    (["train", "llama"], "llama is a model family; name one of its sizes (llama-tiny, "),
]


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """Every case run once, timed; the scratch folder's files before and after all of them."""
    scratch = tmp_path_factory.mktemp("scratch")
    before = write_scratch(scratch, FILES)
    results = forked_zoo([command(args, scratch) for args, _ in CASES])
    return {"results": results, "before": before, "after": snapshot(scratch), "scratch": scratch}


def command(args: list[str], scratch) -> list[str]:
    args = [a.format(d=scratch) for a in args]
    if args[0] == "train" and "--on" not in args:
        args += ["--out", str(scratch / "train-out")]
    return args


@pytest.mark.parametrize("case", range(len(CASES)), ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_nonzero_and_before_any_model(answers, case):
    result = answers["results"][case]
    message = CASES[case][1]
    lines = result["stderr"].strip().splitlines()
    assert result["returncode"] != 0
    assert len(lines) == 1 and message in lines[0], result["stderr"][-2000:]
    assert "Traceback" not in result["stderr"] + result["stdout"]
    assert result["modules_built"] == 0, f"{result['modules_built']} torch modules built"


def test_no_bad_input_changed_or_wrote_a_file(answers):
    assert answers["after"] == answers["before"]
    assert not (answers["scratch"] / "train-out").exists()
