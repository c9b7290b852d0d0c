"""onyx.InferenceSession and its companions, shaped like onnxruntime's Python API so that a
script written for onnxruntime runs by changing its import. docs/python.md lists what maps
to what and what differs."""

import enum
import os
import warnings

import numpy as np

from . import _onyx
from ._errors import Error

try:  # bfloat16 arrays, where installed
    import ml_dtypes as _ml_dtypes

    _BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes comes with onnx
    _ml_dtypes = None
    _BFLOAT16 = None

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"

# onyx's element type names -> onnxruntime's type strings.
_ORT_TYPES = {
    "float32": "tensor(float)", "float64": "tensor(double)", "float16": "tensor(float16)",
    "bfloat16": "tensor(bfloat16)", "int8": "tensor(int8)", "int16": "tensor(int16)",
    "int32": "tensor(int32)", "int64": "tensor(int64)", "uint8": "tensor(uint8)",
    "uint16": "tensor(uint16)", "uint32": "tensor(uint32)", "uint64": "tensor(uint64)",
    "bool": "tensor(bool)", "string": "tensor(string)", "complex64": "tensor(complex64)",
    "complex128": "tensor(complex128)", "float8e4m3fn": "tensor(float8e4m3fn)",
    "float8e4m3fnuz": "tensor(float8e4m3fnuz)", "float8e5m2": "tensor(float8e5m2)",
    "float8e5m2fnuz": "tensor(float8e5m2fnuz)", "float8e8m0": "tensor(float8e8m0)",
    "float4e2m1": "tensor(float4e2m1)", "int4": "tensor(int4)", "uint4": "tensor(uint4)", "int2": "tensor(int2)",
    "uint2": "tensor(uint2)",
}

# The narrow element types: onyx's name -> (ml_dtypes' name, bits of an integer type or 0). onyx and
# ml_dtypes both hold one element a byte; ml_dtypes keeps an integer's low bits only, onyx the
# value sign-extended, so integers convert at this boundary (floats are their codes in both).
_NARROW = {"float8e4m3fn": ("float8_e4m3fn", 0), "float8e4m3fnuz": ("float8_e4m3fnuz", 0),
           "float8e5m2": ("float8_e5m2", 0), "float8e5m2fnuz": ("float8_e5m2fnuz", 0),
           "float8e8m0": ("float8_e8m0fnu", 0), "float4e2m1": ("float4_e2m1fn", 0),
           "int4": ("int4", 4), "uint4": ("uint4", 4), "int2": ("int2", 2), "uint2": ("uint2", 2)}
_NARROW_BY_DTYPE = ({np.dtype(getattr(_ml_dtypes, ml)): name for name, (ml, _) in _NARROW.items()
                     if hasattr(_ml_dtypes, ml)} if _ml_dtypes is not None else {})


def _narrow_feed(x, name):
    """onyx's bytes for an ml_dtypes array of narrow type `name`."""
    bits = _NARROW[name][1]
    u = np.ascontiguousarray(x).view(np.uint8)
    if bits:
        u = u & np.uint8((1 << bits) - 1)
        if not name.startswith("u"):  # sign-extend
            sign = np.uint8(1 << (bits - 1))
            u = ((u ^ sign).astype(np.int16) - int(sign)).astype(np.int8).view(np.uint8)
    return _onyx.Value.from_array(np.ascontiguousarray(u), name)


def _narrow_array(a, name):
    """An ml_dtypes array of onyx's bytes `a` (uint8) of narrow type `name`."""
    bits = _NARROW[name][1]
    if bits:
        a = a & np.uint8((1 << bits) - 1)
    return a.view(np.dtype(getattr(_ml_dtypes, _NARROW[name][0])))


def _numpy_dtype(name):
    """The numpy dtype of an onyx element type name."""
    if name == "bfloat16":
        if _BFLOAT16 is None:
            raise Error("bfloat16 arrays need the ml_dtypes package (pip install ml_dtypes)")
        return _BFLOAT16
    if name == "string":
        return np.dtype(object)
    if name in _NARROW:
        if _ml_dtypes is None:
            raise Error(f"{name} arrays need the ml_dtypes package (pip install ml_dtypes)")
        return np.dtype(getattr(_ml_dtypes, _NARROW[name][0]))
    return np.dtype(name)


def _type_name(dtype):
    """The onyx element type name of a numpy dtype (or anything np.dtype takes)."""
    if isinstance(dtype, str) and dtype.startswith("tensor("):
        for k, v in _ORT_TYPES.items():
            if v == dtype:
                return k
        raise Error(f"unknown element type {dtype!r}")
    d = np.dtype(dtype)
    if _BFLOAT16 is not None and d == _BFLOAT16:
        return "bfloat16"
    if d in _NARROW_BY_DTYPE:
        return _NARROW_BY_DTYPE[d]
    if d.kind in "USO":
        return "string"
    if d == np.bool_:
        return "bool"
    name = d.name
    if name not in _ORT_TYPES:
        raise Error(f"numpy dtype {d} has no onyx element type")
    return name


def _prefix(context, err):
    return Error(f"{context}: {err}", [context] + list(err.chain))


# The numpy dtypes that cross as they are (the fast path of every feed).
_DIRECT = frozenset(np.dtype(n) for n in ("float32", "float64", "float16", "int8", "int16", "int32", "int64",
                                           "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128"))
_from_array = _onyx.Value.from_array


def _value_from_array(x, as_type=""):
    """A native Value over x (numpy, or any DLPack producer), without copying where possible."""
    if type(x) is np.ndarray and x.dtype in _DIRECT:
        return _from_array(x, as_type)
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "USO":
            items = [s.decode("utf-8") if isinstance(s, bytes) else s for s in x.reshape(-1).tolist()]
            bad = [type(s).__name__ for s in items if not isinstance(s, str)]
            if bad:
                raise TypeError(f"an object array fed as strings holds {bad[0]} items, not str")
            return _onyx.Value.from_strings(items, list(x.shape))
        if x.dtype in _NARROW_BY_DTYPE:
            return _narrow_feed(x, _NARROW_BY_DTYPE[x.dtype])
        if _BFLOAT16 is not None and x.dtype == _BFLOAT16:
            if not x.flags.c_contiguous:
                raise Error("the array is not C-contiguous: pass numpy.ascontiguousarray(x) "
                            "(onyx reads feeds in place, without copying)")
            return _onyx.Value.from_array(x.view(np.uint16), "bfloat16")
        _type_name(x.dtype)  # an element type onyx has no tensors of is an error naming it
        return _onyx.Value.from_array(x, as_type)
    if hasattr(x, "__dlpack__"):
        return _onyx.Value.from_array(x, as_type)
    raise TypeError(f"expected a numpy array, an OrtValue or a DLPack tensor, got {type(x).__name__}")


def _map_value(d, value_type):
    """A native map of a dict (int or str keys); its values in the model's value type."""
    keys = list(d.keys())
    if all(isinstance(k, str) for k in keys):
        k = _onyx.Value.from_strings(keys, [len(keys)])
    else:
        k = _value_from_array(np.asarray(keys, dtype=np.int64))
    vals = list(d.values())
    if value_type == "string":
        v = _onyx.Value.from_strings([str(x) for x in vals], [len(vals)])
    else:
        v = _value_from_array(np.asarray(vals, dtype=_numpy_dtype(value_type) if value_type else None))
    return _onyx.Value.map(k, v)


def _sequence_value(items):
    """A native sequence of the arrays (or nested lists) in `items`."""
    values = [_sequence_value(i) if isinstance(i, (list, tuple)) else
              i._v if isinstance(i, OrtValue) else _value_from_array(np.asarray(i)) for i in items]
    return _onyx.Value.sequence(values)


def _numpy_of(v, copy=False):
    """A numpy array of a native Value (a view of its host bytes unless copy); a sequence is a
    list of them, an optional its value or None (as onnxruntime returns them)."""
    if v.dtype == "sequence":
        return [_numpy_of(e, copy) for e in v.elements()]
    if v.dtype == "optional":
        e = v.elements()
        return _numpy_of(e[0], copy) if e else None
    if v.dtype == "map":  # a dict, as onnxruntime returns maps
        keys, values = v.elements()
        return dict(zip(_numpy_of(keys, True).tolist(), _numpy_of(values, True).tolist()))
    if v.dtype in _NARROW:
        if _ml_dtypes is None:
            raise Error(f"{v.dtype} arrays need the ml_dtypes package (pip install ml_dtypes)")
        return _narrow_array(v.numpy_view().copy(), v.dtype)
    if not copy and v.device == "cpu":
        dt = v.dtype
        if dt != "string" and dt != "bfloat16":
            return v.numpy_view()
    if v.dtype == "string":
        return np.array(v.strings(), dtype=object).reshape(v.shape)
    a = v.numpy_view()
    if v.dtype == "bfloat16":
        a = a.view(_numpy_dtype("bfloat16"))
    return a.copy() if copy else a


def _run_controls(run_options):
    """(timeout_seconds, control, profile) for the native run from an onyx.RunOptions (or None)."""
    if run_options is None:
        return 0.0, None, False
    control = getattr(run_options, "_control", None)
    if control is None:
        raise TypeError("run_options must be an onyx.RunOptions")
    return float(run_options.timeout_seconds), control, bool(getattr(run_options, "profile", False))


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class SessionOptions:
    """A session's options. The onnxruntime attributes are accepted so that scripts run
    unchanged; docs/python.md says which of them change what onyx does. onyx's own:

    - memory: "planned" (default: one arena per input-shape signature), "release", "keep"
    - capture: CUDA Graphs, "off" (default), "auto" or "require" (GPU sessions)
    - memory_budget_bytes: the device memory budget (0: memory_fraction of the free memory)
    - memory_fraction, allow_cpu_fallback, validate_replays, plan_cache_capacity
    - fuse_attention: None (default: fuse eager attention into one Attention node; for generation on CUDA only), True, False
    - fuse_linear: None (default: products by constant weights as onyx::Linear, Q/K/V and gate/up as one
      product each, on CUDA only), True, False
    - fuse_rotary_cache: None (default: a layer's rotary embeddings of q and k and its KV-cache writes as one
      onyx::RotaryCache node, on CUDA only), True, False
    - fuse_rotary_attention: None (default: where the rotary-cache fusion is on, a RotaryCache writing the
      cache in place and the Attention after it as one onyx::RotaryCacheAttention node, one kernel for a
      decode step; on CUDA only), True, False
    - overlap_launches: True (default: on a GPU, a product kernel may start while the kernel before it finishes)
    """

    def __init__(self):
        # onnxruntime's, accepted as given
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_cpu_mem_arena = True
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.use_deterministic_compute = False
        self._config = {}
        # onyx's
        self.memory = "planned"
        self.capture = None  # None: from the providers (enable_cuda_graph), else "off"
        self.memory_budget_bytes = 0
        self.memory_fraction = 0.9
        self.allow_cpu_fallback = True
        self.validate_replays = False
        self.plan_cache_capacity = 8
        self.host_memory_budget_bytes = 0  # 0: 80% of the physical memory
        self.fuse_attention = None  # None: fuse eager attention (generation: on CUDA only); True/False force it
        self.fuse_linear = None  # None: the linear fusions on CUDA devices only; True/False force them
        self.fuse_rotary_cache = None  # None: the rotary-cache fusion on CUDA devices only; True/False force it
        self.fuse_rotary_attention = None  # None: the rotary-attention fusion on CUDA devices only
        self.overlap_launches = True  # GPU: programmatic dependent launch of the product kernels

    def add_session_config_entry(self, key, value):
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key):
        return self._config[key]

    def add_free_dimension_override_by_name(self, name, value):
        raise Error("free dimension overrides are not supported: onyx plans each input shape as it comes")

    def _native(self):
        return {
            "memory": self.memory,
            "memory_budget_bytes": int(self.memory_budget_bytes),
            "memory_fraction": float(self.memory_fraction),
            "allow_cpu_fallback": bool(self.allow_cpu_fallback),
            "validate_replays": bool(self.validate_replays),
            "plan_cache_capacity": int(self.plan_cache_capacity),
            "host_memory_budget_bytes": int(self.host_memory_budget_bytes),
            # onnxruntime's basic level and up fold constants; ORT_DISABLE_ALL does not.
            "fold_constants": self.graph_optimization_level != GraphOptimizationLevel.ORT_DISABLE_ALL,
            "fuse_patterns": self.graph_optimization_level != GraphOptimizationLevel.ORT_DISABLE_ALL,
            "fuse_attention": None if self.fuse_attention is None else bool(self.fuse_attention),
            "fuse_linear": None if self.fuse_linear is None else bool(self.fuse_linear),
            "fuse_rotary_cache": None if self.fuse_rotary_cache is None else bool(self.fuse_rotary_cache),
            "fuse_rotary_attention": None if self.fuse_rotary_attention is None else bool(self.fuse_rotary_attention),
            "overlap_launches": bool(self.overlap_launches),
            # onnxruntime's intra_op_num_threads: the CPU kernels' threads (0: every available CPU)
            "intra_op_threads": int(self.intra_op_num_threads),
        }


def get_device():
    """"GPU" when this build runs on a CUDA device present here, else "CPU" (as onnxruntime)."""
    return "GPU" if len(_onyx.devices()) > 1 else "CPU"


def get_available_providers():
    return [CUDA, CPU] if len(_onyx.devices()) > 1 else [CPU]


def get_all_providers():
    return [CUDA, CPU]


def _flag(v):
    if isinstance(v, str):
        if v.lower() in ("1", "true"):
            return True
        if v.lower() in ("0", "false"):
            return False
        raise Error(f"{v!r} is not a flag (1, 0, true, false)")
    return bool(v)


def _choose_device(providers, provider_options):
    """The device and provider options from onnxruntime's providers list: the first provider
    that is available here; unknown or unavailable ones are skipped with a warning, as
    onnxruntime does."""
    if providers is None:
        return "cpu", [CPU], [{}], False, 0
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("provider_options must have one entry per provider")
    entries = []
    for i, p in enumerate(providers):
        if isinstance(p, (tuple, list)):
            name, opts = p[0], dict(p[1])
        else:
            name, opts = p, dict(provider_options[i]) if provider_options else {}
        entries.append((name, opts))
    available = get_available_providers()
    for name, opts in entries:
        if name not in available:
            what = "not a provider onyx knows" if name not in get_all_providers() else "not available here"
            warnings.warn(f"provider {name!r} is {what} (available: {available}); skipping it",
                          stacklevel=3)
    chosen = [(n, o) for n, o in entries if n in available]
    if not chosen:
        chosen = [(CPU, {})]
    name, opts = chosen[0]
    if name == CUDA:
        known = {"device_id", "enable_cuda_graph", "gpu_mem_limit"}
        for k in opts:
            if k not in known:
                warnings.warn(f"CUDAExecutionProvider option {k!r} has no effect in onyx", stacklevel=3)
        device = f"cuda:{int(opts.get('device_id', 0))}"
        return device, [n for n, _ in chosen], [o for _, o in chosen], _flag(opts.get("enable_cuda_graph", False)), \
            int(opts.get("gpu_mem_limit", 0))
    return "cpu", [CPU], [opts], False, 0


def _kind_type(d):
    """onnxruntime's type string of a sequence or optional ("seq(tensor(float))"); maps are "map"."""
    elem = d.get("element_dtype", "")
    inner = {"sequence": "seq(tensor(undefined))", "optional": "optional(tensor(undefined))"}.get(elem) or \
        _ORT_TYPES.get(elem, "tensor(undefined)")
    if d["dtype"] == "map":
        return f"map(?,{_ORT_TYPES.get(elem, 'tensor(undefined)')})"
    return {"sequence": f"seq({inner})", "optional": f"optional({inner})"}.get(d["dtype"], "map")


class NodeArg:
    """An input or output as the model declares it: name, shape (int for a known size, str for
    a symbolic one, None for unknown) and type ("tensor(float)")."""

    def __init__(self, d):
        self.name = d["name"]
        self.shape = d["dims"] if d["dims"] is not None else None
        self.type = _ORT_TYPES.get(d["dtype"], "tensor(undefined)") if d["is_tensor"] else _kind_type(d)
        self._dtype = d["dtype"]

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class ModelMetadata:
    def __init__(self, s):
        self.producer_name = s["producer_name"]
        self.graph_name = s["graph_name"]
        self.domain = s["domain"]
        self.description = s["description"]
        self.graph_description = s["graph_description"]
        self.version = s["version"]
        self.custom_metadata_map = dict(s["custom_metadata_map"])


class OrtValue:
    """A tensor on the host or on a GPU, as onnxruntime's OrtValue: made from numpy or from
    a shape and type, handed to and from IO bindings, and exchanged with torch, CuPy and JAX
    through DLPack without copies."""

    def __init__(self, value, _keep=None):
        self._v = value
        self._keep = _keep  # what the value borrows from (a numpy array)

    @staticmethod
    def ortvalue_from_numpy(array, device_type="cpu", device_id=0):
        array = np.asarray(array)
        host = OrtValue(_value_from_array(array), array)
        if device_type.lower() == "cpu":
            return host
        return OrtValue(_onyx.Value.to_device(host._v, _device_name(device_type, device_id)))

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type="cpu", device_id=0):
        return OrtValue(_onyx.Value.empty(_type_name(element_type), [int(d) for d in shape],
                                          _device_name(device_type, device_id)))

    @staticmethod
    def from_dlpack(tensor):
        """Wraps a DLPack producer (a torch/CuPy/JAX tensor) without copying; the OrtValue keeps it alive."""
        return OrtValue(_value_from_array(tensor), tensor)

    def numpy(self):
        return _numpy_of(self._v, copy=True)

    def shape(self):
        return list(self._v.shape)

    def data_type(self):
        return _ORT_TYPES[self._v.dtype]

    def element_type(self):
        return _numpy_dtype(self._v.dtype)

    def device_name(self):
        return "cpu" if self._v.device == "cpu" else "cuda"

    def data_ptr(self):
        return self._v.data_ptr

    def is_tensor(self):
        return True

    def has_value(self):
        return True

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule over the tensor (no copy). Outputs are complete when a run returns,
        so there is no work to order on the consumer's `stream`."""
        if copy:
            raise BufferError("onyx hands out its tensors without copying (copy=True is not supported)")
        return self._v.dlpack_view()

    def __dlpack_device__(self):
        d = self._v.device
        return (1, 0) if d == "cpu" else (2, int(d.split(":")[1]))

    def __repr__(self):
        return f"OrtValue({self._v.dtype}{self._v.shape} on {self._v.device})"


def _device_name(device_type, device_id):
    t = str(device_type).lower()
    if t == "cpu":
        return "cpu"
    if t in ("cuda", "gpu"):
        return f"cuda:{int(device_id)}"
    raise Error(f"device type {device_type!r} is not one of cpu, cuda")


class IOBinding:
    """Inputs and outputs bound to a session ahead of run_with_iobinding, as onnxruntime's:
    inputs from numpy, OrtValues or raw device pointers; outputs to the host, left on the
    session's device, or written into the caller's OrtValue or buffer."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._keep = {}
        self._outputs = []  # (name, kind, value): kind "host", "device" or "bound"
        self._results = None

    def bind_cpu_input(self, name, arr_on_cpu):
        arr = np.asarray(arr_on_cpu)
        try:
            self._inputs[name] = _value_from_array(arr)
        except Error as e:
            raise _prefix(f"input '{name}'", e) from None
        self._keep[name] = arr

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        self._inputs[name] = _onyx.Value.from_pointer(int(buffer_ptr), _type_name(element_type),
                                                      [int(d) for d in shape], _device_name(device_type, device_id))
        self._keep.pop(name, None)

    def bind_ortvalue_input(self, name, ortvalue):
        self._inputs[name] = ortvalue._v
        self._keep[name] = ortvalue

    def _set_output(self, name, kind, value, keep=None):
        self._outputs = [o for o in self._outputs if o[0] != name] + [(name, kind, value, keep)]

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None):
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise Error(f"output '{name}': binding a buffer needs its element_type and shape")
            v = _onyx.Value.from_pointer(int(buffer_ptr), _type_name(element_type), [int(d) for d in shape],
                                         _device_name(device_type, device_id))
            self._set_output(name, "bound", v)
        elif str(device_type).lower() == "cpu":
            self._set_output(name, "host", None)
        else:
            want = _device_name(device_type, device_id)
            have = self._session._native().device()
            if want != have:
                raise Error(f"output '{name}': bound to {want}, but the session runs on {have}")
            self._set_output(name, "device", None)

    def bind_ortvalue_output(self, name, ortvalue):
        keep = ortvalue._keep
        if isinstance(keep, np.ndarray) and not keep.flags.writeable:
            raise Error(f"output '{name}': the OrtValue wraps a read-only array")
        self._set_output(name, "bound", ortvalue._v, ortvalue)

    def clear_binding_inputs(self):
        self._inputs.clear()
        self._keep.clear()

    def clear_binding_outputs(self):
        self._outputs = []
        self._results = None

    def synchronize_inputs(self):
        """Nothing to wait for: a run reads its inputs in stream order after every copy onyx
        enqueued, and inputs written by the caller's own kernels must be complete before
        run_with_iobinding (synchronize that producer, e.g. torch.cuda.synchronize())."""

    def synchronize_outputs(self):
        """Nothing to wait for: run_with_iobinding returns when every output is complete."""

    def get_outputs(self):
        if self._results is None:
            raise Error("no outputs yet: call run_with_iobinding first")
        return [OrtValue(v) for v in self._results]

    def copy_outputs_to_cpu(self):
        return [_numpy_of(v, copy=True) for v in self._results] if self._results is not None else []

    def _run(self, run_options=None):
        s = self._session._native()
        names = [o[0] for o in self._outputs]
        if not names:
            raise Error("no outputs are bound: bind_output at least one")
        device_outputs = [o[0] for o in self._outputs if o[1] == "device"]
        bound = [(o[0], o[2]) for o in self._outputs if o[1] == "bound"]
        self._results = s.run(list(self._inputs.items()), names, device_outputs, bound, *_run_controls(run_options))


class InferenceSession:
    """Loads a model and runs it, as onnxruntime.InferenceSession.

    providers: onnxruntime's names, e.g. ["CUDAExecutionProvider", "CPUExecutionProvider"]
    or [("CUDAExecutionProvider", {"device_id": 0, "enable_cuda_graph": True})]; a node the
    GPU cannot run falls back to the CPU (reported once). device: onyx's own way to say
    where ("cpu", "cuda:0"), instead of providers."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, *,
                 device=None, **kwargs):
        self._sess = None
        if kwargs:
            raise TypeError(f"unexpected arguments: {', '.join(kwargs)}")
        self._options = sess_options if sess_options is not None else SessionOptions()
        if not isinstance(self._options, SessionOptions):
            raise TypeError("sess_options must be an onyx.SessionOptions")
        if device is not None:
            if providers is not None:
                raise ValueError("give either providers or device, not both")
            dev = _onyx.resolve_device(device)
            self._providers = [CUDA, CPU] if dev != "cpu" else [CPU]
            self._provider_options = [{"device_id": dev.split(":")[1]}, {}] if dev != "cpu" else [{}]
            cuda_graph, mem_limit = False, 0
        else:
            dev, self._providers, self._provider_options, cuda_graph, mem_limit = _choose_device(
                providers, provider_options)
        opts = self._options._native()
        opts["device"] = dev
        capture = self._options.capture
        opts["capture"] = capture if capture is not None else ("require" if cuda_graph else "off")
        if mem_limit and not opts["memory_budget_bytes"]:
            opts["memory_budget_bytes"] = mem_limit
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            source = bytes(path_or_bytes)
            self._model_path = None
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            source = os.fspath(path_or_bytes)
            self._model_path = source
        else:
            raise TypeError(f"path_or_bytes must be a path or bytes, not {type(path_or_bytes).__name__}")
        self._sess = _onyx.Session(source, opts)
        self._inputs = [NodeArg(d) for d in self._sess.inputs() if not d["has_default"]]
        self._overridable = [NodeArg(d) for d in self._sess.inputs() if d["has_default"]]
        self._outputs = [NodeArg(d) for d in self._sess.outputs()]
        self._input_types = {d["name"]: d["dtype"] for d in self._sess.inputs()}
        self._input_elements = {d["name"]: d.get("element_dtype", "") for d in self._sess.inputs()}

    # -- what the model declares --
    def _native(self):
        if self._sess is None or self._sess.closed:
            raise Error("the session is closed")
        return self._sess

    def get_inputs(self):
        self._native()
        return list(self._inputs)

    def get_outputs(self):
        self._native()
        return list(self._outputs)

    def get_overridable_initializers(self):
        self._native()
        return list(self._overridable)

    def get_modelmeta(self):
        return ModelMetadata(self._native().summary())

    def get_providers(self):
        return list(self._providers)

    def get_provider_options(self):
        return {p: {k: str(v) for k, v in o.items()} for p, o in zip(self._providers, self._provider_options)}

    def get_session_options(self):
        return self._options

    @property
    def device(self):
        """Where the session runs ("cpu", "cuda:0")."""
        return self._native().device()

    # -- running --
    def _feeds(self, input_feed):
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of input name -> array, not {type(input_feed).__name__}")
        feeds = []
        for name, x in input_feed.items():
            if type(x) is np.ndarray and x.dtype in _DIRECT and type(name) is str:
                try:
                    feeds.append((name, _from_array(x, "")))
                    continue
                except Error as e:
                    raise _prefix(f"input '{name}'", e) from None
            if not isinstance(name, str):
                raise TypeError(f"input names must be str, not {type(name).__name__}")
            if isinstance(x, OrtValue):
                feeds.append((name, x._v))
                continue
            if isinstance(x, dict) and self._input_types.get(name) == "map":
                try:
                    feeds.append((name, _map_value(x, self._input_elements.get(name, ""))))
                except Error as e:
                    raise _prefix(f"input '{name}'", e) from None
                continue
            if (isinstance(x, (list, tuple)) or x is None) and \
                    self._input_types.get(name) in ("sequence", "optional"):  # a sequence, or no value
                try:
                    feeds.append((name, _sequence_value(x) if x is not None else _onyx.Value.optional(None)))
                except Error as e:
                    raise _prefix(f"input '{name}'", e) from None
                continue
            if not isinstance(x, np.ndarray) and not hasattr(x, "__dlpack__"):
                raise TypeError(f"input '{name}': expected a numpy array, an OrtValue or a DLPack tensor, "
                                f"got {type(x).__name__} (numpy.asarray(x, dtype=...) makes one)")
            try:
                feeds.append((name, _value_from_array(x)))
            except Error as e:
                raise _prefix(f"input '{name}'", e) from None
        return feeds

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model; returns numpy arrays for output_names (all outputs when None), in that order."""
        s = self._native()
        if output_names is not None:
            if isinstance(output_names, str) or not all(isinstance(n, str) for n in output_names):
                raise TypeError("output_names must be None or a list of output names")
            output_names = list(output_names)
        values = s.run(self._feeds(input_feed), output_names, [], [], *_run_controls(run_options))
        return [_numpy_of(v) for v in values]

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """Runs the model on OrtValues; returns OrtValues (on the host)."""
        s = self._native()
        values = s.run(self._feeds(input_dict_ort_values), list(output_names) if output_names else None, [], [],
                       *_run_controls(run_options))
        return [OrtValue(v) for v in values]

    def io_binding(self):
        self._native()
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        self._native()
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise Error("run_with_iobinding needs an IOBinding of this session (session.io_binding())")
        iobinding._run(run_options)

    # -- onyx's --
    def capture_report(self):
        """CUDA Graphs so far: captures, replays, eager runs, graphs alive."""
        return self._native().capture_report()

    def memory_report(self):
        """The device memory governor's holders and their bytes ("" on the CPU)."""
        return self._native().memory_report()

    def cpu_fallbacks(self):
        """(node, reason) for each node of a GPU session that runs on the CPU."""
        return self._native().cpu_fallbacks()

    def last_run_stats(self):
        """The last finished run: peak_bytes and allocations (its intermediates), seconds, and
        nodes (with RunOptions.profile: dicts of node, op and seconds, in the order they ran)."""
        return self._native().last_run_stats()

    def close(self):
        """Frees the session now; any later call raises onyx.Error."""
        if self._sess is not None:
            self._sess.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
