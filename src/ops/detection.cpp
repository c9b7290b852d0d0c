// Object-detection ops: NonMaxSuppression, RoiAlign and MaxRoiPool.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/common.h"

namespace onyx {

namespace {

// ---- NonMaxSuppression(boxes [B, N, 4], scores [B, C, N], max_output_boxes_per_class?,
//      iou_threshold?, score_threshold?) -> selected_indices [K, 3] (batch, class, box) ----

struct Box {
  double x_min, x_max, y_min, y_max;
};

// Corners ([y1, x1, y2, x2], either diagonal) or centers ([x, y, w, h], center_point_box 1).
Box box_at(const Tensor& boxes, int64_t at, bool center) {
  double v[4];
  for (int i = 0; i < 4; ++i) v[i] = boxes.get_as_double(at * 4 + i);
  if (center) return {v[0] - v[2] / 2, v[0] + v[2] / 2, v[1] - v[3] / 2, v[1] + v[3] / 2};
  return {std::min(v[1], v[3]), std::max(v[1], v[3]), std::min(v[0], v[2]), std::max(v[0], v[2])};
}

// Whether b suppresses a: their intersection over union exceeds the threshold (boxes with
// no area suppress nothing).
bool suppresses(const Box& a, const Box& b, double iou_threshold) {
  const double ix = std::min(a.x_max, b.x_max) - std::max(a.x_min, b.x_min);
  const double iy = std::min(a.y_max, b.y_max) - std::max(a.y_min, b.y_min);
  if (ix <= 0 || iy <= 0) return false;
  const double inter = ix * iy;
  const double area_a = (a.x_max - a.x_min) * (a.y_max - a.y_min);
  const double area_b = (b.x_max - b.x_min) * (b.y_max - b.y_min);
  const double uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > iou_threshold;
}

void infer_nms(InferContext& ctx) {
  const Shape boxes = ctx.input_concrete_shape(0), scores = ctx.input_concrete_shape(1);
  ONYX_CHECK(boxes.rank() == 3 && boxes[2] == 4, "boxes must be [batches, boxes, 4], got ", boxes.str());
  ONYX_CHECK(scores.rank() == 3 && scores[0] == boxes[0] && scores[2] == boxes[1], "scores must be [", boxes[0],
             ", classes, ", boxes[1], "], got ", scores.str());
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)) && dtype_is_float(ctx.input_dtype(1)),
             "boxes and scores must be floating types");
  const int64_t cpb = ctx.attr_int("center_point_box", 0);
  ONYX_CHECK(cpb == 0 || cpb == 1, "center_point_box must be 0 or 1, got ", cpb);
  ctx.set_output(0, DType::kInt64, PartialShape({PartialShape::kUnknown, 3}));  // how many: data
}

double optional_scalar(const KernelContext& ctx, size_t i, double fallback, std::string_view what) {
  if (!ctx.has_input(i) || ctx.input(i).numel() == 0) return fallback;
  ONYX_CHECK(ctx.input(i).numel() == 1, what, " must hold one value, got ", ctx.input(i).type_str());
  return ctx.input(i).get_as_double(0);
}

void nms_kernel(KernelContext& ctx) {
  const Tensor& boxes = ctx.input(0);
  const Tensor& scores = ctx.input(1);
  const int64_t B = boxes.shape()[0], N = boxes.shape()[1], C = scores.shape()[1];
  const bool center = ctx.attr_int("center_point_box", 0) == 1;
  int64_t max_out = 0;
  if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
    ONYX_CHECK(ctx.input(2).numel() == 1, "max_output_boxes_per_class must hold one value");
    max_out = std::max<int64_t>(ctx.input(2).get_as_int64(0), 0);
  }
  const double iou = optional_scalar(ctx, 3, 0.0, "iou_threshold");
  const bool by_score = ctx.has_input(4) && ctx.input(4).numel() > 0;
  const double score_min = optional_scalar(ctx, 4, 0.0, "score_threshold");
  std::vector<int64_t> selected;
  std::vector<int64_t> order;
  std::vector<Box> kept;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t base = (b * C + c) * N;
      order.clear();
      for (int64_t i = 0; i < N; ++i)
        if (!by_score || scores.get_as_double(base + i) > score_min) order.push_back(i);
      // Highest score first; equal scores by box index.
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        return scores.get_as_double(base + x) > scores.get_as_double(base + y);
      });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        const Box box = box_at(boxes, b * N + i, center);
        bool keep = true;
        for (const Box& k : kept)
          if (suppresses(box, k, iou)) {
            keep = false;
            break;
          }
        if (!keep) continue;
        kept.push_back(box);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  Tensor& out = ctx.allocate_output(0, DType::kInt64, Shape{static_cast<int64_t>(selected.size() / 3), 3});
  std::copy(selected.begin(), selected.end(), out.data<int64_t>());
}

// ---- RoiAlign(X [N, C, H, W], rois [R, 4], batch_indices [R]) -> Y [R, C, oh, ow] ----

void infer_roi_align(InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0), rois = ctx.input_concrete_shape(1);
  const Shape idx = ctx.input_concrete_shape(2);
  ONYX_CHECK(x.rank() == 4, "X must be [N, C, H, W], got ", x.str());
  ONYX_CHECK(rois.rank() == 2 && rois[1] == 4, "rois must be [num_rois, 4], got ", rois.str());
  ONYX_CHECK(idx.rank() == 1 && idx[0] == rois[0], "batch_indices must be [", rois[0], "], got ", idx.str());
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "X must be a floating type");
  const int64_t oh = ctx.attr_int("output_height", 1), ow = ctx.attr_int("output_width", 1);
  ONYX_CHECK(oh > 0 && ow > 0, "output_height and output_width must be positive, got ", oh, " and ", ow);
  const std::string mode = ctx.attr_string("mode", "avg");
  ONYX_CHECK(mode == "avg" || mode == "max", "mode must be \"avg\" or \"max\", got \"", mode, "\"");
  ctx.set_output(0, ctx.input_dtype(0), Shape{rois[0], x[1], oh, ow});
}

// One sample point's four neighbours and their bilinear weights (all zero outside the map).
struct Sample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Sample bilinear(double y, double x, int64_t H, int64_t W) {
  Sample s;
  if (y < -1.0 || y > static_cast<double>(H) || x < -1.0 || x > static_cast<double>(W)) return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
  if (y0 >= H - 1) y1 = y0 = H - 1, y = static_cast<double>(y0);
  else y1 = y0 + 1;
  if (x0 >= W - 1) x1 = x0 = W - 1, x = static_cast<double>(x0);
  else x1 = x0 + 1;
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0), hy = 1 - ly, hx = 1 - lx;
  s.pos[0] = y0 * W + x0, s.pos[1] = y0 * W + x1, s.pos[2] = y1 * W + x0, s.pos[3] = y1 * W + x1;
  s.w[0] = hy * hx, s.w[1] = hy * lx, s.w[2] = ly * hx, s.w[3] = ly * lx;
  return s;
}

void roi_align_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  const Tensor& batch = ctx.input(2);
  Tensor& Y = ctx.output(0);
  const int64_t N = X.shape()[0], C = X.shape()[1], H = X.shape()[2], W = X.shape()[3];
  const int64_t R = rois.shape()[0], OH = Y.shape()[2], OW = Y.shape()[3];
  const double scale = ctx.attr_float("spatial_scale", 1.f);
  const int64_t ratio = ctx.attr_int("sampling_ratio", 0);
  const bool max_mode = ctx.attr_string("mode", "avg") == "max";
  // half_pixel is the default from opset 16; opset 10 had only the unshifted form.
  const bool half_pixel =
      ctx.opset() >= 16 && ctx.attr_string("coordinate_transformation_mode", "half_pixel") == "half_pixel";
  const double offset = half_pixel ? 0.5 : 0.0;
  dispatch<FloatTypes>(X.dtype(), "RoiAlign X", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    for (int64_t r = 0; r < R; ++r) {
      const int64_t b = batch.get_as_int64(r);
      ONYX_CHECK(b >= 0 && b < N, "batch_indices[", r, "] = ", b, " is out of range for ", N, " images");
      const double x0 = rois.get_as_double(r * 4 + 0) * scale - offset;
      const double y0 = rois.get_as_double(r * 4 + 1) * scale - offset;
      double rw = rois.get_as_double(r * 4 + 2) * scale - offset - x0;
      double rh = rois.get_as_double(r * 4 + 3) * scale - offset - y0;
      if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
      const double bh = rh / static_cast<double>(OH), bw = rw / static_cast<double>(OW);
      const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(OH)));
      const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(OW)));
      const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
      std::vector<Sample> samples;
      for (int64_t ph = 0; ph < OH; ++ph)
        for (int64_t pw = 0; pw < OW; ++pw)
          for (int64_t iy = 0; iy < gh; ++iy)
            for (int64_t ix = 0; ix < gw; ++ix)
              samples.push_back(bilinear(y0 + ph * bh + (iy + 0.5) * bh / gh, x0 + pw * bw + (ix + 0.5) * bw / gw, H, W));
      for (int64_t c = 0; c < C; ++c) {
        const T* plane = x + (b * C + c) * H * W;
        const Sample* s = samples.data();
        for (int64_t p = 0; p < OH * OW; ++p) {
          double acc = 0;
          bool first = true;
          for (int64_t k = 0; k < gh * gw; ++k, ++s) {
            double v[4];
            for (int i = 0; i < 4; ++i) v[i] = s->w[i] * static_cast<double>(static_cast<compute_t<T>>(plane[s->pos[i]]));
            if (!max_mode) {
              acc += v[0] + v[1] + v[2] + v[3];
            } else {
              // ONNX's max mode takes the largest weighted corner, not the interpolated value.
              const double m = std::max({v[0], v[1], v[2], v[3]});
              acc = first ? m : std::max(acc, m);
              first = false;
            }
          }
          y[(r * C + c) * OH * OW + p] = static_cast<T>(max_mode ? acc : acc / count);
        }
      }
    }
  });
}

// ---- MaxRoiPool(X [N, C, H, W], rois [R, 5] (batch, x1, y1, x2, y2)) -> [R, C, ph, pw]:
//      the maximum of each bin of each region, its corners rounded to the input grid ----

void infer_max_roi_pool(InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0), rois = ctx.input_concrete_shape(1);
  ONYX_CHECK(x.rank() == 4, "X must be [N, C, H, W], got ", x.str());
  ONYX_CHECK(rois.rank() == 2 && rois[1] == 5, "rois must be [num_rois, 5], got ", rois.str());
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "X must be a floating type");
  const auto pooled = ctx.attr_ints("pooled_shape");
  ONYX_CHECK(pooled.size() == 2 && pooled[0] > 0 && pooled[1] > 0, "pooled_shape must be two positive sizes");
  ctx.set_output(0, ctx.input_dtype(0), Shape{rois[0], x[1], pooled[0], pooled[1]});
}

void max_roi_pool_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  Tensor& Y = ctx.output(0);
  const int64_t N = X.shape()[0], C = X.shape()[1], H = X.shape()[2], W = X.shape()[3];
  const int64_t R = rois.shape()[0], PH = Y.shape()[2], PW = Y.shape()[3];
  const float scale = ctx.attr_float("spatial_scale", 1.f);
  dispatch<FloatTypes>(X.dtype(), "MaxRoiPool X", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    for (int64_t r = 0; r < R; ++r) {
      const int64_t b = static_cast<int64_t>(rois.get_as_double(r * 5));
      ONYX_CHECK(b >= 0 && b < N, "roi ", r, " names batch ", b, " of ", N);
      auto corner = [&](int k) { return static_cast<int64_t>(std::round(static_cast<float>(rois.get_as_double(r * 5 + k)) * scale)); };
      const int64_t x1 = corner(1), y1 = corner(2), x2 = corner(3), y2 = corner(4);
      const float bin_h = static_cast<float>(std::max<int64_t>(y2 - y1 + 1, 1)) / static_cast<float>(PH);
      const float bin_w = static_cast<float>(std::max<int64_t>(x2 - x1 + 1, 1)) / static_cast<float>(PW);
      for (int64_t c = 0; c < C; ++c) {
        const T* plane = x + (b * C + c) * H * W;
        for (int64_t ph = 0; ph < PH; ++ph)
          for (int64_t pw = 0; pw < PW; ++pw) {
            auto clamp_to = [](int64_t v, int64_t hi) { return std::min(std::max<int64_t>(v, 0), hi); };
            const int64_t hs = clamp_to(static_cast<int64_t>(std::floor(ph * bin_h)) + y1, H);
            const int64_t he = clamp_to(static_cast<int64_t>(std::ceil((ph + 1) * bin_h)) + y1, H);
            const int64_t ws = clamp_to(static_cast<int64_t>(std::floor(pw * bin_w)) + x1, W);
            const int64_t we = clamp_to(static_cast<int64_t>(std::ceil((pw + 1) * bin_w)) + x1, W);
            double m = 0;  // an empty bin is 0
            if (he > hs && we > ws) {
              m = -INFINITY;
              for (int64_t h = hs; h < he; ++h)
                for (int64_t w = ws; w < we; ++w) m = std::max(m, static_cast<double>(static_cast<compute_t<T>>(plane[h * W + w])));
            }
            y[((r * C + c) * PH + ph) * PW + pw] = static_cast<T>(static_cast<compute_t<T>>(m));
          }
      }
    }
  });
}

}  // namespace

void register_detection_ops(OpRegistry& r) {
  r.add(onnx_op("MaxRoiPool", 1, infer_max_roi_pool, max_roi_pool_kernel));
  r.add(onnx_op("NonMaxSuppression", 10, infer_nms, nms_kernel));
  r.add(onnx_op("RoiAlign", 10, infer_roi_align, roi_align_kernel));
}

}  // namespace onyx
