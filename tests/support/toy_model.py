"""A small model for core runtime tests: embedding, a LayerStack of identical blocks that
take a per-position extra (like rotary tables), and an LM-style head. Knows no sharding."""

from torch import nn

from core.remat import LayerStack

VOCAB, DIM, HIDDEN, SEQ, LAYERS = 256, 64, 128, 16, 3


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x, position_bias):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x + position_bias))))


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        self.layers = LayerStack([Block() for _ in range(LAYERS)])
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, input_ids, labels):
        hidden = self.layers(self.embed(input_ids), self.pos.weight[: input_ids.shape[1]])
        logits = self.head(hidden)
        return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
