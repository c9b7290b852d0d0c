// Sequence and optional values (onyx/dtype.h: tensors whose elements are tensors):
// SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase, SequenceLength,
// SplitToSequence, ConcatFromSequence, SequenceMap, Optional, OptionalHasElement,
// OptionalGetElement.
//
// A tensor entering a sequence is copied: it may live in a plan arena whose bytes a later node
// reuses, while the sequence outlives that node. Elements are never written after, so
// sequences made from other sequences share their elements.
#include <cstring>

#include "ops/common.h"
#include "ops/tensor_util.h"

namespace onyx {

namespace {

// The sequence input i: its tensor, known only when the op runs.
const Tensor& sequence_input(const KernelContext& ctx, size_t i) {
  const Tensor& t = ctx.input(i);
  ONYX_CHECK(t.dtype() == DType::kSequence, "input ", i, " must be a sequence, got ", t.type_str());
  return t;
}

std::vector<Tensor> elements_of(const Tensor& seq) {
  const Tensor* e = seq.elements();
  return std::vector<Tensor>(e, e + seq.numel());
}

// A sequence output's elements decide its length and element type, so inference leaves it
// unknown (the node runs in a dynamic region) and the kernel hands the sequence over.
void infer_object(InferContext& ctx, DType dtype) {
  for (size_t o = 0; o < ctx.num_outputs(); ++o)
    if (ctx.has_output(o)) ctx.set_output(o, dtype, PartialShape());
}

// An element of a sequence read by index, which may count from the end: [-n, n) or, for an
// insertion point, [-n, n].
int64_t sequence_position(const KernelContext& ctx, size_t input, int64_t n, bool insertion) {
  const Tensor& p = ctx.input(input);
  ONYX_CHECK(p.numel() == 1 && (p.dtype() == DType::kInt64 || p.dtype() == DType::kInt32),
             "position must be an int32 or int64 scalar, got ", p.type_str());
  const int64_t pos = p.get_as_int64(0);
  const int64_t hi = insertion ? n : n - 1;
  ONYX_CHECK(pos >= -n && pos <= hi, "position ", pos, " is out of range for a sequence of ", n, " elements (",
             -n, " to ", hi, ")");
  return pos < 0 ? pos + n : pos;
}

void check_element(const Tensor& seq, const Tensor& t, std::string_view what) {
  ONYX_CHECK(seq.element_dtype() == DType::kUndefined || seq.element_dtype() == t.dtype(), what, " is ",
             t.type_str(), ", but the sequence holds ", dtype_name(seq.element_dtype()));
}

void sequence_empty(KernelContext& ctx) {
  ctx.set_output(0, Tensor::sequence({}, dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("dtype", 1)))));
}

void sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> parts;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    ONYX_CHECK(!dtype_is_object(t.dtype()) || t.dtype() == DType::kString, "input ", i, " must be a tensor, got ",
               t.type_str());
    ONYX_CHECK(parts.empty() || t.dtype() == parts[0].dtype(), "input ", i, " is ", t.type_str(), ", but input 0 is ",
               parts[0].type_str(), " (a sequence holds one element type)");
    parts.push_back(t.clone(ctx.allocator()));
  }
  ctx.set_output(0, Tensor::sequence(parts));
}

void sequence_insert(KernelContext& ctx) {
  const Tensor& seq = sequence_input(ctx, 0);
  const Tensor& t = ctx.input(1);
  check_element(seq, t, "the inserted tensor");
  std::vector<Tensor> parts = elements_of(seq);
  const int64_t n = static_cast<int64_t>(parts.size());
  const int64_t at = ctx.has_input(2) ? sequence_position(ctx, 2, n, true) : n;
  parts.insert(parts.begin() + at, t.clone(ctx.allocator()));
  ctx.set_output(0, Tensor::sequence(parts, t.dtype()));
}

void sequence_at(KernelContext& ctx) {
  const Tensor& seq = sequence_input(ctx, 0);
  const int64_t at = sequence_position(ctx, 1, seq.numel(), false);
  ctx.set_output(0, seq.elements()[at]);
}

void sequence_erase(KernelContext& ctx) {
  const Tensor& seq = sequence_input(ctx, 0);
  std::vector<Tensor> parts = elements_of(seq);
  const int64_t n = static_cast<int64_t>(parts.size());
  ONYX_CHECK(n > 0, "cannot erase from an empty sequence");
  const int64_t at = ctx.has_input(1) ? sequence_position(ctx, 1, n, false) : n - 1;
  parts.erase(parts.begin() + at);
  ctx.set_output(0, Tensor::sequence(parts, seq.element_dtype()));
}

void sequence_length(KernelContext& ctx) {
  ctx.output(0).data<int64_t>()[0] = sequence_input(ctx, 0).numel();
}

// Part k of x along `axis`: `size` slices from `start`, keeping the axis.
Tensor slice_axis(const Tensor& x, int64_t axis, int64_t start, int64_t size, Allocator& alloc) {
  std::vector<int64_t> dims = x.shape().dims();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= dims[i];
  for (size_t i = axis + 1; i < dims.size(); ++i) inner *= dims[i];
  const int64_t n = dims[axis];
  dims[axis] = size;
  Tensor out(x.dtype(), Shape(dims), alloc);
  for (int64_t o = 0; o < outer; ++o) copy_elements(x, (o * n + start) * inner, out, o * size * inner, size * inner);
  return out;
}

void split_to_sequence(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  ONYX_CHECK(rank >= 1, "input must have rank >= 1, got a scalar");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), rank);
  const int64_t n = x.shape()[axis];
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (!ctx.has_input(1)) {
    sizes.assign(static_cast<size_t>(n), 1);
    squeeze = ctx.attr_int("keepdims", 1) == 0;
  } else {
    const Tensor& split = ctx.input(1);
    ONYX_CHECK(split.dtype() == DType::kInt64 || split.dtype() == DType::kInt32, "split must be int32 or int64, got ",
               split.type_str());
    ONYX_CHECK(split.rank() <= 1, "split must be a scalar or 1-D, got ", split.type_str());
    if (split.rank() == 0) {
      const int64_t size = split.get_as_int64(0);
      ONYX_CHECK(size > 0, "a scalar split must be positive, got ", size);
      for (int64_t at = 0; at < n; at += size) sizes.push_back(std::min(size, n - at));
    } else {
      sizes = split.to_int64_vector();
      int64_t sum = 0;
      for (int64_t s : sizes) {
        ONYX_CHECK(s >= 0, "split sizes must not be negative, got ", s);
        sum = checked_add(sum, s, "the split sizes");
      }
      ONYX_CHECK(sum == n, "split sizes add up to ", sum, ", but axis ", axis, " of ", x.type_str(), " has ", n);
    }
  }
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t size : sizes) {
    Tensor part = slice_axis(x, axis, start, size, ctx.allocator());
    start += size;
    if (squeeze) {
      std::vector<int64_t> dims = part.shape().dims();
      dims.erase(dims.begin() + axis);
      part = part.view(Shape(dims));
    }
    parts.push_back(part);
  }
  ctx.set_output(0, Tensor::sequence(parts, x.dtype()));
}

void concat_from_sequence(KernelContext& ctx) {
  const Tensor& seq = sequence_input(ctx, 0);
  const int64_t count = seq.numel();
  ONYX_CHECK(count > 0, "cannot concatenate an empty sequence");
  const Tensor* parts = seq.elements();
  const bool new_axis = ctx.attr_int("new_axis", 0) != 0;
  const Shape& first = parts[0].shape();
  const int64_t rank = static_cast<int64_t>(first.rank()) + (new_axis ? 1 : 0);
  ONYX_CHECK(rank >= 1, "cannot concatenate scalars without new_axis");
  const int64_t axis = normalize_axis(ctx.attr_int("axis"), rank);
  std::vector<int64_t> dims = first.dims();
  if (new_axis) dims.insert(dims.begin() + axis, 1);
  int64_t total = 0;
  for (int64_t k = 0; k < count; ++k) {
    const Tensor& p = parts[k];
    ONYX_CHECK(p.dtype() == parts[0].dtype() && p.rank() == first.rank(), "element ", k, " is ", p.type_str(),
               ", element 0 ", parts[0].type_str());
    for (size_t d = 0, e = 0; d < static_cast<size_t>(rank); ++d) {
      if (new_axis && static_cast<int64_t>(d) == axis) continue;
      ONYX_CHECK(static_cast<int64_t>(d) == axis || p.shape()[e] == dims[d], "element ", k, " is ", p.type_str(),
                 ", element 0 ", parts[0].type_str(), ": they differ off axis ", axis);
      ++e;
    }
    total = checked_add(total, new_axis ? 1 : p.shape()[axis], "the concatenated axis");
  }
  dims[axis] = total;
  Tensor& out = ctx.allocate_output(0, parts[0].dtype(), Shape(dims));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= dims[i];
  for (size_t i = axis + 1; i < dims.size(); ++i) inner *= dims[i];
  int64_t at = 0;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t len = new_axis ? 1 : parts[k].shape()[axis];
    for (int64_t o = 0; o < outer; ++o)
      copy_elements(parts[k], o * len * inner, out, (o * total + at) * inner, len * inner);
    at += len;
  }
}

// SequenceMap: the body runs once per element of the first input sequence; each input that
// is a sequence gives the body its element at that index, each tensor is given whole.
void sequence_map(KernelContext& ctx) {
  const Graph* body = ctx.attr_graph("body");
  ONYX_CHECK(body, "missing attribute 'body'");
  const Tensor& first = sequence_input(ctx, 0);
  const int64_t n = first.numel();
  ONYX_CHECK(body->inputs.size() == ctx.num_inputs(), "the body takes ", body->inputs.size(), " inputs, the node has ",
             ctx.num_inputs());
  ONYX_CHECK(body->outputs.size() == ctx.num_outputs(), "the body returns ", body->outputs.size(),
             " values, the node has ", ctx.num_outputs(), " outputs");
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.input(i).dtype() == DType::kSequence)
      ONYX_CHECK(ctx.input(i).numel() == n, "input sequence ", i, " has ", ctx.input(i).numel(),
                 " elements, the first ", n);
  std::vector<std::vector<Tensor>> outs(ctx.num_outputs());
  for (int64_t k = 0; k < n; ++k) {
    std::vector<Tensor> in;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.input(i);
      in.push_back(t.dtype() == DType::kSequence ? t.elements()[k] : t);
    }
    std::vector<Tensor> out = with_context(cat("body, element ", k), [&] { return ctx.run_subgraph(*body, in); });
    ONYX_CHECK(out.size() == outs.size(), "the body returned ", out.size(), " values for element ", k);
    for (size_t o = 0; o < out.size(); ++o) {
      ONYX_CHECK(out[o].defined() && !dtype_is_object(out[o].dtype()), "the body's output ", o, " for element ", k,
                 " is not a tensor");
      outs[o].push_back(out[o].clone(ctx.allocator()));
    }
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    const DType declared = body->values[body->outputs[o]].declared.dtype;
    ctx.set_output(o, Tensor::sequence(outs[o], outs[o].empty() ? declared : DType::kUndefined));
  }
}

// ---- optionals ----

void optional_make(KernelContext& ctx) {
  if (ctx.has_input(0)) {
    const Tensor& t = ctx.input(0);
    ctx.set_output(0, Tensor::optional(t.dtype() == DType::kSequence ? t : t.clone(ctx.allocator())));
    return;
  }
  const Attribute* type = ctx.node().find_attribute("type");
  ONYX_CHECK(type && type->kind == Attribute::Kind::kType, "Optional without an input needs its 'type' attribute");
  ctx.set_output(0, Tensor::optional(Tensor(), type->type.dtype));
}

// Whether input 0 holds a value: an optional with an element, or any tensor or sequence;
// an omitted input holds none.
bool has_element(const KernelContext& ctx) {
  if (!ctx.has_input(0)) return false;
  const Tensor& t = ctx.input(0);
  return t.dtype() != DType::kOptional || t.numel() > 0;
}

void optional_has_element(KernelContext& ctx) { ctx.output(0).data<bool>()[0] = has_element(ctx); }

void optional_get_element(KernelContext& ctx) {
  const Tensor& t = ctx.input(0);
  if (t.dtype() != DType::kOptional) {
    ctx.set_output(0, t);
    return;
  }
  ONYX_CHECK(t.numel() > 0, "the optional input holds no value");
  ctx.set_output(0, t.elements()[0]);
}

}  // namespace

void register_sequence_ops(OpRegistry& r) {
  auto to_sequence = [](InferContext& ctx) { infer_object(ctx, DType::kSequence); };
  auto to_tensor = [](InferContext& ctx) { infer_object(ctx, DType::kUndefined); };
  r.add(onnx_op("SequenceEmpty", 11, to_sequence, sequence_empty));
  r.add(onnx_op("SequenceConstruct", 11, to_sequence, sequence_construct));
  r.add(onnx_op("SequenceInsert", 11, to_sequence, sequence_insert));
  r.add(onnx_op("SequenceAt", 11, to_tensor, sequence_at));
  r.add(onnx_op("SequenceErase", 11, to_sequence, sequence_erase));
  r.add(onnx_op("SequenceLength", 11, [](InferContext& ctx) { ctx.set_output(0, DType::kInt64, Shape{}); },
                sequence_length));
  r.add(onnx_op("SplitToSequence", 11, to_sequence, split_to_sequence));
  r.add(onnx_op("ConcatFromSequence", 11, to_tensor, concat_from_sequence));
  r.add(onnx_op("SequenceMap", 17, to_sequence, sequence_map));
  r.add(onnx_op("Optional", 15, [](InferContext& ctx) { infer_object(ctx, DType::kOptional); }, optional_make));
  for (int since : {15, 18}) {
    r.add(onnx_op("OptionalHasElement", since, [](InferContext& ctx) { ctx.set_output(0, DType::kBool, Shape{}); },
                  optional_has_element));
    r.add(onnx_op("OptionalGetElement", since, to_tensor, optional_get_element));
  }
}

}  // namespace onyx
