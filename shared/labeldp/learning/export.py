"""Trained models for use elsewhere: ONNX and TorchScript graphs plus a JSON of what surrounds them.

The ONNX file is the whole prediction (:mod:`labeldp.learning.onnx_graph`): one input per
feature column, the preprocessing, the network and the post-processing, so a runtime gives
``predict``'s answer with no code of ours. The TorchScript file is the network alone: it
takes what :meth:`Preprocessor.transform` produces — ``numeric`` (n, k) float32,
standardized, and ``categorical`` (n, m) int64 codes — and returns, for a regressor, the
network's estimate in label units (``network_outputs``: before debiasing and shrinkage)
and, for a classifier, the logits. The sidecar ``<name>.json`` holds the preprocessor
(means, stds, vocabularies), the regressor's post-processing (label law and λ,
:class:`~labeldp.learning.debiasing.PostProcessing`) or the classifier's class names. The
same JSON travels inside each file too (ONNX ``metadata_props["labeldp"]``, TorchScript
extra file ``labeldp.json``), so the one file ``GET /v1/models/{id}/export`` answers is
enough on its own.

Entry points: ``labeldp export MODEL.pt PREFIX [--format onnx|torchscript|both]`` and
``GET /v1/models/{id}/export?format=`` (docs/architecture.md, "Training at scale");
``python -m labeldp.learning.export`` is an alias of the former.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any, Literal

import onnx
import torch
from torch import nn

from labeldp.learning.networks import MLP
from labeldp.learning.persistence import TrainedClassifier, TrainedModel, TrainedRegressor, load_model

INPUTS = ("numeric", "categorical")
OPSET = 17
Format = Literal["onnx", "torchscript"]
"""The export formats (the route's ``format`` query)."""
SUFFIXES: dict[str, str] = {"onnx": ".onnx", "torchscript": ".torchscript.pt"}
"""Each export format and the suffix of its file."""
METADATA_KEY = "labeldp"
"""ONNX ``metadata_props`` key (and ``<key>.json``, the TorchScript extra file) of the embedded sidecar."""


class ExportError(ValueError):
    """A model file that cannot be read or exported; ``code`` is the stable error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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


def export_onnx(model: TrainedModel, path: str | Path, *, sidecar_file: bool = True) -> Path:
    """ONNX (opset 17): the whole prediction, raw feature columns in (:mod:`labeldp.learning.onnx_graph`),
    with a dynamic batch dimension and the sidecar embedded (and next to it with ``sidecar_file``)."""
    from labeldp.learning.onnx_graph import full_graph

    path = Path(path)
    proto = full_graph(model)
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(sidecar(model))
    onnx.save(proto, str(path))
    if sidecar_file:
        _write_sidecar(model, path)
    return path


def export_torchscript(model: TrainedModel, path: str | Path, *, sidecar_file: bool = True) -> Path:
    """A scripted module (``torch.jit.load`` runs it without this package) with the sidecar embedded
    (and next to it with ``sidecar_file``)."""
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.trace(exportable(model), _example(model))
        scripted.save(str(path), _extra_files={f"{METADATA_KEY}.json": json.dumps(sidecar(model))})
    if sidecar_file:
        _write_sidecar(model, path)
    return path


def _write_sidecar(model: TrainedModel, path: Path) -> None:
    name = path.name.split(".")[0]
    (path.parent / f"{name}.json").write_text(json.dumps(sidecar(model), indent=2))


def export_as(model: TrainedModel, fmt: str, path: str | Path, *, sidecar_file: bool = True) -> Path:
    """``path`` in format ``fmt`` (``onnx`` or ``torchscript``); ``ExportError`` when it cannot be."""
    if fmt not in SUFFIXES:
        raise ExportError("invalid_format", f"format must be one of {', '.join(SUFFIXES)}")
    try:
        return (export_onnx if fmt == "onnx" else export_torchscript)(model, path, sidecar_file=sidecar_file)
    except (RuntimeError, ValueError, TypeError, onnx.checker.ValidationError) as exc:
        # the exporter's message names graph internals, never data: keep its type only
        message = f"the model cannot be exported as {fmt} ({type(exc).__name__})"
        raise ExportError("model_not_exportable", message) from exc


def read_model(path: str | Path) -> TrainedModel:
    """A model file, or ``ExportError`` (``model_file_not_found``, ``invalid_model_file``)."""
    path = Path(path)
    if not path.is_file():
        raise ExportError("model_file_not_found", f"{path}: no such model file")
    try:
        return load_model(path)
    except Exception as exc:  # torch.load's failures on a foreign file are many (pickle, zip, keys)
        raise ExportError("invalid_model_file", f"{path}: not a model file of the features party "
                          f"({type(exc).__name__})") from None


def export_files(
    model_path: str | Path, prefix: str | Path, formats: tuple[str, ...] = tuple(SUFFIXES)
) -> dict[str, str]:
    """``PREFIX.onnx`` and/or ``PREFIX.torchscript.pt`` and ``PREFIX.json`` from a model file; what was written."""
    unknown = [f for f in formats if f not in SUFFIXES]
    if unknown or not formats:
        raise ExportError("invalid_format", f"format must be one of {', '.join(SUFFIXES)}")
    model = read_model(model_path)
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    for fmt in formats:
        written[fmt] = str(export_as(model, fmt, prefix.with_name(prefix.name + SUFFIXES[fmt])))
    written["sidecar"] = str(prefix.with_name(prefix.name.split(".")[0] + ".json"))
    return written


def main(argv: list[str] | None = None) -> None:
    """``python -m labeldp.learning.export``: the same as ``labeldp export`` (both formats by default)."""
    parser = argparse.ArgumentParser(description="Export a model file to ONNX and TorchScript (= labeldp export).")
    parser.add_argument("model", type=Path, help="a model file (.pt) written by the features party")
    parser.add_argument("prefix", type=Path, help="writes PREFIX.onnx, PREFIX.torchscript.pt and PREFIX.json")
    args = parser.parse_args(argv)
    try:
        written = export_files(args.model, args.prefix)
    except ExportError as exc:
        parser.exit(2, f"error: {exc.code}: {exc}\n")
    print(json.dumps(written))


if __name__ == "__main__":
    main()
