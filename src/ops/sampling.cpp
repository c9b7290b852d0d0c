// The CPU kernel of onyx.genai::Sample (the rules are in ops/sampling.h).
#include "ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "cpu/rowwise.h"
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

// Scratch of sample_row, kept across rows.
struct SampleScratch {
  std::vector<double> e;     // exp(z - m) of each token kept by top-k (0 for the others)
  std::vector<float> kept;   // the values being selected or sorted
};

// Tokens by how far below the largest z they are, in quarter-units up to 32 (then one bin for
// the rest, -inf and NaN among them): a bin's tokens are all larger than a later bin's, so
// the first bins hold the largest tokens whole, ties included. Top-k and top-p select or sort
// those few, not the whole vocabulary (128,256 tokens for Llama 3).
constexpr int kBins = 129;
inline int bin_of(float z, float m) {
  const float d = (m - z) * 4.f;
  return d < 128.f ? static_cast<int>(d) : kBins - 1;
}

// The value where the largest tokens' mass first reaches `want`, tokens of one value going in
// together, in descending order: scans the tokens of `kept` in that order. Returns none where
// all of them do not reach it.
std::optional<float> top_p_value(std::vector<float>& kept, float m, double want) {
  std::sort(kept.begin(), kept.end(), std::greater<float>());
  double mass = 0;
  for (size_t i = 0; i < kept.size();) {
    const float v = kept[i];
    while (i < kept.size() && kept[i] == v) mass += std::exp(double(kept[i++]) - m);
    if (mass >= want) return v;
  }
  return std::nullopt;
}

// The largest of z, as std::max_element finds it (NaN never wins, unless it is z[0]), over
// eight independent chains rather than one.
float largest(const std::vector<float>& z) {
  float a[8];
  std::fill(a, a + 8, z[0]);
  const size_t n = z.size(), blocks = n / 8 * 8;
  for (size_t j = 0; j < blocks; j += 8)
    for (int i = 0; i < 8; ++i) a[i] = z[j + i] > a[i] ? z[j + i] : a[i];
  for (size_t j = blocks; j < n; ++j) a[0] = z[j] > a[0] ? z[j] : a[0];
  float m = a[0];
  for (int i = 1; i < 8; ++i) m = a[i] > m ? a[i] : m;
  return m;
}

int64_t sample_row(std::vector<float>& z, const float* opt, double u, SampleScratch& s) {
  const int64_t V = static_cast<int64_t>(z.size());
  const float t = opt[sampling::kTemperature];
  if (t == 0.f) {  // the first index of the largest
    const auto at = std::find(z.begin(), z.end(), largest(z));
    return at == z.end() ? 0 : at - z.begin();  // (z[0] is NaN)
  }
  for (float& x : z) x /= t;
  const float m = largest(z);
  float tau = -std::numeric_limits<float>::infinity();
  const int64_t k = static_cast<int64_t>(opt[sampling::kTopK]);
  if (k > 0 && k < V) {  // the k-th largest value, among the first bins holding k tokens
    int64_t count[kBins] = {};
    for (float v : z) ++count[bin_of(v, m)];
    int last = 0;
    for (int64_t c = count[0]; c < k; c += count[++last]) {
    }
    s.kept.clear();
    for (float v : z)
      if (bin_of(v, m) <= last) s.kept.push_back(v);
    std::nth_element(s.kept.begin(), s.kept.begin() + (k - 1), s.kept.end(), std::greater<float>());
    tau = s.kept[k - 1];
  }
  // Each kept token's weight once: the top-p mass, the total and the draw all read it.
  s.e.resize(static_cast<size_t>(V));
  cpu::exp_weights(z.data(), V, m, tau, s.e.data());
  const bool top_p = opt[sampling::kTopP] < 1.f;
  double kept_mass = 0, mass[kBins] = {};
  for (int64_t j = 0; j < V; ++j) kept_mass += s.e[j];
  if (top_p)
    for (int64_t j = 0; j < V; ++j) mass[bin_of(z[j], m)] += s.e[j];
  if (top_p) {
    const double want = double(opt[sampling::kTopP]) * kept_mass;
    int last = 0;  // the first bins whose mass reaches want (all of them where rounding says none)
    for (double c = mass[0]; c < want && last < kBins - 1; c += mass[++last]) {
    }
    s.kept.clear();
    for (float v : z)
      if (v >= tau && bin_of(v, m) <= last) s.kept.push_back(v);
    std::optional<float> v = top_p_value(s.kept, m, want);
    if (!v && last < kBins - 1) {  // rounding: the sorted sum fell short of the bins' sum
      s.kept.clear();
      for (float x : z)
        if (x >= tau) s.kept.push_back(x);
      v = top_p_value(s.kept, m, want);
    }
    if (v) tau = std::max(tau, *v);
  }
  if (opt[sampling::kMinP] > 0.f) tau = std::max(tau, m + std::log(opt[sampling::kMinP]));
  double total = 0;
  for (int64_t j = 0; j < V; ++j)
    if (z[j] >= tau) total += s.e[j];
  const double target = u * total;
  double cum = 0;
  int64_t last = -1;
  for (int64_t j = 0; j < V; ++j) {
    if (z[j] < tau) continue;
    last = j;
    cum += s.e[j];
    if (cum > target) return j;
  }
  return last;
}

// The logits' z.size() values from element `base`, as float32.
void read_logits(const Tensor& logits, int64_t base, std::vector<float>& z) {
  const int64_t V = static_cast<int64_t>(z.size());
  switch (logits.dtype()) {
    case DType::kFloat32: std::copy_n(logits.data<float>() + base, V, z.begin()); return;
    case DType::kFloat16: {
      const uint16_t* h = static_cast<const uint16_t*>(logits.raw()) + base;
      for (int64_t j = 0; j < V; ++j) z[j] = Float16::to_float(h[j]);
      return;
    }
    case DType::kBFloat16: {
      const uint16_t* h = static_cast<const uint16_t*>(logits.raw()) + base;
      for (int64_t j = 0; j < V; ++j) {
        const uint32_t bits = static_cast<uint32_t>(h[j]) << 16;
        std::memcpy(&z[j], &bits, 4);
      }
      return;
    }
    default:
      for (int64_t j = 0; j < V; ++j) z[j] = static_cast<float>(logits.get_as_double(base + j));
  }
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
  SampleScratch scratch;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = position ? position[b] : S - 1;
    ONYX_CHECK(s >= 0 && s < S, "row ", b, ": position ", s, " is outside the logits' ", S, " positions");
    const int64_t base = (b * S + s) * V;
    read_logits(logits, base, z);
    if (read) std::copy(z.begin(), z.end(), read + b * V);
    const float* opt = options.data<float>() + b * sampling::kOptionCount;
    const int64_t* r = rng.data<int64_t>() + b * 2;
    const double u = sampling::uniform(static_cast<uint64_t>(r[0]), static_cast<uint64_t>(r[1]));
    if (history) penalize_row(z, opt, history->data<int64_t>() + b * H, H, generated_start ? generated_start[b] : 0, keys);
    out[b] = sample_row(z, opt, u, scratch);
  }
}

}  // namespace

void register_sample_op(OpRegistry& r) {
  r.add(domain_op("onyx.genai", "Sample", 1, infer_sample, sample_kernel).never_fold());
}

}  // namespace onyx
