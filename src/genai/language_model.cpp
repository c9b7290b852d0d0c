#include "genai/language_model.h"
#include "genai/language_model_ranks.h"
#include "genai/language_model_parts.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "model/loader.h"
#include "passes/optimize.h"
#include "passes/kv_cache.h"
#include "passes/rewrite_util.h"

namespace onyx::genai {

namespace {

constexpr int64_t kCacheBlock = 64;  // cache capacities are multiples of this many positions
// The most the position tables (passes/position_tables.h) may take: a 131,072-position context's
// cos and sin of 128 entries in 16-bit floats is 64 MiB.
constexpr size_t kPositionTableBytes = size_t{64} << 20;
constexpr size_t kSpareCacheSets = 8;  // retired cache sets kept for reuse (buckets 1-8 at two capacities)

Draw greedy(size_t sequences) {
  Draw d;
  d.options.assign(sequences, {0.f, 0.f, 1.f, 0.f, 1.f});
  d.seeds.assign(sequences, 0);
  d.logits = true;
  return d;
}

}  // namespace

// A prompt's run reads the logits of each row's last position only (left-padded rows: the
// sequence's last position), so the LM head need not run on the others: where the product that
// makes the decoder's logits reads its input row by row (MatMul by a 2-D constant, the linear
// ops, the CPU's packed product, the 4-bit products) and makes nothing else, its input (and the
// skip of a normalized product) is sliced to the last position first, and Sample (appended
// already) reads that one row. For a prompt of P tokens this leaves 1 / P of the LM head's work and of
// its logits in memory (at batch 32 over 8,138 tokens of a 128,256-token vocabulary: 62 GiB in
// bfloat16). Returns whether it rewrote.
bool slice_prompt_logits(Graph& g, const std::string& logits_name) {
  const int logits = g.find_value(logits_name);
  if (logits < 0 || g.values[logits].producer < 0) return false;
  const size_t at = static_cast<size_t>(g.values[logits].producer);
  Node& head = g.nodes[at];
  const bool onyx_linear = head.domain == "onyx" && (head.op_type == "Linear" || head.op_type == "RmsNormLinear" ||
                                                     head.op_type == "LinearNBits" ||
                                                     head.op_type == "RmsNormLinearNBits");
  const bool matmul = normalize_domain(head.domain).empty() && head.op_type == "MatMul" && head.inputs.size() == 2 &&
                      constant_value(g, head.inputs[1]) && constant_value(g, head.inputs[1])->rank() == 2;
  const bool nbits = head.domain == "com.microsoft" && head.op_type == "MatMulNBits";
  // The CPU's packed product (passes/fuse_cpu.h), with no residual (which would need its slice).
  const bool dense = head.domain == "onyx" && head.op_type == "DenseMatMul" &&
                     (head.inputs.size() < 4 || head.inputs[3] < 0);
  if (!(onyx_linear || matmul || nbits || dense) || head.inputs.empty() || head.inputs[0] < 0) return false;
  for (int out : head.outputs)  // the logits alone (a norm's residual sum, other splits: not sliced)
    if (out >= 0 && out != logits) return false;
  std::vector<int> sample;  // the Sample node append_sampler made
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (g.nodes[k].op_type == "Sample" && g.nodes[k].domain == "onyx.genai") sample.push_back(static_cast<int>(k));
  if (sample.size() != 1) return false;
  // x and (normalized products) the skip: [..., S, K] -> [..., 1, K], the last position.
  const bool has_skip = head.op_type == "RmsNormLinear" || head.op_type == "RmsNormLinearNBits";
  std::vector<size_t> sliced{0};
  if (has_skip && head.inputs.size() > 1 && head.inputs[1] >= 0) sliced.push_back(1);
  const int starts = add_initializer(g, "onyx_prompt_last_start", Tensor::from_vector<int64_t>({-1}, Shape{1}));
  const int ends = add_initializer(g, "onyx_prompt_last_end",
                                   Tensor::from_vector<int64_t>({std::numeric_limits<int64_t>::max()}, Shape{1}));
  const int axes = add_initializer(g, "onyx_prompt_last_axis", Tensor::from_vector<int64_t>({-2}, Shape{1}));
  std::vector<Node> slices;
  for (size_t i : sliced) {
    const int in = head.inputs[i];
    const int out = g.value_id(cat(g.values[in].name, "/onyx_last_position"));
    slices.push_back(make_node(cat(head.name, "/last_position_", i), "", "Slice", 13, {in, starts, ends, axes}, {out}));
    head.inputs[i] = out;
  }
  // The logits' declared shape (if any) names the prompt's length; it is one position now.
  g.values[logits].declared.rank_known = false;
  g.values[logits].declared.dims.clear();
  g.values[logits].declared.dim_params.clear();
  Node& draw = g.nodes[static_cast<size_t>(sample[0])];
  if (draw.inputs.size() > 4) draw.inputs[4] = -1;  // position: the only one
  g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(at), std::make_move_iterator(slices.begin()),
                 std::make_move_iterator(slices.end()));
  set_producers(g);
  return true;
}

// Appends onyx.genai::Sample to the decoder: the next token (and the logits it was drawn
// from) become the outputs; the full logits stay inside, in the plan's arena.
void append_sampler(Graph& g, const std::string& logits_name, bool logit_bias) {
  int logits = g.find_value(logits_name);
  auto out = std::find(g.outputs.begin(), g.outputs.end(), logits);
  ONYX_CHECK(out != g.outputs.end(), "the decoder has no output '", logits_name, "'");
  g.outputs.erase(out);
  auto fresh = [&](const char* name) {
    const int id = g.value_id(name);
    ONYX_CHECK(!g.values[id].is_input && g.values[id].producer < 0, "the decoder already has a value named '", name,
               "'");
    return id;
  };
  if (logit_bias) {
    // Add(Cast(logits, float), bias): the bias broadcasts over the batch and positions.
    const int bias = fresh(kDrawLogitBias);
    g.values[bias].is_input = true;
    g.values[bias].declared.category = TypeInfo::Category::kTensor;
    g.values[bias].declared.dtype = DType::kFloat32;
    g.inputs.push_back(bias);
    const int as_float = fresh("onyx_draw_logits_float"), biased = fresh("onyx_draw_logits_biased");
    Node cast;
    cast.name = "onyx_draw_logits_cast";
    cast.op_type = "Cast";
    cast.opset = 13;
    cast.inputs = {logits};
    cast.outputs = {as_float};
    Attribute to;
    to.name = "to";
    to.kind = Attribute::Kind::kInt;
    to.i = 1;  // FLOAT
    cast.attributes = {to};
    Node add;
    add.name = "onyx_draw_logit_bias_add";
    add.op_type = "Add";
    add.opset = 13;
    add.inputs = {as_float, bias};
    add.outputs = {biased};
    g.values[as_float].producer = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(cast));
    g.values[biased].producer = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(add));
    logits = biased;
  }
  Node n;
  n.name = "onyx_draw";
  n.op_type = "Sample";
  n.domain = "onyx.genai";
  n.opset = 1;
  // Sample's inputs after the logits, in its order (ops/sampling.h).
  for (const char* name : {kDrawOptions, kDrawRng, kDrawHistory, kDrawPosition, kDrawGeneratedStart}) {
    const int id = g.value_id(name);
    ONYX_CHECK(!g.values[id].is_input && g.values[id].producer < 0, "the decoder already has a value named '", name,
               "'");
    g.values[id].is_input = true;
    g.inputs.push_back(id);
    n.inputs.push_back(id);
  }
  n.inputs.insert(n.inputs.begin(), logits);
  for (const char* name : {kNextToken, kNextLogits}) {
    const int id = g.value_id(name);
    g.values[id].producer = static_cast<int>(g.nodes.size());
    n.outputs.push_back(id);
    g.outputs.push_back(id);
  }
  g.nodes.push_back(std::move(n));
}

Graph make_fill_graph(size_t tensors) {
  Graph g;
  g.name = "kv_fill";
  const int index = g.value_id("index");
  std::vector<int> caches, fresh;
  for (size_t i = 0; i < tensors; ++i) {
    caches.push_back(g.value_id(cat("cache_", i)));
    fresh.push_back(g.value_id(cat("new_", i)));
  }
  for (size_t i = 0; i < tensors; ++i) {
    g.values[caches[i]].is_input = true;
    g.inputs.push_back(caches[i]);
  }
  for (size_t i = 0; i < tensors; ++i) {
    g.values[fresh[i]].is_input = true;
    g.inputs.push_back(fresh[i]);
  }
  g.values[index].is_input = true;
  g.inputs.push_back(index);
  for (size_t i = 0; i < tensors; ++i) {
    Node n;
    n.name = cat("fill_", i);
    n.op_type = "CacheUpdate";
    n.domain = "onyx.genai";
    n.opset = 1;
    n.inputs = {caches[i], fresh[i], index};
    const int out = g.value_id(cat("out_", i));
    g.values[out].producer = static_cast<int>(g.nodes.size());
    n.outputs = {out};
    g.nodes.push_back(std::move(n));
    g.outputs.push_back(out);
  }
  return g;
}

std::string_view cache_mode_name(CacheMode m) {
  switch (m) {
    case CacheMode::kShared: return "shared";
    case CacheMode::kStatic: return "static";
    case CacheMode::kGrowing: return "growing";
  }
  return "?";
}

LanguageModel::LanguageModel(const std::string& dir, const SessionOptions& options)
    : options_(options), host_(make_cpu_allocator()) {
  folder_ = load_model_folder(dir);
  with_context(cat("loading '", folder_.decoder_path, "'"), [&] {
    device_ = resolve_device(options.device);
    backend_ = make_backend(device_, options);
    kv_pool_ = backend_ ? backend_->make_pool("kv cache") : host_;
    model_ = load_model(folder_.decoder_path);
    if (folder_.has_vision) load_vision(*model_.graph);
    optimize_graph(*model_.graph, options, device_);
    // transformers' exports make their rotary tables from the positions every step; this model
    // feeds positions in [0, context_length) only, so what they compute is made once for each.
    if (!options.fuse_patterns) position_tables_.why_not = "off (fuse_patterns)";
    else if (!options.position_tables) position_tables_.why_not = "off (position_tables)";
    else if (folder_.position_ids.empty()) position_tables_.why_not = "the decoder has no position_ids input";
    else
      position_tables_ = tabulate_positions(*model_.graph, folder_.position_ids, folder_.context_length,
                                            kPositionTableBytes);
    if (options.tensor_parallel_world > 1 && !folder_.layers.empty()) {
      // A rank's cache holds the KV heads the sharding pass gave it (the past input says how
      // many; the folder's config counts them all).
      const int id = model_.graph->find_value(folder_.layers[0].past_key);
      if (id >= 0) {
        const TypeInfo& t = model_.graph->values[id].declared;
        if (t.dims.size() == 4 && t.dims[1] > 0) folder_.kv_heads = t.dims[1];
      }
    }
    append_sampler(*model_.graph, folder_.logits);
    weights_ = std::make_shared<DeviceWeights>();
    SessionOptions prompt_options = options;
    prompt_options.capture = CaptureMode::kOff;  // a prompt's shape is its own: run eagerly
    // Prompts of the shared-buffer layout read each row at its own length (right padding): they
    // run the whole decoder; the others, left-padded, only their last position's LM head.
    bool sliced = false;
    if (!folder_.shared_buffer) {
      prompt_graph_ = *model_.graph;  // nodes and values; the weights' storage is shared
      sliced = slice_prompt_logits(prompt_graph_, folder_.logits);
      if (!sliced) prompt_graph_ = Graph{};
    }
    prompt_ = std::make_unique<Runner>(sliced ? prompt_graph_ : *model_.graph, prompt_options, backend_.get(), host_,
                                       weights_);
    for (const auto& [name, i] : prompt_->inputs) {
      const bool known = name == folder_.input_ids || name == folder_.attention_mask || name == folder_.position_ids ||
                         name == folder_.use_cache_branch || name.rfind("onyx_draw_", 0) == 0 ||
                         (folder_.has_vision && name == folder_.vision.embedding_features);
      bool cache = false;
      for (const auto& l : folder_.layers) cache |= name == l.past_key || name == l.past_value;
      const Value& v = model_.graph->values[model_.graph->inputs[i]];
      ONYX_CHECK(known || cache || v.is_initializer, "decoder input '", name,
                 "' has no role onyx knows how to feed (token ids, attention mask, position ids, past cache)");
    }
    choose_cache_mode();
  });
}

LanguageModel::~LanguageModel() = default;

const Tokenizer& LanguageModel::tokenizer() {
  if (!tokenizer_) {
    const std::string path = (std::filesystem::path(folder_.dir) / "tokenizer.json").string();
    ONYX_CHECK(std::filesystem::exists(path), "model folder '", folder_.dir,
               "' has no tokenizer.json: give token ids (--prompt-ids) or add the tokenizer");
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_file(folder_.dir));
  }
  return *tokenizer_;
}

void LanguageModel::choose_cache_mode() {
  if (folder_.shared_buffer) {
    mode_ = chosen_ = CacheMode::kShared;
    step_ = std::make_unique<Runner>(*model_.graph, options_, backend_.get(), host_, weights_);
    return;
  }
  auto growing = [&](std::string why) {
    mode_ = CacheMode::kGrowing;
    note_ = std::move(why);
    step_.reset();
    fill_.reset();
  };
  if (folder_.position_ids.empty())
    return growing("the decoder has no position_ids input, so positions would follow the cache's length");
  step_graph_ = *model_.graph;
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& l : folder_.layers) {
    pairs.emplace_back(l.past_key, l.present_key);
    pairs.emplace_back(l.past_value, l.present_value);
  }
  CacheRewrite r = rewrite_concat_cache(step_graph_, pairs, folder_.input_ids);
  if (!r.applied) return growing(cat("the cache cannot be rewritten to a fixed capacity: ", r.why_not));
  index_input_ = r.index_input;
  rotary_attention_nodes_ = fuse_rotary_attention_on(options_, device_) ? fuse_rotary_attention(step_graph_) : 0;
  fill_graph_ = make_fill_graph(pairs.size());
  SessionOptions fill_options = options_;
  fill_options.capture = CaptureMode::kOff;
  try {
    step_ = std::make_unique<Runner>(step_graph_, options_, backend_.get(), host_, weights_);
    fill_ = std::make_unique<Runner>(fill_graph_, fill_options, backend_.get(), host_, weights_);
  } catch (const Error& e) {
    return growing(cat("the rewritten decoder does not load: ", e.what()));
  }
  mode_ = CacheMode::kStatic;
  if (std::string why = verify_static(); !why.empty()) growing(why);
  chosen_ = mode_;
}

void LanguageModel::use_growing_cache(bool growing) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { m.use_growing_cache(growing); });
  if (backend_) backend_->make_current();
  settle();
  mode_ = growing ? CacheMode::kGrowing : chosen_;
  batch_.reset();
}

// A two-token prompt and one step, through the original graph and through the rewritten
// one: the rewrite is kept only if both give the same logits.
std::string LanguageModel::verify_static() {
  const int64_t v = std::max<int64_t>(folder_.vocab_size, 6);
  // Ids other than a vision-language model's image token (which would need an image).
  auto id = [&](int64_t i) {
    return folder_.has_vision && i % v == folder_.vision.image_token_id ? (i + 3) % v : i % v;
  };
  const std::vector<std::vector<int64_t>> prompt{{id(1), id(2)}};
  const Draw draw = greedy(1);
  Tensor a, b;
  try {
    mode_ = CacheMode::kGrowing;
    start(prompt, 2 * kCacheBlock, draw);
    a = step({id(3)}, draw).logits;
    mode_ = CacheMode::kStatic;
    start(prompt, 2 * kCacheBlock, draw);
    b = step({id(3)}, draw).logits;
  } catch (const Error& e) {
    mode_ = CacheMode::kStatic;
    batch_.reset();
    return cat("the rewritten decoder does not run: ", e.what());
  }
  batch_.reset();
  return compare_rewrite_logits(a, b, folder_.kv_dtype, "the rewritten decoder's logits differ from the original's");
}

std::string compare_rewrite_logits(const Tensor& want, const Tensor& got, DType kv_dtype, const std::string& what) {
  if (want.numel() != got.numel()) return cat(what, " (", got.numel(), " logits for ", want.numel(), ")");
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    diff = std::max(diff, std::abs(double(want.data<float>()[i]) - double(got.data<float>()[i])));
    scale = std::max(scale, std::abs(double(want.data<float>()[i])));
  }
  const double tol = kv_dtype == DType::kFloat32 ? 1e-4 : 2e-2;
  if (!(diff <= tol * std::max(scale, 1.0))) return cat(what, " (max difference ", diff, " of ", scale, ")");
  return "";
}

Tensor LanguageModel::cache_tensor(int64_t batch, int64_t capacity) {
  Tensor t(folder_.kv_dtype, Shape{batch, folder_.kv_heads, capacity, folder_.head_size}, *kv_pool_);
  // Masked positions weigh 0 in attention, but 0 * NaN is NaN: the cache starts as zeros.
  if (backend_) backend_->zero(t.raw(), t.bytes());
  else std::memset(t.raw(), 0, t.bytes());
  return t;
}

std::vector<Tensor> LanguageModel::cache_set(int64_t batch, int64_t capacity) {
  const std::pair<int64_t, int64_t> key{batch, capacity};
  for (auto it = spare_caches_.begin(); it != spare_caches_.end(); ++it)
    if (it->first == key) {
      std::vector<Tensor> set = std::move(it->second);
      spare_caches_.erase(it);
      for (Tensor& t : set) {
        if (backend_) backend_->zero(t.raw(), t.bytes());
        else std::memset(t.raw(), 0, t.bytes());
      }
      return set;
    }
  std::vector<Tensor> set;
  for (size_t i = 0; i < 2 * folder_.layers.size(); ++i) set.push_back(cache_tensor(batch, capacity));
  return set;
}

// The batch's cache set goes to the spares (the oldest spare beyond kSpareCacheSets is freed).
void LanguageModel::retire_cache() {
  if (!batch_ || batch_->cache.empty()) return;
  spare_caches_.insert(spare_caches_.begin(), {{batch_->size, batch_->capacity}, std::move(batch_->cache)});
  batch_->cache.clear();
  if (spare_caches_.size() > kSpareCacheSets) spare_caches_.pop_back();
}

Next LanguageModel::start(const std::vector<std::vector<int64_t>>& prompts, int64_t capacity, const Draw& draw) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { return m.start(prompts, capacity, draw); });
  if (backend_) backend_->make_current();
  settle();
  ONYX_CHECK(!prompts.empty(), "no prompt to generate from");
  int64_t longest = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    ONYX_CHECK(!prompts[b].empty(), "prompt ", b, " has no tokens");
    for (int64_t id : prompts[b])
      ONYX_CHECK(id >= 0 && (folder_.vocab_size <= 0 || id < folder_.vocab_size), "prompt ", b, ": token id ", id,
                 " is outside the vocabulary of ", folder_.vocab_size);
    longest = std::max<int64_t>(longest, prompts[b].size());
  }
  ONYX_CHECK(longest < folder_.context_length, "a prompt of ", longest, " tokens leaves no room in the context of ",
             folder_.context_length);
  ONYX_CHECK(draw.options.size() == prompts.size() && draw.seeds.size() == prompts.size(),
             "the draw needs options and a seed per sequence");
  // Rows past the sequences pad the bucket with the first prompt; their tokens go unread.
  std::vector<std::vector<int64_t>> rows(prompts.begin(), prompts.end());
  rows.resize(bucket_for(static_cast<int64_t>(prompts.size())), prompts[0]);
  take_image_features(rows, prompts.size());  // (checked before anything of the last generation goes)
  retire_cache();
  slots_.reset();
  batch_ = std::make_unique<Batch>();
  Batch& bt = *batch_;
  bt.rows = static_cast<int64_t>(prompts.size());
  bt.size = static_cast<int64_t>(rows.size());
  bt.prompt = longest;
  const int64_t want = std::max(capacity, longest + 1);
  bt.capacity = std::min((want + kCacheBlock - 1) / kCacheBlock * kCacheBlock, folder_.context_length);
  // GroupQueryAttention models read each row's length from the mask: rows padded on the right.
  const bool right = chosen_ == CacheMode::kShared;
  ONYX_CHECK(!right || mode_ == CacheMode::kShared || bt.size == 1,
             "a growing cache takes one sequence at a time for this decoder (its attention reads right-padded rows)");
  for (const auto& p : rows) {
    const int64_t n = static_cast<int64_t>(p.size());
    bt.length.push_back(right ? n : longest);
    bt.offset.push_back(right ? 0 : longest - n);
  }
  if (mode_ != CacheMode::kGrowing) bt.cache = cache_set(bt.size, bt.capacity);
  return run(*prompt_, prompt_feeds(rows), true, draw);
}

Next LanguageModel::step(const std::vector<int64_t>& tokens, const Draw& draw) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { return m.step(tokens, draw); });
  if (backend_) backend_->make_current();
  ONYX_CHECK(batch_, "a decode step needs a prompt first");
  Batch& bt = *batch_;
  ONYX_CHECK(static_cast<int64_t>(tokens.size()) == bt.rows, "a step takes one token per sequence (", bt.rows,
             "), got ", tokens.size());
  ONYX_CHECK(static_cast<int64_t>(draw.options.size()) == bt.rows, "the draw needs options per sequence");
  if (takes_ahead(tokens, draw, false)) return take_ahead(draw);
  settle();
  const int64_t next = *std::max_element(bt.length.begin(), bt.length.end());
  ONYX_CHECK(next < folder_.context_length, "the context of ", folder_.context_length, " positions is full");
  if (mode_ != CacheMode::kGrowing && next >= bt.capacity) grow(next + 1);
  std::vector<int64_t> rows(tokens.begin(), tokens.end());
  rows.resize(bt.size, tokens[0]);
  if (can_run_ahead(draw, bt.size)) {
    // This step, its tokens on their way to the host; the step after it, fed those tokens on
    // the device; then the wait for this step's tokens alone.
    const int slot = ahead_->next_slot;
    const Tensor drawn = enqueue_step(step_feeds(rows), draw, slot);
    launch_after(slot, [&] { launch_ahead(drawn, draw); });
    return take_tokens(slot);
  }
  Next out = run(mode_ == CacheMode::kGrowing ? *prompt_ : *step_, step_feeds(rows), false, draw);
  ++bt.steps;
  for (auto& n : bt.length) ++n;
  return out;
}

int64_t LanguageModel::bucket() const { return batch_ ? batch_->size : 0; }

std::map<std::string, int> LanguageModel::step_kernels() const {
  const Runner* r = mode_ != CacheMode::kGrowing && step_ ? step_.get() : prompt_.get();
  std::map<std::string, int> ops;
  const auto plan = r ? r->exec->latest_plan() : nullptr;
  if (!plan) return ops;
  for (const Step& s : plan->steps) {
    if (s.place == StepPlace::kNone) continue;
    const Node& n = r->graph->nodes[static_cast<size_t>(s.node)];
    std::string op = n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : n.domain + "::" + n.op_type;
    if (backend_ && s.place == StepPlace::kHost) op += " (host)";
    ++ops[op];
  }
  return ops;
}

int64_t LanguageModel::cache_grows() const { return batch_ ? batch_->grows : 0; }

// The cache to the next block boundary that holds `need` positions: new buffers (zeros past
// the old capacity), each (row, head)'s positions copied over; the old buffers go back to the
// pool after the copies, in stream order. A new capacity is a new decode signature.
void LanguageModel::grow(int64_t need) {
  Batch& bt = *batch_;
  const int64_t cap = std::min((need + kCacheBlock - 1) / kCacheBlock * kCacheBlock, folder_.context_length);
  ONYX_CHECK(cap >= need && cap > bt.capacity, "the cache cannot grow past the context of ", folder_.context_length,
             " positions");
  std::vector<Tensor> set = cache_set(bt.size, cap);
  std::vector<Backend::DeviceCopy> copies;  // every (tensor, row, head)'s positions: one batch
  for (size_t k = 0; k < bt.cache.size(); ++k) {
    Tensor& t = bt.cache[k];
    Tensor& bigger = set[k];
    const size_t pos_bytes = static_cast<size_t>(folder_.head_size) * dtype_size(folder_.kv_dtype);
    const size_t old_row = static_cast<size_t>(bt.capacity) * pos_bytes, new_row = static_cast<size_t>(cap) * pos_bytes;
    for (int64_t r = 0; r < bt.size * folder_.kv_heads; ++r)
      copies.push_back({static_cast<char*>(bigger.raw()) + r * new_row, static_cast<const char*>(t.raw()) + r * old_row,
                        old_row});
  }
  copy_all(backend_.get(), copies);
  retire_cache();
  bt.cache = std::move(set);
  bt.capacity = cap;
  ++bt.grows;
}

// Row `r` of every batch tensor, gathered: [rows, ...] from [size, ...].
Tensor LanguageModel::take_rows(const Tensor& t, const std::vector<size_t>& rows) {
  Shape s = t.shape();
  s[0] = static_cast<int64_t>(rows.size());
  Tensor out(t.dtype(), s, t.on_host() ? *host_ : *kv_pool_);
  copy_rows(t, rows, out);
  return out;
}

// out[i] = t[rows[i]] along dimension 0 (out has rows.size() rows of t's row size).
void LanguageModel::copy_rows(const Tensor& t, const std::vector<size_t>& rows, Tensor& out) {
  const size_t row_bytes = t.bytes() / static_cast<size_t>(t.shape()[0]);
  ONYX_ASSERT(out.bytes() == row_bytes * rows.size(), "copy_rows: ", out.type_str(), " for ", rows.size(), " rows of ",
              t.type_str());
  std::vector<Backend::DeviceCopy> copies;
  for (size_t i = 0; i < rows.size(); ++i)
    copies.push_back({static_cast<char*>(out.raw()) + i * row_bytes,
                      static_cast<const char*>(t.raw()) + rows[i] * row_bytes, row_bytes});
  copy_all(t.on_host() ? nullptr : backend_.get(), copies);
}

void LanguageModel::keep(const std::vector<size_t>& keep) {
  if (ranks_ && !fanning_) return on_every_rank([&](LanguageModel& m) { m.keep(keep); });
  if (backend_) backend_->make_current();
  settle();
  ONYX_CHECK(batch_, "nothing to keep");
  Batch& bt = *batch_;
  const std::vector<size_t> rows = kept_rows(keep, bt.rows);
  const int64_t size = static_cast<int64_t>(rows.size());
  for (Tensor& t : bt.past) t = take_rows(t, rows);
  if (!bt.cache.empty()) {  // into a set of the smaller bucket's geometry (reused when there is one)
    std::vector<Tensor> set = cache_set(size, bt.capacity);
    for (size_t k = 0; k < set.size(); ++k) copy_rows(bt.cache[k], rows, set[k]);
    retire_cache();
    bt.cache = std::move(set);
  }
  std::vector<int64_t> length, offset;
  for (size_t r : rows) {
    length.push_back(bt.length[r]);
    offset.push_back(bt.offset[r]);
  }
  bt.length = std::move(length);
  bt.offset = std::move(offset);
  bt.size = size;
  bt.rows = static_cast<int64_t>(keep.size());
}

}  // namespace onyx::genai
