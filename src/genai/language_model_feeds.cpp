// What LanguageModel feeds the decoder and takes from it, by cache form. Prompts of a batch
// are padded on the right for the shared cache (GroupQueryAttention reads each row's length
// from the mask) and on the left otherwise (the Hugging Face convention: positions count a
// row's own tokens, pads are masked out and sit at position 1).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "genai/language_model.h"
#include "genai/language_model_parts.h"
#include "ops/sampling.h"

namespace onyx::genai {

namespace {

Tensor int64_tensor(Shape shape, int64_t fill) {
  Tensor t(DType::kInt64, std::move(shape));
  std::fill_n(t.data<int64_t>(), t.numel(), fill);
  return t;
}

}  // namespace


Feeds LanguageModel::prompt_feeds(const std::vector<std::vector<int64_t>>& prompts) {
  const Batch& bt = *batch_;
  const int64_t B = bt.size, L = bt.prompt;
  const bool left = chosen_ != CacheMode::kShared;
  const int64_t pad = folder_.pad_id >= 0 ? folder_.pad_id : folder_.eos_ids.empty() ? 0 : folder_.eos_ids[0];
  Tensor ids = int64_tensor(Shape{B, L}, pad), mask = int64_tensor(Shape{B, L}, 0),
         pos = int64_tensor(Shape{B, L}, left ? 1 : 0);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[b];
    const int64_t n = static_cast<int64_t>(p.size()), off = left ? L - n : 0;
    for (int64_t j = 0; j < n; ++j) {
      ids.data<int64_t>()[b * L + off + j] = p[j];
      mask.data<int64_t>()[b * L + off + j] = 1;
      pos.data<int64_t>()[b * L + off + j] = j;
    }
  }
  Feeds f{{folder_.input_ids, ids}};
  if (!folder_.attention_mask.empty()) f.emplace_back(folder_.attention_mask, mask);
  if (!folder_.position_ids.empty()) f.emplace_back(folder_.position_ids, pos);
  if (!folder_.use_cache_branch.empty()) f.emplace_back(folder_.use_cache_branch, Tensor::from_vector<bool>({false}, Shape{1}));
  const Tensor empty(folder_.kv_dtype, Shape{B, folder_.kv_heads, 0, folder_.head_size});
  for (size_t l = 0; l < folder_.layers.size(); ++l) {
    const bool shared = mode_ == CacheMode::kShared;
    f.emplace_back(folder_.layers[l].past_key, shared ? bt.cache[2 * l] : empty);
    f.emplace_back(folder_.layers[l].past_value, shared ? bt.cache[2 * l + 1] : empty);
  }
  return f;
}

Feeds LanguageModel::step_feeds(const std::vector<int64_t>& tokens) {
  const Batch& bt = *batch_;
  const int64_t B = bt.size;
  Tensor ids(DType::kInt64, Shape{B, 1});
  std::copy(tokens.begin(), tokens.end(), ids.data<int64_t>());
  // The mask's width: the cache's capacity (shared, static: one shape for every step) or
  // the positions so far and the new one (growing).
  const int64_t width = mode_ == CacheMode::kGrowing ? bt.prompt + bt.steps + 1 : bt.capacity;
  Tensor mask = int64_tensor(Shape{B, width}, 0), pos(DType::kInt64, Shape{B, 1});
  for (int64_t b = 0; b < B; ++b) {
    const int64_t here = bt.length[b];  // the cache position the new token takes
    for (int64_t j = bt.offset[b]; j <= here && j < width; ++j) mask.data<int64_t>()[b * width + j] = 1;
    pos.data<int64_t>()[b] = here - bt.offset[b];
  }
  Feeds f{{folder_.input_ids, ids}};
  if (!folder_.attention_mask.empty()) f.emplace_back(folder_.attention_mask, mask);
  if (!folder_.position_ids.empty()) f.emplace_back(folder_.position_ids, pos);
  if (!folder_.use_cache_branch.empty()) f.emplace_back(folder_.use_cache_branch, Tensor::from_vector<bool>({true}, Shape{1}));
  if (mode_ == CacheMode::kStatic) f.emplace_back(index_input_, Tensor::scalar<int64_t>(bt.prompt + bt.steps));
  const std::vector<Tensor>& past = mode_ == CacheMode::kGrowing ? bt.past : bt.cache;
  for (size_t l = 0; l < folder_.layers.size(); ++l) {
    f.emplace_back(folder_.layers[l].past_key, past[2 * l]);
    f.emplace_back(folder_.layers[l].past_value, past[2 * l + 1]);
  }
  return f;
}

void add_draw_inputs(Feeds& f, int64_t size, int64_t rows, int64_t history_width,
                     const std::vector<int64_t>& positions, const Draw& draw) {
  using Options = std::array<float, sampling::kOptionCount>;
  static_assert(std::is_same_v<std::decay_t<decltype(draw.options[0])>, Options>);
  const int64_t B = size;
  Tensor options(DType::kFloat32, Shape{B, sampling::kOptionCount}), rng(DType::kInt64, Shape{B, 2});
  bool penalty = false;
  for (int64_t b = 0; b < B; ++b) {
    // Padding rows draw greedily: cheapest, and their tokens go unread.
    const Options o = b < rows ? draw.options[b] : Options{0.f, 0.f, 1.f, 0.f, 1.f, 0.f, 0.f};
    std::copy(o.begin(), o.end(), options.data<float>() + b * sampling::kOptionCount);
    penalty |= sampling::repetition_applies(o.data()) || sampling::counts_apply(o.data());
    rng.data<int64_t>()[2 * b] = static_cast<int64_t>(b < rows ? draw.seeds[b] : 0);
    rng.data<int64_t>()[2 * b + 1] = b < rows && !draw.counters.empty() ? draw.counters[b] : draw.counter;
  }
  const int64_t H = penalty && draw.history ? history_width : 1;
  Tensor history = int64_tensor(Shape{B, H}, -1), generated_start = int64_tensor(Shape{B}, H);
  if (H > 1)
    for (int64_t b = 0; b < rows && b < static_cast<int64_t>(draw.history->size()); ++b) {
      const auto& ids = (*draw.history)[b];
      const int64_t all = static_cast<int64_t>(ids.size()), n = std::min<int64_t>(H, all);
      std::copy(ids.end() - n, ids.end(), history.data<int64_t>() + b * H);
      // Entry k is ids[all - n + k]: a generated id from the prompt's length on.
      const int64_t prompt_length = b < static_cast<int64_t>(draw.prompt_lengths.size()) ? draw.prompt_lengths[b] : all;
      generated_start.data<int64_t>()[b] = std::clamp<int64_t>(prompt_length - (all - n), 0, H);
    }
  Tensor position(DType::kInt64, Shape{B});
  std::copy(positions.begin(), positions.end(), position.data<int64_t>());
  f.emplace_back(kDrawOptions, options);
  f.emplace_back(kDrawRng, rng);
  f.emplace_back(kDrawHistory, history);
  f.emplace_back(kDrawPosition, position);
  f.emplace_back(kDrawGeneratedStart, generated_start);
}

// The inputs of the Sample node onyx appended; each row's logits are read at its last prompt
// position (a prompt) or at 0 (a step).
void LanguageModel::add_draw_feeds(Feeds& f, const Batch& bt, bool prompt, const Draw& draw) const {
  std::vector<int64_t> positions(bt.size);
  for (int64_t b = 0; b < bt.size; ++b)
    positions[b] = !prompt ? 0 : chosen_ == CacheMode::kShared ? bt.length[b] - 1 : bt.prompt - 1;
  add_draw_inputs(f, bt.size, bt.rows, bt.capacity, positions, draw);
}

Next LanguageModel::run(Runner& r, Feeds feeds, bool prompt, const Draw& draw) {
  Batch& bt = *batch_;
  // The cache where it is kept: bound in place (shared; static steps), or left on the device as
  // the next run's input (a static prompt's presents, then written into the cache; growing).
  const bool in_place = mode_ == CacheMode::kShared || (mode_ == CacheMode::kStatic && !prompt);
  std::vector<Tensor> presents;
  Next next = execute(r, std::move(feeds), bt, prompt, draw, in_place ? &bt.cache : nullptr, &presents);
  if (mode_ == CacheMode::kStatic && prompt) fill_cache(bt.cache, presents);
  if (mode_ == CacheMode::kGrowing) bt.past = std::move(presents);
  return next;
}

// The presents of an original-graph run into a static cache, at position 0.
void LanguageModel::fill_cache(const std::vector<Tensor>& cache, const std::vector<Tensor>& presents) {
  std::vector<Tensor> fill(fill_->graph->inputs.size());
  for (size_t k = 0; k < presents.size(); ++k) {
    fill[k] = cache[k];
    fill[presents.size() + k] = presents[k];
  }
  fill.back() = Tensor::scalar<int64_t>(0);
  std::vector<Tensor> bound(cache.begin(), cache.end());
  fill_->exec->run(fill, nullptr, nullptr, &bound);
}

// Runs one of the decoder's graphs over the rows `bt` describes: the token to the host (and the
// logits drawn from, when asked), the presents bound to `in_place` (written there) or returned
// in `presents`.
Next LanguageModel::execute(Runner& r, Feeds feeds, const Batch& bt, bool prompt, const Draw& draw,
                            const std::vector<Tensor>* in_place, std::vector<Tensor>* presents,
                            Tensor* device_tokens) {
  add_draw_feeds(feeds, bt, prompt, draw);
  add_image_feeds(feeds, prompt);
  const Graph& g = *r.graph;
  std::vector<Tensor> inputs(g.inputs.size());
  for (const auto& [name, t] : feeds) {
    auto it = r.inputs.find(name);
    ONYX_ASSERT(it != r.inputs.end(), "the decoder has no input '", name, "'");
    inputs[it->second] = t;
  }
  std::vector<OutputPlace> places(g.outputs.size(), OutputPlace::kDevice);
  places[r.outputs.at(kNextToken)] = device_tokens ? OutputPlace::kDevice : OutputPlace::kHost;
  if (draw.logits) places[r.outputs.at(kNextLogits)] = OutputPlace::kHost;
  std::vector<Tensor> bound(g.outputs.size());
  std::vector<size_t> present;
  for (const auto& l : folder_.layers)
    for (const std::string* n : {&l.present_key, &l.present_value}) present.push_back(r.outputs.at(*n));
  if (in_place)
    for (size_t k = 0; k < present.size(); ++k) bound[present[k]] = (*in_place)[k];
  std::vector<Tensor> outs = r.exec->run(inputs, nullptr, &places, &bound, nullptr, device_tokens == nullptr);
  if (presents)
    for (size_t k : present) presents->push_back(outs[k]);
  Next next;
  if (device_tokens) {
    *device_tokens = outs[r.outputs.at(kNextToken)];
    return next;
  }
  const Tensor& tokens = outs[r.outputs.at(kNextToken)];
  next.tokens.assign(tokens.data<int64_t>(), tokens.data<int64_t>() + bt.rows);
  if (draw.logits) {
    const Tensor& l = outs[r.outputs.at(kNextLogits)];
    const int64_t V = l.shape()[1];
    next.logits = Tensor(DType::kFloat32, Shape{bt.rows, V});
    std::memcpy(next.logits.raw(), l.raw(), next.logits.bytes());
  }
  return next;
}

size_t LanguageModel::cache_bytes() const {
  size_t n = 0;
  if (batch_)
    for (const auto& t : batch_->cache) n += t.bytes();
  if (slots_)
    for (const auto& t : slots_->cache) n += t.bytes();
  return n;
}

CaptureReport LanguageModel::capture_report() const {
  return step_ ? step_->exec->capture_report() : prompt_->exec->capture_report();
}

size_t LanguageModel::peak_device_bytes() const { return backend_ ? backend_->governor().peak_leased() : 0; }

std::string LanguageModel::memory_report() const {
  return (backend_ ? backend_->memory_report() : "") + vision_report();
}

}  // namespace onyx::genai
