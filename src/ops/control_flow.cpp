// Ops with subgraphs: If, Loop, Scan. Their bodies run through the executor
// (KernelContext::run_subgraph), so releasing and error context work the same inside.
#include <cstring>

#include "ops/common.h"

namespace onyx {

namespace {

// Copies `count` elements; strings are objects, everything else plain bytes.
void copy_elements(const Tensor& dst, int64_t dst_off, const Tensor& src, int64_t src_off, int64_t count) {
  if (count <= 0) return;
  if (src.dtype() == DType::kString) {
    const std::string* s = static_cast<const std::string*>(src.raw()) + src_off;
    std::string* d = static_cast<std::string*>(dst.raw()) + dst_off;
    for (int64_t i = 0; i < count; ++i) d[i] = s[i];
    return;
  }
  size_t es = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + dst_off * es, static_cast<const char*>(src.raw()) + src_off * es,
              static_cast<size_t>(count) * es);
}

// Slice `index` of `t` along `axis`, with that axis removed.
Tensor take_along(const Tensor& t, int64_t axis, int64_t index, Allocator& alloc) {
  std::vector<int64_t> dims = t.shape().dims();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= dims[i];
  for (size_t i = axis + 1; i < dims.size(); ++i) inner *= dims[i];
  int64_t n = dims[axis];
  dims.erase(dims.begin() + axis);
  Tensor out(t.dtype(), Shape(dims), alloc);
  for (int64_t o = 0; o < outer; ++o) copy_elements(out, o * inner, t, (o * n + index) * inner, inner);
  return out;
}

// Stacks equally shaped tensors along a new axis `axis`.
Tensor stack_along(const std::vector<Tensor>& parts, int64_t axis, DType dtype, const Shape& part_shape,
                   Allocator& alloc) {
  std::vector<int64_t> dims = part_shape.dims();
  dims.insert(dims.begin() + axis, static_cast<int64_t>(parts.size()));
  Tensor out(dtype, Shape(dims), alloc);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= part_shape[i];
  for (size_t i = axis; i < part_shape.rank(); ++i) inner *= part_shape[i];
  int64_t n = static_cast<int64_t>(parts.size());
  for (int64_t k = 0; k < n; ++k) {
    ONYX_CHECK(parts[k].shape() == part_shape && parts[k].dtype() == dtype, "scan output of iteration ", k, " is ",
               parts[k].type_str(), ", but iteration 0 gave ", dtype_name(dtype), part_shape.str());
    for (int64_t o = 0; o < outer; ++o) copy_elements(out, (o * n + k) * inner, parts[k], o * inner, inner);
  }
  return out;
}

// A Loop's scan output, stacked as the iterations give its parts: one buffer from the
// node's allocator that doubles when full, so the growth of a loop that never ends is
// held against the session's host memory budget (and copies each part once, amortized).
class ScanStack {
 public:
  void append(const Tensor& part, Allocator& alloc, size_t k, int64_t trip) {
    if (count_ == 0 && !buf_.defined()) {
      dtype_ = part.dtype();
      part_shape_ = part.shape();
    }
    ONYX_CHECK(part.shape() == part_shape_ && part.dtype() == dtype_, "scan output ", k, " of iteration ", trip, " is ",
               part.type_str(), ", but iteration 0 gave ", dtype_name(dtype_), part_shape_.str());
    const int64_t capacity = buf_.defined() ? buf_.shape()[0] : 0;
    if (count_ == capacity) grow(capacity, alloc, k);
    copy_elements(buf_, count_ * part.numel(), part, 0, part.numel());
    ++count_;
  }
  bool empty() const { return count_ == 0; }
  // The parts stacked along a new axis 0.
  Tensor take() const {
    const Shape shape = stacked(count_);
    if (count_ == buf_.shape()[0]) return buf_;
    return Tensor::borrow(dtype_, shape, buf_.raw(), buf_.storage());  // the first rows of the buffer
  }

 private:
  Shape stacked(int64_t n) const {
    std::vector<int64_t> dims = part_shape_.dims();
    dims.insert(dims.begin(), n);
    return Shape(dims);
  }
  void grow(int64_t capacity, Allocator& alloc, size_t k) {
    auto make = [&](int64_t rows) {
      return allocating(cat("scan output ", k, " (", rows, " iterations of ", dtype_name(dtype_), part_shape_.str(), ")"),
                        [&] { return Tensor(dtype_, stacked(rows), alloc); });
    };
    Tensor bigger;
    const int64_t want = capacity < (INT64_MAX / 2) ? std::max<int64_t>(4, capacity * 2) : capacity + 1;
    try {
      bigger = make(want);
    } catch (const HostBudgetExceeded&) {
      if (want == capacity + 1) throw;
      bigger = make(capacity + 1);  // near the budget: exactly what this iteration needs
    }
    if (buf_.defined()) copy_elements(bigger, 0, buf_, 0, count_ * part_shape_.numel());
    buf_ = std::move(bigger);
  }

  Tensor buf_;
  int64_t count_ = 0;
  DType dtype_ = DType::kUndefined;
  Shape part_shape_;
};

// Declared output types of a subgraph; shapes stay unknown until it runs.
void infer_from_body(InferContext& ctx, const Graph* g, size_t skip_body_outputs) {
  ONYX_CHECK(g, "missing subgraph attribute");
  for (size_t o = 0; o < ctx.num_outputs(); ++o) {
    size_t bo = o + skip_body_outputs;
    ctx.set_output(o, bo < g->outputs.size() ? g->values[g->outputs[bo]].declared.dtype : DType::kUndefined,
                   PartialShape());
  }
}

void if_kernel(KernelContext& ctx) {
  const Tensor& cond = ctx.input(0);
  ONYX_CHECK(cond.numel() == 1, "the condition must hold one element, got ", cond.type_str());
  bool take_then = cond.get_as_double(0) != 0;
  const char* which = take_then ? "then_branch" : "else_branch";
  const Graph* branch = ctx.attr_graph(which);
  ONYX_CHECK(branch, "missing attribute ", which);
  std::vector<Tensor> outs = with_context(which, [&] { return ctx.run_subgraph(*branch, {}); });
  ONYX_CHECK(outs.size() == ctx.num_outputs(), which, " returns ", outs.size(), " values, the node has ",
             ctx.num_outputs(), " outputs");
  for (size_t o = 0; o < outs.size(); ++o) ONYX_CHECK(outs[o].defined(), which, " returned no tensor for output ", o);
  for (size_t o = 0; o < outs.size(); ++o) ctx.set_output(o, std::move(outs[o]));
}

// Loop(M?, cond?, v_initial...) -> (v_final..., scan_outputs...)
void loop_kernel(KernelContext& ctx) {
  const Graph* body = ctx.attr_graph("body");
  ONYX_CHECK(body, "missing attribute 'body'");
  int64_t max_trips = INT64_MAX;
  if (ctx.has_input(0)) {
    ONYX_CHECK(ctx.input(0).numel() == 1, "M must be a scalar, got ", ctx.input(0).type_str());
    max_trips = ctx.input(0).get_as_int64(0);
  }
  bool cond = true;
  if (ctx.has_input(1)) {
    ONYX_CHECK(ctx.input(1).numel() == 1, "cond must be a scalar, got ", ctx.input(1).type_str());
    cond = ctx.input(1).get_as_double(0) != 0;
  }
  const size_t n_carried = ctx.num_inputs() - 2;
  ONYX_CHECK(body->inputs.size() == n_carried + 2, "the body takes ", body->inputs.size(), " inputs, expected ",
             n_carried + 2);
  ONYX_CHECK(body->outputs.size() >= n_carried + 1, "the body returns ", body->outputs.size(),
             " values, expected at least ", n_carried + 1);
  const size_t n_scan = body->outputs.size() - 1 - n_carried;
  std::vector<Tensor> carried;
  for (size_t i = 0; i < n_carried; ++i) carried.push_back(ctx.input(i + 2));
  std::vector<ScanStack> scans(n_scan);
  for (int64_t trip = 0; trip < max_trips && cond; ++trip) {
    std::vector<Tensor> in{Tensor::scalar<int64_t>(trip), Tensor::scalar<bool>(cond)};
    in.insert(in.end(), carried.begin(), carried.end());
    std::vector<Tensor> out = with_context(cat("body, iteration ", trip), [&] { return ctx.run_subgraph(*body, in); });
    // What the body returns is data of the model: checked before it is read.
    ONYX_CHECK(out.size() == body->outputs.size(), "the body returned ", out.size(), " values in iteration ", trip,
               ", it declares ", body->outputs.size());
    for (size_t i = 0; i < out.size(); ++i)
      ONYX_CHECK(out[i].defined(), "the body returned no tensor for output ", i, " in iteration ", trip);
    ONYX_CHECK(out[0].numel() == 1 && out[0].dtype() != DType::kString, "the body's condition output must hold one ",
               "boolean element, got ", out[0].type_str(), " in iteration ", trip);
    cond = out[0].get_as_double(0) != 0;
    for (size_t i = 0; i < n_carried; ++i) carried[i] = std::move(out[1 + i]);
    for (size_t k = 0; k < n_scan; ++k) scans[k].append(out[1 + n_carried + k], ctx.allocator(), k, trip);
  }
  for (size_t i = 0; i < n_carried && i < ctx.num_outputs(); ++i)
    if (ctx.has_output(i)) ctx.set_output(i, std::move(carried[i]));
  for (size_t k = 0; k < n_scan && n_carried + k < ctx.num_outputs(); ++k) {
    if (!ctx.has_output(n_carried + k)) continue;
    if (scans[k].empty()) {
      const Value& v = body->values[body->outputs[1 + n_carried + k]];
      std::vector<int64_t> dims{0};
      for (int64_t d : v.declared.dims) dims.push_back(std::max<int64_t>(d, 0));
      ctx.allocate_output(n_carried + k, v.declared.dtype == DType::kUndefined ? DType::kFloat32 : v.declared.dtype,
                          Shape(dims));
    } else {
      ctx.set_output(n_carried + k, scans[k].take());
    }
  }
}

// Scan (opset 9+): N state variables, then M scan inputs sliced along their axes.
void scan_kernel(KernelContext& ctx) {
  const Graph* body = ctx.attr_graph("body");
  ONYX_CHECK(body, "missing attribute 'body'");
  const int64_t m = ctx.attr_int("num_scan_inputs");
  const size_t n_state = ctx.num_inputs() - static_cast<size_t>(m);
  const size_t n_scan_out = ctx.num_outputs() - n_state;
  auto in_axes = ctx.attr_ints("scan_input_axes", std::vector<int64_t>(m, 0));
  auto in_dirs = ctx.attr_ints("scan_input_directions", std::vector<int64_t>(m, 0));
  auto out_axes = ctx.attr_ints("scan_output_axes", std::vector<int64_t>(n_scan_out, 0));
  auto out_dirs = ctx.attr_ints("scan_output_directions", std::vector<int64_t>(n_scan_out, 0));
  ONYX_CHECK(static_cast<int64_t>(in_axes.size()) == m && static_cast<int64_t>(in_dirs.size()) == m,
             "scan_input_axes/directions must have num_scan_inputs entries");
  ONYX_CHECK(out_axes.size() == n_scan_out && out_dirs.size() == n_scan_out,
             "scan_output_axes/directions must have one entry per scan output");
  int64_t length = -1;
  for (int64_t j = 0; j < m; ++j) {
    const Tensor& x = ctx.input(n_state + j);
    in_axes[j] = normalize_axis(in_axes[j], static_cast<int64_t>(x.rank()));
    int64_t len = x.shape()[in_axes[j]];
    ONYX_CHECK(length < 0 || len == length, "scan input ", j, " has length ", len, ", an earlier one ", length);
    length = len;
  }
  ONYX_CHECK(m > 0, "Scan needs at least one scan input");
  std::vector<Tensor> state;
  for (size_t i = 0; i < n_state; ++i) state.push_back(ctx.input(i));
  std::vector<std::vector<Tensor>> outs(n_scan_out);
  for (int64_t it = 0; it < length; ++it) {
    std::vector<Tensor> in = state;
    for (int64_t j = 0; j < m; ++j) {
      int64_t index = in_dirs[j] ? length - 1 - it : it;
      in.push_back(take_along(ctx.input(n_state + j), in_axes[j], index, ctx.allocator()));
    }
    std::vector<Tensor> out = with_context(cat("body, iteration ", it), [&] { return ctx.run_subgraph(*body, in); });
    ONYX_CHECK(out.size() == n_state + n_scan_out, "the body returns ", out.size(), " values, expected ",
               n_state + n_scan_out);
    for (size_t i = 0; i < out.size(); ++i)
      ONYX_CHECK(out[i].defined(), "the body returned no tensor for output ", i, " in iteration ", it);
    for (size_t i = 0; i < n_state; ++i) state[i] = std::move(out[i]);
    for (size_t k = 0; k < n_scan_out; ++k) outs[k].push_back(std::move(out[n_state + k]));
  }
  for (size_t i = 0; i < n_state; ++i) ctx.set_output(i, std::move(state[i]));
  for (size_t k = 0; k < n_scan_out; ++k) {
    auto& parts = outs[k];
    if (out_dirs[k]) std::reverse(parts.begin(), parts.end());
    ONYX_CHECK(!parts.empty(), "Scan over zero iterations has no scan output shape");
    int64_t axis = normalize_axis(out_axes[k], static_cast<int64_t>(parts[0].rank()) + 1);
    ctx.set_output(n_state + k, stack_along(parts, axis, parts[0].dtype(), parts[0].shape(), ctx.allocator()));
  }
}

// Scan-8: like Scan-9 with a leading batch axis on every state and scan input, each batch row
// scanned on its own (its length from sequence_lens, input 0, when given; scan outputs past a
// shorter row's length stay zero).
void scan8_kernel(KernelContext& ctx) {
  const Graph* body = ctx.attr_graph("body");
  ONYX_CHECK(body, "missing attribute 'body'");
  const int64_t m = ctx.attr_int("num_scan_inputs");
  ONYX_CHECK(m > 0 && static_cast<size_t>(m) < ctx.num_inputs(), "num_scan_inputs ", m, " does not fit ",
             ctx.num_inputs() - 1, " inputs after sequence_lens");
  const size_t n_state = ctx.num_inputs() - 1 - static_cast<size_t>(m);
  const size_t n_scan_out = ctx.num_outputs() - n_state;
  const auto dirs = ctx.attr_ints("directions", std::vector<int64_t>(m, 0));
  ONYX_CHECK(static_cast<int64_t>(dirs.size()) == m, "directions must have num_scan_inputs entries");
  const Tensor& first = ctx.input(1 + n_state);
  ONYX_CHECK(first.rank() >= 2, "scan inputs must be [batch, sequence, ...], got ", first.type_str());
  const int64_t batch = first.shape()[0], max_len = first.shape()[1];
  ONYX_CHECK(batch > 0, "Scan over an empty batch has no output shapes");
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.input(i);
    ONYX_CHECK(t.rank() >= 1 && t.shape()[0] == batch, "input ", i, " must lead with the batch axis of ", batch,
               ", got ", t.type_str());
    if (i > n_state)
      ONYX_CHECK(t.rank() >= 2 && t.shape()[1] == max_len, "scan input ", i, " has ", t.type_str(),
                 ", expected a sequence of ", max_len);
  }
  std::vector<std::vector<Tensor>> finals(n_state);
  std::vector<std::vector<Tensor>> scans(n_scan_out);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = ctx.has_input(0) ? ctx.input(0).get_as_int64(b) : max_len;
    ONYX_CHECK(len >= 0 && len <= max_len, "sequence_lens[", b, "] = ", len, " is outside [0, ", max_len, "]");
    std::vector<Tensor> state;
    for (size_t i = 0; i < n_state; ++i) state.push_back(take_along(ctx.input(1 + i), 0, b, ctx.allocator()));
    std::vector<std::vector<Tensor>> parts(n_scan_out);
    for (int64_t it = 0; it < len; ++it) {
      std::vector<Tensor> in = state;
      for (int64_t j = 0; j < m; ++j) {
        const Tensor row = take_along(ctx.input(1 + n_state + j), 0, b, ctx.allocator());
        in.push_back(take_along(row, 0, dirs[j] ? len - 1 - it : it, ctx.allocator()));
      }
      std::vector<Tensor> out = with_context(cat("body, batch ", b, ", iteration ", it),
                                             [&] { return ctx.run_subgraph(*body, in); });
      ONYX_CHECK(out.size() == n_state + n_scan_out, "the body returns ", out.size(), " values, expected ",
                 n_state + n_scan_out);
      for (size_t i = 0; i < n_state; ++i) state[i] = std::move(out[i]);
      for (size_t k = 0; k < n_scan_out; ++k) parts[k].push_back(std::move(out[n_state + k]));
    }
    for (size_t i = 0; i < n_state; ++i) finals[i].push_back(state[i]);
    for (size_t k = 0; k < n_scan_out; ++k) {
      ONYX_CHECK(!parts[k].empty(), "Scan over zero iterations has no scan output shape");
      while (static_cast<int64_t>(parts[k].size()) < max_len) {  // a shorter row: zeros past its end
        Tensor zero(parts[k][0].dtype(), parts[k][0].shape(), ctx.allocator());
        if (zero.bytes() && !dtype_is_object(zero.dtype())) std::memset(zero.raw(), 0, zero.bytes());
        parts[k].push_back(zero);
      }
      scans[k].push_back(stack_along(parts[k], 0, parts[k][0].dtype(), parts[k][0].shape(), ctx.allocator()));
    }
  }
  for (size_t i = 0; i < n_state; ++i)
    ctx.set_output(i, stack_along(finals[i], 0, finals[i][0].dtype(), finals[i][0].shape(), ctx.allocator()));
  for (size_t k = 0; k < n_scan_out; ++k)
    ctx.set_output(n_state + k, stack_along(scans[k], 0, scans[k][0].dtype(), scans[k][0].shape(), ctx.allocator()));
}

}  // namespace

void register_control_flow_ops(OpRegistry& r) {
  r.add(onnx_op("Scan", 8, [](InferContext& ctx) { infer_from_body(ctx, ctx.attr_graph("body"), 0); }, scan8_kernel));
  r.add(onnx_op("If", 1, [](InferContext& ctx) { infer_from_body(ctx, ctx.attr_graph("then_branch"), 0); },
              if_kernel));
  r.add(onnx_op("Loop", 1, [](InferContext& ctx) { infer_from_body(ctx, ctx.attr_graph("body"), 1); }, loop_kernel));
  r.add(onnx_op("Scan", 9, [](InferContext& ctx) { infer_from_body(ctx, ctx.attr_graph("body"), 0); }, scan_kernel));
}

}  // namespace onyx
