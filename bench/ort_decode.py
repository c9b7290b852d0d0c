"""onnxruntime's side of the decode benchmark (bench/llama_decode_gpu.py --ort).

One decode step of an ONNX decoder run by onnxruntime over buffers the caller owns (torch
tensors on the GPU, or numpy arrays on the host), bound once through IOBinding, as a user of
onnxruntime's CUDA execution provider with CUDA graphs runs it:

- The decoder's symbolic dimensions are fixed for the session (add_free_dimension_override_by_name),
  so onnxruntime folds the shape arithmetic at load. This is the static-shape form that CUDA graphs
  need (every node on the CUDA provider, the same shapes and addresses every run); the dimensions
  are not written into the ONNX file.
- enable_cuda_graph: onnxruntime captures a run after its warm-up runs and replays it.

onnxruntime 1.31 has no bfloat16 Reciprocal kernel on either provider, and torch.onnx writes one
per attention scale and norm in a bfloat16 decoder. `onnxruntime_form` writes a copy of the graph
beside the original (same external weights) with each bfloat16 Reciprocal(x) as Div(1, x), the same
value rounded once; the benchmark prints how many it rewrote.

The session must hold the provider that was asked for: onnxruntime falls back to the CPU provider
where the CUDA one cannot load; that is an error here, not a slower column.
"""
import numpy as np
import onnx

# torch dtypes and numpy dtypes by name, to ONNX element types.
_ONNX_TYPES = {
    "float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16,
    "int64": onnx.TensorProto.INT64, "int32": onnx.TensorProto.INT32, "bool": onnx.TensorProto.BOOL,
}


def decoder_dims(batch, past, sequence=1):
    """The dimension names of a torch.onnx / Optimum decoder with past and present caches."""
    return {"batch": batch, "sequence": sequence, "past_sequence": past, "total_sequence": past + sequence}


def describe(t):
    """(device type, device id, ONNX element type, shape, address) of a torch tensor or numpy array."""
    if isinstance(t, np.ndarray):
        if not t.flags["C_CONTIGUOUS"]:
            raise ValueError("a numpy buffer bound to onnxruntime must be C-contiguous")
        return "cpu", 0, _ONNX_TYPES[t.dtype.name], list(t.shape), t.ctypes.data
    name = str(t.dtype).replace("torch.", "")
    if not t.is_contiguous():
        raise ValueError("a torch buffer bound to onnxruntime must be contiguous")
    device = t.device
    return device.type, device.index or 0, _ONNX_TYPES[name], list(t.shape), t.data_ptr()


def onnxruntime_form(path):
    """(path, rewritten): the decoder at `path`, or a copy beside it whose bfloat16 Reciprocal
    nodes are Div(1, x) (onnxruntime has no bfloat16 Reciprocal kernel), and how many it rewrote.
    The copy reads the original's external weights; nothing is written when nothing changes."""
    import os
    model = onnx.load(path, load_external_data=False)
    typed = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(typed.graph.value_info) + list(typed.graph.input) + list(typed.graph.output)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    rewritten = 0
    for node in model.graph.node:
        if node.op_type != "Reciprocal" or types.get(node.input[0]) != onnx.TensorProto.BFLOAT16:
            continue
        one = f"{node.name or node.output[0]}/onnxruntime_one"
        model.graph.initializer.append(onnx.helper.make_tensor(one, onnx.TensorProto.BFLOAT16, [], [1.0]))
        x = node.input[0]
        node.op_type = "Div"
        del node.input[:]
        node.input.extend([one, x])
        rewritten += 1
    if not rewritten:
        return path, 0
    root, ext = os.path.splitext(path)
    out = f"{root}.onnxruntime{ext}"
    onnx.save(model, out)
    return out, rewritten


class OrtStep:
    """An onnxruntime session of one decoder at fixed dimensions, inputs and outputs bound."""

    def __init__(self, path, dims, provider="CUDAExecutionProvider", cuda_graph=True, device_id=0, ort=None):
        if ort is None:
            import onnxruntime as ort
        self.ort = ort
        so = ort.SessionOptions()
        for name, value in dims.items():
            so.add_free_dimension_override_by_name(name, int(value))
        if provider == "CPUExecutionProvider":
            if cuda_graph:
                raise ValueError("CUDA graphs need the CUDA execution provider")
            providers = ["CPUExecutionProvider"]
        else:
            options = {"device_id": str(device_id)}
            if cuda_graph:
                options["enable_cuda_graph"] = "1"
            providers = [(provider, options)]
        path, self.rewritten = onnxruntime_form(path)
        self.session = ort.InferenceSession(path, so, providers=providers)
        held = self.session.get_providers()
        if provider not in held:
            raise RuntimeError(f"onnxruntime {ort.__version__} holds {held}, not {provider} "
                               f"(available: {ort.get_available_providers()}); its load warnings above say why")
        self.binding = self.session.io_binding()
        self.names_in = [i.name for i in self.session.get_inputs()]
        self.names_out = [o.name for o in self.session.get_outputs()]

    def bind(self, feeds, outputs):
        """Bind every input and output to the caller's buffers (kept alive by the caller)."""
        missing = [n for n in self.names_in if n not in feeds] + [n for n in self.names_out if n not in outputs]
        if missing:
            raise KeyError(f"no buffer for {missing}")
        for name in self.names_in:
            dev, idx, et, shape, ptr = describe(feeds[name])
            self.binding.bind_input(name, dev, idx, et, shape, ptr)
        for name in self.names_out:
            dev, idx, et, shape, ptr = describe(outputs[name])
            self.binding.bind_output(name, dev, idx, et, shape, ptr)

    def run(self):
        self.session.run_with_iobinding(self.binding)
