// onyx._onyx: the native half of the Python package. It exposes the public API (Session,
// tensors as Values) and src/genai (LanguageModel, Tokenizer, Generator) with as little
// policy as it can: the onnxruntime- and onnxruntime-genai-shaped classes are Python code
// (python/onyx/) over these. Arrays cross without copies where their memory allows it:
// a feed borrows the caller's buffer (numpy, or any DLPack producer on the host or on the
// session's GPU) for the call, and an output is handed out as a view that keeps the tensor.
// Every call that runs a model releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "genai/audio.h"
#include "genai/chat_template.h"
#include "genai/encoder_decoder_model.h"
#include "genai/generator.h"
#include "genai/image.h"
#include "genai/language_model.h"
#include "genai/token_stream.h"
#include "genai/tokenizer.h"
#include "onyx/device.h"
#include "onyx/error.h"
#include "onyx/session.h"
#include "options.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace onyx::py {

namespace {

// ---- dtypes --------------------------------------------------------------------------------

struct DTypeCode {
  DType dtype;
  uint8_t code, bits;
};
constexpr uint8_t kInt = static_cast<uint8_t>(nb::dlpack::dtype_code::Int);
constexpr uint8_t kUInt = static_cast<uint8_t>(nb::dlpack::dtype_code::UInt);
constexpr uint8_t kFloat = static_cast<uint8_t>(nb::dlpack::dtype_code::Float);
constexpr uint8_t kBfloat = static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat);
constexpr uint8_t kComplex = static_cast<uint8_t>(nb::dlpack::dtype_code::Complex);
constexpr uint8_t kBool = static_cast<uint8_t>(nb::dlpack::dtype_code::Bool);
const DTypeCode kCodes[] = {
    {DType::kFloat32, kFloat, 32},    {DType::kFloat64, kFloat, 64},   {DType::kFloat16, kFloat, 16},
    {DType::kBFloat16, kBfloat, 16},  {DType::kInt8, kInt, 8},         {DType::kInt16, kInt, 16},
    {DType::kInt32, kInt, 32},        {DType::kInt64, kInt, 64},       {DType::kUInt8, kUInt, 8},
    {DType::kUInt16, kUInt, 16},      {DType::kUInt32, kUInt, 32},     {DType::kUInt64, kUInt, 64},
    {DType::kBool, kBool, 8},         {DType::kComplex64, kComplex, 64}, {DType::kComplex128, kComplex, 128},
};

DType dtype_of_array(const nb::dlpack::dtype& t) {
  if (t.lanes == 1)
    for (const auto& c : kCodes)
      if (c.code == t.code && c.bits == t.bits) return c.dtype;
  throw Error(cat("arrays of element type (DLPack code ", int(t.code), ", ", int(t.bits), " bits, ", t.lanes,
                  " lanes) are not supported"));
}

nb::dlpack::dtype array_dtype(DType d) {
  for (const auto& c : kCodes)
    if (c.dtype == d) return nb::dlpack::dtype{c.code, c.bits, 1};
  throw Error(cat("tensors of ", dtype_name(d), " have no array form"));
}

DType dtype_from_name(const std::string& name) {
  for (int i = 1; i <= 26; ++i)
    if (dtype_name(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  for (DType t : {DType::kSequence, DType::kOptional, DType::kMap})
    if (dtype_name(t) == name) return t;
  throw Error(cat("unknown element type '", name, "'"));
}

// ---- devices -------------------------------------------------------------------------------

// One backend per GPU for Values made outside a session (OrtValue.ortvalue_from_numpy(...,
// "cuda")); sessions use their own.
Backend& value_backend(Device d) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Backend>> backends;
  std::lock_guard<std::mutex> lock(mu);
  auto& b = backends[d.index];
  if (!b) {
    SessionOptions o;
    o.device = d.str();
    b = make_backend(d, o);
    ONYX_CHECK(b, "no backend for ", d.str());
  }
  return *b;
}

// ---- values --------------------------------------------------------------------------------

struct PyValue {
  Tensor t;
  // The session a device tensor came from (its backend copies it to the host), if any.
  std::shared_ptr<Session> session;

  std::string device() const { return t.device().str(); }
  std::vector<int64_t> shape() const { return t.shape().dims(); }

  // Host copy (the PyValue itself on the host).
  Tensor host() const {
    if (t.on_host()) return t;
    if (session && session->device() == t.device().str()) return session->to_host(t);
    Tensor h(t.dtype(), t.shape());
    Backend& b = value_backend(t.device());
    b.copy_to_host(h.raw(), t.raw(), t.bytes());
    return h;
  }
};

// Feeds are read-only to onyx, so read-only arrays (np.frombuffer, broadcast views) are taken too;
// python/onyx refuses to bind a read-only array as an output.
PyValue value_from_array(nb::ndarray<nb::ro> a, const std::string& as_dtype) {
  DType dtype = dtype_of_array(a.dtype());
  if (!as_dtype.empty()) {
    DType want = dtype_from_name(as_dtype);
    ONYX_CHECK(dtype_size(want) == dtype_size(dtype), "an array of ", dtype_name(dtype), " cannot be read as ",
               as_dtype);
    dtype = want;
  }
  std::vector<int64_t> dims(a.ndim());
  bool empty = false;
  for (size_t i = 0; i < a.ndim(); ++i) {
    dims[i] = static_cast<int64_t>(a.shape(i));
    empty |= a.shape(i) == 0;
  }
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0 && !empty;) {  // an empty array's strides say nothing
    if (a.shape(i) != 1 && a.stride(i) != expect) {
      std::string strides;
      for (size_t j = 0; j < a.ndim(); ++j) strides += cat(j ? "," : "", a.stride(j));
      throw Error(cat("the array is not C-contiguous (element strides [", strides,
                      "]): pass numpy.ascontiguousarray(x) (onyx reads feeds in place, without copying)"));
    }
    expect *= static_cast<int64_t>(a.shape(i));
  }
  Device dev = Device::cpu();
  if (a.device_type() == nb::device::cuda::value) dev = Device::cuda(a.device_id());
  else ONYX_CHECK(a.device_type() == nb::device::cpu::value, "arrays on DLPack device type ", a.device_type(),
                  " are not supported (cpu and cuda are)");
  // The borrowed tensor keeps the array (and so its owner) alive.
  auto keep = std::shared_ptr<const void>(new nb::ndarray<nb::ro>(a), [](const void* p) {
    nb::gil_scoped_acquire gil;
    delete static_cast<const nb::ndarray<nb::ro>*>(p);
  });
  PyValue v;
  v.t = Tensor::borrow(dtype, Shape(dims), const_cast<void*>(a.data()), keep, dev);
  return v;
}

// A view of a host tensor for numpy (no copy): bfloat16 appears as uint16 (numpy has no
// bfloat16; python/onyx views it as ml_dtypes.bfloat16).
nb::object host_view(const Tensor& host, bool numpy) {
  ONYX_CHECK(host.on_host(), "host_view of a device tensor");
  ONYX_CHECK(host.dtype() != DType::kString, "a string tensor has no array view (read strings())");
  // bfloat16 as uint16 and the narrow types as uint8: python/onyx views them as ml_dtypes types.
  nb::dlpack::dtype dt = host.dtype() == DType::kBFloat16 ? nb::dlpack::dtype{kUInt, 16, 1}
                         : dtype_is_narrow(host.dtype()) ? nb::dlpack::dtype{kUInt, 8, 1}
                                                         : array_dtype(host.dtype());
  std::vector<size_t> shape;
  for (int64_t d : host.shape().dims()) shape.push_back(static_cast<size_t>(d));
  auto* keep = new Tensor(host);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  void* data = host.raw();
  static char empty_byte;
  if (!data) data = &empty_byte;  // a tensor with no elements
  if (numpy)
    return nb::cast(nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, dt));
  return nb::cast(nb::ndarray<>(data, shape.size(), shape.data(), owner, nullptr, dt));
}

// A framework-neutral array (DLPack producer) over any tensor, on its device.
nb::object dlpack_view(const PyValue& v) {
  if (v.t.on_host()) return host_view(v.t, false);
  std::vector<size_t> shape;
  for (int64_t d : v.t.shape().dims()) shape.push_back(static_cast<size_t>(d));
  auto* keep = new Tensor(v.t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return nb::cast(nb::ndarray<>(v.t.raw(), shape.size(), shape.data(), owner, nullptr, array_dtype(v.t.dtype()),
                                nb::device::cuda::value, v.t.device().index));
}

// A tensor over memory the caller owns and keeps alive (IOBinding.bind_input's buffer_ptr).
PyValue value_from_pointer(uintptr_t ptr, const std::string& dtype, const std::vector<int64_t>& dims,
                         const std::string& device) {
  ONYX_CHECK(ptr != 0, "buffer_ptr is null");
  DType dt = dtype_from_name(dtype);
  ONYX_CHECK(dt != DType::kString, "string tensors cannot be bound by pointer");
  PyValue v;
  v.t = Tensor::borrow(dt, Shape(dims), reinterpret_cast<void*>(ptr), nullptr, resolve_device(device));
  return v;
}

PyValue value_from_strings(const std::vector<std::string>& items, const std::vector<int64_t>& dims) {
  PyValue v;
  v.t = Tensor(DType::kString, Shape(dims));
  ONYX_CHECK(static_cast<int64_t>(items.size()) == v.t.numel(), items.size(), " strings for shape ",
             v.t.shape().str());
  auto* p = v.t.data<std::string>();
  for (size_t i = 0; i < items.size(); ++i) p[i] = items[i];
  return v;
}

PyValue value_empty(const std::string& dtype, const std::vector<int64_t>& dims, const std::string& device) {
  Device d = resolve_device(device);
  PyValue v;
  DType dt = dtype_from_name(dtype);
  if (d.is_cpu()) {
    v.t = Tensor(dt, Shape(dims));
    if (v.t.bytes() && dt != DType::kString) std::memset(v.t.raw(), 0, v.t.bytes());
  } else {
    ONYX_CHECK(dt != DType::kString, "string tensors live on the host");
    v.t = Tensor(dt, Shape(dims), value_backend(d).allocator());
  }
  return v;
}

PyValue value_to_device(const PyValue& src, const std::string& device) {
  Device d = resolve_device(device);
  Tensor h = src.host();
  PyValue v;
  if (d.is_cpu()) {
    v.t = h.clone();
    return v;
  }
  ONYX_CHECK(h.dtype() != DType::kString, "string tensors live on the host");
  Backend& b = value_backend(d);
  v.t = Tensor(h.dtype(), h.shape(), b.allocator());
  if (h.bytes()) {
    b.copy_from_host(v.t.raw(), h.raw(), h.bytes());
    b.finish();
  }
  return v;
}

// ---- sessions ------------------------------------------------------------------------------

nb::dict describe(const ValueDesc& d) {
  nb::list dims;
  if (d.rank_known)
    for (size_t i = 0; i < d.dims.size(); ++i) {
      if (d.dims[i] >= 0) dims.append(d.dims[i]);
      else if (i < d.dim_params.size() && !d.dim_params[i].empty()) dims.append(d.dim_params[i]);
      else dims.append(nb::none());
    }
  nb::dict r;
  r["name"] = d.name;
  r["dtype"] = d.dtype == DType::kUndefined ? std::string() : std::string(dtype_name(d.dtype));
  r["dims"] = d.rank_known ? nb::object(dims) : nb::none();
  r["is_tensor"] = d.is_tensor;
  r["element_dtype"] = d.element_dtype == DType::kUndefined ? std::string() : std::string(dtype_name(d.element_dtype));
  r["has_default"] = d.has_default;
  return r;
}

// A run's stop switch: set from any thread, the runs given it stop at their next check.
struct PyRunControl {
  std::shared_ptr<std::atomic<bool>> flag = std::make_shared<std::atomic<bool>>(false);
};

class PySession {
 public:
  PySession(nb::object source, const nb::dict& options, const std::string& base_dir) {
    SessionOptions o = parse_options(options);
    if (nb::isinstance<nb::bytes>(source)) {
      nb::bytes b = nb::cast<nb::bytes>(source);
      std::string bytes(b.c_str(), b.size());
      nb::gil_scoped_release nogil;
      s_ = Session::load_from_bytes(bytes.data(), bytes.size(), o, base_dir);
    } else {
      std::string path = nb::cast<std::string>(source);
      nb::gil_scoped_release nogil;
      s_ = Session::load(path, o);
    }
  }

  std::shared_ptr<Session> get() const {
    std::lock_guard<std::mutex> lock(mu_);
    ONYX_CHECK(s_, "the session is closed");
    return s_;
  }
  void close() {
    std::shared_ptr<Session> s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s = std::move(s_);
    }
    nb::gil_scoped_release nogil;
    s.reset();  // a run in flight keeps it until it returns
  }
  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return !s_;
  }

  nb::list inputs() const {
    nb::list l;
    for (const auto& d : get()->inputs()) l.append(describe(d));
    return l;
  }
  nb::list outputs() const {
    nb::list l;
    for (const auto& d : get()->outputs()) l.append(describe(d));
    return l;
  }

  // feeds: (name, PyValue); output_names: which outputs to return, in that order (None: all);
  // device_outputs: outputs left on the session's device; bound: outputs written into
  // the caller's Values.
  std::vector<PyValue> run(const std::vector<std::pair<std::string, PyValue*>>& feeds,
                         std::optional<std::vector<std::string>> output_names,
                         const std::vector<std::string>& device_outputs,
                         const std::vector<std::pair<std::string, PyValue*>>& bound, double timeout_seconds,
                         const PyRunControl* control, bool profile) {
    std::shared_ptr<Session> s = get();
    NamedTensors in;
    for (const auto& [name, v] : feeds) {
      ONYX_CHECK(v, "input '", name, "': None is not a tensor");
      in.emplace_back(name, v->t);
    }
    const auto& outs = s->outputs();
    auto index_of = [&](const std::string& name) {
      for (size_t i = 0; i < outs.size(); ++i)
        if (outs[i].name == name) return i;
      std::string names;
      for (const auto& o : outs) names += (names.empty() ? "" : ", ") + o.name;
      throw Error(cat("output '", name, "': the model has no such output (its outputs: ", names, ")"));
    };
    std::vector<size_t> pick;
    if (output_names) for (const auto& n : *output_names) pick.push_back(index_of(n));
    else for (size_t i = 0; i < outs.size(); ++i) pick.push_back(i);
    RunOptions ro;
    ro.timeout_seconds = timeout_seconds;
    ro.profile = profile;
    if (control) ro.cancel = control->flag;
    for (const auto& n : device_outputs) {
      index_of(n);
      ro.output_places[n] = OutputPlace::kDevice;
    }
    for (const auto& [n, v] : bound) {
      index_of(n);
      ONYX_CHECK(v, "output '", n, "': None is not a tensor");
      ro.bound_outputs[n] = v->t;
    }
    NamedTensors result;
    {
      nb::gil_scoped_release nogil;
      result = s->run(in, ro);
    }
    std::vector<PyValue> r;
    for (size_t i : pick) {
      PyValue v;
      v.t = result[i].second;
      if (!v.t.on_host()) v.session = s;
      r.push_back(std::move(v));
    }
    return r;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Session> s_;
};

nb::dict capture_dict(const CaptureReport& c) {
  nb::dict d;
  d["captures"] = c.captures;
  d["recaptures"] = c.recaptures;
  d["replays"] = c.replays;
  d["eager_runs"] = c.eager_runs;
  d["graphs"] = c.graphs;
  d["capture_seconds"] = c.capture_seconds;
  d["shared_arena_bytes"] = c.shared_arena_bytes;
  d["retained_staging_bytes"] = c.retained_staging_bytes;
  return d;
}

// ---- genai ---------------------------------------------------------------------------------

struct PyTokenizer {
  // Either owns its tokenizer or borrows a model's (and keeps the model).
  std::shared_ptr<const genai::Tokenizer> tok;
  std::string dir;  // the folder it came from: its chat template and special tokens
};

nlohmann::ordered_json parse_json_arg(const char* what, const std::string& text) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(cat(what, " is not valid JSON: ", e.what()));
  }
}

struct PyTokenStream {
  std::shared_ptr<const genai::Tokenizer> tok;
  std::unique_ptr<genai::TokenStream> stream;
};

struct PyModel {
  std::shared_ptr<genai::TokenModel> lm;  // a LanguageModel or an EncoderDecoderModel
  std::weak_ptr<void> active;  // the generation in flight, if any
  std::mutex mu;
};

// A vision-language model's LanguageModel, or an error naming the folder.
genai::LanguageModel& vision_model(const std::shared_ptr<PyModel>& pm) {
  auto* lm = dynamic_cast<genai::LanguageModel*>(pm->lm.get());
  if (!lm || !lm->folder().has_vision)
    throw Error(cat("'", pm->lm->folder().dir, "' is not a vision-language model (its genai_config.json names no "
                    "vision and embedding models): it takes no images"));
  return *lm;
}

// Image i from Python: a file path (decoded), or RGB uint8 [height, width, 3].
RgbImage image_from_py(const nb::object& o, size_t i) {
  if (nb::isinstance<nb::str>(o)) {
    const std::string path = nb::cast<std::string>(o);
    nb::gil_scoped_release nogil;
    return genai::read_image(path);
  }
  nb::ndarray<const uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu> a;
  if (!nb::try_cast(o, a) || a.shape(2) != 3)
    throw Error(cat("image ", i, ": expected a file path or an RGB uint8 array [height, width, 3]"));
  RgbImage rgb;
  rgb.h = static_cast<int64_t>(a.shape(0));
  rgb.w = static_cast<int64_t>(a.shape(1));
  rgb.px.assign(a.data(), a.data() + a.size());
  return rgb;
}


class PyGenerator {
 public:
  explicit PyGenerator(std::shared_ptr<PyModel> m) : m_(std::move(m)), gen_(*m_->lm) {}

  void begin(const std::vector<std::vector<int64_t>>& prompts, const nb::dict& search, bool text) {
    genai::SearchOptions s = parse_search(search);
    {
      std::lock_guard<std::mutex> lock(m_->mu);
      auto other = m_->active.lock();
      ONYX_CHECK(!other || other == token_,
                 "another Generator of this model is generating: a model runs one generation at a time "
                 "(finish or delete that Generator first)");
      if (!token_) token_ = std::make_shared<int>(0);
      m_->active = token_;
    }
    nb::gil_scoped_release nogil;
    gen_.begin(prompts, s, text);
    release_if_done();
  }
  std::vector<int64_t> next(nb::object on_text) {
    ONYX_CHECK(token_, "the generation has not begun");
    std::vector<int64_t> taken;
    std::vector<std::pair<size_t, std::string>> pieces;
    {
      nb::gil_scoped_release nogil;
      taken = gen_.next([&](size_t s, const std::string& t) { pieces.emplace_back(s, t); });
      release_if_done();
    }
    if (!on_text.is_none())
      for (auto& [s, t] : pieces) on_text(s, nb::bytes(t.data(), t.size()));
    return taken;
  }
  void stop() {
    gen_.stop();
    release_if_done();
  }
  bool done() const { return gen_.done(); }
  nb::list results() const {
    nb::list l;
    for (const auto& r : gen_.results()) {
      nb::dict d;
      d["prompt_ids"] = r.prompt_ids;
      d["generated_ids"] = r.generated_ids;
      d["text"] = nb::bytes(r.text.data(), r.text.size());
      d["stop_reason"] = r.stop_reason;
      if (!r.logits.empty()) {
        const size_t n = r.generated_ids.size(), V = n ? r.logits.size() / n : 0;
        auto* copy = new std::vector<float>(r.logits);
        nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
        d["logits"] = nb::ndarray<nb::numpy, float, nb::ndim<2>>(copy->data(), {n, V}, owner);
      }
      l.append(d);
    }
    return l;
  }
  nb::dict stats() const {
    const auto& s = gen_.stats();
    nb::dict d;
    d["sequences"] = s.sequences;
    d["prompt_tokens"] = s.prompt_tokens;
    d["generated_tokens"] = s.generated_tokens;
    d["decode_steps"] = s.decode_steps;
    d["prefill_seconds"] = s.prefill_seconds;
    d["decode_seconds"] = s.decode_seconds;
    d["kv_cache_bytes"] = s.kv_cache_bytes;
    d["kv_cache_grows"] = s.kv_cache_grows;
    d["capture"] = capture_dict(s.capture);
    return d;
  }

 private:
  void release_if_done() {
    if (gen_.done()) {
      std::lock_guard<std::mutex> lock(m_->mu);
      token_.reset();
    }
  }
  std::shared_ptr<PyModel> m_;
  genai::Generator gen_;
  std::shared_ptr<void> token_;
};

}  // namespace

}  // namespace onyx::py

using namespace onyx;
using namespace onyx::py;

NB_MODULE(_onyx, m) {
  m.doc() = "onyx's native core; use the onyx and onyx.genai modules";

  // onyx::Error becomes onyx.Error (defined in python/onyx/_errors.py) with the whole chain.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      nb::object cls = nb::module_::import_("onyx._errors").attr("Error");
      nb::object err = cls(std::string(e.what()), e.chain());
      PyErr_SetObject(cls.ptr(), err.ptr());
    }
  });

  m.def("cuda_built", [] {
#ifdef ONYX_PY_CUDA
    return true;
#else
    return false;
#endif
  });
  m.def("devices", [] {
    std::vector<std::string> d{"cpu"};
    for (int i = 0; i < 64; ++i) {
      try {
        resolve_device(cat("cuda:", i));
        d.push_back(cat("cuda:", i));
      } catch (const Error&) {
        break;
      }
    }
    return d;
  }, "The devices this build can run on: cpu, then cuda:N for each GPU present.");
  m.def("resolve_device", [](const std::string& s) { return resolve_device(s).str(); });
  m.def("dtype_size", [](const std::string& d) { return dtype_size(dtype_from_name(d)); });

  nb::class_<PyValue>(m, "Value")
      .def_static("from_array", &value_from_array, "array"_a, "as_dtype"_a = "")
      .def_static("from_strings", &value_from_strings, "items"_a, "shape"_a)
      .def_static("from_pointer", &value_from_pointer, "ptr"_a, "dtype"_a, "shape"_a, "device"_a)
      .def_static("empty", &value_empty, "dtype"_a, "shape"_a, "device"_a = "cpu")
      .def_static("to_device", &value_to_device, "value"_a, "device"_a)
      .def_prop_ro("dtype", [](const PyValue& v) { return std::string(dtype_name(v.t.dtype())); })
      .def_prop_ro("shape", &PyValue::shape)
      .def_prop_ro("device", &PyValue::device)
      .def_prop_ro("nbytes", [](const PyValue& v) { return v.t.bytes(); })
      .def_prop_ro("data_ptr", [](const PyValue& v) { return reinterpret_cast<uintptr_t>(v.t.raw()); })
      .def("numpy_view", [](const PyValue& v) {
        Tensor h;
        {
          nb::gil_scoped_release nogil;
          h = v.host();
        }
        return host_view(h, true);
      }, "A numpy array over the host copy (the tensor itself on the host); bfloat16 as uint16.")
      .def("dlpack_view", &dlpack_view, "A DLPack producer over the tensor, on its device.")
      .def("strings", [](const PyValue& v) {
        ONYX_CHECK(v.t.dtype() == DType::kString, "not a string tensor");
        auto sp = v.t.span<std::string>();
        return std::vector<std::string>(sp.begin(), sp.end());
      })
      // Sequences and optionals (tensors of element tensors): their elements, and making them.
      .def("elements", [](const PyValue& v) {
        const Tensor* e = v.t.elements();
        std::vector<PyValue> out;
        for (int64_t i = 0; i < v.t.numel(); ++i) out.push_back(PyValue{e[i], v.session});
        return out;
      }, "A sequence's element values (an optional's: none or one).")
      .def_prop_ro("element_dtype", [](const PyValue& v) { return std::string(dtype_name(v.t.element_dtype())); })
      .def_static("sequence", [](const std::vector<PyValue>& items, const std::string& dtype) {
        std::vector<Tensor> parts;
        for (const auto& i : items) parts.push_back(i.t.on_host() ? i.t.clone() : i.host());
        return PyValue{Tensor::sequence(parts, dtype.empty() ? DType::kUndefined : dtype_from_name(dtype)), nullptr};
      }, "items"_a, "dtype"_a = "")
      .def_static("map", [](const PyValue& keys, const PyValue& values) {
        return PyValue{Tensor::map(keys.host().clone(), values.host().clone()), nullptr};
      }, "keys"_a, "values"_a)
      .def_static("optional", [](const PyValue* item) {
        return PyValue{Tensor::optional(item ? (item->t.on_host() ? item->t.clone() : item->host()) : Tensor()), nullptr};
      }, "item"_a.none());

  nb::class_<PyRunControl>(m, "RunControl")
      .def(nb::init<>())
      .def("set", [](PyRunControl& c, bool v) { c.flag->store(v); })
      .def_prop_ro("is_set", [](const PyRunControl& c) { return c.flag->load(); });

  nb::class_<PySession>(m, "Session")
      .def(nb::init<nb::object, const nb::dict&, const std::string&>(), "source"_a, "options"_a, "base_dir"_a = ".")
      .def("inputs", &PySession::inputs)
      .def("outputs", &PySession::outputs)
      .def("run", &PySession::run, "feeds"_a, "output_names"_a.none(), "device_outputs"_a, "bound"_a,
           "timeout_seconds"_a = 0.0, "control"_a.none() = nb::none(), "profile"_a = false)
      .def("close", &PySession::close)
      .def_prop_ro("closed", &PySession::closed)
      .def("device", [](const PySession& s) { return s.get()->device(); })
      .def("summary", [](const PySession& s) {
        ModelSummary m = s.get()->summary();
        nb::dict d;
        d["producer_name"] = m.producer;
        d["producer_version"] = m.producer_version;
        d["domain"] = m.domain;
        d["description"] = m.doc_string;
        d["graph_name"] = m.graph_name;
        d["graph_description"] = m.graph_doc_string;
        d["version"] = m.model_version;
        d["custom_metadata_map"] = m.metadata;
        d["ir_version"] = m.ir_version;
        d["opsets"] = m.opsets;
        return d;
      })
      .def("capture_report", [](const PySession& s) { return capture_dict(s.get()->capture_report()); })
      .def("memory_report", [](const PySession& s) { return s.get()->memory_report(); })
      .def("cpu_fallbacks", [](const PySession& s) { return s.get()->cpu_fallbacks(); })
      .def("last_run_stats", [](const PySession& s) {
        RunStats r = s.get()->last_run_stats();
        nb::dict d;
        d["peak_bytes"] = r.peak_bytes;
        d["allocations"] = r.allocations;
        d["seconds"] = r.seconds;
        nb::list nodes;
        for (const NodeTime& n : r.nodes) {
          nb::dict e;
          e["node"] = n.node;
          e["op"] = n.op;
          e["seconds"] = n.seconds;
          nodes.append(e);
        }
        d["nodes"] = nodes;
        return d;
      })
      .def("release_captured_graphs", [](const PySession& s) { s.get()->release_captured_graphs(); });

  nb::class_<PyTokenizer>(m, "Tokenizer")
      .def_static("from_file", [](const std::string& path) {
        PyTokenizer t;
        nb::gil_scoped_release nogil;
        t.tok = std::make_shared<genai::Tokenizer>(genai::Tokenizer::from_file(path));
        std::filesystem::path p(path);
        t.dir = (std::filesystem::is_directory(p) ? p : p.parent_path()).string();
        return t;
      })
      // As onnxruntime-genai's: messages (and tools) as JSON text; the folder's template
      // unless template_str is given.
      .def("apply_chat_template", [](const PyTokenizer& t, const std::string& messages,
                                     const std::optional<std::string>& template_str,
                                     const std::optional<std::string>& tools, bool add_generation_prompt) {
        nlohmann::ordered_json msgs = parse_json_arg("messages", messages);
        nlohmann::ordered_json extra = nlohmann::ordered_json::object();
        if (tools) extra["tools"] = parse_json_arg("tools", *tools);
        nb::gil_scoped_release nogil;
        genai::ChatTemplate tmpl = template_str ? genai::ChatTemplate(*template_str, genai::read_special_tokens(t.dir))
                                               : genai::ChatTemplate::from_folder(t.dir);
        return genai::apply_chat_template(tmpl, msgs, add_generation_prompt, extra);
      }, "messages"_a, "template_str"_a = nb::none(), "tools"_a = nb::none(), "add_generation_prompt"_a = true)
      .def("encode", [](const PyTokenizer& t, const std::string& text, bool special) {
        return t.tok->encode(text, special);
      }, "text"_a, "add_special_tokens"_a = true)
      .def("decode", [](const PyTokenizer& t, const std::vector<int32_t>& ids, bool skip) {
        std::string s = t.tok->decode(ids, skip);
        return nb::bytes(s.data(), s.size());
      }, "ids"_a, "skip_special_tokens"_a = true)
      .def("stream", [](const PyTokenizer& t, bool skip) {
        auto s = std::make_unique<PyTokenStream>();
        s->tok = t.tok;
        s->stream = std::make_unique<genai::TokenStream>(*t.tok, skip);
        return s.release();
      }, "skip_special_tokens"_a = true, nb::rv_policy::take_ownership)
      .def("token_to_id", [](const PyTokenizer& t, const std::string& s) { return t.tok->token_to_id(s); })
      .def("id_to_token", [](const PyTokenizer& t, int32_t id) { return t.tok->id_to_token(id); })
      .def_prop_ro("vocab_size", [](const PyTokenizer& t) { return t.tok->vocab_size(); })
      .def_prop_ro("bos_id", [](const PyTokenizer& t) { return t.tok->bos_id(); })
      .def_prop_ro("eos_id", [](const PyTokenizer& t) { return t.tok->eos_id(); })
      .def_prop_ro("pad_id", [](const PyTokenizer& t) { return t.tok->pad_id(); });

  // A parsed chat template; render() takes the variables as JSON text (key order kept).
  nb::class_<genai::ChatTemplate>(m, "ChatTemplate")
      .def("__init__", [](genai::ChatTemplate* self, const std::string& source) {
        new (self) genai::ChatTemplate(source);
      }, "source"_a)
      .def("render", [](const genai::ChatTemplate& t, const std::string& variables) {
        nlohmann::ordered_json vars = parse_json_arg("the template variables", variables);
        nb::gil_scoped_release nogil;
        return t.render(vars);
      }, "variables_json"_a)
      .def_prop_ro("source", &genai::ChatTemplate::source);

  nb::class_<PyTokenStream>(m, "TokenStream")
      .def("step", [](PyTokenStream& s, int32_t id) {
        std::string t = s.stream->step(id);
        return nb::bytes(t.data(), t.size());
      })
      .def("finish", [](PyTokenStream& s) {
        std::string t = s.stream->finish();
        return nb::bytes(t.data(), t.size());
      })
      .def("reset", [](PyTokenStream& s) { s.stream->reset(); });

  nb::class_<PyModel>(m, "LanguageModel")
      .def_static("load", [](const std::string& dir, const nb::dict& options) {
        SessionOptions o = parse_options(options);
        auto pm = std::make_shared<PyModel>();
        nb::gil_scoped_release nogil;
        pm->lm = genai::load_token_model(dir, o);
        return pm;
      }, "dir"_a, "options"_a)
      .def("tokenizer", [](const std::shared_ptr<PyModel>& pm) {
        const genai::Tokenizer* tok;
        {
          nb::gil_scoped_release nogil;
          tok = &pm->lm->tokenizer();
        }
        PyTokenizer t;
        t.tok = std::shared_ptr<const genai::Tokenizer>(pm, tok);  // keeps the model
        t.dir = pm->lm->folder().dir;
        return t;
      })
      .def("folder", [](const std::shared_ptr<PyModel>& pm) {
        const genai::ModelFolder& f = pm->lm->folder();
        nb::dict d;
        d["dir"] = f.dir;
        d["decoder_path"] = f.decoder_path;
        d["source"] = f.source;
        d["vocab_size"] = f.vocab_size;
        d["context_length"] = f.context_length;
        d["eos_ids"] = f.eos_ids;
        d["bos_id"] = f.bos_id;
        d["pad_id"] = f.pad_id;
        d["layers"] = f.layers.size();
        d["kv_heads"] = f.kv_heads;
        d["head_size"] = f.head_size;
        auto* p = dynamic_cast<genai::EncoderDecoderModel*>(pm->lm.get());
        d["decoder_start_id"] = p ? p->pipeline().decoder_start_id : -1;
        nb::dict s;
        s["do_sample"] = f.search.do_sample;
        s["temperature"] = f.search.temperature;
        s["top_k"] = f.search.top_k;
        s["top_p"] = f.search.top_p;
        s["min_p"] = f.search.min_p;
        s["repetition_penalty"] = f.search.repetition_penalty;
        s["max_length"] = f.search.max_length;
        d["search"] = s;
        return d;
      })
      .def("device", [](const std::shared_ptr<PyModel>& pm) { return pm->lm->device().str(); })
      .def("cache_mode", [](const std::shared_ptr<PyModel>& pm) {
        return std::string(genai::cache_mode_name(pm->lm->cache_mode()));
      })
      .def("capture_report", [](const std::shared_ptr<PyModel>& pm) { return capture_dict(pm->lm->capture_report()); })
      .def("rotary_attention_nodes", [](const std::shared_ptr<PyModel>& pm) {
        // The decode step's onyx::RotaryCacheAttention nodes (0 for a pipeline).
        auto* m = dynamic_cast<genai::LanguageModel*>(pm->lm.get());
        return m ? m->rotary_attention_nodes() : 0;
      })
      .def("position_tables", [](const std::shared_ptr<PyModel>& pm) {
        // The tables made at load of what the decoder computes from each position alone
        // (passes/position_tables.h): how many, the nodes they replaced, their bytes, and where
        // none were made, why (empty for a pipeline).
        nb::dict d;
        auto* m = dynamic_cast<genai::LanguageModel*>(pm->lm.get());
        const PositionTableReport r = m ? m->position_tables() : PositionTableReport{};
        d["tables"] = r.tables;
        d["nodes"] = r.nodes;
        d["bytes"] = r.bytes;
        d["why_not"] = r.why_not;
        return d;
      })
      .def("step_kernels", [](const std::shared_ptr<PyModel>& pm) {
        // What the latest decode step ran, by op (LanguageModel::step_kernels; empty for a pipeline).
        auto* m = dynamic_cast<genai::LanguageModel*>(pm->lm.get());
        return m ? m->step_kernels() : std::map<std::string, int>{};
      })
      .def("memory_report", [](const std::shared_ptr<PyModel>& pm) { return pm->lm->memory_report(); })
      .def("components", [](const std::shared_ptr<PyModel>& pm) {
        // A pipeline's components and their memory; a decoder-only model has none listed.
        nb::list l;
        if (auto* p = dynamic_cast<genai::EncoderDecoderModel*>(pm->lm.get()))
          for (const auto& c : p->component_use()) {
            nb::dict d;
            d["name"] = c.name;
            d["weight_bytes"] = c.weight_bytes;
            d["arena_bytes"] = c.arena_bytes;
            d["arena_lower_bound"] = c.arena_lower_bound;
            d["arena_no_reuse"] = c.arena_no_reuse;
            d["kv_bytes"] = c.kv_bytes;
            l.append(d);
          }
        return l;
      })
      .def("encoder_decoder", [](const std::shared_ptr<PyModel>& pm) {
        return dynamic_cast<genai::EncoderDecoderModel*>(pm->lm.get()) != nullptr;
      })
      .def("speech", [](const std::shared_ptr<PyModel>& pm) {
        auto* p = dynamic_cast<genai::EncoderDecoderModel*>(pm->lm.get());
        return p != nullptr && p->pipeline().audio;
      })
      .def("speech_prompts", [](const std::shared_ptr<PyModel>& pm, const std::vector<nb::object>& audio,
                                const std::string& language, const std::string& task) {
        // Each item a file path or 1-D float32 samples at the model's rate: its features set for
        // the next begin(), and its decoder prompt (the language detected where none is given).
        auto* p = dynamic_cast<genai::EncoderDecoderModel*>(pm->lm.get());
        if (!p || !p->pipeline().audio)
          throw Error(cat("'", pm->lm->folder().dir, "' is not a speech model (its encoder reads no input_features)"));
        const genai::EncoderDecoderFolder& f = p->pipeline();
        std::vector<std::vector<float>> samples;
        std::vector<std::string> paths;
        for (size_t i = 0; i < audio.size(); ++i) {
          if (nb::isinstance<nb::str>(audio[i])) {
            paths.push_back(nb::cast<std::string>(audio[i]));
            samples.emplace_back();
            continue;
          }
          nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> a;
          if (!nb::try_cast(audio[i], a))
            throw Error(cat("audio ", i, ": expected a file path or 1-D float32 samples at ",
                            f.audio_features.sampling_rate, " Hz"));
          paths.emplace_back();
          samples.emplace_back(a.data(), a.data() + a.shape(0));
        }
        std::vector<std::vector<int64_t>> prompts;
        std::vector<std::string> detected_names;
        {
          nb::gil_scoped_release nogil;
          std::vector<Tensor> features;
          for (size_t i = 0; i < audio.size(); ++i)
            features.push_back(with_context(cat("audio ", i), [&] {
              return genai::log_mel_spectrogram(
                  paths[i].empty() ? samples[i] : genai::read_audio(paths[i], f.audio_features.sampling_rate),
                  f.audio_features);
            }));
          p->set_audio(std::move(features));
          std::vector<int64_t> detected(audio.size(), -1);
          if (genai::speech_needs_language(f, language)) detected = p->detect_languages();
          for (size_t i = 0; i < audio.size(); ++i) {
            prompts.push_back(genai::speech_prompt(f, language, task, detected[i]));
            std::string name;
            for (const auto& [n, id] : f.lang_to_id)
              if (id == detected[i]) name = n;
            detected_names.push_back(name);
          }
        }
        return nb::make_tuple(prompts, detected_names);
      }, "audio"_a, "language"_a, "task"_a)
      .def("vision", [](const std::shared_ptr<PyModel>& pm) { return pm->lm->folder().has_vision; })
      .def("image_pixels", [](const std::shared_ptr<PyModel>& pm, const nb::object& image) {
        // A file path or an RGB uint8 [height, width, 3] array, preprocessed as the folder says.
        genai::LanguageModel& lm = vision_model(pm);
        RgbImage rgb = image_from_py(image, 0);
        Tensor t;
        {
          nb::gil_scoped_release nogil;
          t = genai::preprocess_image(rgb, lm.image_processor());
        }
        return host_view(t, true);
      }, "image"_a)
      .def("image_prompt", [](const std::shared_ptr<PyModel>& pm, const std::vector<int64_t>& ids,
                              const std::vector<nb::object>& images) {
        // The images encoded and set for the next begin(); the prompt's image tokens expanded.
        genai::LanguageModel& lm = vision_model(pm);
        std::vector<RgbImage> rgb;
        for (size_t i = 0; i < images.size(); ++i) rgb.push_back(image_from_py(images[i], i));
        nb::gil_scoped_release nogil;
        std::vector<Tensor> pixels;
        for (size_t i = 0; i < rgb.size(); ++i)
          pixels.push_back(with_context(cat("image ", i), [&] { return genai::preprocess_image(rgb[i], lm.image_processor()); }));
        std::vector<Tensor> features = pixels.empty() ? std::vector<Tensor>{} : lm.encode_images(pixels);
        std::vector<int64_t> rows;
        for (const Tensor& t : features) rows.push_back(t.shape()[0]);
        std::vector<int64_t> expanded = genai::expand_image_tokens(ids, lm.folder().vision.image_token_id, rows);
        lm.set_image_features({std::move(features)});
        return expanded;
      }, "ids"_a, "images"_a);

  nb::class_<PyGenerator>(m, "Generator")
      .def(nb::init<std::shared_ptr<PyModel>>())
      .def("begin", &PyGenerator::begin, "prompts"_a, "search"_a, "text"_a = false)
      .def("next", &PyGenerator::next, "on_text"_a = nb::none())
      .def("stop", &PyGenerator::stop)
      .def_prop_ro("done", &PyGenerator::done)
      .def("results", &PyGenerator::results)
      .def("stats", &PyGenerator::stats);
}
