// Classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
#include <cmath>
#include <optional>

#include "ops/common.h"

namespace onyx {

namespace {

// Output 0: the per-element loss [N, D1...] for reduction "none", a scalar otherwise.
void infer_loss(InferContext& ctx, bool has_log_prob) {
  DType dt = ctx.input_dtype(0);
  ONYX_CHECK(ctx.input_dtype(1) == DType::kInt64 || ctx.input_dtype(1) == DType::kInt32,
             "labels must be int32 or int64, got ", dtype_name(ctx.input_dtype(1)));
  std::string reduction = ctx.attr_string("reduction", "mean");
  ONYX_CHECK(reduction == "none" || reduction == "sum" || reduction == "mean",
             "reduction must be none, sum or mean, got '", reduction, "'");
  if (reduction == "none") ctx.set_output(0, dt, ctx.input_shape(1));
  else ctx.set_output(0, dt, Shape{});
  if (has_log_prob && ctx.has_output(1)) ctx.set_output(1, dt, ctx.input_shape(0));
}

// The loss from log-probabilities lp [N, C, D] (as double), labels [N, D].
template <class T>
void nll_from_log_probs(KernelContext& ctx, const std::vector<double>& lp, const Shape& xs) {
  const Tensor& labels = ctx.input(1);
  ONYX_CHECK(xs.rank() >= 2, "input must be [N, C, ...], got ", xs.str());
  const int64_t n = xs[0], c = xs[1];
  const int64_t d = n * c == 0 ? 0 : static_cast<int64_t>(lp.size()) / (n * c);
  std::vector<int64_t> want(xs.dims());
  want.erase(want.begin() + 1);
  ONYX_CHECK(labels.shape() == Shape(want), "labels must have shape ", Shape(want).str(), " for input ", xs.str(),
             ", got ", labels.shape().str());
  std::vector<double> weight;
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    ONYX_CHECK(w.rank() == 1 && w.numel() == c, "weights must be [", c, "], got ", w.shape().str());
    for (int64_t k = 0; k < c; ++k) weight.push_back(w.get_as_double(k));
  }
  std::optional<int64_t> ignore;
  if (ctx.has_attr("ignore_index")) ignore = ctx.attr_int("ignore_index");
  const std::string reduction = ctx.attr_string("reduction", "mean");
  std::vector<int64_t> lab = labels.to_int64_vector();
  std::vector<double> loss(lab.size(), 0.0);
  double total = 0, wsum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const int64_t t = lab[i * d + j];
      if (ignore && t == *ignore) continue;
      ONYX_CHECK(t >= 0 && t < c, "label ", t, " at position ", i * d + j, " is outside [0, ", c, ")");
      const double w = weight.empty() ? 1.0 : weight[t];
      loss[i * d + j] = -lp[(i * c + t) * d + j] * w;
      total += loss[i * d + j];
      wsum += w;
    }
  T* po = ctx.output(0).data<T>();
  using C = compute_t<T>;
  if (reduction == "none") {
    for (size_t i = 0; i < loss.size(); ++i) po[i] = static_cast<T>(static_cast<C>(loss[i]));
  } else if (reduction == "sum") {
    po[0] = static_cast<T>(static_cast<C>(total));
  } else {
    po[0] = static_cast<T>(static_cast<C>(total / wsum));
  }
}

template <class T>
void nll_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<double> lp(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) lp[i] = static_cast<double>(static_cast<compute_t<T>>(x.data<T>()[i]));
  nll_from_log_probs<T>(ctx, lp, x.shape());
}

template <class T>
void sce_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Shape& xs = x.shape();
  ONYX_CHECK(xs.rank() >= 2, "scores must be [N, C, ...], got ", xs.str());
  const int64_t n = xs[0], c = xs[1];
  const int64_t d = n * c == 0 ? 0 : x.numel() / (n * c);
  const T* px = x.data<T>();
  std::vector<double> lp(static_cast<size_t>(x.numel()));
  // log_softmax over the class axis.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      auto at = [&](int64_t k) { return (i * c + k) * d + j; };
      double mx = -INFINITY;
      for (int64_t k = 0; k < c; ++k) mx = std::max(mx, static_cast<double>(static_cast<compute_t<T>>(px[at(k)])));
      double sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(static_cast<compute_t<T>>(px[at(k)])) - mx);
      const double ls = std::log(sum) + mx;
      for (int64_t k = 0; k < c; ++k) lp[at(k)] = static_cast<double>(static_cast<compute_t<T>>(px[at(k)])) - ls;
    }
  nll_from_log_probs<T>(ctx, lp, xs);
  if (ctx.has_output(1)) {
    T* pl = ctx.output(1).data<T>();
    for (size_t i = 0; i < lp.size(); ++i) pl[i] = static_cast<T>(static_cast<compute_t<T>>(lp[i]));
  }
}

}  // namespace

void register_loss_ops(OpRegistry& r) {
  r.add(onnx_op("NegativeLogLikelihoodLoss", 12, [](InferContext& ctx) { infer_loss(ctx, false); },
              [](KernelContext& ctx) {
                dispatch<FloatTypes>(ctx.input(0).dtype(), "NegativeLogLikelihoodLoss", [&](auto tag) {
                  nll_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
  r.add(onnx_op("SoftmaxCrossEntropyLoss", 12, [](InferContext& ctx) { infer_loss(ctx, true); },
              [](KernelContext& ctx) {
                dispatch<FloatTypes>(ctx.input(0).dtype(), "SoftmaxCrossEntropyLoss", [&](auto tag) {
                  sce_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
}

}  // namespace onyx
