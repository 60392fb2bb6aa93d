"""A small transformer language model on synthetic tokens, data-parallel with Poseidon.

Its Linear layers see K = batch × sequence rows per step (here 8 × 64 = 512 per worker), so
sufficient factors would be larger than the gradients themselves: the plan sends every layer
through the parameter server, as it should (HybComm picks per layer, from the real shapes).

    python examples/pytorch/transformer_lm.py
    poseidon launch -n 2 -- python examples/pytorch/transformer_lm.py
    poseidon plan --torch examples/pytorch/transformer_lm.py:build_model --workers 4

The data: each sequence counts upwards in steps of its own (token t+1 = token t + s mod V,
s drawn per sequence), so the next token is predictable from the two before it and the loss
falls from log V towards 0 as the model learns to read the step off its context.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn

import poseidon.torch

VOCAB, WIDTH, HEADS, LAYERS, CONTEXT = 128, 128, 4, 2, 64


class TinyLM(nn.Module):
    """Token and position embeddings, causal transformer blocks, and an output projection."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(CONTEXT, WIDTH)
        block = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0,
                                           batch_first=True, norm_first=True)  # fmt: skip
        self.blocks = nn.TransformerEncoder(block, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(CONTEXT))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.tokens(tokens) + self.positions(torch.arange(n, device=tokens.device))
        x = self.blocks(x, mask=self.causal[:n, :n], is_causal=True)
        return self.head(self.norm(x))


def build_model(batch: int = 8) -> tuple[nn.Module, torch.Tensor]:
    """The model, and an example input (`batch` sequences of CONTEXT token ids)."""
    return TinyLM(), torch.zeros(batch, CONTEXT, dtype=torch.long)


def batch_of_sequences(count: int, generator: torch.Generator) -> torch.Tensor:
    start = torch.randint(0, VOCAB, (count, 1), generator=generator)
    step = torch.randint(1, 8, (count, 1), generator=generator)
    return (start + step * torch.arange(CONTEXT + 1)) % VOCAB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=16, help="global batch (all workers)")
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    model, _ = build_model()
    net = poseidon.torch.DistributedDataParallel(model)
    if args.batch % net.num_workers:
        raise SystemExit(f"--batch {args.batch} is not divisible by {net.num_workers} workers")
    local = args.batch // net.num_workers
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    data = torch.Generator().manual_seed(1)  # the same global batches on every worker
    for step in range(args.steps):
        sequences = batch_of_sequences(args.batch, data)[net.rank * local : (net.rank + 1) * local]
        optimizer.zero_grad()
        logits = net(sequences[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), sequences[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        if net.rank == 0 and (step % 25 == 0 or step == args.steps - 1):
            print(f"step {step}: loss {loss.item():.3f} (log V = {math.log(VOCAB):.3f})")
    net.close()


if __name__ == "__main__":
    main()
