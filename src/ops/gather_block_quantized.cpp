// com.microsoft GatherBlockQuantized: a Gather from a block-quantized table, dequantized
// (format in ops/block_quant.h): the tied int4 embeddings of onnxruntime-genai's builder.
//
// Supported, as onnxruntime's CPU kernel takes uint8 data: data uint8 [d0, ..., packed last]
// holding `bits`-bit values along the last axis, gather_axis 0, quantize_axis the last axis;
// scales of the output's type with data's shape but ceil(last / block_size) on the last axis;
// zero_points uint8 packed like data (absent: 2^(bits-1)). Output: indices' shape followed by
// data's dimensions after the first, the last one unpacked. As the op's definition says, an
// index outside [-d0, d0) gives a row of zeros. The int4/uint4 and float8 data types are not
// supported (onyx has no such dtypes).
#include <vector>

#include "ops/block_quant.h"
#include "ops/common.h"
#include "ops/tensor_util.h"

namespace onyx {

namespace {

enum Input : size_t { kData, kIndices, kScales, kZeroPoints };

struct GbqGeometry {
  int64_t bits = 0, block_size = 0;
  int64_t rows = 0;       // data's first dimension (gathered)
  int64_t inner = 0;      // dimensions between the first and the last, multiplied
  int64_t cols = 0;       // the last dimension, unpacked
  int64_t col_bytes = 0;  // the last dimension of data (packed)
  int64_t col_blocks = 0;
};

GbqGeometry gbq_geometry(const NodeView& n, const Shape& data, DType data_dt, const Shape& scales, DType scales_dt,
                         const Shape* zero_points, DType zp_dt) {
  GbqGeometry g;
  g.bits = n.attr_int("bits", 4);
  check_quant_bits(g.bits);
  g.block_size = n.attr_int("block_size", 128);
  check_quant_block_size(g.block_size);
  ONYX_CHECK(data_dt == DType::kUInt8,
             "input 'data' must be uint8 (int4, uint4 and float8 data are not supported), got ", dtype_name(data_dt));
  const int64_t r = static_cast<int64_t>(data.rank());
  ONYX_CHECK(r >= 2, "input 'data' must have rank >= 2 (gathered rows, quantized values along the last axis), got ",
             data.str());
  const int64_t gather_axis = normalize_axis(n.attr_int("gather_axis", 0), r);
  const int64_t quantize_axis = normalize_axis(n.attr_int("quantize_axis", 1), r);
  ONYX_CHECK(gather_axis == 0, "gather_axis must be 0 for uint8 data, got ", n.attr_int("gather_axis", 0));
  ONYX_CHECK(quantize_axis == r - 1, "quantize_axis must be the last axis of uint8 data, got ",
             n.attr_int("quantize_axis", 1));
  g.rows = data[0];
  g.col_bytes = data[r - 1];
  g.cols = g.col_bytes * (8 / g.bits);
  g.inner = 1;
  for (int64_t i = 1; i < r - 1; ++i) g.inner *= data[i];
  g.col_blocks = (g.cols + g.block_size - 1) / g.block_size;
  ONYX_CHECK(dtype_is_float(scales_dt), "input 'scales' must be a float tensor, got ", dtype_name(scales_dt));
  std::vector<int64_t> want(data.dims());
  want.back() = g.col_blocks;
  ONYX_CHECK(scales == Shape(want), "input 'scales' must be ", Shape(want).str(), " (data's shape with ceil(", g.cols,
             " / block_size) blocks on the last axis), got ", scales.str());
  if (zero_points) {
    ONYX_CHECK(zp_dt == DType::kUInt8, "input 'zero_points' must be uint8 like data, got ", dtype_name(zp_dt));
    want.back() = packed_bytes(g.col_blocks, g.bits);
    ONYX_CHECK(*zero_points == Shape(want), "input 'zero_points' must be ", Shape(want).str(),
               " (packed like data), got ", zero_points->str());
  }
  return g;
}

void infer_gbq(InferContext& ctx) {
  ONYX_CHECK(ctx.num_inputs() >= 3 && ctx.has_input(kData) && ctx.has_input(kIndices) && ctx.has_input(kScales),
             "GatherBlockQuantized needs the inputs data, indices and scales");
  check_index_dtype(ctx.input_dtype(kIndices), "input 'indices'");
  const DType t = ctx.input_dtype(kScales);
  const PartialShape& idx = ctx.input_shape(kIndices);
  const bool zp = ctx.has_input(kZeroPoints);
  if (!ctx.input_shape(kData).fully_known() || !ctx.input_shape(kScales).fully_known() ||
      (zp && !ctx.input_shape(kZeroPoints).fully_known()) || !idx.rank_known) {
    ctx.set_output(0, t, PartialShape());
    return;
  }
  const Shape data = ctx.input_concrete_shape(kData);
  Shape zps;
  if (zp) zps = ctx.input_concrete_shape(kZeroPoints);
  const GbqGeometry g = gbq_geometry(ctx, data, ctx.input_dtype(kData), ctx.input_concrete_shape(kScales), t,
                                     zp ? &zps : nullptr, zp ? ctx.input_dtype(kZeroPoints) : DType::kUndefined);
  PartialShape y = idx;
  for (size_t i = 1; i < data.rank(); ++i) y.dims.push_back(data[i]);
  y.dims.back() = g.cols;
  ctx.set_output(0, t, y);
}

template <class T>
void gbq_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(kData);
  const Tensor& scales = ctx.input(kScales);
  const Tensor* zp = ctx.has_input(kZeroPoints) ? &ctx.input(kZeroPoints) : nullptr;
  const GbqGeometry g = gbq_geometry(ctx, data.shape(), data.dtype(), scales.shape(), scales.dtype(),
                                     zp ? &zp->shape() : nullptr, zp ? zp->dtype() : DType::kUndefined);
  const Tensor& indices = ctx.input(kIndices);
  check_index_dtype(indices.dtype(), "input 'indices'");
  const uint8_t* pd = data.data<uint8_t>();
  const T* ps = scales.data<T>();
  const uint8_t* pz = zp ? zp->data<uint8_t>() : nullptr;
  const int64_t zp_row = packed_bytes(g.col_blocks, g.bits);
  const int64_t row_out = g.inner * g.cols;  // output values per gathered index
  T* y = ctx.output(0).data<T>();
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t row = index_at(indices, i);
    if (row < 0) row += g.rows;
    T* out = y + i * row_out;
    if (row < 0 || row >= g.rows) {  // out of range: zeros, as the op defines
      std::fill(out, out + row_out, static_cast<T>(0.0f));
      continue;
    }
    for (int64_t in = 0; in < g.inner; ++in) {
      const int64_t line = row * g.inner + in;  // one quantized line along the last axis
      const uint8_t* values = pd + line * g.col_bytes;
      for (int64_t c = 0; c < g.cols; ++c) {
        const int64_t blk = c / g.block_size;
        const double scale = static_cast<double>(static_cast<compute_t<T>>(ps[line * g.col_blocks + blk]));
        const int zero = pz ? packed_value(pz + line * zp_row, blk, g.bits) : default_zero_point(g.bits);
        const double v = (packed_value(values, c, g.bits) - zero) * scale;
        out[in * g.cols + c] = static_cast<T>(static_cast<compute_t<T>>(v));
      }
    }
  }
}

}  // namespace

void register_gather_block_quantized_ops(OpRegistry& r) {
  r.add(domain_op("com.microsoft", "GatherBlockQuantized", 1, infer_gbq, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(kScales).dtype(), "GatherBlockQuantized",
                         [&](auto tag) { gbq_kernel<typename decltype(tag)::type>(ctx); });
  }));
}

}  // namespace onyx
