"""Group relative policy optimisation (`task=grpo`; Shao et al., 2024) of any causal-LM family,
full tune or LoRA, from rewards the run names (zoo/data/rewards.py). Each step's batch is a
rollout (zoo/tasks/grpo_batches.py): G completions per prompt sampled from the policy as it
is, on the run's devices (core/sampler), scored on the host, advantages relative to each
group. The step's loss is the clipped policy loss over the completion tokens
(zoo/tasks/grpo_objective.py, TRL's), the log-probs of logits / temperature as the sampler
drew them; with grpo.num_iterations k a rollout trains k steps, the ratio to the sampler's
log-probs. With grpo.beta > 0 a KL term to the starting point: under LoRA the model with its
adapters off, otherwise a frozen copy placed as the model (as DPO's reference).

Logged each step beside the loss: each reward's mean and std, the completions' lengths, the
share of groups whose rewards tie, KL, the clipped share, and the step's rollout and update
seconds apart (`update_mfu`, `rollout_mfu`: each one's FLOPs over its seconds).

    zoo train --init-from runs/llama-tiny-sft task=grpo grpo.rewards=[exact_match]
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time

import torch
import torch.nn.functional as F

from core import lora, topology
from core.config import read_saved_config
from core.data import check_vocab, load_tokenizer
from core.errors import UserError
from core.json_file import DamagedFile
from core.mesh import resolve_axis_sizes
from core.sampler import Sampler, SamplerShape
from core.sampler.footprint import cache_bytes_per_device, gathered_weight_bytes
from core.sampler.params import DEFAULT_BUCKETS
from core.task import Placed, Sampling, Task
from zoo.data.grpo_data import GRPODataConfig, check_lengths, encode_prompts, load_prompts
from zoo.data.rewards import load_rewards
from zoo.data.sft_data import read_once, recorded
from zoo.tasks import grpo_objective
from zoo.tasks.causal_lm import CausalLM, LMTrainConfig, with_token_ids
from zoo.tasks.grpo_batches import GRPOBatches
from zoo.tasks.grpo_objective import GRPOConfig, policy_loss
from zoo.tasks.variant import TaskVariant, on_top_of


@dataclasses.dataclass
class GRPOTrainConfig(LMTrainConfig):
    data: GRPODataConfig = dataclasses.field(default_factory=GRPODataConfig)
    grpo: GRPOConfig = dataclasses.field(default_factory=GRPOConfig)


_prompts = read_once(lambda data, tokenizer, seq_len: load_prompts(data))


class GroupRelative(CausalLM):
    name = "grpo"
    config_cls = GRPOTrainConfig
    sample_prompt = 'Repeat the word "zoo".'
    chat = True

    def __init__(self, family):
        self.family = family  # the run's (zoo.registry.ModelFamily): its cache, its FLOPs
        self.reference: torch.nn.Module | None = None  # None: the model, adapters off
        self.config = GRPOConfig()
        self.forward_flops = 0.0  # forward FLOPs per token, once started

    def resolve(self, config: GRPOTrainConfig) -> GRPOTrainConfig:
        grpo = config.grpo
        if config.eval_every:
            raise UserError("task=grpo has no validation pass (its rewards are logged every "
                            "step); set eval_every=0")
        if config.global_batch_size % grpo.num_generations:
            raise UserError(f"global_batch_size {config.global_batch_size} counts completions, "
                            f"whole groups of grpo.num_generations ({grpo.num_generations}): "
                            "make it a multiple")
        if config.checkpoint_every % grpo.num_iterations:
            raise UserError(f"checkpoint_every {config.checkpoint_every} is not a multiple of "
                            f"grpo.num_iterations ({grpo.num_iterations}): a run resumes at "
                            "the start of a rollout")
        room = prompt_room(config)
        prompts = _prompts(config.data, config.seq_len)
        tokenizer = load_tokenizer(config.data.tokenizer)
        chat_tuned = tuned_on_chats(config.init_from)
        ids = encode_prompts(prompts, tokenizer, chat_tuned)
        check_lengths(ids, prompts, room, f"seq_len {config.seq_len} less grpo.max_new_tokens "
                                          f"{grpo.max_new_tokens}")
        load_rewards(grpo.rewards, grpo.reward_weights, config.data.answer_field,
                     list(prompts.columns), grpo.format_regex)  # refused now, not at step 1
        self.reference_forwards = int(grpo.beta > 0)  # the reference's forward (MFU)
        print(f"grpo data: {prompts.label}", file=sys.stderr)
        asked = "chat" if prompts.format == "chat" or chat_tuned else "prompt-completion"
        config = dataclasses.replace(config, data=recorded(config.data, asked))
        return with_token_ids(config, tokenizer, ("bos_token_id", "eos_token_id", "pad_token_id"))

    def data(self, config: GRPOTrainConfig, process_index: int,
             process_count: int) -> GRPOBatches:
        if process_count > 1:
            raise UserError("task=grpo samples its rollouts in one process for now; run it "
                            "with --nproc 1 (or none)")
        tokenizer = load_tokenizer(config.data.tokenizer)
        check_vocab(tokenizer, config.model.vocab_size, config.init_from)
        prompts = _prompts(config.data, config.seq_len)
        grpo = config.grpo
        rewards = load_rewards(grpo.rewards, grpo.reward_weights, config.data.answer_field,
                               list(prompts.columns), grpo.format_regex)
        stops = tuple(i for i in (tokenizer.eos_token_id,) if i is not None)
        batches = GRPOBatches(prompts, encode_prompts(prompts, tokenizer,
                                                      tuned_on_chats(config.init_from)),
                              rewards, grpo, seq_len=config.seq_len,
                              global_batch_size=config.global_batch_size, seed=config.seed,
                              shuffle_seed=config.data.shuffle_seed, tokenizer=tokenizer,
                              stop_token_ids=stops)
        print(f"grpo rollouts: {batches.describe()}", file=sys.stderr)
        return batches

    def bind(self, model, config: GRPOTrainConfig, place) -> Task:
        """This task with the run's settings and, when beta > 0, its reference: the model
        with its LoRA adapters off, or else a frozen copy of it placed as the model is."""
        bound = copy.copy(self)
        bound.config = config.grpo
        bound.reference_forwards = int(config.grpo.beta > 0)
        if config.grpo.beta > 0 and not lora.has_adapters(model):
            bound.reference = place(copy.deepcopy(model).requires_grad_(False))
        return bound

    def placed(self, config: GRPOTrainConfig, params) -> list[Placed]:
        """The rollout's KV cache and the weights its sampler reads (gathered over FSDP's
        axes, once a rollout), made and dropped around each rollout, between the step's
        programs (counted on top of the step: a bound, as the step's transients are freed
        while they live), and a frozen copy's share of each device (beta > 0, not LoRA)."""
        topo = topology.parse(config.tpu)
        mesh_sizes = resolve_axis_sizes(config.mesh, topo.devices)
        bf16 = config.runs_in_bf16(topo)
        rollout = self.sampling(config, mesh_sizes)
        dtype, size = ("bf16", 2) if bf16 else ("fp32", 4)
        cache = cache_bytes_per_device(rollout.layout, rollout.shape, size, mesh_sizes)
        entries = [Placed(f"sampler KV cache ({dtype})", cache, in_step=False,
                          advice=CACHE_ADVICE, in_decode="cache"),
                   Placed(f"sampler weights ({dtype}, gathered over fsdp)",
                          gathered_weight_bytes(params, size, mesh_sizes), in_step=False,
                          advice=WEIGHTS_ADVICE, in_decode="weights")]
        if config.grpo.beta > 0 and not config.lora.enabled:
            entries.append(Placed("reference model (frozen copy)",
                                  sum(p.shard_bytes for p in params)))
        return entries

    def sampling(self, config: GRPOTrainConfig, mesh_sizes: dict[str, int]) -> Sampling:
        """The rollout's sampler: the family's cache layout, one row per completion (rounded
        up to the mesh's batch split) of seq_len slots, GRPO's sampling settings stopping at
        the tokenizer's EOS (`resolve` wrote its id into the model config)."""
        eos = getattr(config.model, "eos_token_id", None)
        return Sampling(self.cache_layout(config), rollout_shape(config, mesh_sizes),
                        config.grpo.sampling(config.seed, () if eos is None else (eos,)))

    def cache_layout(self, config: GRPOTrainConfig) -> list:
        """The family's KV-cache layout for the run's model; a family without a device
        sampler is refused (its rollouts could not be sampled)."""
        if self.family.cache_layout is None:
            raise UserError(f"{self.family.name} has no device sampler (model.cache_layout), "
                            "which task=grpo's rollouts need")
        return self.family.cache_layout(config.model)

    def started(self, engine) -> None:
        """The rollouts sample from the placed model on the run's backend and mesh, in the
        run's precision: one row per completion (rounded up to the mesh's batch split), a
        cache of seq_len columns per row. On xla a rollout compiles one prefill per prompt
        bucket it meets and one decode step, once for the whole run."""
        config = engine.config
        rollout = self.sampling(config, engine.mesh_sizes)
        sampler = Sampler(engine.model, rollout.layout, shape=rollout.shape,
                          backend=engine.backend, mesh=engine.mesh, plan=engine.plan,
                          bf16=engine.bf16)
        # per token: the rollout's MFU
        self.forward_flops = self.family.forward_flops(config)

        def generate(prompts, params, sample_ids, decode, pad_id):
            return sampler.generate(prompts, params, sample_ids=sample_ids, decode=decode,
                                    pad_id=pad_id)

        engine.data.generate = generate

    def loss(self, model, batch):
        mask = batch["completion_mask"][:, 1:]
        logps = completion_logps(model, batch, self.config.temperature)
        reference = None
        if self.config.beta > 0:
            with torch.no_grad():
                if self.reference is not None:
                    reference = completion_logps(self.reference, batch, self.config.temperature)
                else:
                    with lora.adapters_off(model):
                        reference = completion_logps(model, batch, self.config.temperature)
        old = batch["old_logps"][:, 1:] if self.config.num_iterations > 1 else None
        return policy_loss(logps, old, batch["advantages"], mask, self.config, reference,
                           self.config.max_new_tokens)

    def loss_weight(self, batch):
        return grpo_objective.loss_weight(batch["completion_mask"][:, 1:],
                                          self.config.loss_type)

    def example_batch(self, config: GRPOTrainConfig, seed: int = 0) -> dict:
        """Random tokens, the second half of each row a completion."""
        batch = super().example_batch(config, seed)
        shape = batch["input_ids"].shape
        mask = torch.zeros(shape)
        mask[:, shape[1] // 2:] = 1
        generator = torch.Generator().manual_seed(seed)
        return {"input_ids": batch["input_ids"], "completion_mask": mask,
                "old_logps": -torch.rand(shape, generator=generator) * mask,
                "advantages": torch.randn(shape[0], generator=generator)}

    def after_step(self, engine, step: int) -> dict:
        """The step's rollout metrics, the update's seconds, and the MFU of each: the
        update's FLOPs (engine.flops_per_step) over its seconds, the sampler's forwards
        (each prompt and new token through the model once) over its."""
        update = time.perf_counter() - engine.data.fetched_at
        rollout = engine.data.latest
        metrics = dict(rollout.metrics)
        if (step - 1) % self.config.num_iterations:  # the rollout was sampled for a step before
            metrics["rollout_s"] = 0.0
        sampled = self.forward_flops * rollout.forwarded_tokens
        return {**metrics, "update_s": update,
                "update_mfu": engine.flops_per_step() / (update * engine.peak_flops),
                "rollout_mfu": sampled / (rollout.sampling_s * engine.peak_flops)}


def completion_logps(model, batch: dict, temperature: float) -> torch.Tensor:
    """[N, seq_len - 1] each next token's log-probability under `model` at `temperature`
    (the sampler's log_softmax(logits / T))."""
    logits = model(batch["input_ids"])[:, :-1].float() / temperature
    targets = batch["input_ids"][:, 1:]
    return -F.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                            reduction="none").view(targets.shape)


WEIGHTS_ADVICE = ("the sampler reads the weights whole on each chip but for their tensor and "
                  "expert splits: split them with sharding=fsdp_tensor mesh.tensor=N")
CACHE_ADVICE = ("the sampler's KV cache holds global_batch_size rows (every completion: "
                "grpo.num_generations per prompt) of seq_len slots (prompt + "
                "grpo.max_new_tokens): lower global_batch_size or seq_len, or split it over "
                "more chips")


def rollout_shape(config: GRPOTrainConfig, mesh_sizes: dict[str, int]) -> SamplerShape:
    """The rollout's sampler shape: one row per completion of the step (global_batch_size,
    rounded up to the mesh's batch split), prompts bucketed up to seq_len less the new
    tokens, so every row holds seq_len slots."""
    room = prompt_room(config)
    buckets = tuple(b for b in DEFAULT_BUCKETS if b < room) + (room,)
    return SamplerShape.for_model(config.model, config.global_batch_size,
                                  config.grpo.max_new_tokens, room, mesh_sizes, buckets)


def prompt_room(config: GRPOTrainConfig) -> int:
    """The longest prompt a row holds: seq_len less the new tokens (at least one, and
    within the model's positions)."""
    new_tokens = config.grpo.max_new_tokens
    positions = getattr(config.model, "max_position_embeddings", None)
    if positions and new_tokens >= positions:
        raise UserError(f"grpo.max_new_tokens {new_tokens} passes the model's {positions} "
                        "positions (a prompt needs one at least)")
    room = config.seq_len - new_tokens
    if room < 1:
        raise UserError(f"grpo.max_new_tokens {config.grpo.max_new_tokens} leaves no room for "
                        f"a prompt in seq_len {config.seq_len}; raise seq_len or lower it")
    return room


def tuned_on_chats(init_from: str | None) -> bool:
    """Whether the starting point is a zoo run tuned on chats, whose saved config records
    `data.row_format: chat` (as SFT, DPO and GRPO record their rows): its text prompts are
    then asked as a user turn of its template, as `zoo generate` asks it. A Hugging Face
    folder or a random start: no."""
    if not init_from:
        return False
    try:
        (_, keys), _ = read_saved_config(init_from)
    except (UserError, DamagedFile):  # not a zoo run (a damaged one is refused at its weights)
        return False
    data = keys.get("data")
    return isinstance(data, dict) and data.get("row_format") == "chat"


VARIANT = TaskVariant(
    builds_on=CausalLM,
    build=lambda family_task, family: on_top_of(family_task, GroupRelative)(family),
    rank=3)
