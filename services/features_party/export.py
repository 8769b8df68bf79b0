"""Trained models for use elsewhere: ONNX and TorchScript graphs plus a JSON of what surrounds them.

The graph takes what :meth:`Preprocessor.transform` produces — ``numeric`` (n, k)
float32, standardized, and ``categorical`` (n, m) int64 codes — and returns, for a
regressor, the network's estimate in label units (``network_outputs``: before
debiasing and shrinkage) and, for a classifier, the logits. The sidecar
``<name>.json`` holds the preprocessor (means, stds, vocabularies), the regressor's
post-processing (label law and λ, :class:`~features_party.debiasing.PostProcessing`)
or the classifier's class names, so a consumer can reproduce ``predict`` exactly:
string codes and the inverse law are table look-ups that do not belong in a graph.

Usage: ``python -m features_party.export MODEL.pt OUT_PREFIX`` writes
``OUT_PREFIX.onnx``, ``OUT_PREFIX.torchscript.pt`` and ``OUT_PREFIX.json``.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from features_party.networks import MLP
from features_party.persistence import TrainedClassifier, TrainedModel, TrainedRegressor, load_model

INPUTS = ("numeric", "categorical")
OPSET = 17


class ExportedNetwork(nn.Module):
    """The trained MLP with the regressor's target scaling folded in (identity for classifiers)."""

    def __init__(self, network: MLP, scale: float = 1.0, shift: float = 0.0) -> None:
        super().__init__()
        self.network = network
        self.scale, self.shift = float(scale), float(shift)

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        return self.network(numeric, categorical) * self.scale + self.shift


def exportable(model: TrainedModel) -> ExportedNetwork:
    """The graph to export, on the CPU in eval mode."""
    network = model.model_.to("cpu").eval()
    if isinstance(model, TrainedRegressor):
        return ExportedNetwork(network, model.target_std_, model.target_mean_).eval()
    return ExportedNetwork(network).eval()


def _example(model: TrainedModel, rows: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    pre = model.preprocessor_
    return (
        torch.zeros(rows, len(pre.numeric_columns), dtype=torch.float32),
        torch.zeros(rows, len(pre.categorical_columns), dtype=torch.int64),
    )


def sidecar(model: TrainedModel) -> dict[str, Any]:
    """What a consumer needs around the graph (plain JSON types)."""
    data: dict[str, Any] = {
        "task": model.task,
        "inputs": list(INPUTS),
        "output": "label units before post-processing" if isinstance(model, TrainedRegressor) else "logits",
        "preprocessor": model.preprocessor_.to_dict(),
        "architecture": model.architecture,
    }
    if isinstance(model, TrainedRegressor):
        data["postprocessing"] = model.postprocessing_.to_dict()
    if isinstance(model, TrainedClassifier):
        data["classes"] = list(model.classes_)
    return data


def export_onnx(model: TrainedModel, path: str | Path) -> Path:
    """ONNX (opset 17) with a dynamic batch dimension, and the sidecar JSON next to it."""
    path = Path(path)
    graph = exportable(model)
    dynamic = {name: {0: "rows"} for name in (*INPUTS, "output")}
    with warnings.catch_warnings():
        # The TorchScript-based exporter: the torch.export-based one needs onnxscript, and this
        # MLP has no control flow for which the new exporter would matter (torch is pinned).
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            graph, _example(model), str(path), input_names=list(INPUTS), output_names=["output"],
            dynamic_axes=dynamic, opset_version=OPSET, dynamo=False,
        )
    _write_sidecar(model, path)
    return path


def export_torchscript(model: TrainedModel, path: str | Path) -> Path:
    """A scripted module (``torch.jit.load`` runs it without this package), and the sidecar JSON."""
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.trace(exportable(model), _example(model))
        scripted.save(str(path))
    _write_sidecar(model, path)
    return path


def _write_sidecar(model: TrainedModel, path: Path) -> None:
    name = path.name.split(".")[0]
    (path.parent / f"{name}.json").write_text(json.dumps(sidecar(model), indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Export a model file to ONNX and TorchScript.")
    parser.add_argument("model", type=Path, help="a model file (.pt) written by the features party")
    parser.add_argument("prefix", type=Path, help="writes PREFIX.onnx, PREFIX.torchscript.pt and PREFIX.json")
    args = parser.parse_args(argv)
    model = load_model(args.model)
    args.prefix.parent.mkdir(parents=True, exist_ok=True)
    export_onnx(model, args.prefix.with_name(args.prefix.name + ".onnx"))
    export_torchscript(model, args.prefix.with_name(args.prefix.name + ".torchscript.pt"))
    print(json.dumps({"onnx": f"{args.prefix}.onnx", "torchscript": f"{args.prefix}.torchscript.pt",
                      "sidecar": f"{args.prefix}.json"}))


if __name__ == "__main__":
    main()
