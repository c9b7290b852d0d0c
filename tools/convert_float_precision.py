#!/usr/bin/env python3
"""Copies a genai model folder with its decoder's float32 tensors in float16 or bfloat16.

  convert_float_precision.py SRC_DIR DST_DIR --to float16|bfloat16|bfloat16-weights

Every float32 initializer, Constant, graph input and output (the past and present caches,
the logits) and Cast-to-float32 becomes the new type; value_info is dropped (onyx infers
it). Meant for decoders whose float arithmetic is all in their weights and activations (the
model builder's: GroupQueryAttention, SimplifiedLayerNormalization, MatMul), not for graphs
that build masks from float32 extremes (those overflow float16). The other files of the
folder are copied as they are. bfloat16-weights keeps every type float32 and only rounds the
initializers to bfloat16 values: float32 arithmetic on bfloat16's weights, which tells how much
of a bfloat16 decoder's difference from float32 comes from its weights alone. For the GPU
suite's precision agreement test.
"""

import argparse
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (NaN kept NaN)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def convert_tensor(t: TensorProto, to: int) -> TensorProto:
    if t.data_type != TensorProto.FLOAT:
        return t
    x = numpy_helper.to_array(t)
    if to == TensorProto.FLOAT16:
        out = numpy_helper.from_array(x.astype(np.float16), t.name)
    else:
        out = TensorProto(name=t.name, data_type=TensorProto.BFLOAT16, dims=list(x.shape))
        out.raw_data = to_bfloat16_bits(x).tobytes()
    return out


def round_weights_to_bfloat16(model: onnx.ModelProto) -> onnx.ModelProto:
    for i, t in enumerate(model.graph.initializer):
        if t.data_type == TensorProto.FLOAT:
            x = numpy_helper.to_array(t)
            bits = to_bfloat16_bits(x).astype(np.uint32) << 16
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(bits.view(np.float32).reshape(x.shape), t.name))
    return model


def convert(model: onnx.ModelProto, to: int) -> onnx.ModelProto:
    g = model.graph
    for i, t in enumerate(g.initializer):
        g.initializer[i].CopyFrom(convert_tensor(t, to))
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = to
    del g.value_info[:]
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = to
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(convert_tensor(a.t, to))
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--to", choices=["float16", "bfloat16", "bfloat16-weights"], required=True)
    a = ap.parse_args()
    if a.dst.exists():
        shutil.rmtree(a.dst)
    shutil.copytree(a.src, a.dst, ignore=shutil.ignore_patterns("*.onnx", "*.onnx.data", "reference.json"))
    model = onnx.load(str(a.src / "model.onnx"))  # with its external data
    if a.to == "bfloat16-weights":
        round_weights_to_bfloat16(model)
    else:
        convert(model, TensorProto.FLOAT16 if a.to == "float16" else TensorProto.BFLOAT16)
    onnx.save(model, str(a.dst / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    print(f"{a.dst}: {a.to}")


if __name__ == "__main__":
    main()
