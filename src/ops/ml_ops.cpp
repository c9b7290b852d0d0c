// Classic-ML ops: TfIdfVectorizer (ai.onnx), and of the ai.onnx.ml domain ArrayFeatureExtractor,
// Binarizer, LabelEncoder and TreeEnsemble (the opset-5 form that replaced the tree ensemble
// regressor and classifier).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>

#include "ops/common.h"

namespace onyx {

namespace {

// ---- TfIdfVectorizer: counts of the pool's n-grams in each row ----

// One token of X as a key: its integer value, or its string.
struct Token {
  int64_t i = 0;
  std::string s;
  bool operator<(const Token& o) const { return i != o.i ? i < o.i : s < o.s; }
};

void infer_tfidf(InferContext& ctx) {
  const PartialShape& x = ctx.input_shape(0);
  const DType t = ctx.input_dtype(0);
  ONYX_CHECK(t == DType::kInt32 || t == DType::kInt64 || t == DType::kString, "X must be int32, int64 or strings, got ",
             dtype_name(t));
  ONYX_CHECK(!x.rank_known || x.dims.size() == 1 || x.dims.size() == 2, "X must be [C] or [N, C], got ", x.str());
  const auto indexes = ctx.attr_ints("ngram_indexes");
  ONYX_CHECK(!indexes.empty(), "ngram_indexes must not be empty");
  int64_t width = 0;
  for (int64_t i : indexes) {
    ONYX_CHECK(i >= 0, "ngram_indexes holds a negative index ", i);
    width = std::max(width, i + 1);
  }
  PartialShape y = x;
  if (y.rank_known) y.dims.back() = width;
  ctx.set_output(0, DType::kFloat32, y);
}

void tfidf_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t min_n = ctx.attr_int("min_gram_length"), max_n = ctx.attr_int("max_gram_length");
  const int64_t max_skip = ctx.attr_int("max_skip_count");
  const std::string mode = ctx.attr_string("mode", "TF");
  ONYX_CHECK(mode == "TF" || mode == "IDF" || mode == "TFIDF", "mode must be TF, IDF or TFIDF, got \"", mode, "\"");
  ONYX_CHECK(min_n >= 1 && max_n >= min_n && max_skip >= 0, "need 1 <= min_gram_length <= max_gram_length and ",
             "max_skip_count >= 0, got ", min_n, ", ", max_n, ", ", max_skip);
  const auto counts = ctx.attr_ints("ngram_counts");
  const auto indexes = ctx.attr_ints("ngram_indexes");
  const auto weights = ctx.attr_floats("weights");
  const auto pool_ints = ctx.attr_ints("pool_int64s");
  const auto pool_strings = ctx.attr_strings("pool_strings");
  const bool strings = x.dtype() == DType::kString;
  ONYX_CHECK(strings ? !pool_strings.empty() : !pool_ints.empty(), "the pool (pool_",
             strings ? "strings" : "int64s", ") must hold the input's kind of tokens");
  const int64_t pool = strings ? static_cast<int64_t>(pool_strings.size()) : static_cast<int64_t>(pool_ints.size());
  // Pool entries by n: n-grams of length n + 1 start at counts[n] and run to the next start.
  std::map<std::vector<Token>, int64_t> ngram_index;
  int64_t seen = 0;
  for (size_t n = 0; n < counts.size(); ++n) {
    const int64_t begin = counts[n], end = n + 1 < counts.size() ? counts[n + 1] : pool;
    ONYX_CHECK(begin >= 0 && begin <= end && end <= pool && (end - begin) % static_cast<int64_t>(n + 1) == 0,
               "ngram_counts[", n, "] = ", begin, " does not split the pool of ", pool, " into ", n + 1, "-grams");
    for (int64_t at = begin; at < end; at += static_cast<int64_t>(n + 1), ++seen) {
      std::vector<Token> gram;
      for (size_t k = 0; k <= n; ++k)
        gram.push_back(strings ? Token{0, pool_strings[at + k]} : Token{pool_ints[at + k], {}});
      ONYX_CHECK(seen < static_cast<int64_t>(indexes.size()), "ngram_indexes has ", indexes.size(),
                 " entries, the pool more n-grams");
      ngram_index[gram] = indexes[seen];
    }
  }
  ONYX_CHECK(weights.empty() || weights.size() == indexes.size(), "weights has ", weights.size(),
             " entries, ngram_indexes ", indexes.size());
  const int64_t rows = x.rank() == 2 ? x.shape()[0] : 1, cols = x.shape().dims().back();
  const int64_t width = y.shape().dims().back();
  std::vector<double> tf(static_cast<size_t>(width));
  auto token = [&](int64_t at) {
    return strings ? Token{0, x.data<std::string>()[at]} : Token{x.get_as_int64(at), {}};
  };
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(tf.begin(), tf.end(), 0.0);
    for (int64_t n = min_n; n <= max_n; ++n)
      for (int64_t skip = 0; skip <= (n == 1 ? 0 : max_skip); ++skip)
        for (int64_t start = 0; start + (n - 1) * (skip + 1) < cols; ++start) {
          std::vector<Token> gram;
          for (int64_t k = 0; k < n; ++k) gram.push_back(token(r * cols + start + k * (skip + 1)));
          auto it = ngram_index.find(gram);
          if (it != ngram_index.end()) tf[it->second] += 1;
        }
    for (int64_t j = 0; j < width; ++j) {
      // Weights are given per ngram_indexes entry; an output index takes its entry's weight.
      double w = 1;
      for (size_t e = 0; e < indexes.size() && !weights.empty(); ++e)
        if (indexes[e] == j) w = weights[e];
      const double v = mode == "TF" ? tf[j] : mode == "IDF" ? (tf[j] > 0 ? w : 0) : tf[j] * w;
      y.data<float>()[r * width + j] = static_cast<float>(v);
    }
  }
}

// ---- ai.onnx.ml ----

void infer_array_feature_extractor(InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0);
  const Shape y = ctx.input_concrete_shape(1);
  ONYX_CHECK(x.rank() >= 1, "X must have rank >= 1");
  ONYX_CHECK(ctx.input_dtype(1) == DType::kInt64, "Y must be int64 indices");
  std::vector<int64_t> dims = x.dims();
  if (dims.size() == 1) dims.insert(dims.begin(), 1);
  dims.back() = y.numel();
  ctx.set_output(0, ctx.input_dtype(0), Shape(dims));
}

void array_feature_extractor(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  Tensor& out = ctx.output(0);
  const int64_t n = x.shape().dims().back(), rows = n ? x.numel() / n : 0, k = idx.numel();
  const size_t es = dtype_size(x.dtype());
  ONYX_CHECK(x.dtype() != DType::kString, "string features are not supported");
  for (int64_t j = 0; j < k; ++j) {
    const int64_t at = idx.get_as_int64(j);
    ONYX_CHECK(at >= 0 && at < n, "index ", at, " (Y[", j, "]) is out of range for ", n, " features");
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(out.raw()) + (r * k + j) * es, static_cast<const char*>(x.raw()) + (r * n + at) * es, es);
  }
}

void binarizer(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const double threshold = ctx.attr_float("threshold", 0.f);
  dispatch<FloatTypes>(x.dtype(), "Binarizer X", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < x.numel(); ++i)
      ctx.output(0).data<T>()[i] = static_cast<T>(static_cast<compute_t<T>>(x.get_as_double(i) > threshold ? 1 : 0));
  });
}

// LabelEncoder: keys and values from the typed lists or (opset 4) tensors; the default from
// default_* or default_tensor.
Tensor list_tensor(const NodeView& n, bool keys) {
  const std::string prefix = keys ? "keys_" : "values_";
  if (const Tensor* t = n.attr_tensor(prefix + "tensor")) return *t;
  if (n.has_attr(prefix + "strings")) {
    auto v = n.attr_strings(prefix + "strings");
    return Tensor::from_vector<std::string>(v, Shape{static_cast<int64_t>(v.size())});
  }
  if (n.has_attr(prefix + "int64s")) {
    auto v = n.attr_ints(prefix + "int64s");
    return Tensor::from_vector<int64_t>(v, Shape{static_cast<int64_t>(v.size())});
  }
  if (n.has_attr(prefix + "floats")) {
    auto v = n.attr_floats(prefix + "floats");
    return Tensor::from_vector<float>(v, Shape{static_cast<int64_t>(v.size())});
  }
  throw Error(cat("LabelEncoder needs ", prefix, "strings, ", prefix, "int64s, ", prefix, "floats or ", prefix,
                  "tensor"));
}

Tensor label_default(const NodeView& n, DType t) {
  if (const Tensor* d = n.attr_tensor("default_tensor")) {
    ONYX_CHECK(d->dtype() == t && d->numel() == 1, "default_tensor must hold one ", dtype_name(t), ", got ",
               d->type_str());
    return *d;
  }
  switch (t) {
    case DType::kString: return Tensor::scalar<std::string>(n.attr_string("default_string", "_Unused"));
    case DType::kInt64: return Tensor::scalar<int64_t>(n.attr_int("default_int64", -1));
    case DType::kFloat32: return Tensor::scalar<float>(n.attr_float("default_float", -0.f));
    default: throw Error(cat("LabelEncoder values of ", dtype_name(t), " need default_tensor"));
  }
}

void infer_label_encoder(InferContext& ctx) {
  const Tensor keys = list_tensor(ctx, true), values = list_tensor(ctx, false);
  ONYX_CHECK(keys.numel() == values.numel(), "LabelEncoder has ", keys.numel(), " keys and ", values.numel(), " values");
  ONYX_CHECK(ctx.input_dtype(0) == keys.dtype(), "X is ", dtype_name(ctx.input_dtype(0)), ", the keys ",
             dtype_name(keys.dtype()));
  ctx.set_output(0, values.dtype(), ctx.input_shape(0));
}

void label_encoder(KernelContext& ctx) {
  const Tensor keys = list_tensor(ctx, true), values = list_tensor(ctx, false);
  const Tensor def = label_default(ctx, values.dtype());
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  auto key_of = [&](const Tensor& t, int64_t i) -> std::string {
    if (t.dtype() == DType::kString) return t.data<std::string>()[i];
    return cat(t.get_as_double(i));  // numbers compare by value
  };
  std::unordered_map<std::string, int64_t> index;
  for (int64_t i = 0; i < keys.numel(); ++i) index.emplace(key_of(keys, i), i);
  dispatch<AllTypes>(values.dtype(), "LabelEncoder values", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto it = index.find(key_of(x, i));
      y.data<T>()[i] = it == index.end() ? def.data<T>()[0] : values.data<T>()[it->second];
    }
  });
}

// TreeEnsemble (ai.onnx.ml 5): X [N, F] -> [N, n_targets].
void infer_tree_ensemble(InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0);
  ONYX_CHECK(x.rank() == 2, "X must be [N, features], got ", x.str());
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "X must be a floating type");
  const int64_t targets = ctx.attr_int("n_targets");
  ONYX_CHECK(targets > 0, "n_targets must be positive, got ", targets);
  ONYX_CHECK(ctx.attr_int("post_transform", 0) == 0, "post_transform ", ctx.attr_int("post_transform", 0),
             " is not supported by onyx (only 0, NONE)");
  ctx.set_output(0, ctx.input_dtype(0), Shape{x[0], targets});
}

std::vector<double> tensor_doubles(const NodeView& n, const char* name) {
  const Tensor* t = n.attr_tensor(name);
  std::vector<double> v;
  if (t)
    for (int64_t i = 0; i < t->numel(); ++i) v.push_back(t->get_as_double(i));
  return v;
}

void tree_ensemble(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  Tensor& Y = ctx.output(0);
  const int64_t N = X.shape()[0], F = X.shape()[1], T = Y.shape()[1];
  const auto splits = tensor_doubles(ctx, "nodes_splits"), weights = tensor_doubles(ctx, "leaf_weights");
  const auto modes = tensor_doubles(ctx, "nodes_modes"), members = tensor_doubles(ctx, "membership_values");
  const auto features = ctx.attr_ints("nodes_featureids"), true_ids = ctx.attr_ints("nodes_truenodeids");
  const auto false_ids = ctx.attr_ints("nodes_falsenodeids"), true_leaf = ctx.attr_ints("nodes_trueleafs");
  const auto false_leaf = ctx.attr_ints("nodes_falseleafs"), targets = ctx.attr_ints("leaf_targetids");
  const auto missing = ctx.attr_ints("nodes_missing_value_tracks_true"), roots = ctx.attr_ints("tree_roots");
  const int64_t agg = ctx.attr_int("aggregate_function", 1);
  ONYX_CHECK(agg >= 0 && agg <= 3, "aggregate_function must be 0 to 3, got ", agg);
  const size_t nodes = features.size();
  ONYX_CHECK(splits.size() == nodes && modes.size() == nodes && true_ids.size() == nodes &&
                 false_ids.size() == nodes && true_leaf.size() == nodes && false_leaf.size() == nodes,
             "the nodes_* attributes must all have ", nodes, " entries");
  ONYX_CHECK(targets.size() == weights.size(), "leaf_targetids and leaf_weights differ in length");
  // Each set-membership node's members: the runs of membership_values between NaNs, in node order.
  std::vector<std::vector<double>> sets(nodes);
  size_t m = 0;
  for (size_t i = 0; i < nodes; ++i) {
    if (modes[i] != 6) continue;
    for (; m < members.size() && !std::isnan(members[m]); ++m) sets[i].push_back(members[m]);
    ONYX_CHECK(m < members.size(), "membership_values has no NaN-ended set for node ", i);
    ++m;
  }
  const double init = agg == 2 ? std::numeric_limits<double>::max() : agg == 3 ? std::numeric_limits<double>::lowest() : 0;
  std::vector<double> out(static_cast<size_t>(N * T));
  for (int64_t r = 0; r < N; ++r) {
    std::fill(out.begin() + r * T, out.begin() + (r + 1) * T, init);
    for (int64_t root : roots) {
      ONYX_CHECK(root >= 0 && static_cast<size_t>(root) < nodes, "tree root ", root, " is not a node");
      int64_t at = root;
      // A root whose branches are one leaf is that leaf.
      bool leaf = true_leaf[at] && false_leaf[at] && true_ids[at] == false_ids[at];
      for (size_t steps = 0; !leaf; ++steps) {
        ONYX_CHECK(steps <= nodes, "tree ", root, " has a cycle");
        ONYX_CHECK(features[at] >= 0 && features[at] < F, "node ", at, " reads feature ", features[at], " of ", F);
        const double v = X.get_as_double(r * F + features[at]);
        const double s = splits[at];
        bool go;
        switch (static_cast<int>(modes[at])) {
          case 0: go = v <= s; break;
          case 1: go = v < s; break;
          case 2: go = v >= s; break;
          case 3: go = v > s; break;
          case 4: go = v == s; break;
          case 5: go = v != s; break;
          case 6: go = std::find(sets[at].begin(), sets[at].end(), v) != sets[at].end(); break;
          default: throw Error(cat("node ", at, " has mode ", modes[at], " (0 to 6)"));
        }
        if (std::isnan(v) && static_cast<size_t>(at) < missing.size() && missing[at]) go = true;
        leaf = go ? true_leaf[at] != 0 : false_leaf[at] != 0;
        at = go ? true_ids[at] : false_ids[at];
        ONYX_CHECK(at >= 0 && static_cast<size_t>(at) < (leaf ? weights.size() : nodes), "a branch leads to ",
                   leaf ? "leaf " : "node ", at, ", which does not exist");
      }
      const int64_t t = targets[at];
      ONYX_CHECK(t >= 0 && t < T, "leaf ", at, " adds to target ", t, " of ", T);
      double& o = out[r * T + t];
      const double w = weights[at];
      if (agg == 1) o += w;
      else if (agg == 0) o += w / static_cast<double>(roots.size());
      else if (agg == 2) o = std::min(o, w);
      else o = std::max(o, w);
    }
  }
  dispatch<FloatTypes>(Y.dtype(), "TreeEnsemble Y", [&](auto tag) {
    using TT = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) Y.data<TT>()[i] = static_cast<TT>(static_cast<compute_t<TT>>(out[i]));
  });
}

}  // namespace

void register_ml_ops(OpRegistry& r) {
  r.add(onnx_op("TfIdfVectorizer", 9, infer_tfidf, tfidf_kernel));
  r.add(domain_op("ai.onnx.ml", "ArrayFeatureExtractor", 1, infer_array_feature_extractor, array_feature_extractor));
  r.add(domain_op("ai.onnx.ml", "Binarizer", 1, [](InferContext& c) { infer_same_as_input(c); }, binarizer));
  for (int since : {2, 4}) r.add(domain_op("ai.onnx.ml", "LabelEncoder", since, infer_label_encoder, label_encoder));
  r.add(domain_op("ai.onnx.ml", "TreeEnsemble", 5, infer_tree_ensemble, tree_ensemble));
}

}  // namespace onyx
