// Convolution, pooling and resize ops against direct float64 loop references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "cpu/gemm.h"
#include "cpu/thread_pool.h"
#include "cpu/winograd.h"
#include "graph_builder.h"
#include "op_test_util.h"
#include "passes/optimize.h"

namespace onyx {

namespace {

double at(const Tensor& t, int64_t i) { return t.get_as_double(i); }

struct Conv2dParams {
  int64_t group = 1;
  std::vector<int64_t> strides{1, 1}, dilations{1, 1}, pads{0, 0, 0, 0};
};

// y[n, m, oh, ow] = b[m] + sum_{c in group, kh, kw} x[n, c, ih, iw] * w[m, c', kh, kw].
std::vector<double> conv2d_reference(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2dParams& p,
                                     Shape& out_shape) {
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t M = w.shape()[0], CG = w.shape()[1], KH = w.shape()[2], KW = w.shape()[3];
  const int64_t OH = (H + p.pads[0] + p.pads[2] - (p.dilations[0] * (KH - 1) + 1)) / p.strides[0] + 1;
  const int64_t OW = (W + p.pads[1] + p.pads[3] - (p.dilations[1] * (KW - 1) + 1)) / p.strides[1] + 1;
  out_shape = Shape{N, M, OH, OW};
  std::vector<double> y(static_cast<size_t>(N * M * OH * OW));
  std::vector<double> xv(x.numel()), wv(w.numel());
  for (int64_t i = 0; i < x.numel(); ++i) xv[i] = at(x, i);
  for (int64_t i = 0; i < w.numel(); ++i) wv[i] = at(w, i);
  const int64_t MG = M / p.group;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b ? at(*b, m) : 0.0;
          const int64_t g = m / MG;
          for (int64_t cc = 0; cc < CG; ++cc)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * p.strides[0] - p.pads[0] + kh * p.dilations[0];
                int64_t iw = ow * p.strides[1] - p.pads[1] + kw * p.dilations[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t c = g * CG + cc;
                acc += xv[((n * C + c) * H + ih) * W + iw] * wv[((m * CG + cc) * KH + kh) * KW + kw];
              }
          y[((n * M + m) * OH + oh) * OW + ow] = acc;
        }
  return y;
}

// A 2-D convolution's strides, dilations and pads (one group).
Conv2dParams params(std::vector<int64_t> strides, std::vector<int64_t> dilations, std::vector<int64_t> pads) {
  Conv2dParams p;
  p.strides = std::move(strides), p.dilations = std::move(dilations), p.pads = std::move(pads);
  return p;
}

std::vector<Attribute> conv_attrs(const Conv2dParams& p) {
  return {test::attr_int("group", p.group), test::attr_ints("strides", p.strides),
          test::attr_ints("dilations", p.dilations), test::attr_ints("pads", p.pads)};
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(at(got, i), want[i], tol * (1 + std::abs(want[i]))) << "at flat index " << i;
}

// As expect_close, the tolerance scaled by the output's largest magnitude: a float32 sum of many
// products errs in proportion to the terms' size, which an output near zero (cancellation) does
// not show.
void expect_close_to_scale(const Tensor& got, const std::vector<double>& want, double tol) {
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(at(got, i), want[i], tol * (1 + scale)) << "at flat index " << i << " (largest output " << scale << ")";
}

}  // namespace

TEST(OpsConv, Conv2dStridePadDilationGroupMatchesReference) {
  Conv2dParams p;
  p.group = 2;
  p.strides = {2, 1};
  p.dilations = {1, 2};
  p.pads = {1, 0, 2, 1};
  Tensor x = test::random_tensor<float>(Shape{2, 4, 9, 11});
  Tensor w = test::random_tensor<float>(Shape{6, 2, 3, 3});
  Tensor b = test::random_tensor<float>(Shape{6});
  Shape shape;
  std::vector<double> want = conv2d_reference(x, w, &b, p, shape);
  auto out = test::run_op("Conv", {x, w, b}, conv_attrs(p));
  ASSERT_EQ(out[0].shape(), shape);
  expect_close(out[0], want, 1e-4);
}

TEST(OpsConv, Conv2dGeometriesOfTheDirectPathMatchReference) {
  // Every 2-D float32 convolution that is not depthwise or pointwise reads its padded image's
  // phases through offsets (conv_direct_2d): strides 1 to 3 per axis, pads larger than the
  // kernel's reach and uneven, dilations, groups, odd and one-column widths, a batch, and
  // onyx::FusedConv's residual and activation added as the result is copied out.
  struct Case {
    int64_t n, c, m, group, h, w, kh, kw;
    Conv2dParams p;
  };
  const Case cases[] = {
      {1, 3, 16, 1, 23, 23, 3, 3, params({2, 2}, {1, 1}, {1, 1, 1, 1})},   // a stem, odd size
      {1, 3, 8, 1, 20, 21, 7, 7, params({2, 2}, {1, 1}, {3, 3, 3, 3})},    // resnet's stem
      {1, 8, 12, 1, 9, 9, 1, 1, params({2, 2}, {1, 1}, {0, 0, 0, 0})},     // a strided 1x1
      {2, 6, 13, 1, 10, 17, 3, 3, params({1, 1}, {1, 1}, {1, 1, 1, 1})},   // batch 2
      {1, 5, 7, 1, 8, 11, 3, 5, params({1, 2}, {2, 1}, {2, 0, 1, 3})},     // mixed, uneven pads
      {1, 4, 6, 2, 12, 13, 3, 3, params({3, 2}, {1, 2}, {0, 2, 2, 1})},    // groups, stride 3
      {1, 2, 3, 1, 6, 1, 3, 1, params({1, 1}, {1, 1}, {1, 0, 1, 0})},      // one column
      {1, 3, 5, 1, 5, 6, 3, 3, params({1, 1}, {1, 1}, {4, 4, 4, 4})},      // pads past the kernel
      {1, 40, 33, 1, 14, 14, 3, 3, params({1, 1}, {1, 1}, {1, 1, 1, 1})},  // K past one block
      {1, 4, 10, 1, 31, 29, 3, 3, params({2, 2}, {1, 1}, {1, 0, 2, 1})},   // a larger stride-2 image
      {1, 3, 9, 1, 27, 19, 5, 3, params({1, 1}, {2, 1}, {3, 1, 2, 1})},    // dilated rows, uneven pads
  };
  // At 1, 2 and 3 threads: the copies into the planes split by channel, the product by its own
  // tasks, the copies out by channel.
  for (int threads : {1, 2, 3}) {
  SCOPED_TRACE(threads);
  cpu::ThreadPool pool(threads);
  cpu::PoolScope scope(&pool);
  int case_no = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(case_no);
    Conv2dParams p = c.p;
    p.group = c.group;
    Tensor x = test::random_tensor<float>(Shape{c.n, c.c, c.h, c.w});
    Tensor w = test::random_tensor<float>(Shape{c.m, c.c / c.group, c.kh, c.kw});
    Tensor b = test::random_tensor<float>(Shape{c.m});
    Shape shape;
    std::vector<double> want = conv2d_reference(x, w, &b, p, shape);
    auto out = test::run_op("Conv", {x, w, b}, conv_attrs(p));
    ASSERT_EQ(out[0].shape(), shape);
    expect_close(out[0], want, 1e-4);
    // The same with a residual and an activation (onyx::FusedConv).
    Tensor z = test::random_tensor<float>(shape);
    auto attrs = conv_attrs(p);
    attrs.push_back(test::attr_string("activation", case_no % 2 ? "relu" : "hard_swish"));
    auto fused = test::run_op("FusedConv", {x, w, b, z}, attrs, 1, 1, "onyx");
    std::vector<double> want_fused(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const double v = want[i] + z.get_as_double(static_cast<int64_t>(i));
      want_fused[i] = case_no % 2 ? std::max(v, 0.0) : v * std::clamp(v / 6 + 0.5, 0.0, 1.0);
    }
    expect_close(fused[0], want_fused, 1e-4);
    ++case_no;
  }
  }
}

TEST(OpsConv, DepthwiseConv2dGeometriesMatchReference) {
  // A group per channel takes the depthwise kernel (cpu::depthwise_conv2d): MobileNet's
  // geometries (3 x 3 and 5 x 5, strides 1 and 2, 7 x 7 and 14 x 14 images), uneven pads
  // (more at the end than the start and the reverse), rectangular kernels and strides,
  // dilations, a batch, one column; with onyx::FusedConv's activation too.
  struct Case {
    int64_t n, c, h, w, kh, kw;
    Conv2dParams p;
  };
  const Case cases[] = {
      {1, 6, 7, 7, 5, 5, params({1, 1}, {1, 1}, {2, 2, 2, 2})},      // MobileNet's last stage
      {1, 5, 14, 14, 5, 5, params({2, 2}, {1, 1}, {2, 2, 2, 2})},    // 14 -> 7, 5 x 5
      {1, 4, 28, 28, 3, 3, params({2, 2}, {1, 1}, {1, 1, 1, 1})},    // 28 -> 14
      {2, 3, 9, 10, 3, 3, params({1, 1}, {1, 1}, {0, 1, 2, 3})},     // uneven pads, a batch
      {1, 3, 11, 13, 3, 5, params({2, 1}, {1, 2}, {3, 0, 0, 2})},    // rectangular, dilated
      {1, 2, 8, 9, 3, 3, params({3, 2}, {2, 1}, {1, 2, 1, 0})},      // stride 3
      {1, 3, 6, 1, 3, 3, params({1, 1}, {1, 1}, {1, 1, 1, 1})},      // one column
      {1, 4, 37, 35, 3, 3, params({2, 2}, {1, 1}, {0, 0, 1, 1})},    // wide stride-2 rows
  };
  int case_no = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(case_no);
    Conv2dParams p = c.p;
    p.group = c.c;
    Tensor x = test::random_tensor<float>(Shape{c.n, c.c, c.h, c.w});
    Tensor w = test::random_tensor<float>(Shape{c.c, 1, c.kh, c.kw});
    Tensor b = test::random_tensor<float>(Shape{c.c});
    Shape shape;
    std::vector<double> want = conv2d_reference(x, w, &b, p, shape);
    auto out = test::run_op("Conv", {x, w, b}, conv_attrs(p));
    ASSERT_EQ(out[0].shape(), shape);
    expect_close(out[0], want, 1e-5);
    auto attrs = conv_attrs(p);
    attrs.push_back(test::attr_string("activation", case_no % 2 ? "relu" : "hard_swish"));
    auto fused = test::run_op("FusedConv", {x, w, b}, attrs, 1, 1, "onyx");
    ASSERT_EQ(fused[0].shape(), shape);
    std::vector<double> want_fused(want.size());
    for (size_t i = 0; i < want.size(); ++i)
      want_fused[i] = case_no % 2 ? std::max(want[i], 0.0) : want[i] * std::clamp(want[i] / 6 + 0.5, 0.0, 1.0);
    expect_close(fused[0], want_fused, 1e-5);
    ++case_no;
  }
}

TEST(OpsConv, FusedConvWithWeightsInPanelsMatchesReference) {
  // onyx::FusedConv with w_panels = 1 (passes/fuse_cpu.h): each group's W^T packed (cpu::pack_b),
  // the pixels the product's rows: pointwise (the image read in place), 3 x 3 and strided
  // (im2col), groups, a 1 x 1 image, an image of few rows (fewer than a tile), a batch, with and
  // without the residual and activation.
  struct Case {
    int64_t n, c, m, group, h, w, kh, kw, stride, pad;
  };
  const Case cases[] = {
      {1, 40, 32, 1, 7, 7, 1, 1, 1, 0},    // ResNet's last stage, smaller
      {1, 24, 48, 1, 7, 7, 3, 3, 1, 1},    // 3 x 3 over 49 pixels
      {2, 9, 16, 1, 9, 11, 3, 3, 2, 1},    // strided, a batch
      {1, 8, 32, 2, 6, 5, 3, 3, 1, 1},     // groups of 16 output channels
      {1, 33, 16, 1, 1, 1, 1, 1, 1, 0},    // a 1 x 1 image
      {1, 20, 16, 1, 2, 1, 1, 1, 1, 0},    // two pixels
      {1, 300, 64, 1, 14, 14, 1, 1, 1, 0},  // K past one block, 196 pixels
      {1, 96, 32, 1, 12, 13, 3, 3, 1, 1},   // im2col split over the threads by channels
  };
  int case_no = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(case_no);
    Conv2dParams p;
    p.group = c.group;
    p.strides = {c.stride, c.stride};
    p.pads = {c.pad, c.pad, c.pad, c.pad};
    Tensor x = test::random_tensor<float>(Shape{c.n, c.c, c.h, c.w});
    Tensor w = test::random_tensor<float>(Shape{c.m, c.c / c.group, c.kh, c.kw});
    Tensor b = test::random_tensor<float>(Shape{c.m});
    Tensor wp(DType::kFloat32, w.shape());
    const int64_t mg = c.m / c.group, kg = w.numel() / c.m;
    for (int64_t g = 0; g < c.group; ++g)
      cpu::pack_b(w.data<float>() + g * mg * kg, kg, true, kg, mg, wp.data<float>() + g * mg * kg);
    Shape shape;
    std::vector<double> want = conv2d_reference(x, w, &b, p, shape);
    auto attrs = conv_attrs(p);
    attrs.push_back(test::attr_int("w_panels", 1));
    auto plain = test::run_op("FusedConv", {x, wp, b}, attrs, 1, 1, "onyx");
    ASSERT_EQ(plain[0].shape(), shape);
    expect_close_to_scale(plain[0], want, 1e-5);
    {  // three threads (im2col split by channels, the products by tiles): the same sums
      cpu::ThreadPool pool(3);
      cpu::PoolScope scope(&pool);
      auto three = test::run_op("FusedConv", {x, wp, b}, attrs, 1, 1, "onyx");
      ASSERT_EQ(three[0].shape(), shape);
      for (int64_t i = 0; i < three[0].numel(); ++i)
        ASSERT_EQ(three[0].data<float>()[i], plain[0].data<float>()[i]) << "three threads at " << i;
    }
    Tensor z = test::random_tensor<float>(shape);
    for (int with_z = 0; with_z < 2; ++with_z) {
      auto a2 = attrs;
      a2.push_back(test::attr_string("activation", (case_no + with_z) % 2 ? "relu" : "hard_swish"));
      std::vector<Tensor> in{x, wp, b};
      if (with_z) in.push_back(z);
      auto fused = test::run_op("FusedConv", in, a2, 1, 1, "onyx");
      std::vector<double> want_fused(want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        const double v = want[i] + (with_z ? z.get_as_double(static_cast<int64_t>(i)) : 0.0);
        want_fused[i] = (case_no + with_z) % 2 ? std::max(v, 0.0) : v * std::clamp(v / 6 + 0.5, 0.0, 1.0);
      }
      expect_close_to_scale(fused[0], want_fused, 1e-5);
    }
    ++case_no;
  }
}

TEST(OpsConv, FusedConvWithWinogradWeightsMatchesFloat64) {
  // onyx::FusedConv with w_winograd = 2 or 4 (cpu::winograd_weights, [16 or 36, M, C]) against
  // a float64 direct convolution: odd sizes (partial tiles in both directions), pads 1, 0 and
  // uneven, a batch, an image of one pixel, one wide enough for several vectors of tiles a row
  // and several blocks of tile rows; bias, then a residual and relu or hard_swish.
  // The error is measured against each output's magnitude (|b| + sum |x w| (+ |z|): what a
  // float32 sum of those terms is off by a multiple of epsilon of). Over 65 draws of these
  // cases the largest was 1.7e-7 of it for F(2x2, 3x3), about one float32 epsilon (the direct
  // product's own error is of that order), and 2.5e-6 for F(4x4, 3x3), whose transforms
  // multiply by up to 5 (inputs) and 1/4-1/24 (weights) with sums of both signs. The bounds
  // leave about 2.5x over those.
  struct Case {
    int64_t n, c, m, h, w;
    std::vector<int64_t> pads;  // top, left, bottom, right
  };
  const Case cases[] = {
      {2, 32, 48, 9, 11, {1, 1, 1, 1}},   // a batch, partial tiles
      {1, 40, 32, 7, 7, {1, 1, 1, 1}},    // ResNet's last stage's image
      {1, 32, 36, 8, 13, {0, 0, 0, 0}},   // no padding; rows not a multiple of the tile
      {1, 33, 35, 10, 6, {0, 1, 1, 0}},   // uneven pads
      {1, 32, 32, 1, 1, {1, 1, 1, 1}},    // one pixel
      {1, 64, 64, 57, 57, {1, 1, 1, 1}},  // several vectors of tiles a row, several blocks of rows
  };
  for (int tile : {2, 4}) {
    SCOPED_TRACE(tile);
    const double bound = tile == 2 ? 5e-7 : 6e-6;
    double worst = 0;
    int case_no = 0;
    for (const Case& c : cases) {
      SCOPED_TRACE(case_no);
      Tensor x = test::random_tensor<float>(Shape{c.n, c.c, c.h, c.w}, -1, 1);
      Tensor w = test::random_tensor<float>(Shape{c.m, c.c, 3, 3}, -1, 1);
      Tensor b = test::random_tensor<float>(Shape{c.m}, -1, 1);
      Tensor u(DType::kFloat32, Shape{(tile + 2) * (tile + 2), c.m, c.c});
      cpu::winograd_weights(w.data<float>(), c.m, c.c, tile, u.data<float>());
      const int64_t oh = c.h + c.pads[0] + c.pads[2] - 2, ow = c.w + c.pads[1] + c.pads[3] - 2;
      std::vector<double> want(static_cast<size_t>(c.n * c.m * oh * ow)), mag(want.size());
      const float* px = x.data<float>();
      const float* pw = w.data<float>();
      for (int64_t n = 0; n < c.n; ++n)
        for (int64_t m = 0; m < c.m; ++m)
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              double s = b.data<float>()[m], a = std::abs(s);
              for (int64_t ci = 0; ci < c.c; ++ci)
                for (int64_t ki = 0; ki < 3; ++ki)
                  for (int64_t kj = 0; kj < 3; ++kj) {
                    const int64_t iy = oy - c.pads[0] + ki, ix = ox - c.pads[1] + kj;
                    if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
                    const double t =
                        double(px[((n * c.c + ci) * c.h + iy) * c.w + ix]) * pw[((m * c.c + ci) * 3 + ki) * 3 + kj];
                    s += t;
                    a += std::abs(t);
                  }
              const size_t i = static_cast<size_t>(((n * c.m + m) * oh + oy) * ow + ox);
              want[i] = s;
              mag[i] = a;
            }
      std::vector<Attribute> attrs{test::attr_ints("pads", c.pads), test::attr_int("w_winograd", tile)};
      const Shape shape{c.n, c.m, oh, ow};
      const Tensor z = test::random_tensor<float>(shape, -1, 1);
      for (int variant = 0; variant < 3; ++variant) {  // plain; relu; residual and hard_swish
        auto a2 = attrs;
        std::vector<Tensor> in{x, u, b};
        if (variant == 1) a2.push_back(test::attr_string("activation", "relu"));
        if (variant == 2) {
          a2.push_back(test::attr_string("activation", "hard_swish"));
          in.push_back(z);
        }
        auto got = test::run_op("FusedConv", in, a2, 1, 1, "onyx");
        ASSERT_EQ(got[0].shape(), shape);
        {  // split over two threads (by blocks of tile rows where each thread has rows and the
           // images outweigh the transformed weights, as the 57 x 57 case; else by channels and
           // transformed matrices, as the 7 x 7 one): the same sums
          cpu::ThreadPool pool(2);
          cpu::PoolScope scope(&pool);
          auto two = test::run_op("FusedConv", in, a2, 1, 1, "onyx");
          ASSERT_EQ(two[0].shape(), shape);
          for (int64_t i = 0; i < two[0].numel(); ++i)
            ASSERT_EQ(two[0].data<float>()[i], got[0].data<float>()[i]) << "two threads, variant " << variant << " at " << i;
        }
        for (size_t i = 0; i < want.size(); ++i) {
          double v = want[i] + (variant == 2 ? z.data<float>()[i] : 0.0);
          const double scale = mag[i] + (variant == 2 ? std::abs(z.data<float>()[i]) : 0.0);
          if (variant == 1) v = std::max(v, 0.0);
          if (variant == 2) v = v * std::clamp(v / 6 + 0.5, 0.0, 1.0);
          // (hard_swish's slope is at most 1.5 where the result moves with its input.)
          const double err = std::abs(got[0].data<float>()[i] - v) / scale;
          worst = std::max(worst, err);
          ASSERT_LE(err, bound) << "variant " << variant << " at flat index " << i << ": got "
                                << got[0].data<float>()[i] << ", want " << v;
        }
      }
      ++case_no;
    }
    std::printf("F(%dx%d, 3x3): largest error / magnitude %.3g\n", tile, tile, worst);
  }
}

// The fused graph computes what the unfused one does: every output of both executors on each of
// `inputs`, within tol * (1 + |want|).
static void expect_graphs_agree(Graph& plain, Graph& fused, const std::vector<Tensor>& inputs, double tol) {
  auto alloc = make_cpu_allocator();
  GraphExecutor e1(plain, OpRegistry::global(), alloc, SessionOptions{});
  GraphExecutor e2(fused, OpRegistry::global(), alloc, SessionOptions{});
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto want = e1.run({inputs[k]}), got = e2.run({inputs[k]});
    ASSERT_EQ(want.size(), got.size());
    for (size_t o = 0; o < want.size(); ++o) {
      ASSERT_EQ(want[o].shape(), got[o].shape());
      for (int64_t i = 0; i < want[o].numel(); ++i)
        ASSERT_NEAR(got[o].data<float>()[i], want[o].data<float>()[i], tol * (1 + std::abs(want[o].data<float>()[i])))
            << "input " << k << ", output " << o << " at " << i;
    }
  }
}

TEST(OpsConv, CpuFusionTransformsThreeByThreeWeightsForWinograd) {
  // passes/fuse_cpu.h: a 3 x 3 convolution of stride 1 with enough channels gets Winograd
  // weights (its only reader); a strided one, a grouped one and a narrow one do not.
  test::GraphBuilder b;
  const int x = b.input("x");
  const std::vector<Attribute> pad1{test::attr_ints("pads", {1, 1, 1, 1})};
  const int c1 = b.node("Conv", {x, b.init("w1", test::random_tensor<float>(Shape{48, 32, 3, 3}, -0.2, 0.2)),
                                 b.init("b1", test::random_tensor<float>(Shape{48}, -1, 1))}, pad1);
  const int r1 = b.node("Relu", {c1});
  auto strided = pad1;
  strided.push_back(test::attr_ints("strides", {2, 2}));
  const int c2 = b.node("Conv", {r1, b.init("w2", test::random_tensor<float>(Shape{32, 48, 3, 3}, -0.2, 0.2))}, strided);
  auto grouped = pad1;
  grouped.push_back(test::attr_int("group", 2));
  const int c3 = b.node("Conv", {c2, b.init("w3", test::random_tensor<float>(Shape{32, 16, 3, 3}, -0.2, 0.2))}, grouped);
  const int c4 = b.node("Conv", {c3, b.init("w4", test::random_tensor<float>(Shape{16, 32, 3, 3}, -0.2, 0.2))}, pad1);
  b.g.outputs = {c4};
  Graph plain = b.g, fused = b.g;
  const OptimizeReport r = optimize_graph(fused, SessionOptions{}, Device::cpu());
  EXPECT_EQ(r.cpu.conv_winograd, 1);
  EXPECT_FALSE(fused.initializers.count(fused.find_value("w1")));
  for (const char* w : {"w2", "w3", "w4"}) EXPECT_TRUE(fused.initializers.count(fused.find_value(w))) << w;
  expect_graphs_agree(plain, fused, {test::random_tensor<float>(Shape{1, 32, 11, 9}, -1, 1)}, 1e-4);
}

TEST(OpsConv, CpuFusionKeepsLargeConvWeightsInPanelsAndComputesTheSame) {
  // passes/fuse_cpu.h: weights that cpu::conv_panels_pay picks go into panels (their only
  // reader), a bare Conv becoming a FusedConv for it; small ones and shared ones stay.
  const int64_t big = 1024;  // 1024 x 1024 x 1 x 1: 4 MiB
  ASSERT_TRUE(cpu::conv_panels_pay(big, big));
  ASSERT_FALSE(cpu::conv_panels_pay(64, 64 * 9));
  test::GraphBuilder b;
  const int x = b.input("x");
  const int c1 = b.node("Conv", {x, b.init("w1", test::random_tensor<float>(Shape{big, 64, 1, 1}, -1, 1))});
  const int c2 = b.node("Conv", {b.node("Relu", {c1}), b.init("w2", test::random_tensor<float>(Shape{big, big, 1, 1}, -0.05f, 0.05f)),
                                 b.init("b2", test::random_tensor<float>(Shape{big}, -1, 1))});
  const int r2 = b.node("Relu", {c2});
  const int c3 = b.node("Conv", {r2, b.init("w3", test::random_tensor<float>(Shape{128, big, 3, 3}, -0.02f, 0.02f))},
                        {test::attr_ints("pads", {1, 1, 1, 1})});
  b.g.outputs = {c3};
  Graph plain = b.g, fused = b.g;
  const OptimizeReport r = optimize_graph(fused, SessionOptions{}, Device::cpu());
  EXPECT_EQ(r.cpu.conv_panels, 2);  // w2 (4 MiB) and w3 (4.5 MiB); w1 (256 KiB) stays
  for (const char* w : {"w2", "w3"}) EXPECT_FALSE(fused.initializers.count(fused.find_value(w))) << w;
  EXPECT_TRUE(fused.initializers.count(fused.find_value("w1")));
  expect_graphs_agree(plain, fused, {test::random_tensor<float>(Shape{1, 64, 5, 6}, -1, 1)}, 2e-5);
}

TEST(OpsConv, CpuFusionKeepsOnePixelConvWeightsInPanelsAndComputesTheSame) {
  // passes/fuse_cpu.h: a squeeze-and-excitation block's 1 x 1 convolutions read one pixel (a
  // global pool's output, then what the first convolution and its activation make of it): their
  // weights go into panels whatever their size where the outputs fill whole panels. A 1 x 1
  // convolution over the image itself, and one of 24 outputs, keep theirs.
  test::GraphBuilder b;
  const int x = b.input("x");
  const int pooled = b.node("GlobalAveragePool", {x});
  const int fc1 = b.node("Conv", {pooled, b.init("w_fc1", test::random_tensor<float>(Shape{32, 48, 1, 1}, -0.3f, 0.3f)),
                                  b.init("b_fc1", test::random_tensor<float>(Shape{32}, -1, 1))});
  const int fc2 = b.node("Conv", {b.node("Relu", {fc1}), b.init("w_fc2", test::random_tensor<float>(Shape{48, 32, 1, 1}, -0.3f, 0.3f)),
                                  b.init("b_fc2", test::random_tensor<float>(Shape{48}, -1, 1))});
  const int scaled = b.node("Mul", {x, b.node("HardSigmoid", {fc2})});
  const int narrow = b.node("Conv", {b.node("GlobalMaxPool", {scaled}),
                                     b.init("w_narrow", test::random_tensor<float>(Shape{24, 48, 1, 1}, -0.3f, 0.3f))});
  const int image = b.node("Conv", {scaled, b.init("w_image", test::random_tensor<float>(Shape{32, 48, 1, 1}, -0.3f, 0.3f))});
  b.g.outputs = {narrow, image};
  Graph plain = b.g, fused = b.g;
  const OptimizeReport r = optimize_graph(fused, SessionOptions{}, Device::cpu());
  EXPECT_EQ(r.cpu.conv_panels, 2);
  for (const char* w : {"w_fc1", "w_fc2"}) EXPECT_FALSE(fused.initializers.count(fused.find_value(w))) << w;
  for (const char* w : {"w_narrow", "w_image"}) EXPECT_TRUE(fused.initializers.count(fused.find_value(w))) << w;
  expect_graphs_agree(plain, fused,
                      {test::random_tensor<float>(Shape{1, 48, 5, 6}, -1, 1),
                       test::random_tensor<float>(Shape{3, 48, 5, 6}, -1, 1)},
                      2e-5);
}

TEST(OpsConv, CpuFusionKeepsSmallImageConvWeightsInPanelsWhereTheSizeIsDeclared) {
  // passes/fuse_cpu.h: where the graph's input declares its image size, a 1 x 1 convolution
  // known to write at most 64 pixels (cpu::conv_panels_pay_for) keeps its weights in panels: here
  // the one over the 7 x 7 image a strided convolution makes; not the one over the 14 x 14 input,
  // nor the 3 x 3 one, nor one of 24 outputs. Without the declared size, none.
  auto build = [](bool declared) {
    test::GraphBuilder b;
    const int x = b.input("x");
    if (declared) {
      TypeInfo& t = b.g.values[x].declared;
      t.category = TypeInfo::Category::kTensor;
      t.dtype = DType::kFloat32;
      t.rank_known = true;
      t.dims = {1, 48, 14, 14};
      t.dim_params.assign(4, "");
    }
    const int c1 = b.node("Conv", {x, b.init("w1", test::random_tensor<float>(Shape{32, 48, 3, 3}, -0.1f, 0.1f))},
                          {test::attr_ints("strides", {2, 2}), test::attr_ints("pads", {1, 1, 1, 1})});
    const int c2 = b.node("Conv", {b.node("Relu", {c1}), b.init("w2", test::random_tensor<float>(Shape{64, 32, 1, 1}, -0.3f, 0.3f)),
                                   b.init("b2", test::random_tensor<float>(Shape{64}, -1, 1))});
    const int c3 = b.node("Conv", {x, b.init("w3", test::random_tensor<float>(Shape{32, 48, 1, 1}, -0.3f, 0.3f))});
    const int c4 = b.node("Conv", {b.node("Relu", {c2}), b.init("w4", test::random_tensor<float>(Shape{24, 64, 1, 1}, -0.3f, 0.3f))});
    b.g.outputs = {c3, c4};
    return b.g;
  };
  for (bool declared : {true, false}) {
    Graph plain = build(declared);
    Graph fused = plain;
    const OptimizeReport r = optimize_graph(fused, SessionOptions{}, Device::cpu());
    EXPECT_EQ(r.cpu.conv_panels, declared ? 1 : 0);
    EXPECT_EQ(!fused.initializers.count(fused.find_value("w2")), declared);
    for (const char* w : {"w1", "w3", "w4"}) EXPECT_TRUE(fused.initializers.count(fused.find_value(w))) << w;
    expect_graphs_agree(plain, fused, {test::random_tensor<float>(Shape{1, 48, 14, 14}, -1, 1)}, 2e-5);
  }
}

TEST(OpsConv, CpuFusionKeepsLargeReductionWeightsInPanelsOverFewPixels) {
  // cpu::conv_panels_pay_for: up to 256 pixels, a 1 x 1 convolution whose weights pass 512 KiB and
  // which reads at least twice the channels it writes keeps them in panels (ResNet-50's 14 x 14
  // 1024 -> 256 reductions): here 1040 -> 144 channels (585 KiB) over 12 x 12 pixels, with its
  // bias and ReLU; not 1040 -> 48 (195 KiB) beside it, nor either over 17 x 17 (289 pixels).
  auto build = [](int64_t side) {
    test::GraphBuilder b;
    const int x = b.input("x");
    TypeInfo& t = b.g.values[x].declared;
    t.category = TypeInfo::Category::kTensor;
    t.dtype = DType::kFloat32;
    t.rank_known = true;
    t.dims = {1, 1040, side, side};
    t.dim_params.assign(4, "");
    const int big = b.node("Conv", {x, b.init("w_big", test::random_tensor<float>(Shape{144, 1040, 1, 1}, -0.05f, 0.05f)),
                                    b.init("b_big", test::random_tensor<float>(Shape{144}, -1, 1))});
    const int small = b.node("Conv", {x, b.init("w_small", test::random_tensor<float>(Shape{48, 1040, 1, 1}, -0.05f, 0.05f))});
    b.g.outputs = {b.node("Relu", {big}), small};
    return b.g;
  };
  for (int64_t side : {12, 17}) {
    Graph plain = build(side);
    Graph fused = plain;
    const OptimizeReport r = optimize_graph(fused, SessionOptions{}, Device::cpu());
    EXPECT_EQ(r.cpu.conv_panels, side == 12 ? 1 : 0) << side;
    EXPECT_EQ(!fused.initializers.count(fused.find_value("w_big")), side == 12) << side;
    EXPECT_TRUE(fused.initializers.count(fused.find_value("w_small"))) << side;
    expect_graphs_agree(plain, fused, {test::random_tensor<float>(Shape{1, 1040, side, side}, -1, 1)}, 2e-5);
  }
}

TEST(OpsConv, Conv2dFloat64AndFloat16MatchReference) {
  Conv2dParams p;
  p.strides = {1, 2};
  p.pads = {2, 1, 0, 1};
  {
    Tensor x = test::random_tensor<double>(Shape{1, 3, 7, 8});
    Tensor w = test::random_tensor<double>(Shape{5, 3, 2, 3});
    Shape shape;
    std::vector<double> want = conv2d_reference(x, w, nullptr, p, shape);
    auto out = test::run_op("Conv", {x, w}, conv_attrs(p));
    ASSERT_EQ(out[0].shape(), shape);
    expect_close(out[0], want, 1e-12);
  }
  {
    Tensor x = test::random_tensor<Float16>(Shape{1, 3, 7, 8}, -1, 1);
    Tensor w = test::random_tensor<Float16>(Shape{5, 3, 2, 3}, -1, 1);
    Shape shape;
    std::vector<double> want = conv2d_reference(x, w, nullptr, p, shape);
    auto out = test::run_op("Conv", {x, w}, conv_attrs(p));
    ASSERT_EQ(out[0].dtype(), DType::kFloat16);
    ASSERT_EQ(out[0].shape(), shape);
    expect_close(out[0], want, 5e-3);
  }
}

TEST(OpsConv, Conv1dAndPointwiseAgreeWith2dReference) {
  // A 1-D conv is a 2-D conv over a height-1 image.
  Tensor x = test::random_tensor<float>(Shape{2, 3, 13});
  Tensor w = test::random_tensor<float>(Shape{4, 3, 3});
  Conv2dParams p;
  p.strides = {1, 3};
  p.pads = {0, 2, 0, 1};
  p.dilations = {1, 2};
  Shape shape;
  std::vector<double> want =
      conv2d_reference(x.view(Shape{2, 3, 1, 13}), w.view(Shape{4, 3, 1, 3}), nullptr, p, shape);
  auto out = test::run_op("Conv", {x, w},
                          {test::attr_ints("strides", {3}), test::attr_ints("pads", {2, 1}),
                           test::attr_ints("dilations", {2})});
  ASSERT_EQ(out[0].shape(), (Shape{2, 4, shape[3]}));
  expect_close(out[0], want, 1e-4);

  // 1x1 kernel, stride 1, no pads: the im2col-free path.
  Tensor x2 = test::random_tensor<float>(Shape{2, 6, 5, 4});
  Tensor w2 = test::random_tensor<float>(Shape{3, 6, 1, 1});
  std::vector<double> want2 = conv2d_reference(x2, w2, nullptr, Conv2dParams{}, shape);
  auto out2 = test::run_op("Conv", {x2, w2});
  ASSERT_EQ(out2[0].shape(), shape);
  expect_close(out2[0], want2, 1e-4);
}

TEST(OpsConv, ConvLargeImageProcessedInChunksMatchesReference) {
  // Big enough that the im2col buffer is split into several row chunks.
  Conv2dParams p;
  p.pads = {1, 1, 1, 1};
  Tensor x = test::random_tensor<float>(Shape{1, 128, 10, 1024});
  Tensor w = test::random_tensor<float>(Shape{2, 128, 3, 3});
  Shape shape;
  std::vector<double> want = conv2d_reference(x, w, nullptr, p, shape);
  auto out = test::run_op("Conv", {x, w}, conv_attrs(p));
  ASSERT_EQ(out[0].shape(), shape);
  // Each output sums 1152 float products: its rounding error scales with the sum of the
  // products' magnitudes (the same convolution of |x| and |w|), not with the result.
  auto abs_of = [](const Tensor& t) {
    Tensor a = t.clone();
    float* p = a.data<float>();
    for (int64_t i = 0; i < a.numel(); ++i) p[i] = std::abs(p[i]);
    return a;
  };
  std::vector<double> magnitude = conv2d_reference(abs_of(x), abs_of(w), nullptr, p, shape);
  for (int64_t i = 0; i < out[0].numel(); ++i)
    ASSERT_NEAR(at(out[0], i), want[i], 1e-6 * magnitude[i] + 1e-6) << "at flat index " << i;
}

TEST(OpsConv, ConvAutoPadSameUpperMatchesExplicitPads) {
  Tensor x = test::random_tensor<float>(Shape{1, 2, 7, 6});
  Tensor w = test::random_tensor<float>(Shape{3, 2, 4, 3});
  // SAME_UPPER with stride 2: out = ceil(in / 2); total pad = (out-1)*2 + k - in, extra at the end.
  Conv2dParams p;
  p.strides = {2, 2};
  p.pads = {1, 0, 2, 1};  // H: out 4, total 3 -> 1/2; W: out 3, total 1 -> 0/1
  Shape shape;
  std::vector<double> want = conv2d_reference(x, w, nullptr, p, shape);
  auto out = test::run_op("Conv", {x, w}, {test::attr_string("auto_pad", "SAME_UPPER"), test::attr_ints("strides", {2, 2})});
  ASSERT_EQ(out[0].shape(), (Shape{1, 3, 4, 3}));
  ASSERT_EQ(shape, out[0].shape());
  expect_close(out[0], want, 1e-4);
}

TEST(OpsConv, ConvTransposeMatchesScatterReference) {
  const int64_t N = 2, C = 4, H = 3, W = 4, MG = 3, G = 2, KH = 3, KW = 2, SH = 2, SW = 3, DH = 1, DW = 2;
  const int64_t PT = 1, PL = 0, PB = 0, PR = 1;
  Tensor x = test::random_tensor<float>(Shape{N, C, H, W});
  Tensor w = test::random_tensor<float>(Shape{C, MG, KH, KW});
  Tensor b = test::random_tensor<float>(Shape{G * MG});
  const int64_t OH = SH * (H - 1) + DH * (KH - 1) + 1 - PT - PB;
  const int64_t OW = SW * (W - 1) + DW * (KW - 1) + 1 - PL - PR + 1;  // output_padding 1 on W
  const int64_t M = G * MG, CG = C / G;
  std::vector<double> want(static_cast<size_t>(N * M * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < OH * OW; ++i) want[(n * M + m) * OH * OW + i] = at(b, m);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw)
          for (int64_t mg = 0; mg < MG; ++mg)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t oh = ih * SH - PT + kh * DH, ow = iw * SW - PL + kw * DW;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                int64_t m = (c / CG) * MG + mg;
                want[((n * M + m) * OH + oh) * OW + ow] +=
                    at(x, ((n * C + c) * H + ih) * W + iw) * at(w, ((c * MG + mg) * KH + kh) * KW + kw);
              }
  auto out = test::run_op("ConvTranspose", {x, w, b},
                          {test::attr_int("group", G), test::attr_ints("strides", {SH, SW}),
                           test::attr_ints("dilations", {DH, DW}), test::attr_ints("pads", {PT, PL, PB, PR}),
                           test::attr_ints("output_padding", {0, 1})});
  ASSERT_EQ(out[0].shape(), (Shape{N, M, OH, OW}));
  expect_close(out[0], want, 1e-4);
}

// An input with an empty spatial dimension scatters nothing: the output given by output_shape is
// the bias alone. (The CI fuzzer found the scatter dividing by the empty grid's extent; that
// division is undefined behaviour which the optimized build drops, so the fuzz reproducer
// tests/fixtures/fuzz/load_conv_transpose_empty_input.crash, replayed under UBSan, is what checks it.)
TEST(OpsConv, ConvTransposeOfAnEmptyInputIsTheBias) {
  Tensor x = test::random_tensor<float>(Shape{1, 2, 0, 3});
  Tensor w = test::random_tensor<float>(Shape{2, 3, 3, 3});
  Tensor b = test::random_tensor<float>(Shape{3});
  auto out = test::run_op("ConvTranspose", {x, w, b},
                          {test::attr_ints("strides", {3, 2}), test::attr_ints("output_shape", {8, 8})});
  ASSERT_EQ(out[0].shape(), (Shape{1, 3, 8, 8}));
  for (int64_t i = 0; i < out[0].numel(); ++i) ASSERT_EQ(at(out[0], i), at(b, i / 64)) << "at flat index " << i;
}

namespace {

struct PoolRef {
  std::vector<double> y;
  std::vector<int64_t> argmax;
  Shape shape;
};

// 2-D pooling by direct loops; kind 0 max, 1 average.
PoolRef pool2d_reference(const Tensor& x, int kind, std::vector<int64_t> k, std::vector<int64_t> s,
                         std::vector<int64_t> d, std::vector<int64_t> pads, bool ceil_mode, bool include_pad) {
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  auto out_dim = [&](int64_t in, int i) {
    int64_t span = d[i] * (k[i] - 1) + 1, padded = in + pads[i] + pads[i + 2];
    int64_t o = ceil_mode ? (padded - span + s[i] - 1) / s[i] + 1 : (padded - span) / s[i] + 1;
    if (ceil_mode && (o - 1) * s[i] >= in + pads[i]) --o;
    return o;
  };
  const int64_t OH = out_dim(H, 0), OW = out_dim(W, 1);
  PoolRef r;
  r.shape = Shape{N, C, OH, OW};
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t arg = -1, inside = 0, padded = 0;
        for (int64_t kh = 0; kh < k[0]; ++kh)
          for (int64_t kw = 0; kw < k[1]; ++kw) {
            int64_t ih = oh * s[0] - pads[0] + kh * d[0], iw = ow * s[1] - pads[1] + kw * d[1];
            if (ih >= -pads[0] && ih < H + pads[2] && iw >= -pads[1] && iw < W + pads[3]) ++padded;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            int64_t flat = (nc * H + ih) * W + iw;
            double v = at(x, flat);
            ++inside;
            sum += v;
            if (v > best) {
              best = v;
              arg = flat;
            }
          }
        r.y.push_back(kind == 0 ? best : sum / static_cast<double>(include_pad ? padded : inside));
        r.argmax.push_back(arg);
      }
  return r;
}

}  // namespace

TEST(OpsConv, MaxPoolWithIndicesMatchesReference) {
  Tensor x = test::random_tensor<float>(Shape{2, 3, 10, 9});
  for (bool ceil_mode : {false, true}) {
    PoolRef ref = pool2d_reference(x, 0, {3, 2}, {2, 3}, {1, 2}, {1, 0, 1, 1}, ceil_mode, false);
    auto out = test::run_op("MaxPool", {x},
                            {test::attr_ints("kernel_shape", {3, 2}), test::attr_ints("strides", {2, 3}),
                             test::attr_ints("dilations", {1, 2}), test::attr_ints("pads", {1, 0, 1, 1}),
                             test::attr_int("ceil_mode", ceil_mode)},
                            2);
    ASSERT_EQ(out[0].shape(), ref.shape) << "ceil_mode " << ceil_mode;
    ASSERT_EQ(out[1].dtype(), DType::kInt64);
    expect_close(out[0], ref.y, 0);
    for (int64_t i = 0; i < out[1].numel(); ++i) EXPECT_EQ(out[1].data<int64_t>()[i], ref.argmax[i]) << i;
  }
}

TEST(OpsConv, MaxPoolFloatSeparableMatchesReferenceWithNaNs) {
  // The float32 2-D max pool without indices (rows' column windows reduced once, then the
  // rows): strides 1 to 3, ResNet's 3 x 3 / 2 with pad 1, uneven pads, ceil_mode, one column,
  // odd widths; NaNs in the input win their windows.
  struct Case {
    int64_t h, w;
    std::vector<int64_t> k, s, pads;
    bool ceil_mode;
  };
  const Case cases[] = {
      {112, 112, {3, 3}, {2, 2}, {1, 1, 1, 1}, false},  // ResNet's
      {13, 17, {3, 3}, {1, 1}, {1, 1, 1, 1}, false},
      {10, 9, {2, 3}, {2, 3}, {0, 1, 1, 2}, true},
      {9, 23, {3, 5}, {3, 2}, {2, 2, 0, 1}, false},
      {7, 1, {3, 1}, {2, 1}, {1, 0, 1, 0}, true},
      {6, 8, {2, 2}, {2, 2}, {0, 0, 0, 0}, false},
  };
  int case_no = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(case_no++);
    Tensor x = test::random_tensor<float>(Shape{2, 3, c.h, c.w});
    for (int64_t i = 5; i < x.numel(); i += 97) x.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    PoolRef ref = pool2d_reference(x, 0, c.k, c.s, {1, 1}, c.pads, c.ceil_mode, false);
    // (The reference skips NaNs: a window holding one is NaN.)
    const int64_t OH = ref.shape[2], OW = ref.shape[3];
    std::vector<bool> has_nan(ref.y.size(), false);
    for (int64_t nc = 0; nc < 6; ++nc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t kh = 0; kh < c.k[0]; ++kh)
            for (int64_t kw = 0; kw < c.k[1]; ++kw) {
              const int64_t ih = oh * c.s[0] - c.pads[0] + kh, iw = ow * c.s[1] - c.pads[1] + kw;
              if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
              if (std::isnan(x.data<float>()[(nc * c.h + ih) * c.w + iw])) has_nan[(nc * OH + oh) * OW + ow] = true;
            }
    auto out = test::run_op("MaxPool", {x},
                            {test::attr_ints("kernel_shape", c.k), test::attr_ints("strides", c.s),
                             test::attr_ints("pads", c.pads), test::attr_int("ceil_mode", c.ceil_mode)});
    ASSERT_EQ(out[0].shape(), ref.shape);
    int nans = 0;
    for (int64_t i = 0; i < out[0].numel(); ++i) {
      const float got = out[0].data<float>()[i];
      if (has_nan[i]) {
        ASSERT_TRUE(std::isnan(got)) << "at " << i;
        ++nans;
      } else {
        ASSERT_EQ(got, static_cast<float>(ref.y[i])) << "at " << i;
      }
    }
    EXPECT_GT(nans, 0);
  }
}

TEST(OpsConv, AveragePoolCountIncludePadMatchesReference) {
  Tensor x = test::random_tensor<float>(Shape{1, 4, 8, 7});
  for (int include : {0, 1})
    for (bool ceil_mode : {false, true}) {
      PoolRef ref = pool2d_reference(x, 1, {3, 3}, {2, 2}, {1, 1}, {1, 1, 0, 1}, ceil_mode, include);
      auto out = test::run_op("AveragePool", {x},
                              {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("strides", {2, 2}),
                               test::attr_ints("pads", {1, 1, 0, 1}), test::attr_int("count_include_pad", include),
                               test::attr_int("ceil_mode", ceil_mode)});
      ASSERT_EQ(out[0].shape(), ref.shape);
      expect_close(out[0], ref.y, 1e-5);
    }
}

TEST(OpsConv, GlobalAveragePoolMatchesFloat64AtEveryPlaneSize) {
  // Planes shorter than, equal to and past the eight partial sums, with a remainder.
  for (int64_t hw : {1, 7, 8, 49, 199}) {
    Tensor x = test::random_tensor<float>(Shape{2, 3, hw, 1});
    auto out = test::run_op("GlobalAveragePool", {x});
    ASSERT_EQ(out[0].shape(), (Shape{2, 3, 1, 1}));
    for (int64_t p = 0; p < 6; ++p) {
      double sum = 0;
      for (int64_t i = 0; i < hw; ++i) sum += at(x, p * hw + i);
      ASSERT_NEAR(at(out[0], p), sum / hw, 1e-6) << "plane size " << hw;
    }
  }
}

TEST(OpsConv, GlobalPoolsSplitOverThePoolMatchFloat64) {
  // Enough planes (2 x 700 of 49) that the planes split into chunks over 2 threads; each
  // output against a float64 mean or max, at 1 and 2 threads.
  Tensor x = test::random_tensor<float>(Shape{2, 700, 7, 7});
  const int64_t planes = 1400, hw = 49;
  for (int threads : {1, 2}) {
    cpu::ThreadPool pool(threads);
    cpu::PoolScope scope(&pool);
    for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
      SCOPED_TRACE(std::string(op) + " threads " + std::to_string(threads));
      auto out = test::run_op(op, {x});
      ASSERT_EQ(out[0].shape(), (Shape{2, 700, 1, 1}));
      for (int64_t p = 0; p < planes; ++p) {
        double sum = 0, mx = -INFINITY;
        for (int64_t i = 0; i < hw; ++i) sum += at(x, p * hw + i), mx = std::max(mx, at(x, p * hw + i));
        ASSERT_NEAR(at(out[0], p), op[6] == 'A' ? sum / hw : mx, 1e-6) << "plane " << p;
      }
    }
  }
}

TEST(OpsConv, ResizeLinearHalfPixelMatchesBilinearReference) {
  Tensor x = test::random_tensor<float>(Shape{2, 3, 5, 7});
  const std::vector<float> scales{1.f, 1.f, 1.8f, 0.6f};
  Tensor sc = Tensor::from_vector<float>(scales, Shape{4});
  auto out = test::run_op("Resize", {x, Tensor(), sc}, {test::attr_string("mode", "linear")}, 1, 19);
  // Output sizes are floor(in * scale) with the float scale widened to double (5 * 1.8f < 9).
  const int64_t H = 5, W = 7, OH = 8, OW = 4;
  ASSERT_EQ(out[0].shape().str(), (Shape{2, 3, OH, OW}).str());
  // Half-pixel source coordinate, clamped into the image, then bilinear.
  auto src = [](int64_t o, double scale, int64_t in, int64_t& i0, int64_t& i1, double& f) {
    double c = std::clamp((o + 0.5) / scale - 0.5, 0.0, static_cast<double>(in - 1));
    i0 = static_cast<int64_t>(std::floor(c));
    i1 = std::min(i0 + 1, in - 1);
    f = c - static_cast<double>(i0);
  };
  std::vector<double> want;
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t h0, h1, w0, w1;
        double fh, fw;
        src(oh, static_cast<double>(scales[2]), H, h0, h1, fh);
        src(ow, static_cast<double>(scales[3]), W, w0, w1, fw);
        auto v = [&](int64_t h, int64_t w) { return at(x, (p * H + h) * W + w); };
        want.push_back((1 - fh) * ((1 - fw) * v(h0, w0) + fw * v(h0, w1)) + fh * ((1 - fw) * v(h1, w0) + fw * v(h1, w1)));
      }
  expect_close(out[0], want, 1e-5);
}

TEST(OpsConv, BadShapesNameTheProblem) {
  try {
    test::run_op("Conv", {test::random_tensor<float>(Shape{1, 3, 5, 5}), test::random_tensor<float>(Shape{2, 4, 3, 3})});
    FAIL() << "expected a channel mismatch error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("channels"), std::string::npos) << e.what();
  }
  try {
    test::run_op("MaxPool", {test::random_tensor<float>(Shape{1, 1, 2, 2})}, {test::attr_ints("kernel_shape", {5, 5})});
    FAIL() << "expected a window-does-not-fit error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
}

}  // namespace onyx

namespace onyx {

TEST(OpsConv, InferenceKeepsKnownDimsWhenPlanningWithoutValues) {
  auto infer = [](const std::string& op, std::vector<ValueType> in, std::vector<Attribute> attrs, int opset = 19) {
    Node n;
    n.name = "planned";
    n.op_type = op;
    n.opset = opset;
    n.attributes = std::move(attrs);
    for (size_t i = 0; i < in.size(); ++i) n.inputs.push_back(static_cast<int>(i));
    n.outputs = {static_cast<int>(in.size())};
    const OpDef* def = OpRegistry::global().find("", op, opset);
    EXPECT_TRUE(def);
    InferContext ctx(n, in, std::vector<const Tensor*>(in.size(), nullptr));
    def->infer(ctx);
    return ctx.outputs()[0].shape;
  };
  PartialShape x = PartialShape::of_rank(4);
  x.dims = {-1, 3, 32, -1};
  // Conv: batch and width unknown, height (32 + 2 - 3) / 2 + 1 = 16.
  PartialShape y = infer("Conv", {{DType::kFloat32, x}, {DType::kFloat32, Shape{8, 3, 3, 3}}},
                         {test::attr_ints("pads", {1, 1, 1, 1}), test::attr_ints("strides", {2, 2})});
  EXPECT_EQ(y.dims, (std::vector<int64_t>{-1, 8, 16, -1}));
  y = infer("MaxPool", {{DType::kFloat32, x}}, {test::attr_ints("kernel_shape", {2, 2}), test::attr_ints("strides", {2, 2})});
  EXPECT_EQ(y.dims, (std::vector<int64_t>{-1, 3, 16, -1}));
  // Resize with scales whose values are not known yet: rank only.
  y = infer("Resize", {{DType::kFloat32, Shape{1, 3, 8, 8}}, {DType::kFloat32, Shape{0}}, {DType::kFloat32, Shape{4}}}, {});
  EXPECT_TRUE(y.rank_known);
  EXPECT_EQ(y.dims, (std::vector<int64_t>{-1, -1, -1, -1}));
}

}  // namespace onyx
