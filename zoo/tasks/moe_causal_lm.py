"""Causal language modelling for a mixture of experts: the next-token loss plus the
router's load-balancing loss (weighted by `router_aux_loss_coef`, as transformers trains
Mixtral), with the router's balance and dropped-token fraction logged every step."""

from __future__ import annotations

from zoo.tasks.causal_lm import CausalLM, documents, loss_from_hidden


class MoECausalLM(CausalLM):
    name = "moe-causal-lm"

    def loss(self, model, batch):
        hidden, router = model.hidden_states_with_router(batch["input_ids"], **documents(batch))
        lm_loss = loss_from_hidden(model, hidden, batch["labels"])
        loss = lm_loss + model.config.router_aux_loss_coef * router.aux_loss
        return loss, {"lm_loss": lm_loss.detach(), "router_aux_loss": router.aux_loss.detach(),
                      "expert_balance": router.balance.detach(),
                      "dropped_fraction": router.dropped_fraction.detach()}


MOE_CAUSAL_LM = MoECausalLM()
