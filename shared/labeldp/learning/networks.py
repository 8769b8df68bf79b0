"""The one MLP body both tasks share, with a regression or a K-way classification head."""

from __future__ import annotations

import torch
from torch import nn

EMBEDDING_DIM = 8
HIDDEN = (128, 64)
PREDICT_CHUNK = 65_536
"""Rows per forward pass at prediction and evaluation time, so large tables fit on the device."""


class MLP(nn.Module):
    """Embeddings (8 per categorical column) + standardized numerics -> 128 -> 64 -> ``out_features``."""

    def __init__(
        self, n_numeric: int, vocab_sizes: list[int], out_features: int = 1, embedding_dim: int = EMBEDDING_DIM
    ) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(size + 1, embedding_dim) for size in vocab_sizes)
        width = n_numeric + embedding_dim * len(vocab_sizes)
        self.body = nn.Sequential(
            nn.Linear(width, HIDDEN[0]),
            nn.ReLU(),
            nn.Linear(HIDDEN[0], HIDDEN[1]),
            nn.ReLU(),
            nn.Linear(HIDDEN[1], out_features),
        )

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        parts = [numeric] + [emb(categorical[:, j]) for j, emb in enumerate(self.embeddings)]
        return self.body(torch.cat(parts, dim=1))



class MLPRegressor(MLP):
    """The MLP with one output, returned as shape (n,)."""

    def __init__(self, n_numeric: int, vocab_sizes: list[int], embedding_dim: int = EMBEDDING_DIM) -> None:
        super().__init__(n_numeric, vocab_sizes, 1, embedding_dim)

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        return super().forward(numeric, categorical).squeeze(1)



class MLPClassifier(MLP):
    """The same MLP with a K-way head; returns logits (n, K) (softmax is applied by the loss and predict)."""

    def __init__(
        self, n_numeric: int, vocab_sizes: list[int], n_classes: int, embedding_dim: int = EMBEDDING_DIM
    ) -> None:
        super().__init__(n_numeric, vocab_sizes, n_classes, embedding_dim)
        self.n_classes = n_classes



def describe_architecture(n_numeric: int, vocab_sizes: list[int], head: str = "Linear 1; Adam, MSE") -> str:
    return (
        f"MLP: {n_numeric} standardized numeric + {len(vocab_sizes)} categorical "
        f"(Embedding(vocab+1, {EMBEDDING_DIM}) each) -> Linear {HIDDEN[0]} -> ReLU -> "
        f"Linear {HIDDEN[1]} -> ReLU -> {head}"
    )



def classifier_head(n_classes: int, corrected: bool) -> str:
    loss = "cross-entropy with forward correction (log(softmax·T))" if corrected else "cross-entropy"
    return f"Linear {n_classes} -> softmax; Adam, {loss}"
