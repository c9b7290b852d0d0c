#!/usr/bin/env python3
"""Generate the small ONNX test models used by onyx's parity and memory tests.

Models are built node by node with onnx.helper so that their graphs look like
what torch.onnx (opset 18) emits: shape plumbing via Shape/Gather/Unsqueeze/
Concat, Constant nodes for small int64 tensors, weights as initializers.
Weights come from a fixed-seed RNG, so every run produces identical files.

Usage:
    python tools/gen_models.py [--out DIR] [--only NAME ...] [--chain50 PATH]
                               [--planner-set DIR]

Without --chain50 / --planner-set the bundled models (mlp, bert_layer,
llama_layer) are written to --out (default: models/). With --chain50 and/or
--planner-set only those are written, unless --out or --only is also given.

--planner-set DIR writes the six memory-planner benchmark models (PLANNER_SET):
an MLP, a 24-layer BERT-style encoder and a Llama-style decoder with past/present
KV tensors, each at a small and a large size. They use the same builders as the
bundled models, only with other dimensions.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18
# onnxruntime 1.32 accepts IR 10; pinning it keeps the files loadable by older
# runtimes too (onnx 1.22 would otherwise stamp its own, newer IR version).
IR_VERSION = 10
SEED = 20240611

FLOAT_MIN = float(np.finfo(np.float32).min)

# Model dimensions, exported so tests can build matching inputs.
MLP = dict(in_dim=64, hidden=128, out_dim=16)
BERT = dict(vocab=100, hidden=64, heads=4, ffn=128, layers=2, max_pos=64)
LLAMA = dict(vocab=128, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128,
             layers=2, max_pos=64, rope_theta=10000.0, rms_eps=1e-6)

# Memory-planner benchmark sizes (--planner-set). Each large model stays under
# ~55 MB of float32 weights (all six together ~75 MB): the planner only sees
# activations, whose size is set by the input shapes, so wider weights would
# add file size without changing what is measured. Encoders and decoders allow
# long enough inputs (512 / 1024 positions) for prefill and decode benchmarks.
MLP_SMALL = dict(in_dim=256, hidden=256, out_dim=16, layers=4)
MLP_LARGE = dict(in_dim=512, hidden=512, out_dim=16, layers=8)
ENCODER24_SMALL = dict(vocab=1000, hidden=64, heads=4, ffn=256, layers=24, max_pos=512)
ENCODER24_LARGE = dict(vocab=1000, hidden=256, heads=8, ffn=512, layers=24, max_pos=512)
DECODER_SMALL = dict(LLAMA, vocab=512, max_pos=1024)
DECODER_LARGE = dict(LLAMA, vocab=1024, hidden=256, heads=8, kv_heads=4, head_dim=32,
                     ffn=688, layers=4, max_pos=1024)


class GraphBuilder:
    """Accumulates nodes/initializers and hands out unique tensor names."""

    def __init__(self, seed: int = SEED):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.scope = ""
        self._counts: dict[str, int] = {}
        self._scalars: dict[tuple, str] = {}

    # -- naming ---------------------------------------------------------
    def _unique(self, base: str) -> str:
        n = self._counts.get(base, 0)
        self._counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    # -- graph I/O ------------------------------------------------------
    def input(self, name, elem_type, shape):
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def output(self, value, name, elem_type, shape):
        # Rename the producing node's output (and its consumers) in place, so
        # graph outputs are real op outputs rather than Identity copies.
        for node in self.nodes:
            for i, out in enumerate(node.output):
                if out == value:
                    node.output[i] = name
            for i, inp in enumerate(node.input):
                if inp == value:
                    node.input[i] = name
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    # -- constants ------------------------------------------------------
    def weight(self, name, shape, std=None, mean=0.0):
        """Random float32 initializer; default std keeps activations O(1)."""
        if std is None:
            std = 1.0 / math.sqrt(shape[0])
        arr = (mean + std * self.rng.standard_normal(shape)).astype(np.float32)
        return self.init(name, arr)

    def init(self, name, arr):
        name = self._unique(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def scalar(self, value, dtype=np.float32):
        """Shared scalar initializer (torch exports reuse these too)."""
        key = (np.dtype(dtype).str, value)
        if key not in self._scalars:
            self._scalars[key] = self.init(f"const_{np.dtype(dtype).name}_{value}",
                                           np.array(value, dtype=dtype))
        return self._scalars[key]

    def const(self, values, dtype=np.int64):
        """Small tensor emitted as a Constant node, the way torch exports axes/shapes."""
        arr = np.array(values, dtype=dtype)
        return self.op("Constant", [], value=numpy_helper.from_array(arr))

    # -- nodes ----------------------------------------------------------
    def op(self, op_type, inputs, n_out=1, **attrs):
        name = self._unique(f"{self.scope}/{op_type}")
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def dim(self, tensor, axis):
        """Shape(tensor)[axis] as a 1-D int64 tensor of length 1."""
        shape = self.op("Shape", [tensor])
        d = self.op("Gather", [shape, self.const(axis)], axis=0)
        return self.op("Unsqueeze", [d, self.const([0])])

    def dim_scalar(self, tensor, axis):
        shape = self.op("Shape", [tensor])
        return self.op("Gather", [shape, self.const(axis)], axis=0)

    def shape_of(self, *parts):
        """Concat of 1-D int64 pieces; ints become Constant nodes."""
        pieces = [self.const([p]) if isinstance(p, int) else p for p in parts]
        return self.op("Concat", pieces, axis=0)

    def build(self, name, doc=""):
        graph = helper.make_graph(self.nodes, name, self.inputs, self.outputs,
                                  initializer=self.initializers)
        model = helper.make_model(graph, producer_name="onyx-gen_models",
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        model.doc_string = doc
        return model

    # -- common blocks ----------------------------------------------------
    def linear(self, x, in_dim, out_dim, prefix, bias=True):
        y = self.op("MatMul", [x, self.weight(f"{prefix}.weight", [in_dim, out_dim])])
        if bias:
            y = self.op("Add", [y, self.weight(f"{prefix}.bias", [out_dim], std=0.1)])
        return y

    def gelu_erf(self, x):
        """0.5 * x * (1 + erf(x / sqrt(2))), as torch exports nn.GELU()."""
        t = self.op("Div", [x, self.scalar(math.sqrt(2.0))])
        t = self.op("Erf", [t])
        t = self.op("Add", [t, self.scalar(1.0)])
        t = self.op("Mul", [x, t])
        return self.op("Mul", [t, self.scalar(0.5)])

    def layer_norm(self, x, dim, prefix, eps=1e-12):
        gamma = self.weight(f"{prefix}.weight", [dim], std=0.1, mean=1.0)
        beta = self.weight(f"{prefix}.bias", [dim], std=0.1)
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=eps)

    def rms_norm(self, x, dim, prefix, eps):
        """x * 1/sqrt(mean(x^2) + eps) * w, the decomposed HF LlamaRMSNorm."""
        sq = self.op("Pow", [x, self.scalar(2.0)])
        mean = self.op("ReduceMean", [sq, self.const([-1])], keepdims=1)
        var = self.op("Add", [mean, self.scalar(eps)])
        inv = self.op("Reciprocal", [self.op("Sqrt", [var])])
        y = self.op("Mul", [x, inv])
        return self.op("Mul", [self.weight(f"{prefix}.weight", [dim], std=0.1, mean=1.0), y])


# ---------------------------------------------------------------------------
# mlp.onnx
# ---------------------------------------------------------------------------
def make_mlp(c=MLP, name="mlp", seed=SEED + 1) -> onnx.ModelProto:
    """Hidden layers cycle MatMul+Add+Relu, MatMul+Add+GELU, Gemm+Relu; then a head.

    c["layers"] (default 3) hidden layers; the first maps in_dim -> hidden.
    """
    b = GraphBuilder(seed)
    d_in, h, d_out = c["in_dim"], c["hidden"], c["out_dim"]
    n_layers = c.get("layers", 3)
    x = b.input("x", TensorProto.FLOAT, ["batch", d_in])

    t, t_dim = x, d_in
    for i in range(n_layers):
        p = f"fc{i + 1}"
        b.scope = f"/{p}"
        kind = i % 3
        if kind == 0:
            t = b.op("Relu", [b.linear(t, t_dim, h, p)])
        elif kind == 1:
            t = b.gelu_erf(b.linear(t, t_dim, h, p))
        else:
            # Gemm with transB=1 and non-trivial alpha/beta, as exported
            # nn.Linear used to look (weight stored [out, in]).
            w = b.weight(f"{p}.weight", [h, t_dim], std=1.0 / math.sqrt(t_dim))
            bias = b.weight(f"{p}.bias", [h], std=0.1)
            t = b.op("Gemm", [t, w, bias], transB=1, alpha=0.9, beta=1.1)
            t = b.op("Relu", [t])
        t_dim = h
    b.scope = "/head"
    y = b.linear(t, h, d_out, "head")
    b.output(y, "y", TensorProto.FLOAT, ["batch", d_out])
    kinds = ["MatMul+Add+Relu", "MatMul+Add+GELU", "Gemm+Relu"]
    if n_layers <= 3:
        what = ", ".join(kinds[:n_layers])
    else:
        what = f"{h} wide, cycling " + ", ".join(kinds)
    return b.build(name, f"{n_layers}-layer MLP ({what}) + head")


# ---------------------------------------------------------------------------
# bert_layer.onnx
# ---------------------------------------------------------------------------
def _bert_attention(b, c, x, mask_add, prefix):
    heads, hd = c["heads"], c["hidden"] // c["heads"]
    batch, seq = b.dim(x, 0), b.dim(x, 1)
    split_shape = b.shape_of(batch, seq, heads, hd)

    def heads_of(name, perm):
        t = b.linear(x, c["hidden"], c["hidden"], f"{prefix}.{name}")
        t = b.op("Reshape", [t, split_shape])
        return b.op("Transpose", [t], perm=perm)

    q = heads_of("query", [0, 2, 1, 3])        # [b, h, s, d]
    k = heads_of("key", [0, 2, 3, 1])          # [b, h, d, s]
    v = heads_of("value", [0, 2, 1, 3])        # [b, h, s, d]
    scores = b.op("MatMul", [q, k])
    scores = b.op("Div", [scores, b.scalar(math.sqrt(hd))])
    scores = b.op("Add", [scores, mask_add])
    probs = b.op("Softmax", [scores], axis=-1)
    ctx = b.op("MatMul", [probs, v])
    ctx = b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.shape_of(batch, seq, c["hidden"])])
    return b.linear(ctx, c["hidden"], c["hidden"], f"{prefix}.output.dense")


def make_bert_layer(c=BERT, name="bert_layer", seed=SEED + 2) -> onnx.ModelProto:
    """BERT-style encoder: embeddings + c["layers"] post-LN transformer layers."""
    b = GraphBuilder(seed)
    ids = b.input("input_ids", TensorProto.INT64, ["batch", "sequence"])
    mask = b.input("attention_mask", TensorProto.INT64, ["batch", "sequence"])

    b.scope = "/embeddings"
    words = b.op("Gather", [b.weight("embeddings.word_embeddings.weight",
                                     [c["vocab"], c["hidden"]], std=1.0), ids], axis=0)
    # position_ids = arange(seq); token_type_ids = zeros_like(input_ids)
    pos_ids = b.op("Range", [b.scalar(0, np.int64), b.dim_scalar(ids, 1),
                             b.scalar(1, np.int64)])
    pos = b.op("Gather", [b.weight("embeddings.position_embeddings.weight",
                                   [c["max_pos"], c["hidden"]], std=0.5), pos_ids], axis=0)
    type_ids = b.op("ConstantOfShape", [b.op("Shape", [ids])],
                    value=numpy_helper.from_array(np.zeros([1], np.int64)))
    types = b.op("Gather", [b.weight("embeddings.token_type_embeddings.weight",
                                     [2, c["hidden"]], std=0.5), type_ids], axis=0)
    h = b.op("Add", [b.op("Add", [words, pos]), types])
    h = b.layer_norm(h, c["hidden"], "embeddings.LayerNorm")

    # Extended attention mask: (1 - mask[:, None, None, :]) * finfo.min
    b.scope = "/extended_mask"
    m = b.op("Unsqueeze", [mask, b.const([1, 2])])
    m = b.op("Cast", [m], to=TensorProto.FLOAT)
    m = b.op("Sub", [b.scalar(1.0), m])
    mask_add = b.op("Mul", [m, b.scalar(FLOAT_MIN)])

    for i in range(c["layers"]):
        p = f"encoder.layer.{i}"
        b.scope = f"/{p}/attention"
        a = _bert_attention(b, c, h, mask_add, f"{p}.attention")
        h = b.layer_norm(b.op("Add", [a, h]), c["hidden"], f"{p}.attention.LayerNorm")
        b.scope = f"/{p}/ffn"
        f = b.gelu_erf(b.linear(h, c["hidden"], c["ffn"], f"{p}.intermediate.dense"))
        f = b.linear(f, c["ffn"], c["hidden"], f"{p}.output.dense")
        h = b.layer_norm(b.op("Add", [f, h]), c["hidden"], f"{p}.output.LayerNorm")

    b.output(h, "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", c["hidden"]])
    return b.build(name, f"{c['layers']}-layer BERT-style encoder, hidden {c['hidden']}, "
                         f"{c['heads']} heads")


# ---------------------------------------------------------------------------
# vit_encoder.onnx: a vision encoder at any image size
# ---------------------------------------------------------------------------
def make_vit_encoder(c, name="vit_encoder", seed=SEED + 4) -> onnx.ModelProto:
    """ViT-style encoder on pixel_values [batch, 3, height, width]: a patch embedding (a Conv with
    the patch as kernel and stride), the patches as a sequence with learned position embeddings
    sliced to the image's patch count, c["layers"] pre-LN transformer layers, a final LayerNorm.
    Any height and width that are multiples of the patch size up to c["max_side"] run."""
    b = GraphBuilder(seed)
    px = b.input("pixel_values", TensorProto.FLOAT, ["batch", 3, "height", "width"])
    hid, p = c["hidden"], c["patch"]
    b.scope = "/embeddings"
    patches = b.op("Conv", [px, b.weight("embeddings.patch.weight", [hid, 3, p, p], std=0.05),
                            b.weight("embeddings.patch.bias", [hid], std=0.1)], kernel_shape=[p, p], strides=[p, p])
    batch = b.dim(patches, 0)
    seq = b.op("Mul", [b.dim(patches, 2), b.dim(patches, 3)])  # [1]: the patch count
    h = b.op("Reshape", [patches, b.shape_of(batch, hid, -1)])
    h = b.op("Transpose", [h], perm=[0, 2, 1])  # [b, patches, hidden]
    table = b.weight("embeddings.position.weight", [(c["max_side"] // p) ** 2, hid], std=0.5)
    pos = b.op("Slice", [table, b.const([0]), seq, b.const([0])])
    h = b.op("Add", [h, pos])
    no_mask = b.init("no_mask", np.zeros([1, 1, 1, 1], np.float32))
    for i in range(c["layers"]):
        prefix = f"encoder.layer.{i}"
        b.scope = f"/{prefix}"
        a = _bert_attention(b, c, b.layer_norm(h, hid, f"{prefix}.norm1", eps=1e-6), no_mask, f"{prefix}.attention")
        h = b.op("Add", [h, a])
        f = b.gelu_erf(b.linear(b.layer_norm(h, hid, f"{prefix}.norm2", eps=1e-6), hid, c["ffn"], f"{prefix}.fc1"))
        h = b.op("Add", [h, b.linear(f, c["ffn"], hid, f"{prefix}.fc2")])
    b.scope = "/final"
    h = b.layer_norm(h, hid, "final_norm", eps=1e-6)
    b.output(h, "last_hidden_state", TensorProto.FLOAT, ["batch", "patches", hid])
    return b.build(name, f"{c['layers']}-layer ViT-style encoder, hidden {hid}, patch {p}")


# ---------------------------------------------------------------------------
# llama_layer.onnx
# ---------------------------------------------------------------------------
def _rope_cache(c):
    hd = c["head_dim"]
    inv_freq = 1.0 / (c["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    freqs = np.outer(np.arange(c["max_pos"], dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _rotate_half(b, x, half):
    x1 = b.op("Slice", [x, b.const([0]), b.const([half]), b.const([-1]), b.const([1])])
    # torch exports x[..., half:] with an INT64_MAX end.
    x2 = b.op("Slice", [x, b.const([half]), b.const([np.iinfo(np.int64).max]),
                        b.const([-1]), b.const([1])])
    return b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)


def _apply_rope(b, x, cos, sin, half):
    return b.op("Add", [b.op("Mul", [x, cos]),
                        b.op("Mul", [_rotate_half(b, x, half), sin])])


def _repeat_kv(b, x, batch, total, n_rep, c):
    """[b, kv, T, d] -> [b, kv*n_rep, T, d] via Unsqueeze/Expand/Reshape."""
    kv, hd = c["kv_heads"], c["head_dim"]
    t = b.op("Unsqueeze", [x, b.const([2])])
    t = b.op("Expand", [t, b.shape_of(batch, kv, n_rep, total, hd)])
    return b.op("Reshape", [t, b.shape_of(batch, kv * n_rep, total, hd)])


def make_llama_layer(c=LLAMA, name="llama_layer", seed=SEED + 3) -> onnx.ModelProto:
    """Llama-style decoder with GQA, RoPE and past/present KV tensors."""
    hid, nh, nkv, hd = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
    b = GraphBuilder(seed)
    ids = b.input("input_ids", TensorProto.INT64, ["batch", "sequence"])
    attn = b.input("attention_mask", TensorProto.INT64, ["batch", "total_sequence"])
    pos_ids = b.input("position_ids", TensorProto.INT64, ["batch", "sequence"])
    pasts = []
    for i in range(c["layers"]):
        pk = b.input(f"past_key_values.{i}.key", TensorProto.FLOAT,
                     ["batch", nkv, "past_sequence", hd])
        pv = b.input(f"past_key_values.{i}.value", TensorProto.FLOAT,
                     ["batch", nkv, "past_sequence", hd])
        pasts.append((pk, pv))

    b.scope = "/model/embed_tokens"
    embed = b.weight("model.embed_tokens.weight", [c["vocab"], hid], std=1.0)
    h = b.op("Gather", [embed, ids], axis=0)

    # RoPE tables gathered by position id, broadcast over heads: [b, 1, s, d].
    b.scope = "/model/rotary_emb"
    cos_tab, sin_tab = _rope_cache(c)
    cos = b.op("Gather", [b.init("model.rotary_emb.cos_cached", cos_tab), pos_ids], axis=0)
    sin = b.op("Gather", [b.init("model.rotary_emb.sin_cached", sin_tab), pos_ids], axis=0)
    cos = b.op("Unsqueeze", [cos, b.const([1])])
    sin = b.op("Unsqueeze", [sin, b.const([1])])

    # Additive mask [b, 1, s, T]: causal (query i sits at absolute position
    # past + i) OR padding (attention_mask == 0) -> finfo.min, else 0.
    b.scope = "/model/causal_mask"
    batch, seq = b.dim(ids, 0), b.dim(ids, 1)
    seq_s = b.dim_scalar(ids, 1)
    total_s = b.dim_scalar(attn, 1)
    total = b.dim(attn, 1)
    past_s = b.op("Sub", [total_s, seq_s])
    one = b.scalar(1, np.int64)
    rows = b.op("Range", [past_s, total_s, one])
    cols = b.op("Range", [b.scalar(0, np.int64), total_s, one])
    future = b.op("Less", [b.op("Unsqueeze", [rows, b.const([1])]),
                           b.op("Unsqueeze", [cols, b.const([0])])])       # [s, T]
    padded = b.op("Equal", [attn, b.scalar(0, np.int64)])                 # [b, T]
    padded = b.op("Unsqueeze", [padded, b.const([1, 2])])                 # [b,1,1,T]
    blocked = b.op("Or", [future, padded])                                # [b,1,s,T]
    neg = b.op("ConstantOfShape", [b.op("Shape", [blocked])],
               value=numpy_helper.from_array(np.array([FLOAT_MIN], np.float32)))
    mask_add = b.op("Where", [blocked, neg, b.scalar(0.0)])

    presents = []
    for i in range(c["layers"]):
        p = f"model.layers.{i}"
        b.scope = f"/{p}/self_attn"
        x = b.rms_norm(h, hid, f"{p}.input_layernorm", c["rms_eps"])

        def proj(name, n_heads):
            t = b.linear(x, hid, n_heads * hd, f"{p}.self_attn.{name}", bias=False)
            t = b.op("Reshape", [t, b.shape_of(batch, seq, -1, hd)])
            return b.op("Transpose", [t], perm=[0, 2, 1, 3])

        q = _apply_rope(b, proj("q_proj", nh), cos, sin, hd // 2)
        k = _apply_rope(b, proj("k_proj", nkv), cos, sin, hd // 2)
        v = proj("v_proj", nkv)
        k = b.op("Concat", [pasts[i][0], k], axis=2)
        v = b.op("Concat", [pasts[i][1], v], axis=2)
        presents.append((k, v))

        k_rep = _repeat_kv(b, k, batch, total, nh // nkv, c)
        v_rep = _repeat_kv(b, v, batch, total, nh // nkv, c)
        scores = b.op("MatMul", [q, b.op("Transpose", [k_rep], perm=[0, 1, 3, 2])])
        scores = b.op("Mul", [scores, b.scalar(1.0 / math.sqrt(hd))])
        scores = b.op("Add", [scores, mask_add])
        probs = b.op("Softmax", [scores], axis=-1)
        ctx = b.op("MatMul", [probs, v_rep])
        ctx = b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, b.shape_of(batch, seq, -1)])
        h = b.op("Add", [h, b.linear(ctx, nh * hd, hid, f"{p}.self_attn.o_proj", bias=False)])

        b.scope = f"/{p}/mlp"
        x = b.rms_norm(h, hid, f"{p}.post_attention_layernorm", c["rms_eps"])
        gate = b.linear(x, hid, c["ffn"], f"{p}.mlp.gate_proj", bias=False)
        up = b.linear(x, hid, c["ffn"], f"{p}.mlp.up_proj", bias=False)
        act = b.op("Mul", [gate, b.op("Sigmoid", [gate])])                # SiLU
        down = b.linear(b.op("Mul", [act, up]), c["ffn"], hid, f"{p}.mlp.down_proj", bias=False)
        h = b.op("Add", [h, down])

    b.scope = "/model/norm"
    h = b.rms_norm(h, hid, "model.norm", c["rms_eps"])
    b.scope = "/lm_head"
    if c.get("tie"):  # the LM head is the embedding, transposed in the graph (as torch.onnx exports it)
        logits = b.op("MatMul", [h, b.op("Transpose", [embed], perm=[1, 0])])
    else:
        logits = b.linear(h, hid, c["vocab"], "lm_head", bias=False)

    b.output(logits, "logits", TensorProto.FLOAT, ["batch", "sequence", c["vocab"]])
    for i, (k, v) in enumerate(presents):
        b.output(k, f"present.{i}.key", TensorProto.FLOAT, ["batch", nkv, "total_sequence", hd])
        b.output(v, f"present.{i}.value", TensorProto.FLOAT, ["batch", nkv, "total_sequence", hd])
    return b.build(name, f"{c['layers']}-layer Llama-style decoder with GQA, RoPE and KV cache")


# ---------------------------------------------------------------------------
# chain50.onnx (memory test)
# ---------------------------------------------------------------------------
def make_chain50(n_ops: int = 50) -> onnx.ModelProto:
    """A straight chain of n_ops ops over ~2 MiB activations.

    Shapes change every step, so an engine can't simply run in place; peak
    memory should stay at a few live activations, not n_ops of them. Two
    weights are reused by every MatMul to keep the file small (~4 MiB).
    """
    b = GraphBuilder(SEED + 4)
    x = b.input("x", TensorProto.FLOAT, [512, 1024])
    w_big = b.weight("w_big", [1024, 1024])     # [512,1024] @ -> [512,1024]
    w_small = b.weight("w_small", [64, 64])     # [16,512,64] @ -> [16,512,64]
    shapes = {s: b.init(f"shape_{'x'.join(map(str, s))}", np.array(s, np.int64))
              for s in [(1024, 512), (512, 16, 64)]}

    # Ten-op cycle; every output holds 512*1024 floats (2 MiB).
    cycle = [
        lambda t: b.op("MatMul", [t, w_big]),                       # [512, 1024]
        lambda t: b.op("Reshape", [t, shapes[(1024, 512)]]),          # [1024, 512]
        lambda t: b.op("Transpose", [t], perm=[1, 0]),               # [512, 1024]
        lambda t: b.op("Reshape", [t, shapes[(512, 16, 64)]]),        # [512, 16, 64]
        lambda t: b.op("Transpose", [t], perm=[1, 0, 2]),            # [16, 512, 64]
        lambda t: b.op("MatMul", [t, w_small]),                      # [16, 512, 64]
        lambda t: b.op("Transpose", [t], perm=[1, 2, 0]),            # [512, 64, 16]
        lambda t: b.op("Reshape", [t, shapes[(1024, 512)]]),          # [1024, 512]
        lambda t: b.op("Transpose", [t], perm=[1, 0]),               # [512, 1024]
        lambda t: b.op("Tanh", [t]),                                 # keeps values bounded
    ]
    t = x
    for i in range(n_ops):
        b.scope = f"/chain/{i}"
        t = cycle[i % len(cycle)](t)
    b.output(t, "y", TensorProto.FLOAT, [512, 1024])
    return b.build("chain50", f"chain of {n_ops} shape-changing ops for peak-memory tests")


# ---------------------------------------------------------------------------
# checking / saving
# ---------------------------------------------------------------------------
MODELS = {
    "mlp": make_mlp,
    "bert_layer": make_bert_layer,
    "llama_layer": make_llama_layer,
}

# Memory-planner benchmark set (bench/planner_report.py). Seeds differ from the
# bundled models' so no two files share weights by accident.
PLANNER_SET = {
    "mlp_small": lambda: make_mlp(MLP_SMALL, "mlp_small", SEED + 11),
    "mlp_large": lambda: make_mlp(MLP_LARGE, "mlp_large", SEED + 12),
    "encoder24_small": lambda: make_bert_layer(ENCODER24_SMALL, "encoder24_small", SEED + 13),
    "encoder24_large": lambda: make_bert_layer(ENCODER24_LARGE, "encoder24_large", SEED + 14),
    "decoder_small": lambda: make_llama_layer(DECODER_SMALL, "decoder_small", SEED + 15),
    "decoder_large": lambda: make_llama_layer(DECODER_LARGE, "decoder_large", SEED + 16),
}


def sample_inputs(model: onnx.ModelProto, rng=None, sym=None) -> dict:
    """Random inputs matching the model's declared inputs.

    sym maps symbolic dim names to sizes (default: batch 2, sequence 7, past 5).
    Integer inputs are drawn in [0, 32); good enough for ids, masks get ones.
    """
    rng = rng or np.random.default_rng(0)
    sizes = {"batch": 2, "sequence": 7, "past_sequence": 5, "total_sequence": 12}
    sizes.update(sym or {})
    feeds = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else sizes[d.dim_param]
                 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if "mask" in vi.name:
            feeds[vi.name] = np.ones(shape, dtype)
        elif vi.name == "position_ids":
            start = sizes["total_sequence"] - shape[-1]
            feeds[vi.name] = np.broadcast_to(np.arange(start, start + shape[-1], dtype=dtype),
                                             shape).copy()
        elif np.issubdtype(dtype, np.integer):
            feeds[vi.name] = rng.integers(0, 32, size=shape).astype(dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def verify(model: onnx.ModelProto) -> None:
    """Full onnx check plus a CPU onnxruntime run with finite outputs."""
    import onnxruntime as ort

    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, sample_inputs(model))
    for meta, out in zip(sess.get_outputs(), outs):
        if not np.all(np.isfinite(out)):
            raise RuntimeError(f"{model.graph.name}: output {meta.name} is not finite")


def save(model: onnx.ModelProto, path: str, quiet=False) -> str:
    verify(model)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    onnx.save_model(model, path)
    if not quiet:
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    return path


def generate(out_dir: str, names=None, quiet=False) -> dict:
    """Write the bundled models into out_dir; returns {name: path}."""
    names = names or list(MODELS)
    return {n: save(MODELS[n](), os.path.join(out_dir, f"{n}.onnx"), quiet) for n in names}


def write_chain50(path: str, quiet=False) -> str:
    return save(make_chain50(), path, quiet)


def generate_planner_set(out_dir: str, names=None, quiet=False) -> dict:
    """Write the memory-planner benchmark models into out_dir; returns {name: path}."""
    names = names or list(PLANNER_SET)
    return {n: save(PLANNER_SET[n](), os.path.join(out_dir, f"{n}.onnx"), quiet) for n in names}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output directory for the bundled models (default: models/)")
    ap.add_argument("--only", nargs="+", choices=sorted(MODELS), help="subset of models")
    ap.add_argument("--chain50", metavar="PATH", help="write the 50-op memory-test chain to PATH")
    ap.add_argument("--planner-set", metavar="DIR",
                    help="write the six memory-planner benchmark models (" +
                         ", ".join(PLANNER_SET) + ") to DIR")
    args = ap.parse_args(argv)

    if args.chain50:
        write_chain50(args.chain50)
    if args.planner_set:
        generate_planner_set(args.planner_set)
    if not (args.chain50 or args.planner_set) or args.out or args.only:
        generate(args.out or "models", args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
