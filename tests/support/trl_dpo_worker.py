"""TRL's DPOTrainer as the reference for tests/unit/test_dpo_loss.py, in a process of its own
(accelerate would put it on the XLA device in the test's): a tiny transformers llama as the
policy (perturbed) and a copy as the reference, two preference rows; per loss type, TRL's
loss and rewards, and the same log-probabilities (summed over TRL's completion mask, from the
same models) put through zoo's `preference_loss`.

    python -m tests.support.trl_dpo_worker OUT.json
"""

import dataclasses
import json
import os
import sys

os.environ["USE_TORCH_XLA"] = "0"  # accelerate: the CPU, not torch_xla's device

import datasets  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from trl import DPOConfig as TRLConfig  # noqa: E402
from trl import DPOTrainer  # noqa: E402

from core.data import load_tokenizer  # noqa: E402
from zoo.registry import family  # noqa: E402
from zoo.tasks.dpo import DPOConfig, preference_loss  # noqa: E402

ROWS = [{"prompt": "What is 2 + 3?", "chosen": " 5", "rejected": " I don't know."},
        {"prompt": "Say hi.", "chosen": " hi", "rejected": " no, not now"}]
BETA = 0.1


def models():
    fam = family("llama")
    config = dataclasses.replace(fam.sizes["tiny"], num_hidden_layers=2, attention="plain")
    torch.manual_seed(0)
    policy = transformers.LlamaForCausalLM(fam.hf_config(config))
    reference = transformers.LlamaForCausalLM(fam.hf_config(config))
    reference.load_state_dict(policy.state_dict())
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    return policy.eval(), reference.eval()


def summed_logps(model, inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """([2 * pairs] summed log-probabilities of the completion tokens, their counts)."""
    logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
    targets = inputs["input_ids"][:, 1:]
    logps = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, targets[..., None])[..., 0]
    mask = inputs["completion_mask"][:, 1:].float()
    return (logps * mask).sum(1), mask.sum(1)


def main(out: str) -> None:
    policy, reference = models()
    tokenizer = load_tokenizer("default")
    found = {}
    for loss_type in ("sigmoid", "hinge", "ipo"):
        args = TRLConfig(output_dir=os.path.join(os.path.dirname(out), loss_type), report_to=[],
                         beta=BETA, loss_type=[loss_type], per_device_train_batch_size=2,
                         use_cpu=True, bf16=False)
        trainer = DPOTrainer(model=policy, ref_model=reference, args=args,
                             train_dataset=datasets.Dataset.from_list(ROWS),
                             processing_class=tokenizer)
        inputs = trainer.data_collator([trainer.train_dataset[i] for i in range(len(ROWS))])
        with torch.no_grad():
            theirs = trainer.compute_loss(trainer.model, inputs).item()
            metrics = {k: v[-1] for k, v in trainer._metrics["eval"].items()}  # eval(): no dropout
            (policy_logps, tokens), (reference_logps, _) = (summed_logps(m, inputs)
                                                            for m in (policy, reference))

        def pairs(values):  # TRL's batch is [chosen rows; rejected rows]
            return torch.stack(values.chunk(2), dim=-1)

        losses, chosen, rejected = preference_loss(
            pairs(policy_logps), pairs(reference_logps), DPOConfig(beta=BETA, loss_type=loss_type),
            pairs(tokens))
        found[loss_type] = {
            "trl": theirs, "ours": losses.mean().item(),
            "trl_rewards": [metrics["rewards/chosen"], metrics["rewards/rejected"]],
            "our_rewards": [chosen.mean().item(), rejected.mean().item()],
        }
    with open(out, "w") as file:
        json.dump(found, file)


if __name__ == "__main__":
    main(sys.argv[1])
