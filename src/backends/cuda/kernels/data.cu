// Data movement: Gather, Concat, Split, Slice, Transpose, GatherND, ScatterND.
//
// These kernels only move bytes, so they are instantiated per element width
// (1, 2, 4, 8 bytes, and 16 where contiguous runs allow wider copies), never per
// dtype. Any fixed-size dtype works (float32/float16/bfloat16/int32/int64/bool...).
#include <algorithm>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/broadcast.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"

namespace onyx::cuda {

namespace {

// Calls f(Tag<U>{}) with U an unsigned type (or uint4) of `width` bytes.
template <class F>
void dispatch_width(int width, F&& f) {
  switch (width) {
    case 1: f(Tag<uint8_t>{}); return;
    case 2: f(Tag<uint16_t>{}); return;
    case 4: f(Tag<uint32_t>{}); return;
    case 8: f(Tag<uint64_t>{}); return;
    case 16: f(Tag<uint4>{}); return;
    default: throw Error(cat("no copy unit of ", width, " bytes"));
  }
}

// The widest unit (<= max_width) dividing every byte count and aligning every pointer.
int pick_width(int max_width, std::initializer_list<int64_t> byte_counts, std::initializer_list<const void*> ptrs) {
  for (int w = max_width; w > 1; w /= 2) {
    bool ok = true;
    for (int64_t b : byte_counts) ok = ok && b % w == 0;
    for (const void* p : ptrs) ok = ok && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(w) == 0;
    if (ok) return w;
  }
  return 1;
}

bool movable(DType dt) {
  const size_t s = dt == DType::kString ? 0 : dtype_size(dt);
  return s == 1 || s == 2 || s == 4 || s == 8;
}

std::string movable_reason(const char* op) {
  return cat(
      op, " on CUDA supports fixed-size dtypes of 1, 2, 4 or 8 bytes (float32/float16/bfloat16/int32/int64/bool...)");
}

// ---- Gather ----
// out[o, i, j] = data[o, idx[i], j] with [outer, n, inner] views; inner counted in units.

template <class U>
__global__ void gather_kernel(const U* __restrict__ src, U* __restrict__ dst, const void* idx, int idx64,
                              int64_t outer, int64_t n, int64_t size, int64_t inner, unsigned int* err) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t total = outer * n * inner;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % inner, t = e / inner;
    const int64_t i = t % n, o = t / n;
    int64_t k = load_index(idx, idx64 != 0, i);
    if (k < 0) k += size;
    // Out of range: nothing is read or written, and the device error word says so.
    if (k < 0 || k >= size) {
      if (err) atomicOr(err, kDeviceErrorGatherIndex);
      continue;
    }
    dst[e] = src[(o * size + k) * inner + j];
  }
}

void run_gather(KernelContext& ctx, CudaContext& cu) {
  const Tensor& data = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  Tensor& out = ctx.output(0);
  const auto& d = data.shape().dims();
  ONYX_CHECK(!d.empty(), "Gather needs data of rank >= 1");
  const int64_t axis = norm_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(d.size()));
  const int64_t outer = prod(d, 0, axis), size = d[axis], inner = prod(d, axis + 1, d.size());
  const int64_t n = ind.numel();
  if (out.numel() == 0) return;
  const int64_t es = static_cast<int64_t>(dtype_size(data.dtype()));
  const int w = pick_width(16, {inner * es}, {data.raw(), out.raw()});
  const int64_t inner_u = inner * es / w;
  dispatch_width(w, [&](auto tag) {
    using U = typename decltype(tag)::type;
    launch_kernel(gather_kernel<U>, blocks_for(outer * n * inner_u, kThreads), kThreads, 0, cu,
                  static_cast<const U*>(data.raw()), static_cast<U*>(out.raw()), ind.raw(),
                  ind.dtype() == DType::kInt64, outer, n, size, inner_u, cu.error_word);
  });
  ONYX_CUDA_CHECK_LAUNCH("Gather");
}

// ---- Concat / Split ----
// The whole tensor is [outer, total] (in units); piece p holds columns
// [start[p], start[p] + width[p]) of every row. blockIdx.y picks the piece.

constexpr int kMaxPieces = 16;

struct Pieces {
  void* ptr[kMaxPieces];
  int64_t start[kMaxPieces];
  int64_t width[kMaxPieces];
};

template <class U>
__global__ void pieces_kernel(U* whole, Pieces p, int64_t outer, int64_t total, int to_whole) {
  ONYX_KERNEL_PROLOGUE();
  const int q = blockIdx.y;
  const int64_t w = p.width[q];
  const int64_t n = outer * w;
  U* part = static_cast<U*>(p.ptr[q]);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = (e / w) * total + p.start[q] + e % w;
    if (to_whole) whole[at] = part[e];
    else part[e] = whole[at];
  }
}

// One piece of a Concat or Split: its tensor's bytes and its extent along the axis.
struct Piece {
  void* ptr;
  int64_t axis_len;
};

// Copies pieces into (Concat) or out of (Split) `whole`; pieces with a null
// pointer are skipped but still take their place along the axis.
void move_pieces(void* whole, const std::vector<int64_t>& dims, int64_t axis, size_t es,
                 const std::vector<Piece>& pieces, bool to_whole, CudaContext& cu, const char* what) {
  const int64_t outer = prod(dims, 0, axis), inner = prod(dims, axis + 1, dims.size());
  const int64_t row_bytes = dims[axis] * inner * static_cast<int64_t>(es);
  if (outer == 0 || row_bytes == 0) return;
  // One unit width for all pieces: it must divide every piece's row and align every pointer.
  int w = 16;
  for (const Piece& p : pieces) {
    w = pick_width(w, {p.axis_len * inner * static_cast<int64_t>(es)}, {});
    if (p.ptr) w = pick_width(w, {}, {p.ptr});
  }
  w = pick_width(w, {row_bytes}, {whole});
  const int64_t total = row_bytes / w;
  int64_t at = 0;
  size_t i = 0;
  while (i < pieces.size()) {
    Pieces batch{};
    int count = 0;
    int64_t widest = 0;
    for (; i < pieces.size() && count < kMaxPieces; ++i) {
      const int64_t width = pieces[i].axis_len * inner * static_cast<int64_t>(es) / w;
      if (pieces[i].ptr && width > 0) {
        batch.ptr[count] = pieces[i].ptr;
        batch.start[count] = at;
        batch.width[count] = width;
        widest = std::max(widest, width);
        ++count;
      }
      at += width;
    }
    if (count == 0) continue;
    dispatch_width(w, [&](auto tag) {
      using U = typename decltype(tag)::type;
      const dim3 grid(blocks_for(outer * widest, kThreads), static_cast<unsigned>(count));
      launch_kernel(pieces_kernel<U>, grid, kThreads, 0, cu, static_cast<U*>(whole), batch, outer, total,
                                                         to_whole ? 1 : 0);
    });
    ONYX_CUDA_CHECK_LAUNCH(what);
  }
}

void run_concat(KernelContext& ctx, CudaContext& cu) {
  Tensor& out = ctx.output(0);
  const auto& od = out.shape().dims();
  ONYX_CHECK(!od.empty(), "Concat needs inputs of rank >= 1");
  const int64_t axis = norm_axis(ctx.opset() < 4 ? ctx.attr_int("axis", 1) : ctx.attr_int("axis"),
                                 static_cast<int64_t>(od.size()));
  std::vector<Piece> pieces;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const Tensor& in = ctx.input(i);
    pieces.push_back({in.numel() ? in.raw() : nullptr, in.shape()[axis]});
  }
  move_pieces(out.raw(), od, axis, dtype_size(out.dtype()), pieces, true, cu, "Concat");
}

// Split sizes: each present output's extent along the axis; an absent output's
// extent follows from the split attribute, the even-split rule, or the total.
void run_split(KernelContext& ctx, CudaContext& cu) {
  const Tensor& in = ctx.input(0);
  const auto& d = in.shape().dims();
  ONYX_CHECK(!d.empty(), "Split needs an input of rank >= 1");
  const int64_t axis = norm_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(d.size()));
  const size_t count = ctx.num_outputs();
  std::vector<int64_t> sizes(count, -1);
  int64_t known = 0, missing = 0;
  for (size_t o = 0; o < count; ++o) {
    if (ctx.has_output(o)) {
      sizes[o] = ctx.output(o).shape()[axis];
      known += sizes[o];
    } else {
      ++missing;
    }
  }
  if (missing > 0) {
    std::vector<int64_t> rule;
    if (ctx.opset() < 13) rule = ctx.attr_ints("split");
    const bool split_input = ctx.opset() >= 13 && ctx.has_input(1);
    if (rule.empty() && !split_input) {
      // Even split; from opset 18 an uneven one: ceil-sized chunks, a smaller last.
      const int64_t pieces = static_cast<int64_t>(count), dim = d[axis];
      const int64_t chunk = (dim + pieces - 1) / pieces;
      rule.assign(count, chunk);
      rule.back() = dim - chunk * (pieces - 1);
    }
    for (size_t o = 0; o < count; ++o) {
      if (sizes[o] >= 0) continue;
      if (!rule.empty()) {
        ONYX_CHECK(rule.size() == count, "Split: ", rule.size(), " split sizes for ", count, " outputs");
        sizes[o] = rule[o];
      } else {
        ONYX_CHECK(missing == 1, "Split on CUDA: cannot place more than one absent output");
        sizes[o] = d[axis] - known;
      }
    }
  }
  std::vector<Piece> pieces;
  for (size_t o = 0; o < count; ++o) {
    void* p = ctx.has_output(o) && ctx.output(o).numel() ? ctx.output(o).raw() : nullptr;
    pieces.push_back({p, sizes[o]});
  }
  move_pieces(in.raw(), d, axis, dtype_size(in.dtype()), pieces, false, cu, "Split");
}

// ---- strided copies: Transpose (general) and Slice ----

struct Strided {
  int rank = 0;
  int64_t dims[kMaxRank] = {};     // output dims
  int64_t strides[kMaxRank] = {};  // input stride (in units) of each output axis
  int64_t total = 0;
};

template <class U>
__global__ void strided_copy_kernel(const U* __restrict__ in, U* __restrict__ out, Strided s) {
  ONYX_KERNEL_PROLOGUE();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < s.total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off = 0, rem = e;
    for (int a = s.rank - 1; a >= 0; --a) {
      off += (rem % s.dims[a]) * s.strides[a];
      rem /= s.dims[a];
    }
    out[e] = in[off];
  }
}

// out[b, c, r] = in[b, r, c] for in [batch, R, C], through 32x32 shared-memory
// tiles so that both the reads and the writes are coalesced. Block: 32 x 8.
template <class U>
__global__ void transpose_tiled_kernel(const U* __restrict__ in, U* __restrict__ out, int64_t batch, int64_t R,
                                       int64_t C) {
  ONYX_KERNEL_PROLOGUE();
  __shared__ U tile[32][33];
  const int64_t tiles_c = (C + 31) / 32, tiles_r = (R + 31) / 32;
  const int64_t tiles = batch * tiles_r * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t tc = t % tiles_c, rest = t / tiles_c;
    const int64_t tr = rest % tiles_r, b = rest / tiles_r;
    const U* src = in + b * R * C;
    U* dst = out + b * R * C;
    const int64_t c = tc * 32 + threadIdx.x;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
      const int64_t r = tr * 32 + k;
      if (r < R && c < C) tile[k][threadIdx.x] = src[r * C + c];
    }
    __syncthreads();
    const int64_t r = tr * 32 + threadIdx.x;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
      const int64_t cc = tc * 32 + k;
      if (cc < C && r < R) dst[cc * R + r] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

std::vector<int64_t> transpose_perm(const NodeView& n, size_t rank) {
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (!n.has_attr("perm")) {
    perm.resize(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);  // default: reverse
  }
  ONYX_CHECK(perm.size() == rank, "Transpose perm has ", perm.size(), " entries for an input of rank ", rank);
  for (int64_t& p : perm) p = norm_axis(p, static_cast<int64_t>(rank));
  return perm;
}

void run_transpose(KernelContext& ctx, CudaContext& cu) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.numel() == 0) return;
  const auto& d = in.shape().dims();
  const std::vector<int64_t> perm = transpose_perm(ctx, d.size());
  // Drop size-1 axes, then merge output-adjacent axes that are input-adjacent too.
  std::vector<int64_t> newidx(d.size(), -1);
  int64_t kept = 0;
  for (size_t a = 0; a < d.size(); ++a)
    if (d[a] != 1) newidx[a] = kept++;
  std::vector<int64_t> p1;  // perm over kept axes
  for (int64_t p : perm)
    if (newidx[p] >= 0) p1.push_back(newidx[p]);
  std::vector<int64_t> d1;
  for (int64_t v : d)
    if (v != 1) d1.push_back(v);
  // Runs of consecutive input axes, in output order.
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first input axis, merged size)
  for (size_t i = 0; i < p1.size(); ++i) {
    if (i > 0 && p1[i] == p1[i - 1] + 1) runs.back().second *= d1[p1[i]];
    else runs.push_back({p1[i], d1[p1[i]]});
  }
  const size_t r = runs.size();
  const size_t es = dtype_size(in.dtype());
  if (r <= 1) {
    ONYX_CUDA_CHECK(cudaMemcpyAsync(out.raw(), in.raw(), out.bytes(), cudaMemcpyDeviceToDevice, cu.stream));
    return;
  }
  // Input layout of the merged axes: runs sorted by their first input axis.
  std::vector<size_t> order(r);
  for (size_t i = 0; i < r; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return runs[a].first < runs[b].first; });
  std::vector<int64_t> in_dims(r), in_stride(r), perm2(r);  // perm2[output axis] = merged input axis
  for (size_t k = 0; k < r; ++k) {
    in_dims[k] = runs[order[k]].second;
    perm2[order[k]] = static_cast<int64_t>(k);
  }
  int64_t st = 1;
  for (size_t k = r; k-- > 0;) {
    in_stride[k] = st;
    st *= in_dims[k];
  }
  bool swap_last = perm2[r - 1] == static_cast<int64_t>(r - 2) && perm2[r - 2] == static_cast<int64_t>(r - 1);
  for (size_t k = 0; k + 2 < r; ++k) swap_last = swap_last && perm2[k] == static_cast<int64_t>(k);
  if (swap_last && es != 16) {
    const int64_t R = in_dims[r - 2], C = in_dims[r - 1];
    const int64_t batch = out.numel() / (R * C);
    const int64_t tiles = batch * ((R + 31) / 32) * ((C + 31) / 32);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{1} << 20));
    dispatch_width(static_cast<int>(es), [&](auto tag) {
      using U = typename decltype(tag)::type;
      launch_kernel(transpose_tiled_kernel<U>, blocks, dim3(32, 8), 0, cu, static_cast<const U*>(in.raw()),
                                                                         static_cast<U*>(out.raw()), batch, R, C);
    });
    ONYX_CUDA_CHECK_LAUNCH("Transpose (tiled)");
    return;
  }
  ONYX_CHECK(r <= static_cast<size_t>(kMaxRank), "Transpose on CUDA supports up to ", kMaxRank,
             " non-mergeable axes, got ", r);
  Strided s;
  s.rank = static_cast<int>(r);
  for (size_t i = 0; i < r; ++i) {
    s.dims[i] = in_dims[perm2[i]];
    s.strides[i] = in_stride[perm2[i]];
  }
  // When the innermost axis stays innermost, copy it in wider units.
  int w = static_cast<int>(es);
  if (perm2[r - 1] == static_cast<int64_t>(r - 1)) {
    w = pick_width(16, {s.dims[r - 1] * static_cast<int64_t>(es)}, {in.raw(), out.raw()});
    w = std::max(w, 1);
    const int64_t scale_num = static_cast<int64_t>(es), scale_den = w;  // units per element = es / w
    for (size_t i = 0; i < r; ++i) {
      if (i == r - 1) s.dims[i] = s.dims[i] * scale_num / scale_den;
      else s.strides[i] = s.strides[i] * scale_num / scale_den;  // a multiple of the inner run
    }
  }
  s.total = static_cast<int64_t>(out.bytes()) / w;
  dispatch_width(w, [&](auto tag) {
    using U = typename decltype(tag)::type;
    launch_kernel(strided_copy_kernel<U>, blocks_for(s.total, kThreads), kThreads, 0, cu,
                  static_cast<const U*>(in.raw()), static_cast<U*>(out.raw()), s);
  });
  ONYX_CUDA_CHECK_LAUNCH("Transpose");
}

// Slice: the starts/axes/steps inputs stay on the device; each block's first
// thread turns them into a base offset and per-axis strides (the output shape,
// from host-side inference, gives the counts, so `ends` is not needed).
struct SliceArgs {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
  int64_t start[kMaxRank] = {};  // host-known (opset < 10); otherwise 0
  int64_t step[kMaxRank] = {};   // host-known (opset < 10); otherwise 1
  const void* starts = nullptr;  // device arguments (opset >= 10); null when host-known
  const void* axes = nullptr;
  const void* steps = nullptr;
  int m = 0;  // entries in starts
  int starts64 = 1, axes64 = 1, steps64 = 1;
  int64_t total = 0;
};

template <class U>
__global__ void slice_kernel(const U* __restrict__ in, U* __restrict__ out, SliceArgs a) {
  ONYX_KERNEL_PROLOGUE();
  __shared__ int64_t stride[kMaxRank];
  __shared__ int64_t base;
  if (threadIdx.x == 0) {
    int64_t start[kMaxRank], step[kMaxRank];
    for (int i = 0; i < a.rank; ++i) {
      start[i] = a.start[i];
      step[i] = a.step[i];
    }
    if (a.starts) {
      for (int k = 0; k < a.m; ++k) {
        int64_t axis = a.axes ? load_index(a.axes, a.axes64 != 0, k) : k;
        if (axis < 0) axis += a.rank;
        if (axis < 0 || axis >= a.rank) continue;  // rejected by shape inference already
        const int64_t st = a.steps ? load_index(a.steps, a.steps64 != 0, k) : 1;
        const int64_t dim = a.in_dims[axis];
        int64_t s = load_index(a.starts, a.starts64 != 0, k);
        if (s < 0) s += dim;
        if (st > 0) s = s < 0 ? 0 : (s > dim ? dim : s);
        else if (dim > 0) s = s < 0 ? 0 : (s > dim - 1 ? dim - 1 : s);
        else s = 0;
        start[axis] = s;
        step[axis] = st;
      }
    }
    int64_t b = 0;
    for (int i = 0; i < a.rank; ++i) {
      b += start[i] * a.in_strides[i];
      stride[i] = step[i] * a.in_strides[i];
    }
    base = b;
  }
  __syncthreads();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < a.total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off = base, rem = e;
    for (int i = a.rank - 1; i >= 0; --i) {
      off += (rem % a.out_dims[i]) * stride[i];
      rem /= a.out_dims[i];
    }
    out[e] = in[off];
  }
}

void run_slice(KernelContext& ctx, CudaContext& cu) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.numel() == 0) return;
  const auto& d = in.shape().dims();
  const int64_t rank = static_cast<int64_t>(d.size());
  ONYX_CHECK(rank <= kMaxRank, "Slice on CUDA supports rank <= ", kMaxRank);
  SliceArgs a;
  a.rank = static_cast<int>(rank);
  a.total = out.numel();
  int64_t st = 1;
  for (int64_t i = rank; i-- > 0;) {
    a.out_dims[i] = out.shape()[i];
    a.in_dims[i] = d[i];
    a.in_strides[i] = st;
    st *= d[i];
    a.start[i] = 0;
    a.step[i] = 1;
  }
  if (ctx.opset() < 10) {
    // Attributes: clamp on the host, as the CPU op (steps are always 1 here).
    const auto starts = ctx.attr_ints("starts");
    std::vector<int64_t> axes = ctx.attr_ints("axes");
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    ONYX_CHECK(axes.size() == starts.size(), "Slice: ", axes.size(), " axes for ", starts.size(), " starts");
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t axis = norm_axis(axes[i], rank), dim = d[axis];
      const int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
      a.start[axis] = std::clamp<int64_t>(s, 0, dim);
    }
  } else {
    const Tensor& starts = ctx.input(1);
    a.m = static_cast<int>(starts.numel());
    ONYX_CHECK(a.m <= rank, "Slice: ", a.m, " starts for an input of rank ", rank);
    a.starts = starts.raw();
    a.starts64 = starts.dtype() == DType::kInt64;
    if (ctx.has_input(3)) {
      a.axes = ctx.input(3).raw();
      a.axes64 = ctx.input(3).dtype() == DType::kInt64;
    }
    if (ctx.has_input(4)) {
      a.steps = ctx.input(4).raw();
      a.steps64 = ctx.input(4).dtype() == DType::kInt64;
    }
    if (a.m == 0) a.starts = nullptr;
  }
  dispatch_width(static_cast<int>(dtype_size(in.dtype())), [&](auto tag) {
    using U = typename decltype(tag)::type;
    launch_kernel(slice_kernel<U>, blocks_for(a.total, kThreads), kThreads, 0, cu, static_cast<const U*>(in.raw()),
                                                                             static_cast<U*>(out.raw()), a);
  });
  ONYX_CUDA_CHECK_LAUNCH("Slice");
}

// ---- supports() ----

CudaSupportFn data_support(const char* op, std::vector<size_t> index_inputs, bool rank8) {
  return [op, index_inputs, rank8](const Node& node, const std::vector<ValueType>& inputs) -> std::string {
    NodeView n(node);
    if (inputs.empty() || !movable(inputs[0].dtype)) return movable_reason(op);
    for (size_t i : index_inputs)
      if (n.has_input(i) && i < inputs.size() && inputs[i].dtype != DType::kInt32 && inputs[i].dtype != DType::kInt64)
        return cat(op, " on CUDA needs int32/int64 index inputs");
    if (rank8 && inputs[0].shape.rank_known && inputs[0].shape.dims.size() > static_cast<size_t>(kMaxRank))
      return cat(op, " on CUDA supports rank <= ", kMaxRank);
    return "";
  };
}

// ---- ScatterND (no reduction): data copied to the output, then one thread per updated element
// finds its place from its index tuple, read on the device; an index outside its axis sets the
// device error word and writes nothing ----

// The element offset an index tuple of m entries points at (added to `off`), negative entries
// counted from the end of their axis; false where an entry is outside its axis.
__device__ inline bool nd_offset(const int64_t* tuple, int m, const int64_t* dims, const int64_t* strides,
                                 int64_t& off) {
  bool in_range = true;
  for (int q = 0; q < m; ++q) {
    int64_t i = tuple[q];
    if (i < 0) i += dims[q];
    if (i < 0 || i >= dims[q]) in_range = false;
    off += i * strides[q];
  }
  return in_range;
}

struct ScatterNdArgs {
  int m;                      // index tuple length
  int64_t dims[kMaxRank];     // data's first m dims
  int64_t strides[kMaxRank];  // in elements
  int64_t tuples, slice;
  unsigned int* err;
};

template <class U>
__global__ void scatter_nd_kernel(const int64_t* __restrict__ idx, const U* __restrict__ upd, U* __restrict__ out,
                                  ScatterNdArgs a) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t total = a.tuples * a.slice;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / a.slice, j = e - t * a.slice;
    int64_t off = 0;
    if (!nd_offset(idx + t * a.m, a.m, a.dims, a.strides, off)) {
      atomicOr(a.err, kDeviceErrorIndexInput);
      continue;
    }
    out[off + j] = upd[e];
  }
}

void run_scatter_nd(KernelContext& ctx, CudaContext& cu) {
  const Tensor& data = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  Tensor& out = ctx.output(0);
  ONYX_CHECK(ind.dtype() == DType::kInt64 && upd.dtype() == data.dtype(), "ScatterND on CUDA: indices ",
             ind.type_str(), ", updates ", upd.type_str(), ", data ", data.type_str());
  const auto& dd = data.shape().dims();
  const auto& id = ind.shape().dims();
  ONYX_CHECK(!id.empty(), "ScatterND: indices must have rank >= 1");
  const int64_t m = id.back();
  ONYX_CHECK(m >= 1 && m <= static_cast<int64_t>(dd.size()) && m <= kMaxRank, "ScatterND: index tuples of length ", m,
             " do not fit data of rank ", dd.size());
  std::vector<int64_t> want(id.begin(), id.end() - 1);
  want.insert(want.end(), dd.begin() + m, dd.end());
  ONYX_CHECK(upd.shape().dims() == want, "ScatterND: updates have shape ", upd.shape().str(), ", expected ",
             Shape(want).str());
  ScatterNdArgs a{};
  a.m = static_cast<int>(m);
  a.tuples = prod(id, 0, id.size() - 1);
  a.slice = prod(dd, static_cast<size_t>(m), dd.size());
  for (int64_t q = 0; q < m; ++q) {
    a.dims[q] = dd[q];
    a.strides[q] = prod(dd, static_cast<size_t>(q) + 1, dd.size());
  }
  a.err = cu.error_word;
  if (out.raw() != data.raw() && out.bytes() > 0)
    ONYX_CUDA_CHECK(cudaMemcpyAsync(out.raw(), data.raw(), out.bytes(), cudaMemcpyDeviceToDevice, cu.stream));
  const int64_t total = a.tuples * a.slice;
  if (total == 0) return;
  dispatch_width(static_cast<int>(dtype_size(data.dtype())), [&](auto tag) {
    using U = typename decltype(tag)::type;
    launch_kernel(scatter_nd_kernel<U>, blocks_for(total, kThreads), kThreads, 0, cu, ind.data<int64_t>(),
                  static_cast<const U*>(upd.raw()), static_cast<U*>(out.raw()), a);
  });
  ONYX_CUDA_CHECK_LAUNCH("ScatterND");
}

// ---- GatherND: one thread per output element finds its source from its index tuple, read on the
// device (torch.export's Llama masks gather the attention mask by position pairs); an index
// outside its axis sets the device error word and writes a zero ----

struct GatherNdArgs {
  int m;                      // index tuple length
  int64_t dims[kMaxRank];     // data's dims b .. b + m - 1
  int64_t strides[kMaxRank];  // their strides, in elements
  int64_t tuples_per_batch;   // index tuples in one batch entry (indices.shape[b:-1])
  int64_t batch_stride;       // elements of data in one batch entry (data.shape[b:])
  int64_t slice;              // elements a tuple takes (data.shape[b + m:])
  int64_t total;              // output elements
  unsigned int* err;
};

template <class U>
__global__ void gather_nd_kernel(const U* __restrict__ data, const int64_t* __restrict__ idx, U* __restrict__ out,
                                 GatherNdArgs a) {
  ONYX_KERNEL_PROLOGUE();
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < a.total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / a.slice, j = e - t * a.slice;
    int64_t off = (t / a.tuples_per_batch) * a.batch_stride;
    if (!nd_offset(idx + t * a.m, a.m, a.dims, a.strides, off)) {
      atomicOr(a.err, kDeviceErrorIndexInput);
      out[e] = U{};
      continue;
    }
    out[e] = data[off + j];
  }
}

void run_gather_nd(KernelContext& ctx, CudaContext& cu) {
  const Tensor& data = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  Tensor& out = ctx.output(0);
  ONYX_CHECK(ind.dtype() == DType::kInt64, "GatherND on CUDA: indices ", ind.type_str(), " (int64 only)");
  const auto& dd = data.shape().dims();
  const auto& id = ind.shape().dims();
  const int64_t b = ctx.attr_int("batch_dims", 0);
  ONYX_CHECK(!id.empty(), "GatherND: indices must have rank >= 1");
  const int64_t m = id.back();
  ONYX_CHECK(b >= 0 && b < static_cast<int64_t>(id.size()) && b < static_cast<int64_t>(dd.size()),
             "GatherND: batch_dims ", b, " must be below the ranks of data (", dd.size(), ") and indices (", id.size(), ")");
  ONYX_CHECK(m >= 1 && b + m <= static_cast<int64_t>(dd.size()) && m <= kMaxRank, "GatherND: index tuples of length ",
             m, " do not fit data of rank ", dd.size(), " after ", b, " batch dims");
  for (int64_t q = 0; q < b; ++q)
    ONYX_CHECK(id[q] == dd[q], "GatherND: batch dim ", q, " is ", dd[q], " in data and ", id[q], " in indices");
  std::vector<int64_t> want(id.begin(), id.end() - 1);
  want.insert(want.end(), dd.begin() + b + m, dd.end());
  ONYX_CHECK(out.shape().dims() == want, "GatherND: output has shape ", out.shape().str(), ", expected ",
             Shape(want).str());
  GatherNdArgs a{};
  a.m = static_cast<int>(m);
  a.tuples_per_batch = prod(id, static_cast<size_t>(b), id.size() - 1);
  a.batch_stride = prod(dd, static_cast<size_t>(b), dd.size());
  a.slice = prod(dd, static_cast<size_t>(b + m), dd.size());
  for (int64_t q = 0; q < m; ++q) {
    a.dims[q] = dd[static_cast<size_t>(b + q)];
    a.strides[q] = prod(dd, static_cast<size_t>(b + q) + 1, dd.size());
  }
  a.total = out.numel();
  a.err = cu.error_word;
  if (a.total == 0) return;
  if (a.tuples_per_batch == 0) a.tuples_per_batch = 1;  // no tuples: no output either (total 0 above)
  dispatch_width(static_cast<int>(dtype_size(data.dtype())), [&](auto tag) {
    using U = typename decltype(tag)::type;
    launch_kernel(gather_nd_kernel<U>, blocks_for(a.total, kThreads), kThreads, 0, cu,
                  static_cast<const U*>(data.raw()), ind.data<int64_t>(), static_cast<U*>(out.raw()), a);
  });
  ONYX_CUDA_CHECK_LAUNCH("GatherND");
}

// Copy i of the batch: blocks (x, i) take its 16-byte pieces (bytes where an end is not 16-byte
// aligned) in a grid-stride loop.
constexpr int kCopyBatch = 64;  // copies per launch: 64 x 24 bytes of arguments
struct CopyBatch {
  const unsigned char* src[kCopyBatch];
  unsigned char* dst[kCopyBatch];
  uint64_t bytes[kCopyBatch];
};

__global__ void __launch_bounds__(256) copy_batch_kernel(CopyBatch b) {
  const int e = blockIdx.y;
  const unsigned char* s = b.src[e];
  unsigned char* d = b.dst[e];
  const uint64_t bytes = b.bytes[e], stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t done = 0;
  if (((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) & 15) == 0) {
    const uint64_t packs = bytes / 16;
    for (uint64_t k = first; k < packs; k += stride)
      reinterpret_cast<uint4*>(d)[k] = reinterpret_cast<const uint4*>(s)[k];
    done = packs * 16;
  }
  for (uint64_t k = done + first; k < bytes; k += stride) d[k] = s[k];
}

}  // namespace

void copy_batch_on_device(const Backend::DeviceCopy* copies, size_t n, cudaStream_t stream) {
  for (size_t at = 0; at < n; at += kCopyBatch) {
    const int count = static_cast<int>(std::min<size_t>(kCopyBatch, n - at));
    CopyBatch b{};
    uint64_t most = 0;
    for (int i = 0; i < count; ++i) {
      const Backend::DeviceCopy& c = copies[at + i];
      b.src[i] = static_cast<const unsigned char*>(c.src);
      b.dst[i] = static_cast<unsigned char*>(c.dst);
      b.bytes[i] = c.bytes;
      most = std::max<uint64_t>(most, c.bytes);
    }
    // About four 16-byte pieces a thread for the largest copy, at most 128 blocks a copy.
    const uint64_t blocks = std::min<uint64_t>(128, std::max<uint64_t>(1, (most + 256 * 64 - 1) / (256 * 64)));
    copy_batch_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(count)), 256, 0, stream>>>(b);
    ONYX_CUDA_CHECK_LAUNCH("copy_batch");
  }
}

void register_data_kernels(CudaKernelRegistry& r) {
  r.add(onnx_kernel("Gather", 1, run_gather, data_support("Gather", {1}, false)));
  r.add(onnx_kernel("Concat", 1, run_concat, [](const Node& node, const std::vector<ValueType>& inputs) -> std::string {
    for (const ValueType& v : inputs)
      if (!movable(v.dtype)) return movable_reason("Concat");
    return "";
  }));
  r.add(onnx_kernel("Split", 1, run_split, [](const Node& node, const std::vector<ValueType>& inputs) -> std::string {
    NodeView n(node);
    if (inputs.empty() || !movable(inputs[0].dtype)) return movable_reason("Split");
    if (n.opset() >= 13 && n.has_input(1)) {
      size_t absent = 0;
      for (size_t o = 0; o < n.num_outputs(); ++o) absent += n.has_output(o) ? 0 : 1;
      if (absent > 1) return "Split on CUDA with a split input needs all outputs but one present";
    }
    return "";
  }));
  r.add(onnx_kernel("Slice", 1, run_slice, data_support("Slice", {1, 2, 3, 4}, true)));
  r.add(onnx_kernel("Transpose", 1, run_transpose, data_support("Transpose", {}, false)));
  r.add(onnx_kernel("GatherND", 11, run_gather_nd, [](const Node&, const std::vector<ValueType>& in) -> std::string {
    if (in.size() < 2 || !movable(in[0].dtype) || in[1].dtype != DType::kInt64)
      return "GatherND on CUDA takes int64 indices and data of a fixed-size type";
    return "";
  }));
  r.add(onnx_kernel("ScatterND", 11, run_scatter_nd, [](const Node& node, const std::vector<ValueType>& in) -> std::string {
    NodeView n(node);
    if (n.opset() >= 16 && n.attr_string("reduction", "none") != "none")
      return "ScatterND on CUDA takes reduction 'none' (the others run on the CPU)";
    if (in.size() < 3 || !movable(in[0].dtype) || in[1].dtype != DType::kInt64 || in[2].dtype != in[0].dtype)
      return "ScatterND on CUDA takes int64 indices and updates of data's fixed-size type";
    return "";
  }));
}

}  // namespace onyx::cuda
