// ai.onnx.ml SVMRegressor and SVMClassifier (what scikit-learn's SVR/SVC convert to): a kernel
// (linear, polynomial, RBF, sigmoid) against support vectors, or a linear model when there are
// none; the classifier votes one class against another, and with Platt parameters (prob_a,
// prob_b) couples the pairwise probabilities into one distribution, as libsvm does. The scores
// and labels follow onnxruntime's kernels, where they and the ONNX reference differ (a two-class
// label's threshold, the winner of pairwise models by votes).
#include <algorithm>
#include <cmath>

#include "ops/common.h"

namespace onyx {

namespace {

struct Kernel {
  std::string type = "LINEAR";
  double gamma = 0, coef0 = 0;
  int64_t degree = 0;

  double operator()(const double* a, const double* b, int64_t n) const {
    double dot = 0;
    if (type == "RBF") {
      for (int64_t i = 0; i < n; ++i) dot += (a[i] - b[i]) * (a[i] - b[i]);
      return std::exp(-gamma * dot);
    }
    for (int64_t i = 0; i < n; ++i) dot += a[i] * b[i];
    if (type == "POLY") return std::pow(gamma * dot + coef0, static_cast<double>(degree));
    if (type == "SIGMOID") return std::tanh(gamma * dot + coef0);
    return dot;
  }
};

Kernel read_kernel(const NodeView& n) {
  Kernel k;
  k.type = n.attr_string("kernel_type", "LINEAR");
  ONYX_CHECK(k.type == "LINEAR" || k.type == "POLY" || k.type == "RBF" || k.type == "SIGMOID",
             "kernel_type must be LINEAR, POLY, RBF or SIGMOID, got \"", k.type, "\"");
  const auto p = n.attr_floats("kernel_params");
  if (!p.empty()) {
    ONYX_CHECK(p.size() == 3, "kernel_params must be (gamma, coef0, degree), got ", p.size(), " values");
    k.gamma = p[0], k.coef0 = p[1], k.degree = static_cast<int64_t>(p[2]);
  }
  return k;
}

std::vector<double> as_doubles(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// X's row r as doubles.
std::vector<double> row_of(const Tensor& x, int64_t r, int64_t f) {
  std::vector<double> v(static_cast<size_t>(f));
  for (int64_t i = 0; i < f; ++i) v[i] = x.get_as_double(r * f + i);
  return v;
}

std::pair<int64_t, int64_t> rows_features(const Shape& x) {
  ONYX_CHECK(x.rank() == 1 || x.rank() == 2, "X must be [N, features] or [features], got ", x.str());
  return x.rank() == 1 ? std::pair<int64_t, int64_t>{1, x[0]} : std::pair<int64_t, int64_t>{x[0], x[1]};
}

void check_x(const InferContext& ctx) {
  const DType t = ctx.input_dtype(0);
  ONYX_CHECK(t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64,
             "X must be float, double, int32 or int64, got ", dtype_name(t));
}

// ---- SVMRegressor -> [N, 1] ----

void infer_regressor(InferContext& ctx) {
  check_x(ctx);
  ONYX_CHECK(ctx.attr_string("post_transform", "NONE") == "NONE", "SVMRegressor's post_transform must be NONE");
  ctx.set_output(0, DType::kFloat32, Shape{rows_features(ctx.input_concrete_shape(0)).first, 1});
}

void regressor(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto [N, F] = rows_features(x.shape());
  const Kernel k = read_kernel(ctx);
  const auto coef = as_doubles(ctx.attr_floats("coefficients"));
  const auto sv = as_doubles(ctx.attr_floats("support_vectors"));
  const auto rho = ctx.attr_floats("rho");
  const int64_t supports = ctx.attr_int("n_supports", 0);
  ONYX_CHECK(!rho.empty(), "rho must hold the bias");
  if (supports > 0)
    ONYX_CHECK(static_cast<int64_t>(sv.size()) == supports * F && static_cast<int64_t>(coef.size()) >= supports,
               "support_vectors must be ", supports, " x ", F, " and coefficients hold one per support vector");
  else
    ONYX_CHECK(static_cast<int64_t>(coef.size()) == F, "a linear SVM needs one coefficient per feature (", F, ")");
  const bool one_class = ctx.attr_int("one_class", 0) != 0;
  for (int64_t r = 0; r < N; ++r) {
    const auto v = row_of(x, r, F);
    double s = rho[0];
    if (supports > 0)
      for (int64_t j = 0; j < supports; ++j) s += coef[j] * k(v.data(), sv.data() + j * F, F);
    else
      s += Kernel{}(v.data(), coef.data(), F);
    ctx.output(0).data<float>()[r] = static_cast<float>(one_class ? (s > 0 ? 1 : -1) : s);
  }
}

// ---- SVMClassifier -> (labels [N], scores [N, width]) ----

struct SvcModel {
  int64_t classes = 1, vectors = 0, features = 0;
  std::vector<int64_t> per_class, start;
  std::vector<double> coef, sv;
  std::vector<float> rho, prob_a, prob_b;
  bool svc = false, proba = false, all_positive = true;
  std::vector<int64_t> label_ints;
  std::vector<std::string> label_strings;
};

SvcModel read_svc(const NodeView& n, int64_t features) {
  SvcModel m;
  m.label_ints = n.attr_ints("classlabels_ints");
  m.label_strings = n.attr_strings("classlabels_strings");
  m.classes = std::max<int64_t>(std::max(m.label_ints.size(), m.label_strings.size()), 1);
  m.features = features;
  m.per_class = n.attr_ints("vectors_per_class");
  for (int64_t c : m.per_class) {
    ONYX_CHECK(c >= 0, "vectors_per_class holds a negative count");
    m.start.push_back(m.vectors);
    m.vectors += c;
  }
  m.coef = as_doubles(n.attr_floats("coefficients"));
  m.sv = as_doubles(n.attr_floats("support_vectors"));
  m.rho = n.attr_floats("rho");
  m.prob_a = n.attr_floats("prob_a");
  m.prob_b = n.attr_floats("prob_b");
  m.svc = m.vectors > 0;
  for (double c : m.coef) m.all_positive &= c >= 0;
  const int64_t pairs = m.classes * (m.classes - 1) / 2;
  if (m.svc) {
    ONYX_CHECK(static_cast<int64_t>(m.per_class.size()) == m.classes, "vectors_per_class must hold one count per class (",
               m.classes, ")");
    ONYX_CHECK(static_cast<int64_t>(m.sv.size()) == m.vectors * features, "support_vectors must be ", m.vectors, " x ",
               features, ", got ", m.sv.size(), " values");
    ONYX_CHECK(static_cast<int64_t>(m.coef.size()) == (m.classes - 1) * m.vectors, "coefficients must be ",
               m.classes - 1, " x ", m.vectors, ", got ", m.coef.size(), " values");
    ONYX_CHECK(static_cast<int64_t>(m.rho.size()) >= pairs, "rho must hold one bias per pair of classes (", pairs, ")");
    m.proba = !m.prob_a.empty();
    if (m.proba)
      ONYX_CHECK(static_cast<int64_t>(m.prob_a.size()) >= pairs && static_cast<int64_t>(m.prob_b.size()) >= pairs,
                 "prob_a and prob_b must hold one value per pair of classes (", pairs, ")");
  } else {
    ONYX_CHECK(static_cast<int64_t>(m.coef.size()) == m.classes * features, "a linear SVM needs ", m.classes, " x ",
               features, " coefficients, got ", m.coef.size());
    ONYX_CHECK(!m.rho.empty(), "rho must hold the bias");
  }
  return m;
}

// The width of the scores output: probabilities or scores per class, or the pairwise scores (the
// one score of two classes written for both).
int64_t score_width(const SvcModel& m) {
  if (m.svc && !m.proba) return m.classes > 2 ? m.classes * (m.classes - 1) / 2 : 2;
  return m.classes;
}

double logistic(double v) { return 1 / (1 + std::exp(-v)); }

// libsvm's coupling of pairwise probabilities r[i][j] (i against j) into one distribution.
std::vector<double> couple(int64_t k, const std::vector<double>& r) {
  std::vector<double> Q(static_cast<size_t>(k * k)), Qp(static_cast<size_t>(k)), p(static_cast<size_t>(k), 1.0 / k);
  for (int64_t t = 0; t < k; ++t) {
    Q[t * k + t] = 0;
    for (int64_t j = 0; j < t; ++j) {
      Q[t * k + t] += r[j * k + t] * r[j * k + t];
      Q[t * k + j] = Q[j * k + t];
    }
    for (int64_t j = t + 1; j < k; ++j) {
      Q[t * k + t] += r[j * k + t] * r[j * k + t];
      Q[t * k + j] = -r[j * k + t] * r[t * k + j];
    }
  }
  const double eps = 0.005 / static_cast<double>(k);
  for (int64_t iter = 0; iter < std::max<int64_t>(100, k); ++iter) {
    double pQp = 0;
    for (int64_t t = 0; t < k; ++t) {
      Qp[t] = 0;
      for (int64_t j = 0; j < k; ++j) Qp[t] += Q[t * k + j] * p[j];
      pQp += p[t] * Qp[t];
    }
    double max_error = 0;
    for (int64_t t = 0; t < k; ++t) max_error = std::max(max_error, std::abs(Qp[t] - pQp));
    if (max_error < eps) break;
    for (int64_t t = 0; t < k; ++t) {
      const double diff = (-Qp[t] + pQp) / Q[t * k + t];
      p[t] += diff;
      pQp = (pQp + diff * (diff * Q[t * k + t] + 2 * Qp[t])) / ((1 + diff) * (1 + diff));
      for (int64_t j = 0; j < k; ++j) {
        Qp[j] = (Qp[j] + diff * Q[t * k + j]) / (1 + diff);
        p[j] /= 1 + diff;
      }
    }
  }
  return p;
}

void infer_classifier(InferContext& ctx) {
  check_x(ctx);
  const auto [N, F] = rows_features(ctx.input_concrete_shape(0));
  const SvcModel m = read_svc(ctx, F);
  const std::string how = ctx.attr_string("post_transform", "NONE");
  ONYX_CHECK(how == "NONE" || how == "LOGISTIC" || how == "SOFTMAX" || how == "SOFTMAX_ZERO", "post_transform ", how,
             " is not supported by onyx for SVMClassifier (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO)");
  ONYX_CHECK(!(m.svc && !m.proba && m.classes == 2) || how == "NONE", "post_transform ", how,
             " is not supported by onyx for a two-class SVMClassifier without probabilities (NONE)");
  ONYX_CHECK(m.classes >= 2, "SVMClassifier needs at least two class labels");
  ctx.set_output(0, m.label_strings.empty() ? DType::kInt64 : DType::kString, Shape{N});
  if (ctx.has_output(1)) ctx.set_output(1, DType::kFloat32, Shape{N, score_width(m)});
}

void softmax(std::vector<double>& s, bool zero) {
  double mx = -INFINITY, sum = 0;
  for (double v : s) mx = std::max(mx, v);
  for (double& v : s)
    if (!zero || v != 0) sum += v = std::exp(v - mx);
  for (double& v : s) v = zero && sum == 0 ? 0.5 : v / sum;
}

void classifier(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto [N, F] = rows_features(x.shape());
  const SvcModel m = read_svc(ctx, F);
  const Kernel k = m.svc ? read_kernel(ctx) : Kernel{};
  const std::string how = ctx.attr_string("post_transform", "NONE");
  const int64_t C = m.classes, width = score_width(m);
  std::vector<double> kern(static_cast<size_t>(m.vectors));
  for (int64_t r = 0; r < N; ++r) {
    const auto v = row_of(x, r, F);
    std::vector<double> scores, votes;
    if (!m.svc) {
      for (int64_t c = 0; c < C; ++c) scores.push_back(m.rho[0] + k(v.data(), m.coef.data() + c * F, F));
    } else {
      for (int64_t j = 0; j < m.vectors; ++j) kern[j] = k(v.data(), m.sv.data() + j * F, F);
      votes.assign(static_cast<size_t>(C), 0.0);
      int64_t pair = 0;
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = i + 1; j < C; ++j, ++pair) {
          double s = m.rho[pair];
          for (int64_t t = 0; t < m.per_class[i]; ++t) s += m.coef[(j - 1) * m.vectors + m.start[i] + t] * kern[m.start[i] + t];
          for (int64_t t = 0; t < m.per_class[j]; ++t) s += m.coef[i * m.vectors + m.start[j] + t] * kern[m.start[j] + t];
          scores.push_back(s);
          ++votes[s > 0 ? i : j];
        }
      if (m.proba) {
        std::vector<double> pr(static_cast<size_t>(C * C), 0.0);
        pair = 0;
        for (int64_t i = 0; i < C; ++i)
          for (int64_t j = i + 1; j < C; ++j, ++pair) {
            const double p = std::clamp(1 - logistic(scores[pair] * m.prob_a[pair] + m.prob_b[pair]), 1e-7, 1 - 1e-7);
            pr[i * C + j] = p;
            pr[j * C + i] = 1 - p;
          }
        scores = couple(C, pr);
      }
    }
    // The winner: most votes (pairwise models; their weight counts as 0), else the best score.
    // Two classes without probabilities pick the second where the weight says so, as onnxruntime
    // does: at least 0.5 when every coefficient is positive, above 0 when one is not.
    const std::vector<double>& basis = votes.empty() ? scores : votes;
    int64_t label_index = std::max_element(basis.begin(), basis.end()) - basis.begin();
    const double weight = votes.empty() ? scores[label_index] : 0.0;
    if (C == 2 && !m.proba && ((m.all_positive && weight >= 0.5) || (!m.all_positive && weight > 0))) label_index = 1;
    if (scores.size() >= 2) {
      if (how == "LOGISTIC") for (double& s : scores) s = logistic(s);
      else if (how == "SOFTMAX" || how == "SOFTMAX_ZERO") softmax(scores, how == "SOFTMAX_ZERO");
    } else {
      scores = {-scores[0], scores[0]};  // one pairwise score, written for both classes
    }
    ONYX_CHECK(static_cast<int64_t>(scores.size()) == width, "internal: ", scores.size(), " scores for width ", width);
    if (!m.label_strings.empty()) {
      ONYX_CHECK(label_index >= 0 && label_index < static_cast<int64_t>(m.label_strings.size()), "label ", label_index,
                 " of ", m.label_strings.size());
      ctx.output(0).data<std::string>()[r] = m.label_strings[label_index];
    } else {
      ONYX_CHECK(label_index >= 0 && label_index < static_cast<int64_t>(m.label_ints.size()), "label ", label_index,
                 " of ", m.label_ints.size());
      ctx.output(0).data<int64_t>()[r] = m.label_ints[label_index];
    }
    if (ctx.has_output(1))
      for (int64_t c = 0; c < width; ++c) ctx.output(1).data<float>()[r * width + c] = static_cast<float>(scores[c]);
  }
}

}  // namespace

void register_ml_svm_ops(OpRegistry& r) {
  r.add(domain_op("ai.onnx.ml", "SVMRegressor", 1, infer_regressor, regressor));
  r.add(domain_op("ai.onnx.ml", "SVMClassifier", 1, infer_classifier, classifier));
}

}  // namespace onyx
