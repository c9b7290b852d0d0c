"""Small ONNX models for the Python tests, built with onnx.helper.

Every builder takes a numpy Generator (weights are random, never all zeros)
and returns an onnx.ModelProto. `build_all(directory, seed)` writes them all
as <name>.onnx and returns {name: path}. Run this file directly to write the
models somewhere by hand:

    python tests/python/pyapi_models.py /tmp/onyx-models
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8

# Shapes the tests and the migration scripts rely on.
MLP_IN, MLP_HIDDEN, MLP_OUT = 16, 32, 8
MIXED_WIDTH = 4
HALF_WIDTH = 6
BIG_WIDTH, BIG_LAYERS = 1024, 8


def _model(graph: onnx.GraphProto, **meta) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    model.producer_name = meta.get("producer_name", "onyx-tests")
    model.producer_version = meta.get("producer_version", "1.0")
    model.domain = meta.get("domain", "")
    model.model_version = meta.get("model_version", 1)
    model.doc_string = meta.get("doc_string", "")
    for key, value in meta.get("metadata", {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    return model


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _randn(rng: np.random.Generator, shape, scale=1.0, dtype=np.float32) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def mlp(rng: np.random.Generator) -> onnx.ModelProto:
    """X[batch,16] -> MatMul+Add -> Relu -> MatMul+Add -> Y[batch,8], float32."""
    w1 = _randn(rng, (MLP_IN, MLP_HIDDEN), 1.0 / np.sqrt(MLP_IN))
    b1 = _randn(rng, (MLP_HIDDEN,), 0.1)
    w2 = _randn(rng, (MLP_HIDDEN, MLP_OUT), 1.0 / np.sqrt(MLP_HIDDEN))
    b2 = _randn(rng, (MLP_OUT,), 0.1)
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "B1"], ["h1"], name="bias1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "B2"], ["Y"], name="bias2"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp_graph",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", MLP_IN])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", MLP_OUT])],
        [_init("W1", w1), _init("B1", b1), _init("W2", w2), _init("B2", b2)],
        doc_string="two-layer perceptron",
    )
    return _model(
        graph,
        producer_name="onyx-tests-mlp",
        producer_version="2.5",
        domain="ai.onyx.tests",
        model_version=3,
        doc_string="MLP used by the Python tests",
        metadata={"author": "onyx", "purpose": "migration", "layers": "2"},
    )


def mixed(rng: np.random.Generator) -> onnx.ModelProto:
    """Two inputs, three outputs of mixed dtypes.

    reading float32 [batch,4], tally int64 [batch,4] ->
      total    float32 [batch,4] = reading * S + Cast<float>(tally)
      doubled  int64   [batch,4] = tally * 2
      positive bool    [batch,4] = reading > 0
    (Distinctive names, so that tests can look for them in error messages.)
    """
    scale = _randn(rng, (MIXED_WIDTH,), 1.0) + np.float32(2.0)
    nodes = [
        helper.make_node("Mul", ["reading", "S"], ["scaled"]),
        helper.make_node("Cast", ["tally"], ["I_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["scaled", "I_f"], ["total"]),
        helper.make_node("Mul", ["tally", "two"], ["doubled"]),
        helper.make_node("Greater", ["reading", "zero"], ["positive"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed_graph",
        [
            helper.make_tensor_value_info("reading", TensorProto.FLOAT, ["batch", MIXED_WIDTH]),
            helper.make_tensor_value_info("tally", TensorProto.INT64, ["batch", MIXED_WIDTH]),
        ],
        [
            helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch", MIXED_WIDTH]),
            helper.make_tensor_value_info("doubled", TensorProto.INT64, ["batch", MIXED_WIDTH]),
            helper.make_tensor_value_info("positive", TensorProto.BOOL, ["batch", MIXED_WIDTH]),
        ],
        [
            _init("S", scale),
            _init("two", np.array(2, dtype=np.int64)),
            _init("zero", np.array(0.0, dtype=np.float32)),
        ],
    )
    return _model(graph, producer_name="onyx-tests-mixed", model_version=1)


def half(rng: np.random.Generator) -> onnx.ModelProto:
    """H float16 [batch,6] -> Y = H * S + B (float16), F = Cast<float>(Y)."""
    scale = _randn(rng, (HALF_WIDTH,), 0.5, np.float16)
    bias = _randn(rng, (HALF_WIDTH,), 0.5, np.float16)
    nodes = [
        helper.make_node("Mul", ["H", "S"], ["m"]),
        helper.make_node("Add", ["m", "B"], ["Y"]),
        helper.make_node("Cast", ["Y"], ["F"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "half_graph",
        [helper.make_tensor_value_info("H", TensorProto.FLOAT16, ["batch", HALF_WIDTH])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT16, ["batch", HALF_WIDTH]),
            helper.make_tensor_value_info("F", TensorProto.FLOAT, ["batch", HALF_WIDTH]),
        ],
        [_init("S", scale), _init("B", bias)],
    )
    return _model(graph, producer_name="onyx-tests-half")


def strings(rng: np.random.Generator) -> onnx.ModelProto:
    """S string [n] -> Identity -> T string [n]. The input dim is unnamed (unknown)."""
    del rng
    graph = helper.make_graph(
        [helper.make_node("Identity", ["S"], ["T"])],
        "string_graph",
        [helper.make_tensor_value_info("S", TensorProto.STRING, [None])],
        [helper.make_tensor_value_info("T", TensorProto.STRING, [None])],
    )
    return _model(graph, producer_name="onyx-tests-strings")


def bf16(rng: np.random.Generator) -> onnx.ModelProto:
    """brain_in bfloat16 [2,3] -> Cast<float> -> widened float32 [2,3]."""
    del rng
    graph = helper.make_graph(
        [helper.make_node("Cast", ["brain_in"], ["widened"], to=TensorProto.FLOAT)],
        "bf16_graph",
        [helper.make_tensor_value_info("brain_in", TensorProto.BFLOAT16, [2, 3])],
        [helper.make_tensor_value_info("widened", TensorProto.FLOAT, [2, 3])],
    )
    return _model(graph, producer_name="onyx-tests-bf16")


def big(rng: np.random.Generator) -> onnx.ModelProto:
    """X[batch,1024] through 8 MatMuls with one shared 1024x1024 weight (for the GIL test)."""
    weight = _randn(rng, (BIG_WIDTH, BIG_WIDTH), 1.0 / np.sqrt(BIG_WIDTH))
    nodes, prev = [], "X"
    for i in range(BIG_LAYERS):
        out = "Y" if i == BIG_LAYERS - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, "W"], [out], name=f"mm{i}"))
        prev = out
    graph = helper.make_graph(
        nodes,
        "big_graph",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", BIG_WIDTH])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", BIG_WIDTH])],
        [_init("W", weight)],
    )
    return _model(graph, producer_name="onyx-tests-big")


BUILDERS = {
    "mlp": mlp,
    "mixed": mixed,
    "half": half,
    "strings": strings,
    "bf16": bf16,
    "big": big,
}


def build_all(directory: str, seed: int = 20240611) -> dict[str, str]:
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = {}
    for name, builder in BUILDERS.items():
        path = os.path.join(directory, f"{name}.onnx")
        onnx.save(builder(rng), path)
        paths[name] = path
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTPUT_DIR")
    for name, path in build_all(sys.argv[1]).items():
        print(name, path)
