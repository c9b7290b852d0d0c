// ai.onnx.ml's feature transforms and linear models (what scikit-learn pipelines convert to):
// Scaler, Normalizer, Imputer, OneHotEncoder, CategoryMapper, FeatureVectorizer,
// LinearRegressor and LinearClassifier. Inputs [N, C] (or [C]) of float, double, int32 or
// int64; outputs float, as the domain defines them; math in double.
#include <cmath>
#include <unordered_map>

#include "ops/common.h"

namespace onyx {

namespace {

bool ml_numeric(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64;
}

void check_ml_input(const InferContext& ctx) {
  ONYX_CHECK(ml_numeric(ctx.input_dtype(0)), "X must be float, double, int32 or int64, got ",
             dtype_name(ctx.input_dtype(0)));
}

// X as [rows, C]: a 1-D X is one row.
std::pair<int64_t, int64_t> rows_cols(const Shape& x) {
  ONYX_CHECK(x.rank() == 1 || x.rank() == 2, "X must be [N, C] or [C], got ", x.str());
  return x.rank() == 1 ? std::pair<int64_t, int64_t>{1, x[0]} : std::pair<int64_t, int64_t>{x[0], x[1]};
}

// A per-feature list (one value, or one per column) at column c.
double per_feature(const std::vector<float>& v, int64_t c) { return v[v.size() == 1 ? 0 : static_cast<size_t>(c)]; }

void check_per_feature(const std::vector<float>& v, int64_t cols, const char* what) {
  ONYX_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == cols, what, " holds ", v.size(),
             " values; X has ", cols, " features (one value, or one per feature)");
}

// ---- Scaler: (X - offset) * scale ----

void infer_float_like_x(InferContext& ctx) {
  check_ml_input(ctx);
  ctx.set_output(0, DType::kFloat32, ctx.input_shape(0));
}

void scaler(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto [rows, cols] = rows_cols(x.shape());
  const auto offset = ctx.attr_floats("offset", {0.f}), scale = ctx.attr_floats("scale", {1.f});
  check_per_feature(offset, cols, "offset");
  check_per_feature(scale, cols, "scale");
  float* y = ctx.output(0).data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = static_cast<float>((x.get_as_double(r * cols + c) - per_feature(offset, c)) * per_feature(scale, c));
}

// ---- Normalizer: each row divided by its largest value (MAX, signed, as onnxruntime divides),
//      its L1 or its L2 norm ----

void normalizer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto [rows, cols] = rows_cols(x.shape());
  const std::string norm = ctx.attr_string("norm", "MAX");
  ONYX_CHECK(norm == "MAX" || norm == "L1" || norm == "L2", "norm must be MAX, L1 or L2, got \"", norm, "\"");
  float* y = ctx.output(0).data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double d = norm == "MAX" ? -INFINITY : 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x.get_as_double(r * cols + c);
      d = norm == "MAX" ? std::max(d, v) : norm == "L1" ? d + std::abs(v) : d + v * v;
    }
    if (norm == "L2") d = std::sqrt(d);
    if (norm != "MAX") d = std::max(d, 1e-30);  // an all-zero row stays zero
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(x.get_as_double(r * cols + c) / d);
  }
}

// ---- Imputer: values equal to the replaced value (0 by default; NaN matches NaN) become the
//      imputed ones ----

void infer_imputer(InferContext& ctx) {
  const DType t = ctx.input_dtype(0);
  ONYX_CHECK(t == DType::kFloat32 || t == DType::kInt64, "X must be float or int64, got ", dtype_name(t));
  ctx.set_output(0, t, ctx.input_shape(0));
}

void imputer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto [rows, cols] = rows_cols(x.shape());
  Tensor& y = ctx.output(0);
  if (x.dtype() == DType::kFloat32) {
    const auto values = ctx.attr_floats("imputed_value_floats");
    ONYX_CHECK(!values.empty(), "a float X needs imputed_value_floats");
    check_per_feature(values, cols, "imputed_value_floats");
    const float replaced = ctx.attr_float("replaced_value_float", 0.f);  // NaN when given as NaN
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = x.data<float>()[i];
      const bool hit = std::isnan(replaced) ? std::isnan(v) : v == replaced;
      y.data<float>()[i] = hit ? static_cast<float>(per_feature(values, i % cols)) : v;
    }
  } else {
    const auto values = ctx.attr_ints("imputed_value_int64s");
    ONYX_CHECK(!values.empty() && (values.size() == 1 || static_cast<int64_t>(values.size()) == cols),
               "an int64 X needs imputed_value_int64s, one value or one per feature (", cols, ")");
    const int64_t replaced = ctx.attr_int("replaced_value_int64", 0);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const int64_t v = x.data<int64_t>()[i];
      y.data<int64_t>()[i] = v == replaced ? values[values.size() == 1 ? 0 : static_cast<size_t>(i % cols)] : v;
    }
  }
}

// ---- OneHotEncoder: [..] -> [.., categories], 1 at each value's category ----

std::unordered_map<std::string, int64_t> category_index(const NodeView& n, bool strings) {
  std::unordered_map<std::string, int64_t> index;
  if (strings) {
    const auto cats = n.attr_strings("cats_strings");
    for (size_t i = 0; i < cats.size(); ++i) index.emplace(cats[i], static_cast<int64_t>(i));
  } else {
    const auto cats = n.attr_ints("cats_int64s");
    for (size_t i = 0; i < cats.size(); ++i) index.emplace(std::to_string(cats[i]), static_cast<int64_t>(i));
  }
  return index;
}

std::string key_of(const Tensor& x, int64_t i) {
  if (x.dtype() == DType::kString) return x.data<std::string>()[i];
  return std::to_string(x.get_as_int64(i));  // a float category matches the integer it equals
}

void infer_one_hot(InferContext& ctx) {
  const DType t = ctx.input_dtype(0);
  ONYX_CHECK(t == DType::kString || ml_numeric(t), "X must be strings or numbers, got ", dtype_name(t));
  const size_t n = t == DType::kString ? ctx.attr_strings("cats_strings").size() : ctx.attr_ints("cats_int64s").size();
  ONYX_CHECK(n > 0, "OneHotEncoder needs ", t == DType::kString ? "cats_strings" : "cats_int64s");
  PartialShape y = ctx.input_shape(0);
  if (y.rank_known) y.dims.push_back(static_cast<int64_t>(n));
  ctx.set_output(0, DType::kFloat32, y);
}

void one_hot(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto index = category_index(ctx, x.dtype() == DType::kString);
  const int64_t n = static_cast<int64_t>(index.size());
  const bool zeros = ctx.attr_int("zeros", 1) != 0;
  float* y = ctx.output(0).data<float>();
  std::fill(y, y + x.numel() * n, 0.f);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (x.dtype() != DType::kString && x.dtype() != DType::kInt64 && x.dtype() != DType::kInt32) {
      const double v = x.get_as_double(i);
      if (v != std::floor(v)) {
        ONYX_CHECK(zeros, "element ", i, " (", v, ") is no category (zeros=0)");
        continue;
      }
    }
    auto it = index.find(key_of(x, i));
    ONYX_CHECK(it != index.end() || zeros, "element ", i, " is no category (zeros=0)");
    if (it != index.end()) y[i * n + it->second] = 1.f;
  }
}

// ---- CategoryMapper: strings <-> int64 by the parallel lists cats_strings and cats_int64s ----

void infer_category_mapper(InferContext& ctx) {
  const DType t = ctx.input_dtype(0);
  ONYX_CHECK(t == DType::kString || t == DType::kInt64, "X must be strings or int64, got ", dtype_name(t));
  ONYX_CHECK(ctx.attr_strings("cats_strings").size() == ctx.attr_ints("cats_int64s").size(),
             "cats_strings and cats_int64s must be parallel lists of one length");
  ctx.set_output(0, t == DType::kString ? DType::kInt64 : DType::kString, ctx.input_shape(0));
}

void category_mapper(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto strings = ctx.attr_strings("cats_strings");
  const auto ints = ctx.attr_ints("cats_int64s");
  Tensor& y = ctx.output(0);
  if (x.dtype() == DType::kString) {
    std::unordered_map<std::string, int64_t> m;
    for (size_t i = 0; i < strings.size(); ++i) m.emplace(strings[i], ints[i]);
    const int64_t fallback = ctx.attr_int("default_int64", -1);
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto it = m.find(x.data<std::string>()[i]);
      y.data<int64_t>()[i] = it == m.end() ? fallback : it->second;
    }
  } else {
    std::unordered_map<int64_t, std::string> m;
    for (size_t i = 0; i < ints.size(); ++i) m.emplace(ints[i], strings[i]);
    const std::string fallback = ctx.attr_string("default_string", "_Unused");
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto it = m.find(x.data<int64_t>()[i]);
      y.data<std::string>()[i] = it == m.end() ? fallback : it->second;
    }
  }
}

// ---- FeatureVectorizer: inputs [N, Ci] (a 1-D input is one row, as onnxruntime reads it)
//      concatenated, each cut or zero-padded to inputdimensions[i] columns ----

void infer_feature_vectorizer(InferContext& ctx) {
  const auto dims = ctx.attr_ints("inputdimensions");
  ONYX_CHECK(dims.size() == ctx.num_inputs(), "inputdimensions has ", dims.size(), " entries for ", ctx.num_inputs(),
             " inputs");
  int64_t total = 0, rows = -1;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    ONYX_CHECK(ml_numeric(ctx.input_dtype(i)), "input ", i, " must be numbers, got ", dtype_name(ctx.input_dtype(i)));
    const Shape s = ctx.input_concrete_shape(i);
    const int64_t n = rows_cols(s).first;  // a 1-D input is one row
    ONYX_CHECK(rows < 0 || n == rows, "input ", i, " has ", n, " rows, input 0 ", rows);
    rows = n;
    ONYX_CHECK(dims[i] >= 0, "inputdimensions[", i, "] is negative");
    total = checked_add(total, dims[i], "the output's columns");
  }
  ctx.set_output(0, DType::kFloat32, Shape{rows, total});
}

void feature_vectorizer(KernelContext& ctx) {
  const auto dims = ctx.attr_ints("inputdimensions");
  Tensor& y = ctx.output(0);
  const int64_t rows = y.shape()[0], total = y.shape()[1];
  int64_t at = 0;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& x = ctx.input(i);
    const int64_t cols = rows_cols(x.shape()).second;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < dims[i]; ++c)
        y.data<float>()[r * total + at + c] = c < cols ? static_cast<float>(x.get_as_double(r * cols + c)) : 0.f;
    at += dims[i];
  }
}

// ---- LinearRegressor and LinearClassifier: scores = X coefficients^T + intercepts ----

std::vector<double> linear_scores(const KernelContext& ctx, const Tensor& x, int64_t targets) {
  const auto [rows, cols] = rows_cols(x.shape());
  const auto coef = ctx.attr_floats("coefficients");
  const auto icpt = ctx.attr_floats("intercepts");
  ONYX_CHECK(static_cast<int64_t>(coef.size()) == targets * cols, "coefficients holds ", coef.size(), " values, ",
             targets, " targets of ", cols, " features need ", targets * cols);
  ONYX_CHECK(icpt.empty() || static_cast<int64_t>(icpt.size()) == targets, "intercepts holds ", icpt.size(),
             " values for ", targets, " targets");
  std::vector<double> s(static_cast<size_t>(rows * targets));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < targets; ++t) {
      double acc = icpt.empty() ? 0.0 : icpt[t];
      for (int64_t c = 0; c < cols; ++c) acc += x.get_as_double(r * cols + c) * coef[t * cols + c];
      s[r * targets + t] = acc;
    }
  return s;
}

void infer_linear_regressor(InferContext& ctx) {
  check_ml_input(ctx);
  const PartialShape& x = ctx.input_shape(0);
  const int64_t targets = ctx.attr_int("targets", 1);
  ONYX_CHECK(targets > 0, "targets must be positive, got ", targets);
  ONYX_CHECK(ctx.attr_string("post_transform", "NONE") == "NONE", "LinearRegressor's post_transform ",
             ctx.attr_string("post_transform", "NONE"), " is not supported by onyx (NONE)");
  ctx.set_output(0, DType::kFloat32,
                 x.rank_known ? PartialShape(Shape{x.dims.size() == 1 ? 1 : x.dims[0], targets}) : PartialShape());
}

void linear_regressor(KernelContext& ctx) {
  const auto s = linear_scores(ctx, ctx.input(0), ctx.attr_int("targets", 1));
  for (size_t i = 0; i < s.size(); ++i) ctx.output(0).data<float>()[i] = static_cast<float>(s[i]);
}

double logistic(double v) { return 1 / (1 + std::exp(-v)); }

// A row of scores after the post transform (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO).
void post_transform(const std::string& how, double* s, int64_t n) {
  if (how == "NONE") return;
  if (how == "LOGISTIC") {
    for (int64_t j = 0; j < n; ++j) s[j] = logistic(s[j]);
    return;
  }
  ONYX_CHECK(how == "SOFTMAX" || how == "SOFTMAX_ZERO", "post_transform ", how, " is not supported by onyx ",
             "(NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO)");
  // SOFTMAX_ZERO leaves zero scores zero (and a row of zeros 0.5 each, as the domain defines it).
  const bool skip_zero = how == "SOFTMAX_ZERO";
  double mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  for (int64_t j = 0; j < n; ++j) {
    if (skip_zero && s[j] == 0) continue;
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  for (int64_t j = 0; j < n; ++j) s[j] = skip_zero && sum == 0 ? 0.5 : s[j] / sum;
}

void infer_linear_classifier(InferContext& ctx) {
  check_ml_input(ctx);
  const auto [rows, cols] = rows_cols(ctx.input_concrete_shape(0));
  const bool strings = !ctx.attr_strings("classlabels_strings").empty();
  const int64_t labels = strings ? static_cast<int64_t>(ctx.attr_strings("classlabels_strings").size())
                                 : static_cast<int64_t>(ctx.attr_ints("classlabels_ints").size());
  ONYX_CHECK(labels > 0, "LinearClassifier needs classlabels_ints or classlabels_strings");
  const int64_t coef = static_cast<int64_t>(ctx.attr_floats("coefficients").size());
  ONYX_CHECK(cols > 0 && coef % cols == 0, "coefficients (", coef, " values) do not split into rows of ", cols);
  const int64_t classes = coef / cols;
  ctx.set_output(0, strings ? DType::kString : DType::kInt64, Shape{rows});
  // One row of coefficients with two labels scores the second class; the first is its negation.
  if (ctx.has_output(1)) ctx.set_output(1, DType::kFloat32, Shape{rows, classes == 1 && labels == 2 ? 2 : classes});
}

void linear_classifier(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto [rows, cols] = rows_cols(x.shape());
  const auto label_strings = ctx.attr_strings("classlabels_strings");
  const auto label_ints = ctx.attr_ints("classlabels_ints");
  const bool strings = !label_strings.empty();
  const int64_t labels = strings ? static_cast<int64_t>(label_strings.size()) : static_cast<int64_t>(label_ints.size());
  const int64_t classes = static_cast<int64_t>(ctx.attr_floats("coefficients").size()) / cols;
  std::vector<double> s = linear_scores(ctx, x, classes);
  const bool binary = classes == 1 && labels == 2;
  const int64_t width = binary ? 2 : classes;
  const std::string how = ctx.attr_string("post_transform", "NONE");
  std::vector<double> row(static_cast<size_t>(width));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    if (binary) {
      // One row of coefficients for two labels, as onnxruntime scores it: the score s (its
      // logistic under LOGISTIC; the softmaxes leave it as is) for the second label and one minus
      // it for the first; the second label where s > 0.
      ONYX_CHECK(how == "NONE" || how == "LOGISTIC" || how == "SOFTMAX" || how == "SOFTMAX_ZERO",
                 "post_transform ", how, " is not supported by onyx for a binary LinearClassifier");
      const double t = how == "LOGISTIC" ? logistic(s[r]) : s[r];
      row = {1 - t, t};
      best = s[r] > 0 ? 1 : 0;
    } else {
      std::copy(s.begin() + r * classes, s.begin() + (r + 1) * classes, row.begin());
      post_transform(how, row.data(), width);
    }
    if (!binary && width > 1) {
      for (int64_t j = 1; j < width; ++j)
        if (row[j] > row[best]) best = j;
    } else if (!binary) {
      best = row[0] >= (how == "NONE" ? 0.0 : 0.5) ? 0 : -1;  // one class: its label above the threshold
    }
    ONYX_CHECK(best < labels, "the best score is column ", best, ", past the ", labels, " class labels");
    if (strings) ctx.output(0).data<std::string>()[r] = best >= 0 ? label_strings[best] : std::string();
    else ctx.output(0).data<int64_t>()[r] = best >= 0 ? label_ints[best] : 0;
    if (ctx.has_output(1))
      for (int64_t j = 0; j < width; ++j) ctx.output(1).data<float>()[r * width + j] = static_cast<float>(row[j]);
  }
}

}  // namespace

void register_ml_linear_ops(OpRegistry& r) {
  const std::string ml = "ai.onnx.ml";
  r.add(domain_op(ml, "Scaler", 1, infer_float_like_x, scaler));
  r.add(domain_op(ml, "Normalizer", 1, infer_float_like_x, normalizer));
  r.add(domain_op(ml, "Imputer", 1, infer_imputer, imputer));
  r.add(domain_op(ml, "OneHotEncoder", 1, infer_one_hot, one_hot));
  r.add(domain_op(ml, "CategoryMapper", 1, infer_category_mapper, category_mapper));
  r.add(domain_op(ml, "FeatureVectorizer", 1, infer_feature_vectorizer, feature_vectorizer));
  r.add(domain_op(ml, "LinearRegressor", 1, infer_linear_regressor, linear_regressor));
  r.add(domain_op(ml, "LinearClassifier", 1, infer_linear_classifier, linear_classifier));
}

}  // namespace onyx
