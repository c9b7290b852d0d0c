// LanguageModel's serving side: slots, the rows of one cache, that sequences enter by a
// prefill and leave between decode steps. Every slot's row is laid out as a one-sequence
// cache ([1, kv heads, capacity, head size], contiguous), so a prefill runs on a view of its
// row and a decode step of n sequences on a view of the first rows of the bucket holding n.
// Rows are right-aligned at position 0: each slot's own length is its write position (the
// static form's CacheUpdate takes one index per row; GroupQueryAttention reads each row's
// length from the mask).
#include <algorithm>
#include <cstring>

#include "genai/language_model.h"
#include "genai/language_model_ranks.h"
#include "genai/language_model_parts.h"

namespace onyx::genai {

namespace {

constexpr int64_t kBlock = 64;


Tensor int64_tensor(Shape shape, int64_t fill) {
  Tensor t(DType::kInt64, std::move(shape));
  std::fill_n(t.data<int64_t>(), t.numel(), fill);
  return t;
}

// Rows [begin, begin + count) of t along dimension 0: a view sharing t's storage.
Tensor row_view(const Tensor& t, int64_t begin, int64_t count) {
  Shape s = t.shape();
  const size_t row = t.bytes() / static_cast<size_t>(s[0]);
  s[0] = count;
  return Tensor::borrow(t.dtype(), s, static_cast<char*>(t.raw()) + begin * row, t.storage(), t.device());
}

}  // namespace

void LanguageModel::open_slots(int64_t slots, int64_t capacity) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { m.open_slots(slots, capacity); });
  if (backend_) backend_->make_current();
  settle();
  ONYX_CHECK(slots >= 1, "serving needs at least one slot, got ", slots);
  ONYX_CHECK(capacity >= 2, "a slot needs room for at least 2 positions, got ", capacity);
  ONYX_CHECK(mode_ != CacheMode::kGrowing, "serving needs a cache of fixed capacity, and this decoder's is growing: ",
             note_);
  retire_cache();
  batch_.reset();
  slots_.reset();
  spare_caches_.clear();  // serving holds one cache; the spares of generations go back to the pool
  auto sl = std::make_unique<Slots>();
  sl->count = slots;
  sl->capacity = std::min((capacity + kBlock - 1) / kBlock * kBlock, folder_.context_length);
  for (size_t i = 0; i < 2 * folder_.layers.size(); ++i) sl->cache.push_back(cache_tensor(slots, sl->capacity));
  for (size_t i = 0; i < 2 * folder_.layers.size(); ++i) sl->spare.push_back(cache_tensor(1, sl->capacity));
  sl->filled.assign(slots, 0);
  slots_ = std::move(sl);
}

int64_t LanguageModel::slot_count() const { return slots_ ? slots_->count : 0; }
int64_t LanguageModel::slot_capacity() const { return slots_ ? slots_->capacity : 0; }

int64_t LanguageModel::slot_filled(int64_t slot) const {
  ONYX_CHECK(slots_ && slot >= 0 && slot < slots_->count, "no slot ", slot);
  return slots_->filled[slot];
}

std::vector<Tensor> LanguageModel::slot_views(int64_t begin, int64_t count) const {
  std::vector<Tensor> v;
  for (const Tensor& t : slots_->cache) v.push_back(row_view(t, begin, count));
  return v;
}

void LanguageModel::truncate_slot(int64_t slot, int64_t keep) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { m.truncate_slot(slot, keep); });
  if (backend_) backend_->make_current();
  settle();
  ONYX_CHECK(slots_ && slot >= 0 && slot < slots_->count, "no slot ", slot);
  slots_->filled[slot] = std::clamp<int64_t>(keep, 0, slots_->filled[slot]);
}

void LanguageModel::swap_slots(int64_t a, int64_t b) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { m.swap_slots(a, b); });
  if (backend_) backend_->make_current();
  settle();
  ONYX_CHECK(slots_ && a >= 0 && b >= 0 && a < slots_->count && b < slots_->count, "no slots ", a, " and ", b);
  if (a == b) return;
  // Three batches of copies, each over every cache tensor: a into the spares, b into a, the
  // spares into b (the batches run in order; the copies of one batch never overlap).
  std::vector<Backend::DeviceCopy> to_spare, b_to_a, from_spare;
  for (size_t k = 0; k < slots_->cache.size(); ++k) {
    const Tensor& t = slots_->cache[k];
    const size_t row = t.bytes() / static_cast<size_t>(slots_->count);
    char* base = static_cast<char*>(t.raw());
    void* tmp = slots_->spare[k].raw();
    to_spare.push_back({tmp, base + a * row, row});
    b_to_a.push_back({base + a * row, base + b * row, row});
    from_spare.push_back({base + b * row, tmp, row});
  }
  for (const auto* batch : {&to_spare, &b_to_a, &from_spare}) copy_all(backend_.get(), *batch);
  std::swap(slots_->filled[a], slots_->filled[b]);
}

int64_t LanguageModel::prefill(int64_t slot, const std::vector<int64_t>& ids, int64_t from, const Draw& draw) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { return m.prefill(slot, ids, from, draw); });
  if (backend_) backend_->make_current();
  settle();
  ONYX_CHECK(slots_, "prefill needs open slots");
  Slots& sl = *slots_;
  ONYX_CHECK(slot >= 0 && slot < sl.count, "no slot ", slot, " (", sl.count, " slots)");
  ONYX_CHECK(!ids.empty(), "a prefill needs tokens");
  ONYX_CHECK(from >= 0 && from <= sl.filled[slot], "slot ", slot, " holds ", sl.filled[slot],
             " positions; cannot continue from ", from);
  const int64_t c = static_cast<int64_t>(ids.size()), total = from + c;
  ONYX_CHECK(total < sl.capacity, "a prompt of ", total, " tokens leaves no room in a slot of ", sl.capacity,
             " positions");
  for (int64_t id : ids)
    ONYX_CHECK(id >= 0 && (folder_.vocab_size <= 0 || id < folder_.vocab_size), "token id ", id,
               " is outside the vocabulary of ", folder_.vocab_size);
  ONYX_CHECK(draw.options.size() == 1 && draw.seeds.size() == 1, "a prefill draws for one sequence");
  check_prefill_images(ids);
  sl.filled[slot] = from;  // positions past `from` are rewritten now
  const bool shared = mode_ == CacheMode::kShared;
  Tensor tokens(DType::kInt64, Shape{1, c}), mask = int64_tensor(Shape{1, total}, 1), pos(DType::kInt64, Shape{1, c});
  std::copy(ids.begin(), ids.end(), tokens.data<int64_t>());
  for (int64_t j = 0; j < c; ++j) pos.data<int64_t>()[j] = from + j;
  Feeds f{{folder_.input_ids, tokens}};
  if (!folder_.attention_mask.empty()) f.emplace_back(folder_.attention_mask, mask);
  if (!folder_.position_ids.empty()) f.emplace_back(folder_.position_ids, pos);
  if (!folder_.use_cache_branch.empty())
    f.emplace_back(folder_.use_cache_branch, Tensor::from_vector<bool>({from > 0}, Shape{1}));
  const std::vector<Tensor> row = slot_views(slot, 1);
  // The past: the slot's row itself (shared: written in place), or its first `from`
  // positions gathered into a tensor of that length (static: the original graph's past).
  const size_t pos_bytes = static_cast<size_t>(folder_.head_size) * dtype_size(folder_.kv_dtype);
  std::vector<Backend::DeviceCopy> copies;  // the gathered pasts' heads: one batch
  for (size_t l = 0; l < folder_.layers.size(); ++l)
    for (int k = 0; k < 2; ++k) {
      const std::string& name = k == 0 ? folder_.layers[l].past_key : folder_.layers[l].past_value;
      const Tensor& r = row[2 * l + k];
      if (shared) {
        f.emplace_back(name, r);
        continue;
      }
      Tensor past(folder_.kv_dtype, Shape{1, folder_.kv_heads, from, folder_.head_size}, *kv_pool_);
      for (int64_t h = 0; h < folder_.kv_heads && from > 0; ++h)
        copies.push_back({static_cast<char*>(past.raw()) + h * from * pos_bytes,
                          static_cast<const char*>(r.raw()) + h * sl.capacity * pos_bytes, from * pos_bytes});
      f.emplace_back(name, past);
    }
  copy_all(backend_.get(), copies);
  Batch bt;
  bt.size = bt.rows = 1;
  bt.prompt = c;
  bt.capacity = sl.capacity;
  bt.length = {c};
  std::vector<Tensor> presents;
  Next next = execute(*prompt_, std::move(f), bt, true, draw, shared ? &row : nullptr, &presents);
  if (!shared) fill_cache(row, presents);  // all `total` positions into the slot's row
  sl.filled[slot] = total;
  return next.tokens[0];
}

// The feeds of a decode step over slots [0, B): row r's token `tokens[r]` (r < tokens.size()),
// padding where it is -1 or past them; the padding rows keep one fewer position when full.
LanguageModel::DecodeFeeds LanguageModel::decode_feeds(const std::vector<int64_t>& tokens, int64_t B) {
  Slots& sl = *slots_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  auto active = [&](int64_t r) { return r < n && tokens[r] >= 0; };
  for (int64_t r = 0; r < B; ++r)  // padding writes one past what the slot keeps: keep one fewer when full
    if (!active(r)) sl.filled[r] = std::min(sl.filled[r], sl.capacity - 1);
  const int64_t W = sl.capacity;
  Tensor ids(DType::kInt64, Shape{B, 1}), mask = int64_tensor(Shape{B, W}, 0), pos(DType::kInt64, Shape{B, 1}),
      index(DType::kInt64, Shape{B});
  for (int64_t r = 0; r < B; ++r) {
    const int64_t here = sl.filled[r];
    ids.data<int64_t>()[r] = active(r) ? tokens[r] : 0;
    std::fill_n(mask.data<int64_t>() + r * W, here + 1, 1);
    pos.data<int64_t>()[r] = here;
    index.data<int64_t>()[r] = here;
  }
  DecodeFeeds d;
  Feeds& f = d.feeds;
  f.emplace_back(folder_.input_ids, ids);
  if (!folder_.attention_mask.empty()) f.emplace_back(folder_.attention_mask, mask);
  if (!folder_.position_ids.empty()) f.emplace_back(folder_.position_ids, pos);
  if (!folder_.use_cache_branch.empty())
    f.emplace_back(folder_.use_cache_branch, Tensor::from_vector<bool>({true}, Shape{1}));
  if (mode_ == CacheMode::kStatic) f.emplace_back(index_input_, index);
  d.rows = slot_views(0, B);
  for (size_t l = 0; l < folder_.layers.size(); ++l) {
    f.emplace_back(folder_.layers[l].past_key, d.rows[2 * l]);
    f.emplace_back(folder_.layers[l].past_value, d.rows[2 * l + 1]);
  }
  return d;
}

Draw padded_draw(const Draw& draw, int64_t B) {
  Draw d = draw;
  d.options.resize(B, {0.f, 0.f, 1.f, 0.f, 1.f});
  d.seeds.resize(B, 0);
  if (!d.counters.empty()) d.counters.resize(B, 0);
  return d;
}

std::vector<int64_t> LanguageModel::decode(const std::vector<int64_t>& tokens, const Draw& draw) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { return m.decode(tokens, draw); });
  if (backend_) backend_->make_current();
  ONYX_CHECK(slots_, "decode needs open slots");
  Slots& sl = *slots_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  ONYX_CHECK(n >= 1 && n <= sl.count, "a decode step takes 1 to ", sl.count, " sequences, got ", n);
  ONYX_CHECK(static_cast<int64_t>(draw.options.size()) == n && static_cast<int64_t>(draw.seeds.size()) == n,
             "the draw needs options and a seed per sequence");
  if (takes_ahead(tokens, draw, true)) return take_decode_ahead(draw);
  settle();
  const int64_t B = std::min(bucket_for(n), sl.count);
  auto active = [&](int64_t r) { return r < n && tokens[r] >= 0; };
  for (int64_t r = 0; r < n; ++r)
    ONYX_CHECK(!active(r) || sl.filled[r] < sl.capacity, "slot ", r, " is full (", sl.capacity, " positions)");
  if (can_run_ahead(draw, B)) {
    // As step(): this step, the one after it fed its tokens on the device, then this one's tokens.
    const int slot = ahead_->next_slot;
    const Tensor drawn = enqueue_decode(tokens, draw, B, slot, nullptr);
    launch_after(slot, [&] { launch_decode_ahead(drawn, tokens, draw); });
    return take_decode_tokens(slot, tokens);
  }
  DecodeFeeds f = decode_feeds(tokens, B);
  Batch bt;
  bt.size = bt.rows = B;
  bt.capacity = sl.capacity;
  Next next = execute(*step_, std::move(f.feeds), bt, false, padded_draw(draw, B), &f.rows, nullptr);
  for (int64_t r = 0; r < n; ++r)
    if (active(r)) ++sl.filled[r];
  next.tokens.resize(n);
  for (int64_t r = 0; r < n; ++r)
    if (!active(r)) next.tokens[r] = -1;
  return next.tokens;
}

}  // namespace onyx::genai
