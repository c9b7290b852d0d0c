// ai.onnx.ml TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1 and 3: what
// scikit-learn, LightGBM and XGBoost forests convert to). Nodes are listed by (tree id, node id);
// each tree's first listed node is its root; a row walks each tree to a leaf, whose targets (or
// classes) add their weights. Thresholds are float32 (the *_as_tensor forms may be double).
#include <cmath>
#include <map>
#include <set>

#include "ops/common.h"

namespace onyx {

namespace {

enum class Rule { kLeq, kLt, kGte, kGt, kEq, kNeq, kLeaf };

Rule parse_rule(const std::string& s) {
  static const std::map<std::string, Rule> kRules = {{"BRANCH_LEQ", Rule::kLeq}, {"BRANCH_LT", Rule::kLt},
                                                     {"BRANCH_GTE", Rule::kGte}, {"BRANCH_GT", Rule::kGt},
                                                     {"BRANCH_EQ", Rule::kEq},   {"BRANCH_NEQ", Rule::kNeq},
                                                     {"LEAF", Rule::kLeaf}};
  auto it = kRules.find(s);
  ONYX_CHECK(it != kRules.end(), "node mode \"", s, "\" is not one of BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, ",
             "BRANCH_EQ, BRANCH_NEQ, LEAF");
  return it->second;
}

// A float list attribute, or its *_as_tensor form (opset 3).
std::vector<double> doubles_attr(const NodeView& n, const std::string& name) {
  if (const Tensor* t = n.attr_tensor(name + "_as_tensor")) {
    std::vector<double> v(static_cast<size_t>(t->numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = t->get_as_double(static_cast<int64_t>(i));
    return v;
  }
  const auto f = n.attr_floats(name);
  return std::vector<double>(f.begin(), f.end());
}

struct Forest {
  std::vector<int64_t> tree, node, feature, yes, no, missing;
  std::vector<Rule> rule;
  std::vector<double> value;
  std::vector<int64_t> roots;                      // node index of each tree's root, by tree id order
  std::map<std::pair<int64_t, int64_t>, int64_t> at;  // (tree, node id) -> node index
  // Per leaf node index: its (output column, weight) pairs.
  std::map<int64_t, std::vector<std::pair<int64_t, double>>> leaf_weights;
};

// Reads the nodes and the leaves' weights (prefix "target" or "class"); `columns` bounds the ids.
Forest read_forest(const NodeView& n, const std::string& prefix, int64_t columns) {
  Forest f;
  f.tree = n.attr_ints("nodes_treeids");
  f.node = n.attr_ints("nodes_nodeids");
  f.feature = n.attr_ints("nodes_featureids");
  f.yes = n.attr_ints("nodes_truenodeids");
  f.no = n.attr_ints("nodes_falsenodeids");
  f.missing = n.attr_ints("nodes_missing_value_tracks_true");
  f.value = doubles_attr(n, "nodes_values");
  const auto modes = n.attr_strings("nodes_modes");
  const size_t count = f.tree.size();
  ONYX_CHECK(f.node.size() == count && f.feature.size() == count && f.yes.size() == count && f.no.size() == count &&
                 modes.size() == count && (f.value.empty() || f.value.size() == count) &&
                 (f.missing.empty() || f.missing.size() == count),
             "the nodes_* attributes must all have ", count, " entries");
  if (f.value.empty()) f.value.assign(count, 0.0);
  for (const auto& m : modes) f.rule.push_back(parse_rule(m));
  std::map<int64_t, int64_t> root;
  for (size_t i = 0; i < count; ++i) {
    ONYX_CHECK(f.at.emplace(std::pair{f.tree[i], f.node[i]}, static_cast<int64_t>(i)).second, "tree ", f.tree[i],
               " lists node ", f.node[i], " twice");
    root.emplace(f.tree[i], static_cast<int64_t>(i));  // the first listed node of each tree
  }
  for (const auto& [tree, index] : root) f.roots.push_back(index);
  const auto ids = n.attr_ints(prefix + "_ids"), nodes = n.attr_ints(prefix + "_nodeids");
  const auto trees = n.attr_ints(prefix + "_treeids");
  const auto weights = doubles_attr(n, prefix + "_weights");
  ONYX_CHECK(ids.size() == nodes.size() && ids.size() == trees.size() && ids.size() == weights.size(), prefix,
             "_ids, _nodeids, _treeids and _weights must have one length");
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = f.at.find({trees[i], nodes[i]});
    ONYX_CHECK(it != f.at.end(), prefix, " weight ", i, " names node ", nodes[i], " of tree ", trees[i],
               ", which is not listed");
    ONYX_CHECK(ids[i] >= 0 && ids[i] < columns, prefix, " weight ", i, " adds to column ", ids[i], " of ", columns);
    f.leaf_weights[it->second].emplace_back(ids[i], weights[i]);
  }
  return f;
}

// The leaf node index that row x reaches in the tree rooted at node index `r`.
int64_t leaf_of(const Forest& f, const Tensor& X, int64_t row, int64_t features, int64_t r) {
  int64_t i = r;
  for (size_t steps = 0; f.rule[i] != Rule::kLeaf; ++steps) {
    ONYX_CHECK(steps <= f.rule.size(), "tree ", f.tree[i], " has a cycle");
    ONYX_CHECK(f.feature[i] >= 0 && f.feature[i] < features, "node ", f.node[i], " of tree ", f.tree[i],
               " reads feature ", f.feature[i], " of ", features);
    const double x = X.get_as_double(row * features + f.feature[i]);
    const double t = static_cast<float>(f.value[i]);  // thresholds compare as float32
    bool go;
    if (std::isnan(x)) go = !f.missing.empty() && f.missing[i] != 0;
    else switch (f.rule[i]) {
        case Rule::kLeq: go = x <= t; break;
        case Rule::kLt: go = x < t; break;
        case Rule::kGte: go = x >= t; break;
        case Rule::kGt: go = x > t; break;
        case Rule::kEq: go = x == t; break;
        default: go = x != t; break;
      }
    auto it = f.at.find({f.tree[i], go ? f.yes[i] : f.no[i]});
    ONYX_CHECK(it != f.at.end(), "node ", f.node[i], " of tree ", f.tree[i], " branches to node ",
               go ? f.yes[i] : f.no[i], ", which is not listed");
    i = it->second;
  }
  return i;
}

int64_t feature_count(const Tensor& X) { return X.rank() == 1 ? X.shape()[0] : X.numel() / std::max<int64_t>(X.shape()[0], 1); }
int64_t row_count(const Tensor& X) { return X.rank() == 1 ? 1 : X.shape()[0]; }

double logistic(double v) { return 1 / (1 + std::exp(-v)); }

void transform_row(const std::string& how, double* s, int64_t n) {
  if (how == "NONE") return;
  if (how == "LOGISTIC") {
    for (int64_t j = 0; j < n; ++j) s[j] = logistic(s[j]);
  } else if (how == "SOFTMAX" || how == "SOFTMAX_ZERO") {
    const bool zero = how == "SOFTMAX_ZERO";
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
    for (int64_t j = 0; j < n; ++j)
      if (!zero || s[j] != 0) sum += s[j] = std::exp(s[j] - mx);
    for (int64_t j = 0; j < n; ++j) s[j] = zero && sum == 0 ? 0.5 : s[j] / sum;
  } else {
    throw Error(cat("post_transform ", how, " is not supported by onyx (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO)"));
  }
}

void check_x(const InferContext& ctx) {
  const DType t = ctx.input_dtype(0);
  ONYX_CHECK(t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64,
             "X must be float, double, int32 or int64, got ", dtype_name(t));
  ONYX_CHECK(ctx.input_concrete_shape(0).rank() == 1 || ctx.input_concrete_shape(0).rank() == 2,
             "X must be [N, features] or [features], got ", ctx.input_concrete_shape(0).str());
}

// ---- TreeEnsembleRegressor -> Y [N, n_targets] ----

void infer_regressor(InferContext& ctx) {
  check_x(ctx);
  const int64_t targets = ctx.attr_int("n_targets");
  ONYX_CHECK(targets > 0, "n_targets must be positive, got ", targets);
  const Shape x = ctx.input_concrete_shape(0);
  ctx.set_output(0, DType::kFloat32, Shape{x.rank() == 1 ? 1 : x[0], targets});
}

void regressor(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const int64_t T = ctx.attr_int("n_targets"), N = row_count(X), F = feature_count(X);
  const Forest f = read_forest(ctx, "target", T);
  const std::string agg = ctx.attr_string("aggregate_function", "SUM");
  ONYX_CHECK(agg == "SUM" || agg == "AVERAGE" || agg == "MIN" || agg == "MAX",
             "aggregate_function must be SUM, AVERAGE, MIN or MAX, got \"", agg, "\"");
  const auto base = doubles_attr(ctx, "base_values");
  ONYX_CHECK(base.empty() || static_cast<int64_t>(base.size()) == T, "base_values holds ", base.size(), " values for ",
             T, " targets");
  const std::string how = ctx.attr_string("post_transform", "NONE");
  std::vector<double> row(static_cast<size_t>(T));
  for (int64_t r = 0; r < N; ++r) {
    const double init = agg == "MIN" ? INFINITY : agg == "MAX" ? -INFINITY : 0.0;
    std::fill(row.begin(), row.end(), init);
    std::vector<bool> hit(static_cast<size_t>(T), false);
    for (int64_t root : f.roots) {
      auto it = f.leaf_weights.find(leaf_of(f, X, r, F, root));
      if (it == f.leaf_weights.end()) continue;
      for (auto [t, w] : it->second) {
        row[t] = agg == "MIN" ? std::min(row[t], w) : agg == "MAX" ? std::max(row[t], w) : row[t] + w;
        hit[t] = true;
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      if (!hit[t]) row[t] = 0;  // a target no leaf reached
      if (agg == "AVERAGE") row[t] /= static_cast<double>(f.roots.size());
      if (!base.empty()) row[t] += base[t];
    }
    transform_row(how, row.data(), T);
    for (int64_t t = 0; t < T; ++t) ctx.output(0).data<float>()[r * T + t] = static_cast<float>(row[t]);
  }
}

// ---- TreeEnsembleClassifier -> (Y [N] labels, Z [N, classes] scores) ----

size_t label_count(const NodeView& n) {
  return std::max(n.attr_ints("classlabels_int64s").size(), n.attr_strings("classlabels_strings").size());
}

void infer_classifier(InferContext& ctx) {
  check_x(ctx);
  const size_t labels = label_count(ctx);
  ONYX_CHECK(labels > 0, "TreeEnsembleClassifier needs classlabels_int64s or classlabels_strings");
  const Shape x = ctx.input_concrete_shape(0);
  const int64_t N = x.rank() == 1 ? 1 : x[0];
  const bool strings = !ctx.attr_strings("classlabels_strings").empty();
  ctx.set_output(0, strings ? DType::kString : DType::kInt64, Shape{N});
  if (ctx.has_output(1)) ctx.set_output(1, DType::kFloat32, Shape{N, std::max<int64_t>(static_cast<int64_t>(labels), 2)});
}

void classifier(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const auto ints = ctx.attr_ints("classlabels_int64s");
  const auto strings = ctx.attr_strings("classlabels_strings");
  const int64_t C = static_cast<int64_t>(label_count(ctx)), N = row_count(X), F = feature_count(X);
  const Forest f = read_forest(ctx, "class", C);
  const auto base = doubles_attr(ctx, "base_values");
  ONYX_CHECK(base.empty() || static_cast<int64_t>(base.size()) == C, "base_values holds ", base.size(), " values for ",
             C, " classes");
  // Binary (every weight goes to one class), as onnxruntime scores it: the sum s stands for the
  // second label, chosen where s > 0.5 when no weight is negative, else where s > 0. Scores:
  // LOGISTIC [1 - p, p] with p = logistic(s); otherwise (the softmaxes change nothing here)
  // [1 - s, s] when no weight is negative, else [-s, s].
  std::set<int64_t> used;
  bool positive = true;
  for (const auto& [leaf, ws] : f.leaf_weights)
    for (auto [c, w] : ws) used.insert(c), positive &= w >= 0;
  const bool binary = used.size() == 1;
  // One label means the second of a binary pair: ONNX defines only the label 1 (0 otherwise).
  ONYX_CHECK(C > 1 || (strings.empty() && ints[0] == 1), "a single class label other than the integer 1 is not ",
             "defined for TreeEnsembleClassifier");
  const std::string how = ctx.attr_string("post_transform", "NONE");
  ONYX_CHECK(!binary || how != "PROBIT", "post_transform PROBIT is not supported by onyx for a binary classifier");
  const int64_t width = std::max<int64_t>(C, 2);
  std::vector<double> row(static_cast<size_t>(width));
  for (int64_t r = 0; r < N; ++r) {
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t c = 0; c < C && !base.empty(); ++c) row[c] = base[c];
    for (int64_t root : f.roots) {
      auto it = f.leaf_weights.find(leaf_of(f, X, r, F, root));
      if (it != f.leaf_weights.end())
        for (auto [c, w] : it->second) row[c] += w;
    }
    int64_t best = 0;
    if (binary) {
      const double sum = row[*used.begin()];
      best = positive ? sum > 0.5 : sum > 0;
      const double p = how == "LOGISTIC" ? logistic(sum) : sum;
      row[0] = how == "LOGISTIC" || positive ? 1 - p : -p;
      row[1] = p;
      for (int64_t c = 2; c < width; ++c) row[c] = 0;
    } else {
      transform_row(how, row.data(), width);
      for (int64_t c = 1; c < width; ++c)
        if (row[c] > row[best]) best = c;
    }
    if (!strings.empty()) ctx.output(0).data<std::string>()[r] = best < C ? strings[best] : std::string();
    else ctx.output(0).data<int64_t>()[r] = C == 1 ? best : ints[best];
    if (ctx.has_output(1))
      for (int64_t c = 0; c < width; ++c) ctx.output(1).data<float>()[r * width + c] = static_cast<float>(row[c]);
  }
}

}  // namespace

void register_ml_tree_ops(OpRegistry& r) {
  for (int since : {1, 3}) {
    r.add(domain_op("ai.onnx.ml", "TreeEnsembleRegressor", since, infer_regressor, regressor));
    r.add(domain_op("ai.onnx.ml", "TreeEnsembleClassifier", since, infer_classifier, classifier));
  }
}

}  // namespace onyx
