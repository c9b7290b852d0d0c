// The CPU kernel of onyx.genai::Sample (the rules are in ops/sampling.h).
#include "ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/common.h"

namespace onyx {

namespace {

// Applies the penalties of ops/sampling.h to the row's logits z: each distinct id of the
// history once, with the count of its generated entries (those at index >= generated_start).
// `keys` is scratch (reused across rows): id * 2 + 1 for a generated entry, id * 2 for a prompt one,
// sorted so that an id's entries sit together.
void penalize_row(std::vector<float>& z, const float* opt, const int64_t* history, int64_t h,
                  int64_t generated_start, std::vector<int64_t>& keys) {
  const int64_t V = static_cast<int64_t>(z.size());
  const bool repetition = sampling::repetition_applies(opt), counts = sampling::counts_apply(opt);
  if (!repetition && !counts) return;
  keys.clear();
  for (int64_t i = 0; i < h; ++i) {
    const int64_t id = history[i];
    const bool generated = i >= generated_start;
    if (id < 0 || id >= V || (!repetition && !generated)) continue;
    keys.push_back(id * 2 + (generated ? 1 : 0));
  }
  std::sort(keys.begin(), keys.end());
  for (size_t a = 0; a < keys.size();) {
    const int64_t id = keys[a] >> 1;
    int64_t count = 0;
    size_t e = a;
    for (; e < keys.size() && keys[e] >> 1 == id; ++e) count += keys[e] & 1;
    z[id] = sampling::penalized(z[id], opt, count);
    a = e;
  }
}

int64_t sample_row(std::vector<float>& z, const float* opt, double u) {
  const int64_t V = static_cast<int64_t>(z.size());
  const float t = opt[sampling::kTemperature];
  if (t == 0.f) return std::max_element(z.begin(), z.end()) - z.begin();
  for (float& x : z) x /= t;
  const float m = *std::max_element(z.begin(), z.end());
  float tau = -std::numeric_limits<float>::infinity();
  const int64_t k = static_cast<int64_t>(opt[sampling::kTopK]);
  std::vector<float> sorted;
  if ((k > 0 && k < V) || opt[sampling::kTopP] < 1.f) {
    sorted = z;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  }
  if (k > 0 && k < V) tau = sorted[k - 1];
  if (opt[sampling::kTopP] < 1.f) {
    double total = 0;
    for (float v : sorted) {
      if (v < tau) break;
      total += std::exp(double(v) - m);
    }
    const double want = double(opt[sampling::kTopP]) * total;
    double mass = 0;
    for (size_t i = 0; i < sorted.size() && sorted[i] >= tau;) {
      const float v = sorted[i];  // tokens equal to v go in together
      while (i < sorted.size() && sorted[i] == v) mass += std::exp(double(sorted[i++]) - m);
      if (mass >= want) {
        tau = std::max(tau, v);
        break;
      }
    }
  }
  if (opt[sampling::kMinP] > 0.f) tau = std::max(tau, m + std::log(opt[sampling::kMinP]));
  double total = 0;
  for (float v : z)
    if (v >= tau) total += std::exp(double(v) - m);
  const double target = u * total;
  double cum = 0;
  int64_t last = -1;
  for (int64_t j = 0; j < V; ++j) {
    if (z[j] < tau) continue;
    last = j;
    cum += std::exp(double(z[j]) - m);
    if (cum > target) return j;
  }
  return last;
}

void infer_sample(InferContext& ctx) {
  const PartialShape& l = ctx.input_shape(0);
  ONYX_CHECK(!l.rank_known || l.dims.size() == 3, "logits must be [batch, positions, vocab], got ", l.str());
  const DType dt = ctx.input_dtype(0);
  ONYX_CHECK(dt == DType::kFloat32 || dt == DType::kFloat16 || dt == DType::kBFloat16, "logits of ", dtype_name(dt),
             " are not float32/float16/bfloat16");
  ONYX_CHECK(ctx.input_dtype(1) == DType::kFloat32, "options must be float32");
  ONYX_CHECK(ctx.input_dtype(2) == DType::kInt64, "rng must be int64 [batch, 2]");
  if (ctx.has_input(3)) ONYX_CHECK(ctx.input_dtype(3) == DType::kInt64, "history must be int64");
  if (ctx.has_input(4)) ONYX_CHECK(ctx.input_dtype(4) == DType::kInt64, "position must be int64");
  if (ctx.has_input(5)) ONYX_CHECK(ctx.input_dtype(5) == DType::kInt64, "generated_start must be int64");
  PartialShape out = PartialShape::of_rank(1);
  if (l.rank_known) out.dims[0] = l.dims[0];
  if (l.fully_known()) {
    const int64_t B = l.dims[0];
    auto check = [&](size_t i, int64_t cols, const char* what) {
      const PartialShape& s = ctx.input_shape(i);
      if (s.fully_known())
        ONYX_CHECK(s.dims.size() == 2 && s.dims[0] == B && (cols < 0 || s.dims[1] == cols), what, " must be [", B,
                   cols < 0 ? ", H" : cat(", ", cols), "], got ", s.str());
    };
    check(1, sampling::kOptionCount, "options");
    check(2, 2, "rng");
    if (ctx.has_input(3)) check(3, -1, "history");
    for (auto [i, what] : {std::pair<size_t, const char*>{4, "position"}, {5, "generated_start"}})
      if (ctx.has_input(i) && ctx.input_shape(i).fully_known())
        ONYX_CHECK(ctx.input_shape(i).dims == std::vector<int64_t>{B}, what, " must be [", B, "], got ",
                   ctx.input_shape(i).str());
  }
  ctx.set_output(0, DType::kInt64, out);
  if (ctx.has_output(1)) {
    PartialShape read = PartialShape::of_rank(2);
    if (l.rank_known) read.dims = {l.dims[0], l.dims[2]};
    ctx.set_output(1, DType::kFloat32, read);
  }
}

void sample_kernel(KernelContext& ctx) {
  const Tensor& logits = ctx.input(0);
  const Tensor& options = ctx.input(1);
  const Tensor& rng = ctx.input(2);
  const Tensor* history = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  const int64_t B = logits.shape()[0], S = logits.shape()[1], V = logits.shape()[2];
  const int64_t H = history ? history->shape()[1] : 0;
  ONYX_CHECK(S > 0 && V > 0, "logits ", logits.type_str(), " have no position or no token to sample from");
  int64_t* out = ctx.output(0).data<int64_t>();
  float* read = ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
  const int64_t* position = ctx.has_input(4) ? ctx.input(4).data<int64_t>() : nullptr;
  const int64_t* generated_start = ctx.has_input(5) ? ctx.input(5).data<int64_t>() : nullptr;
  std::vector<float> z(V);
  std::vector<int64_t> keys;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = position ? position[b] : S - 1;
    ONYX_CHECK(s >= 0 && s < S, "row ", b, ": position ", s, " is outside the logits' ", S, " positions");
    const int64_t base = (b * S + s) * V;
    for (int64_t j = 0; j < V; ++j) z[j] = static_cast<float>(logits.get_as_double(base + j));
    if (read) std::copy(z.begin(), z.end(), read + b * V);
    const float* opt = options.data<float>() + b * sampling::kOptionCount;
    const int64_t* r = rng.data<int64_t>() + b * 2;
    const double u = sampling::uniform(static_cast<uint64_t>(r[0]), static_cast<uint64_t>(r[1]));
    if (history) penalize_row(z, opt, history->data<int64_t>() + b * H, H, generated_start ? generated_start[b] : 0, keys);
    out[b] = sample_row(z, opt, u);
  }
}

}  // namespace

void register_sample_op(OpRegistry& r) {
  r.add(domain_op("onyx.genai", "Sample", 1, infer_sample, sample_kernel).never_fold());
}

}  // namespace onyx
