"""The whole prediction as one ONNX graph: raw feature columns in, the service's answer out.

A model exported by the service used to be the network alone, with the preprocessing and
the regressor's post-processing described in embedded JSON; readings of that JSON that
looked reasonable were off by up to 10⁵ label units per prediction (issue 26). This graph
holds all of it, so ``onnxruntime`` (or any ONNX runtime) gives what ``predict`` gives,
to 10⁻⁵, with no code of ours:

* one input per feature column, named by the column, shape ``(rows,)``: ``double`` for a
  numeric feature, ``string`` for a categorical one;
* the preprocessing of :class:`~labeldp.learning.preprocessing.Preprocessor`: a NaN or
  infinite numeric value is missing and takes the training mean, then the standardization;
  a category outside the training vocabulary (``""`` for a missing one) is the "unknown"
  category (index 0), as the service does;
* the trained network (traced by torch), with the target scaling folded in;
* a regressor's post-processing (:class:`~labeldp.learning.debiasing.PostProcessing`): the
  plain and debiased estimates with their clipping, the shrinkage λ, and the pull toward
  the release's private mean; output ``prediction`` (double, label units);
* a classifier: outputs ``logits`` and ``probabilities`` (softmax), classes in the order of
  the embedded JSON's ``classes``.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import onnx
import pyarrow as pa
import torch
from onnx import TensorProto, compose, helper, numpy_helper

from labeldp.learning.debiasing import MonotoneLaw, PostProcessing
from labeldp.learning.persistence import TrainedClassifier, TrainedModel, TrainedRegressor

OPSET = 17
ML_OPSET = 3  # ai.onnx.ml LabelEncoder with default_int64 and tensor attributes
PREDICTION, LOGITS, PROBABILITIES = "prediction", "logits", "probabilities"


class _Graph:
    """Nodes and constants of one hand-built graph, with fresh names."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.nodes, self.initializers, self.count = prefix, [], [], 0  # type: ignore[var-annotated]

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}{hint}_{self.count}"

    def const(self, value: Any, dtype: type = np.float64, hint: str = "c") -> str:
        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, kind: str, *inputs: str, domain: str = "", hint: str | None = None, **attrs: Any) -> str:
        out = self.name(hint or kind.lower())
        self.nodes.append(helper.make_node(kind, list(inputs), [out], domain=domain, **attrs))
        return out


def _network(model: TrainedModel) -> onnx.ModelProto:
    """The traced network: ``numeric`` (n, k) float32 standardized, ``categorical`` (n, m) int64 → ``output``."""
    from labeldp.learning.export import INPUTS, _example, exportable

    buffer = io.BytesIO()
    dynamic = {name: {0: "rows"} for name in (*INPUTS, "output")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            exportable(model), _example(model), buffer,  # type: ignore[arg-type]  # a stream works
            input_names=list(INPUTS), output_names=["output"],
            dynamic_axes=dynamic, opset_version=OPSET, dynamo=False,
        )
    return onnx.load_from_string(buffer.getvalue())


def _preprocessing(model: TrainedModel) -> onnx.ModelProto:
    pre = model.preprocessor_
    g = _Graph("pre_")
    inputs = [helper.make_tensor_value_info(c, TensorProto.DOUBLE, ["rows"]) for c in pre.numeric_columns]
    inputs += [helper.make_tensor_value_info(c, TensorProto.STRING, ["rows"]) for c in pre.categorical_columns]
    axis_1 = g.const([1], np.int64, "axis")
    first = (pre.numeric_columns + pre.categorical_columns)[0]
    rows = g.op("Slice", g.op("Shape", first), g.const([0], np.int64), g.const([1], np.int64))

    def empty(dtype: int) -> str:  # (rows, 0): a model with no column of this kind
        shape = g.op("Concat", rows, g.const([0], np.int64), axis=0)
        return g.op("ConstantOfShape", shape, value=helper.make_tensor("v", dtype, [1], [0]))

    numeric = []
    for name, mean, std in zip(pre.numeric_columns, pre.means, pre.stds, strict=True):
        missing = g.op("Or", g.op("IsNaN", name), g.op("IsInf", name))
        value = g.op("Where", missing, g.const(mean), name)
        scaled = g.op("Div", g.op("Sub", value, g.const(mean)), g.const(std))
        numeric.append(g.op("Unsqueeze", g.op("Cast", scaled, to=TensorProto.FLOAT), axis_1))
    categorical = []
    for name, vocabulary in zip(pre.categorical_columns, pre.vocabularies, strict=True):
        if vocabulary:
            keys = sorted(vocabulary, key=vocabulary.__getitem__)
            codes = g.op(
                "LabelEncoder", name, domain="ai.onnx.ml", keys_strings=keys,
                values_int64s=[vocabulary[k] for k in keys], default_int64=0,
            )
        else:  # no category seen at training: every row is "unknown"
            zero = helper.make_tensor("v", TensorProto.INT64, [1], [0])
            codes = g.op("ConstantOfShape", g.op("Shape", name), value=zero)
        categorical.append(g.op("Unsqueeze", codes, axis_1))
    g.nodes.append(helper.make_node("Concat", numeric, ["numeric"], axis=1) if numeric else
                   helper.make_node("Identity", [empty(TensorProto.FLOAT)], ["numeric"]))
    g.nodes.append(helper.make_node("Concat", categorical, ["categorical"], axis=1) if categorical else
                   helper.make_node("Identity", [empty(TensorProto.INT64)], ["categorical"]))
    outputs = [
        helper.make_tensor_value_info("numeric", TensorProto.FLOAT, ["rows", len(pre.numeric_columns)]),
        helper.make_tensor_value_info("categorical", TensorProto.INT64, ["rows", len(pre.categorical_columns)]),
    ]
    graph = helper.make_graph(g.nodes, "preprocessing", inputs, outputs, g.initializers)
    return _model(graph)


def _clip(g: _Graph, x: str, low: float, high: float) -> str:
    if np.isfinite(low):
        x = g.op("Max", x, g.const(low))
    if np.isfinite(high):
        x = g.op("Min", x, g.const(high))
    return x


def _interp(g: _Graph, x: str, knots: np.ndarray, values: np.ndarray) -> str:
    """``np.interp(x, knots, values)`` for increasing knots: values[0] plus a sum of clamped ramps."""
    if len(knots) == 1:
        return g.op("Add", g.op("Mul", x, g.const(0.0)), g.const(values[0]))
    lo, hi = knots[:-1], knots[1:]
    slopes = np.diff(values) / (hi - lo)
    column = g.op("Unsqueeze", x, g.const([1], np.int64))  # (n, 1) against (K - 1,) knots
    ramps = g.op("Sub", g.op("Min", g.op("Max", column, g.const(lo)), g.const(hi)), g.const(lo))
    summed = g.op("ReduceSum", g.op("Mul", ramps, g.const(slopes)), g.const([1], np.int64), keepdims=0)
    return g.op("Add", summed, g.const(values[0]))


def _postprocessing(post: PostProcessing) -> onnx.ModelProto:
    """``output`` (rows,) float32 network estimate in label units → ``prediction`` (rows,) double."""
    g = _Graph("post_")
    raw = g.op("Cast", "output", to=TensorProto.DOUBLE)
    law = post.law
    if post.debias == "none":
        plain = debiased = raw
    elif post.debias == "predictions":
        plain = _clip(g, raw, law.low, law.high)
        if isinstance(law, MonotoneLaw):
            means, values = law._inverse_table()
            debiased = _interp(g, raw, means, values)
        else:
            debiased = _clip(g, g.op("Div", g.op("Sub", raw, g.const(law.b)), g.const(law.a)), law.low, law.high)
    else:  # targets: the network learnt the debiased labels
        plain = _clip(g, g.op("Add", g.op("Mul", raw, g.const(law.a)), g.const(law.b)), law.low, law.high)
        debiased = _clip(g, raw, law.low, law.high)
    lam = float(post.shrinkage)
    if lam == 0.0:
        estimate = plain
    elif lam == 1.0:
        estimate = debiased
    else:
        estimate = g.op("Add", g.op("Mul", g.const(lam), debiased), g.op("Mul", g.const(1.0 - lam), plain))
    if post.anchor is not None and post.model_weight != 1.0:
        anchor = g.const(post.anchor)
        estimate = g.op("Add", anchor, g.op("Mul", g.const(post.model_weight), g.op("Sub", estimate, anchor)))
    g.nodes.append(helper.make_node("Identity", [estimate], [PREDICTION]))
    graph = helper.make_graph(
        g.nodes, "postprocessing", [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["rows"])],
        [helper.make_tensor_value_info(PREDICTION, TensorProto.DOUBLE, ["rows"])], g.initializers,
    )
    return _model(graph)


def _probabilities(classes: int) -> onnx.ModelProto:
    g = _Graph("post_")
    g.nodes.append(helper.make_node("Identity", ["output"], [LOGITS]))
    wide = g.op("Cast", "output", to=TensorProto.DOUBLE)
    g.nodes.append(helper.make_node("Softmax", [wide], [PROBABILITIES], axis=1))
    graph = helper.make_graph(
        g.nodes, "probabilities", [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["rows", classes])],
        [helper.make_tensor_value_info(LOGITS, TensorProto.FLOAT, ["rows", classes]),
         helper.make_tensor_value_info(PROBABILITIES, TensorProto.DOUBLE, ["rows", classes])],
    )
    return _model(graph)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", ML_OPSET)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _aligned(model: onnx.ModelProto) -> onnx.ModelProto:
    """The torch graph with both opset domains and the same IR version, so the parts merge."""
    if not any(o.domain == "ai.onnx.ml" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("ai.onnx.ml", ML_OPSET))
    model.ir_version = 8
    return model


def feeds(model: TrainedModel, table: pa.Table) -> dict[str, np.ndarray]:
    """The graph's inputs for the rows of ``table``: what a Python consumer passes to ``run``.

    A null becomes NaN (numeric) or ``""`` (categorical): both are missing values to the graph.
    """
    pre = model.preprocessor_
    out: dict[str, np.ndarray] = {}
    for name in pre.numeric_columns:
        column = table.column(name).cast(pa.float64()).to_numpy()  # nulls become NaN
        out[name] = np.asarray(column, dtype=np.float64)
    for name in pre.categorical_columns:
        texts = table.column(name).cast(pa.string()).to_pylist()
        out[name] = np.asarray(["" if t is None else t for t in texts], dtype=object)
    return out


def full_graph(model: TrainedModel) -> onnx.ModelProto:
    """Preprocessing + network + post-processing: raw columns in, the service's prediction out."""
    network = _aligned(_network(model))
    whole = compose.merge_models(
        _preprocessing(model), network, io_map=[("numeric", "numeric"), ("categorical", "categorical")]
    )
    if isinstance(model, TrainedRegressor):
        post = _postprocessing(model.postprocessing_)
    elif isinstance(model, TrainedClassifier):
        post = _probabilities(len(model.classes_))
    else:  # pragma: no cover - the two kinds of model
        raise TypeError(type(model).__name__)
    whole = compose.merge_models(whole, post, io_map=[("output", "output")])
    onnx.checker.check_model(whole, full_check=True)
    return whole
