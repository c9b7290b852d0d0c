// Ops that rearrange elements without computing on them: Concat, Split, Transpose,
// Expand, Tile, Trilu, DepthToSpace, SpaceToDepth, ReverseSequence.
#include <algorithm>
#include <numeric>

#include "cpu/thread_pool.h"
#include "ops/tensor_util.h"

namespace onyx {

namespace {

constexpr int64_t kUnknown = PartialShape::kUnknown;

int64_t product(std::span<const int64_t> d, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= d[i];
  return p;
}

// ---- Concat ---------------------------------------------------------------

int64_t concat_axis(const NodeView& n) { return n.opset() < 4 ? n.attr_int("axis", 1) : n.attr_int("axis"); }

void infer_concat(InferContext& ctx) {
  ONYX_CHECK(ctx.num_inputs() >= 1 && ctx.has_input(0), "Concat needs at least one input");
  check_same_dtypes(ctx);
  PartialShape out;
  int64_t axis = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const PartialShape& s = ctx.input_shape(i);
    if (!s.rank_known) continue;
    if (!out.rank_known) {
      out = s;
      axis = normalize_axis(concat_axis(ctx), static_cast<int64_t>(s.dims.size()));
      out.dims[axis] = 0;
    }
    ONYX_CHECK(s.dims.size() == out.dims.size(), "Concat input ", i, " has rank ", s.dims.size(), ", input 0 has ",
               out.dims.size());
    for (size_t a = 0; a < s.dims.size(); ++a) {
      if (static_cast<int64_t>(a) == axis) {
        out.dims[a] = (out.dims[a] == kUnknown || s.dims[a] == kUnknown)
                          ? kUnknown
                          : checked_add(out.dims[a], s.dims[a], "Concat: the concatenated axis");
      } else if (out.dims[a] == kUnknown) {
        out.dims[a] = s.dims[a];
      } else {
        ONYX_CHECK(s.dims[a] == kUnknown || s.dims[a] == out.dims[a], "Concat input ", i, " has shape ", s.str(),
                   ", which differs from the others on axis ", a, " (concatenating on axis ", axis, ")");
      }
    }
  }
  // An input of unknown rank leaves the concat axis unknown.
  for (size_t i = 0; i < ctx.num_inputs() && out.rank_known; ++i)
    if (!ctx.input_shape(i).rank_known) out.dims[axis] = kUnknown;
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void concat_kernel(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  const auto& od = out.shape().dims();
  const int64_t axis = normalize_axis(concat_axis(ctx), static_cast<int64_t>(od.size()));
  const int64_t outer = product(od, 0, axis), inner = product(od, axis + 1, od.size());
  const int64_t out_block = od[axis] * inner;
  // Spans of the outer index on the pool's threads, each copying every input's blocks for its
  // span (a decode step's past + new caches: one span per head), at least 64 KiB a span.
  const int64_t block_bytes = std::max<int64_t>(1, out_block * static_cast<int64_t>(dtype_size(out.dtype())));
  const int64_t grain = std::max<int64_t>(1, (int64_t{64} << 10) / block_bytes);
  cpu::parallel_for(outer, grain, [&](int64_t o0, int64_t o1) {
    int64_t at = 0;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& in = ctx.input(i);
      const int64_t block = in.shape()[axis] * inner;
      for (int64_t o = o0; o < o1; ++o) copy_elements(in, o * block, out, o * out_block + at, block);
      at += block;
    }
  });
}

// ---- Split ----------------------------------------------------------------

// Sizes of the pieces along the axis of size `dim` (dim unknown: only explicit splits are known).
std::vector<int64_t> split_sizes(const NodeView& n, const std::optional<std::vector<int64_t>>& split, int64_t dim) {
  const int64_t count = static_cast<int64_t>(n.num_outputs());
  if (split && !split->empty()) {
    ONYX_CHECK(static_cast<int64_t>(split->size()) == count, "Split: ", split->size(), " split sizes for ", count,
               " outputs");
    int64_t sum = 0;
    for (int64_t s : *split) {
      ONYX_CHECK(s >= 0, "Split: negative split size ", s);
      sum = checked_add(sum, s, "Split: the sum of split sizes");
    }
    ONYX_CHECK(dim == kUnknown || sum == dim, "Split: split sizes sum to ", sum, ", but the axis has size ", dim);
    return *split;
  }
  int64_t pieces = count;
  if (n.opset() >= 18 && n.has_attr("num_outputs")) {
    pieces = n.attr_int("num_outputs");
    ONYX_CHECK(pieces == count, "Split: num_outputs is ", pieces, ", but the node has ", count, " outputs");
  }
  ONYX_CHECK(pieces > 0, "Split needs at least one output");
  if (dim == kUnknown) return std::vector<int64_t>(pieces, kUnknown);
  if (dim % pieces == 0) return std::vector<int64_t>(pieces, dim / pieces);
  // Opset 18 allows an uneven split: equal ceil-sized chunks, a smaller last one.
  ONYX_CHECK(n.opset() >= 18, "Split: axis of size ", dim, " does not split evenly into ", pieces, " outputs");
  const int64_t chunk = (dim + pieces - 1) / pieces;
  std::vector<int64_t> sizes(pieces, chunk);
  sizes.back() = dim - chunk * (pieces - 1);
  ONYX_CHECK(sizes.back() >= 0, "Split: axis of size ", dim, " cannot be split into ", pieces, " chunks of ", chunk);
  return sizes;
}

std::optional<std::vector<int64_t>> split_arg(const InferContext& ctx) {
  if (ctx.opset() < 13) return ctx.attr_ints("split");
  if (!ctx.has_input(1)) return std::vector<int64_t>{};
  return known_ints(ctx, 1);
}

void infer_split(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  auto split = split_arg(ctx);
  if (!in.rank_known || !split) {
    for (size_t o = 0; o < ctx.num_outputs(); ++o)
      ctx.set_output(o, ctx.input_dtype(0), in.rank_known ? PartialShape::of_rank(in.dims.size()) : PartialShape());
    return;
  }
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(in.dims.size()));
  auto sizes = split_sizes(ctx, split, in.dims[axis]);
  for (size_t o = 0; o < ctx.num_outputs(); ++o) {
    PartialShape s = in;
    s.dims[axis] = sizes[o];
    ctx.set_output(o, ctx.input_dtype(0), s);
  }
}

void split_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const auto& d = in.shape().dims();
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(d.size()));
  std::optional<std::vector<int64_t>> split;
  if (ctx.opset() < 13)
    split = ctx.attr_ints("split");
  else if (ctx.has_input(1))
    split = ctx.input(1).to_int64_vector();
  auto sizes = split_sizes(ctx, split, d[axis]);
  const int64_t outer = product(d, 0, axis), inner = product(d, axis + 1, d.size());
  const int64_t in_block = d[axis] * inner;
  int64_t at = 0;
  for (size_t o = 0; o < sizes.size(); ++o) {
    const int64_t block = sizes[o] * inner;
    if (ctx.has_output(o)) {
      Tensor& out = ctx.output(o);
      for (int64_t i = 0; i < outer; ++i) copy_elements(in, i * in_block + at, out, i * block, block);
    }
    at += block;
  }
}

// ---- Transpose ------------------------------------------------------------

std::vector<int64_t> transpose_perm(const NodeView& n, size_t rank) {
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (!n.has_attr("perm")) {
    perm.resize(rank);
    std::iota(perm.rbegin(), perm.rend(), 0);  // default: reverse the axes
  }
  ONYX_CHECK(perm.size() == rank, "Transpose perm has ", perm.size(), " entries for an input of rank ", rank);
  std::vector<bool> seen(rank, false);
  for (int64_t& p : perm) {
    p = normalize_axis(p, static_cast<int64_t>(rank));
    ONYX_CHECK(!seen[p], "Transpose perm repeats axis ", p);
    seen[p] = true;
  }
  return perm;
}

void infer_transpose(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  auto perm = transpose_perm(ctx, in.dims.size());
  PartialShape out = in;
  for (size_t i = 0; i < perm.size(); ++i) out.dims[i] = in.dims[perm[i]];
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void transpose_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  auto perm = transpose_perm(ctx, in.rank());
  auto st = in.shape().strides();
  std::vector<int64_t> strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) strides[i] = st[perm[i]];
  strided_copy(in, 0, ctx.output(0).shape().dims(), strides, ctx.output(0), "Transpose");
}

// ---- Expand, Tile ---------------------------------------------------------

void infer_expand(InferContext& ctx) {
  auto shape = known_ints(ctx, 1);
  if (!shape) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  for (int64_t d : *shape) ONYX_CHECK(d >= 0, "Expand: negative dimension ", d, " in the target shape");
  ctx.set_output(0, ctx.input_dtype(0), broadcast_shapes(ctx.input_shape(0), PartialShape(Shape(*shape))));
}

void expand_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  const size_t r = out.rank(), off = r - in.rank();
  auto st = in.shape().strides();
  std::vector<int64_t> strides(r, 0);
  for (size_t i = off; i < r; ++i) strides[i] = in.shape()[i - off] == 1 ? 0 : st[i - off];
  strided_copy(in, 0, out.shape().dims(), strides, out, "Expand");
}

void infer_tile(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  auto reps = known_ints(ctx, 1);
  if (!reps || !in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), in.rank_known ? PartialShape::of_rank(in.dims.size()) : PartialShape());
    return;
  }
  ONYX_CHECK(reps->size() == in.dims.size(), "Tile: ", reps->size(), " repeats for an input of rank ", in.dims.size());
  PartialShape out = in;
  for (size_t i = 0; i < reps->size(); ++i) {
    ONYX_CHECK((*reps)[i] >= 0, "Tile: negative repeat ", (*reps)[i], " for axis ", i);
    if (out.dims[i] != kUnknown) out.dims[i] = checked_mul(out.dims[i], (*reps)[i], cat("Tile: axis ", i, " repeated"));
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void tile_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  auto reps = ctx.input(1).to_int64_vector();
  // Output axis k of size r*d, row-major, is the pair (repeat, d): read with strides (0, stride_k).
  auto st = in.shape().strides();
  std::vector<int64_t> dims, strides;
  for (size_t k = 0; k < in.rank(); ++k) {
    dims.insert(dims.end(), {reps[k], in.shape()[k]});
    strides.insert(strides.end(), {0, st[k]});
  }
  strided_copy(in, 0, dims, strides, ctx.output(0), "Tile");
}

// ---- Trilu ----------------------------------------------------------------

void infer_trilu(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  ONYX_CHECK(!in.rank_known || in.dims.size() >= 2, "Trilu needs an input of rank >= 2, got ", in.str());
  infer_same_as_input(ctx);
}

void trilu_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  int64_t k = 0;
  if (ctx.has_input(1)) {
    ONYX_CHECK(ctx.input(1).numel() == 1, "Trilu: k must be a scalar, got shape ", ctx.input(1).shape().str());
    k = ctx.input(1).get_as_int64(0);
  }
  const bool upper = ctx.attr_int("upper", 1) != 0;
  const int64_t rows = in.shape()[in.rank() - 2], cols = in.shape()[in.rank() - 1];
  const int64_t mats = rows * cols == 0 ? 0 : in.numel() / (rows * cols);
  dispatch_storage(in.dtype(), "Trilu", [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = in.data<U>();
    U* dst = out.data<U>();
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          int64_t at = (m * rows + i) * cols + j;
          bool keep = upper ? j - i >= k : j - i <= k;
          dst[at] = keep ? src[at] : U{};
        }
  });
}

// ---- DepthToSpace, SpaceToDepth -------------------------------------------

// The blocksize, checked so that blocksize^2 (what the channels are divided by) is positive and fits.
int64_t block_size(const NodeView& n) {
  int64_t b = n.attr_int("blocksize");
  ONYX_CHECK(b > 0, "blocksize must be positive, got ", b);
  checked_mul(b, b, cat("blocksize ", b, " squared"));
  return b;
}

void infer_depth_to_space(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  ONYX_CHECK(!in.rank_known || in.dims.size() == 4, "DepthToSpace needs a 4-D input, got ", in.str());
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape::of_rank(4));
    return;
  }
  const int64_t b = block_size(ctx);
  PartialShape out = in;
  if (in.dims[1] != kUnknown) {
    ONYX_CHECK(in.dims[1] % (b * b) == 0, "DepthToSpace: channels ", in.dims[1], " are not a multiple of blocksize^2 ",
               b * b);
    out.dims[1] = in.dims[1] / (b * b);
  }
  for (int a = 2; a < 4; ++a)
    if (in.dims[a] != kUnknown) out.dims[a] = checked_mul(in.dims[a], b, cat("DepthToSpace: axis ", a));
  ctx.set_output(0, ctx.input_dtype(0), out);
}

// Reads the input as a 6-D row-major view `view` and writes it in the order `perm`.
void permuted_copy(const Tensor& in, Tensor& out, const std::vector<int64_t>& view, const std::vector<int64_t>& perm,
                   std::string_view what) {
  auto st = Shape(view).strides();
  std::vector<int64_t> dims(perm.size()), strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    dims[i] = view[perm[i]];
    strides[i] = st[perm[i]];
  }
  strided_copy(in, 0, dims, strides, out, what);
}

void depth_to_space_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const int64_t b = block_size(ctx);
  const int64_t n = in.shape()[0], c = in.shape()[1] / (b * b), h = in.shape()[2], w = in.shape()[3];
  std::string mode = ctx.attr_string("mode", "DCR");
  if (mode == "DCR") {
    permuted_copy(in, ctx.output(0), {n, b, b, c, h, w}, {0, 3, 4, 1, 5, 2}, "DepthToSpace");
  } else {
    ONYX_CHECK(mode == "CRD", "DepthToSpace: unknown mode '", mode, "' (expected DCR or CRD)");
    permuted_copy(in, ctx.output(0), {n, c, b, b, h, w}, {0, 1, 4, 2, 5, 3}, "DepthToSpace");
  }
}

void infer_space_to_depth(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  ONYX_CHECK(!in.rank_known || in.dims.size() == 4, "SpaceToDepth needs a 4-D input, got ", in.str());
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape::of_rank(4));
    return;
  }
  const int64_t b = block_size(ctx);
  PartialShape out = in;
  if (in.dims[1] != kUnknown)
    out.dims[1] = checked_mul(checked_mul(in.dims[1], b, "SpaceToDepth: channels"), b, "SpaceToDepth: channels");
  for (int a = 2; a < 4; ++a) {
    if (in.dims[a] == kUnknown) continue;
    ONYX_CHECK(in.dims[a] % b == 0, "SpaceToDepth: axis ", a, " of size ", in.dims[a],
               " is not a multiple of blocksize ", b);
    out.dims[a] = in.dims[a] / b;
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void space_to_depth_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const int64_t b = block_size(ctx);
  const int64_t n = in.shape()[0], c = in.shape()[1], h = in.shape()[2] / b, w = in.shape()[3] / b;
  permuted_copy(in, ctx.output(0), {n, c, h, b, w, b}, {0, 3, 5, 1, 2, 4}, "SpaceToDepth");
}

// ---- ReverseSequence ------------------------------------------------------

void infer_reverse_sequence(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  ONYX_CHECK(!in.rank_known || in.dims.size() >= 2, "ReverseSequence needs an input of rank >= 2, got ", in.str());
  int64_t batch_axis = ctx.attr_int("batch_axis", 1), time_axis = ctx.attr_int("time_axis", 0);
  ONYX_CHECK((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0),
             "ReverseSequence: batch_axis and time_axis must be 0 and 1 in some order, got ", batch_axis, " and ",
             time_axis);
  ONYX_CHECK(ctx.input_dtype(1) == DType::kInt64, "ReverseSequence: sequence_lens must be int64");
  infer_same_as_input(ctx);
}

void reverse_sequence_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  const Tensor& lens = ctx.input(1);
  const int64_t batch_axis = ctx.attr_int("batch_axis", 1), time_axis = ctx.attr_int("time_axis", 0);
  const int64_t batch = in.shape()[batch_axis], steps = in.shape()[time_axis];
  ONYX_CHECK(lens.rank() == 1 && lens.numel() == batch, "ReverseSequence: sequence_lens has shape ", lens.shape().str(),
             ", expected [", batch, "]");
  const auto st = in.shape().strides();
  const int64_t inner = product(in.shape().dims(), 2, in.rank());
  copy_elements(in, 0, out, 0, in.numel());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = lens.data<int64_t>()[b];
    ONYX_CHECK(len >= 0 && len <= steps, "ReverseSequence: sequence length ", len, " for batch ", b, " is outside [0, ",
               steps, "]");
    for (int64_t t = 0; t < len; ++t)
      copy_elements(in, b * st[batch_axis] + (len - 1 - t) * st[time_axis], out, b * st[batch_axis] + t * st[time_axis],
                    inner);
  }
}

}  // namespace

void register_layout_ops(OpRegistry& r) {
  r.add(onnx_op("Concat", 1, infer_concat, concat_kernel));
  r.add(onnx_op("Split", 1, infer_split, split_kernel).reads_values({1}));
  r.add(onnx_op("Transpose", 1, infer_transpose, transpose_kernel));
  r.add(onnx_op("Expand", 8, infer_expand, expand_kernel).reads_values({1}));
  r.add(onnx_op("Tile", 6, infer_tile, tile_kernel).reads_values({1}));
  r.add(onnx_op("Trilu", 14, infer_trilu, trilu_kernel));
  r.add(onnx_op("DepthToSpace", 1, infer_depth_to_space, depth_to_space_kernel));
  r.add(onnx_op("SpaceToDepth", 1, infer_space_to_depth, space_to_depth_kernel));
  r.add(onnx_op("ReverseSequence", 10, infer_reverse_sequence, reverse_sequence_kernel));
}

}  // namespace onyx
