"""Where training and prediction run: CUDA when asked for and present, else the CPU."""

from __future__ import annotations

import torch


def resolve_device(requested: str) -> str:
    """``cuda`` when asked for (``auto`` or ``cuda``) and present, else ``cpu``."""
    requested = (requested or "auto").lower()
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError("device must be auto, cpu or cuda")
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return "cuda"
    return "cpu"
