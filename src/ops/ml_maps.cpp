// ai.onnx.ml's map ops (maps: onyx/dtype.h's kMap, keys and values): ZipMap (each row of class
// scores as a map from label to score: what scikit-learn classifiers end in), DictVectorizer
// (a map to a dense row over a vocabulary) and CastMap (a map with integer keys to a row).
#include <map>
#include <unordered_map>

#include "ops/common.h"

namespace onyx {

namespace {

const Tensor& map_input(const KernelContext& ctx) {
  const Tensor& m = ctx.input(0);
  ONYX_CHECK(m.dtype() == DType::kMap, "X must be a map, got ", m.type_str());
  return m;
}

// ---- ZipMap(X [N, C] float) -> sequence of N maps from the C labels ----

void infer_zip_map(InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(0) == DType::kFloat32, "X must be float, got ", dtype_name(ctx.input_dtype(0)));
  const bool ints = !ctx.attr_ints("classlabels_int64s").empty(), strings = !ctx.attr_strings("classlabels_strings").empty();
  ONYX_CHECK(ints != strings, "ZipMap needs one of classlabels_int64s and classlabels_strings");
  ctx.set_output(0, DType::kSequence, PartialShape());
}

void zip_map(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(x.rank() == 1 || x.rank() == 2, "X must be [N, C] or [C], got ", x.type_str());
  const auto ints = ctx.attr_ints("classlabels_int64s");
  const auto strings = ctx.attr_strings("classlabels_strings");
  const int64_t C = static_cast<int64_t>(ints.empty() ? strings.size() : ints.size());
  const int64_t cols = x.shape().dims().back(), rows = x.rank() == 1 ? 1 : x.shape()[0];
  ONYX_CHECK(cols == C, "X has ", cols, " columns for ", C, " class labels");
  const Tensor keys = ints.empty() ? Tensor::from_vector<std::string>(strings, Shape{C})
                                   : Tensor::from_vector<int64_t>(ints, Shape{C});
  std::vector<Tensor> maps;
  for (int64_t r = 0; r < rows; ++r) {
    Tensor values(DType::kFloat32, Shape{C}, ctx.allocator());
    std::copy(x.data<float>() + r * C, x.data<float>() + (r + 1) * C, values.data<float>());
    maps.push_back(Tensor::map(keys, values));
  }
  ctx.set_output(0, Tensor::sequence(maps, DType::kMap));
}

// The position of each key of a map among the vocabulary (-1 where it has none).
template <class K>
std::vector<int64_t> positions(const Tensor& keys, const std::vector<K>& vocabulary) {
  std::unordered_map<K, int64_t> at;
  for (size_t i = 0; i < vocabulary.size(); ++i) at.emplace(vocabulary[i], static_cast<int64_t>(i));
  std::vector<int64_t> p(static_cast<size_t>(keys.numel()));
  for (int64_t i = 0; i < keys.numel(); ++i) {
    auto it = at.find(keys.data<K>()[i]);
    p[i] = it == at.end() ? -1 : it->second;
  }
  return p;
}

// ---- DictVectorizer(map) -> [1, vocabulary]: each key's value at its word, 0 elsewhere ----

DType map_value_type(const InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(0) == DType::kMap, "X must be a map, got ", dtype_name(ctx.input_dtype(0)));
  const Tensor* m = ctx.input_value(0);
  ONYX_CHECK(m, "the map's value type is known when it runs");
  return m->element_dtype();
}

void infer_dict_vectorizer(InferContext& ctx) {
  const DType v = map_value_type(ctx);
  const size_t n = std::max(ctx.attr_strings("string_vocabulary").size(), ctx.attr_ints("int64_vocabulary").size());
  ONYX_CHECK(n > 0, "DictVectorizer needs string_vocabulary or int64_vocabulary");
  ctx.set_output(0, v, Shape{1, static_cast<int64_t>(n)});
}

void dict_vectorizer(KernelContext& ctx) {
  const Tensor& m = map_input(ctx);
  const Tensor& keys = m.elements()[0];
  const Tensor& values = m.elements()[1];
  const auto words = ctx.attr_strings("string_vocabulary");
  const auto ids = ctx.attr_ints("int64_vocabulary");
  ONYX_CHECK(keys.dtype() == (words.empty() ? DType::kInt64 : DType::kString), "the map's keys are ",
             dtype_name(keys.dtype()), ", the vocabulary ", words.empty() ? "int64" : "strings");
  const std::vector<int64_t> at = words.empty() ? positions(keys, ids) : positions(keys, words);
  Tensor& y = ctx.output(0);
  dispatch<AllTypes>(y.dtype(), "DictVectorizer values", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) out[i] = T{};
    for (size_t i = 0; i < at.size(); ++i)
      if (at[i] >= 0) out[at[i]] = values.data<T>()[i];
  });
}

// ---- CastMap(map(int64, V)) -> [1, n]: the values in key order (DENSE), or at their keys in
//      0..max_map-1 (SPARSE), cast to float, int64 or strings ----

void infer_cast_map(InferContext& ctx) {
  const DType v = map_value_type(ctx);
  ONYX_CHECK(v == DType::kFloat32 || v == DType::kString, "CastMap takes maps to float or strings, got ",
             dtype_name(v));
  const std::string to = ctx.attr_string("cast_to", "TO_FLOAT"), form = ctx.attr_string("map_form", "DENSE");
  ONYX_CHECK(to == "TO_FLOAT" || to == "TO_STRING" || to == "TO_INT64", "cast_to must be TO_FLOAT, TO_STRING or ",
             "TO_INT64, got \"", to, "\"");
  ONYX_CHECK(form == "DENSE" || form == "SPARSE", "map_form must be DENSE or SPARSE, got \"", form, "\"");
  const DType out = to == "TO_FLOAT" ? DType::kFloat32 : to == "TO_STRING" ? DType::kString : DType::kInt64;
  const int64_t n = form == "SPARSE" ? ctx.attr_int("max_map", 1) : ctx.input_value(0)->elements()[0].numel();
  ONYX_CHECK(n >= 0, "max_map must not be negative");
  ctx.set_output(0, out, Shape{1, n});
}

void cast_map(KernelContext& ctx) {
  const Tensor& m = map_input(ctx);
  const Tensor& keys = m.elements()[0];
  const Tensor& values = m.elements()[1];
  ONYX_CHECK(keys.dtype() == DType::kInt64, "CastMap takes maps with int64 keys, got ", dtype_name(keys.dtype()));
  const bool sparse = ctx.attr_string("map_form", "DENSE") == "SPARSE";
  Tensor& y = ctx.output(0);
  // Entries by key, in order.
  std::map<int64_t, int64_t> order;
  for (int64_t i = 0; i < keys.numel(); ++i) order.emplace(keys.data<int64_t>()[i], i);
  auto put = [&](int64_t at, int64_t from) {
    if (y.dtype() == DType::kString) {
      y.data<std::string>()[at] = from < 0 ? std::string("0")
                                  : values.dtype() == DType::kString ? values.data<std::string>()[from]
                                                                     : std::to_string(values.data<float>()[from]);
      return;
    }
    double v = 0;
    if (from >= 0) v = values.dtype() == DType::kString ? std::stod(values.data<std::string>()[from]) : values.data<float>()[from];
    if (y.dtype() == DType::kFloat32) y.data<float>()[at] = static_cast<float>(v);
    else y.data<int64_t>()[at] = static_cast<int64_t>(v);
  };
  if (sparse) {
    for (int64_t k = 0; k < y.numel(); ++k) {
      auto it = order.find(k);
      put(k, it == order.end() ? -1 : it->second);
    }
  } else {
    int64_t at = 0;
    for (const auto& [key, from] : order) put(at++, from);
  }
}

}  // namespace

void register_ml_map_ops(OpRegistry& r) {
  r.add(domain_op("ai.onnx.ml", "ZipMap", 1, infer_zip_map, zip_map));
  r.add(domain_op("ai.onnx.ml", "DictVectorizer", 1, infer_dict_vectorizer, dict_vectorizer));
  r.add(domain_op("ai.onnx.ml", "CastMap", 1, infer_cast_map, cast_map));
}

}  // namespace onyx
