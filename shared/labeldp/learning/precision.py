"""Mixed precision: the forward pass under bf16/fp16 autocast, one optimizer step per batch.

``fp32`` adds nothing (no autocast, plain ``backward()``), so the default training is
bit for bit what it was before precision became an option. ``fp16`` scales the loss
(:class:`torch.amp.GradScaler`) so small gradients do not underflow; ``bf16`` has
fp32's exponent range and needs no scaler. Losses are computed in float32 from the
network's output either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from labeldp.learning.config import PRECISIONS

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class MixedPrecision:
    """The autocast context and the step (with a gradient scaler for fp16) of one training."""

    def __init__(self, precision: str, device: str) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}")
        self.precision = precision
        self.device_type = torch.device(device).type
        self.dtype = _DTYPES.get(precision)
        self.scaler = torch.amp.GradScaler(self.device_type) if precision == "fp16" else None

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.dtype is None:
            yield
            return
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            yield

    def step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """Backward and optimizer step (scaled for fp16)."""
        self.backward(loss)
        self.update(optimizer)

    def backward(self, loss: torch.Tensor) -> None:
        """Add ``loss``'s gradients (scaled for fp16): one micro-batch of a step."""
        if self.scaler is None:
            loss.backward()
        else:
            self.scaler.scale(loss).backward()

    def update(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer step on the gradients added since the last one."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()
