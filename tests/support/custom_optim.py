"""A user-defined optimizer for the trainer tests: plain SGD whose step returns a metric."""

import torch


class SGDWithUpdateNorm(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, weight_decay=0.0):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self):
        squares = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    update = group["lr"] * p.grad
                    p.sub_(update)
                    squares.append(update.pow(2).sum())
        return {"update_norm": torch.stack(squares).sum().sqrt()}
