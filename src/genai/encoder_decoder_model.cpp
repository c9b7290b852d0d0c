#include "genai/encoder_decoder_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "genai/language_model.h"
#include "genai/language_model_parts.h"
#include "model/loader.h"
#include "onyx/session.h"
#include "passes/compose.h"
#include "passes/kv_cache.h"
#include "passes/optimize.h"

namespace onyx::genai {

namespace {

constexpr int64_t kHistoryBlock = 64;  // the penalties' id window grows by this many ids
constexpr int64_t kCacheBlock = 64;    // fixed-capacity caches hold a multiple of this many positions

Tensor int64_tensor(Shape shape, int64_t fill) {
  Tensor t(DType::kInt64, std::move(shape));
  std::fill_n(t.data<int64_t>(), t.numel(), fill);
  return t;
}

// The split decoder's two files carry the same weights (under names of their own). The steps'
// graph takes the first run's tensor of each weight they share (same type, shape and bytes): one copy on the host, and
// one upload to the device (uploads are shared by host address). What is its own it clones, so that nothing borrows
// from its file's parsed bytes and they go. Returns the bytes shared.
size_t share_weights(const Graph& from, Graph& to) {
  auto key = [](const Tensor& t) {
    return cat(dtype_name(t.dtype()), t.shape().str(), "/",
               std::hash<std::string_view>{}(std::string_view(static_cast<const char*>(t.raw()), t.bytes())));
  };
  std::unordered_multimap<std::string, const Tensor*> by_content;
  for (const auto& [id, t] : from.initializers)
    if (t.dtype() != DType::kString && t.bytes() > 0) by_content.emplace(key(t), &t);
  size_t shared = 0;
  for (auto& [id, t] : to.initializers) {
    const Tensor* same = nullptr;
    if (t.dtype() != DType::kString && t.bytes() > 0) {
      auto [lo, hi] = by_content.equal_range(key(t));
      for (auto it = lo; it != hi && !same; ++it)
        if (std::memcmp(it->second->raw(), t.raw(), t.bytes()) == 0) same = it->second;
    }
    if (same) {
      t = *same;
      shared += t.bytes();
    } else {
      t = t.clone();
    }
  }
  return shared;
}

}  // namespace

// One executor over one component's graph, its inputs and outputs by name.
struct EncoderDecoderModel::Runner {
  Graph* graph = nullptr;
  std::unique_ptr<GraphExecutor> exec;
  std::map<std::string, size_t> inputs, outputs;
  ComponentUse* use = nullptr;

  Runner(Graph& g, const SessionOptions& o, const PipelineMemory::Component& c, ComponentUse* u,
         std::shared_ptr<DeviceWeights> weights = nullptr)
      : graph(&g),
        exec(std::make_unique<GraphExecutor>(g, OpRegistry::global(), c.host, o, c.backend_or_null(),
                                             std::move(weights))),
        use(u) {
    for (size_t i = 0; i < g.inputs.size(); ++i) inputs[g.values[g.inputs[i]].name] = i;
    for (size_t i = 0; i < g.outputs.size(); ++i) outputs[g.values[g.outputs[i]].name] = i;
  }
  bool has_input(const std::string& n) const { return inputs.count(n) > 0; }
  // The element type the graph declares for input `n` (undefined when it does not say).
  DType input_dtype(const std::string& n) const {
    auto it = inputs.find(n);
    return it == inputs.end() ? DType::kUndefined : graph->values[graph->inputs[it->second]].declared.dtype;
  }
  // The feeds in the graph's input order (inputs not fed stay undefined).
  std::vector<Tensor> ordered(const Feeds& feeds) const {
    std::vector<Tensor> in(graph->inputs.size());
    for (const auto& [name, t] : feeds) {
      auto it = inputs.find(name);
      if (it != inputs.end()) in[it->second] = t;
    }
    return in;
  }
  size_t output(const std::string& n) const {
    auto it = outputs.find(n);
    ONYX_ASSERT(it != outputs.end(), "graph '", graph->name, "' has no output '", n, "'");
    return it->second;
  }

  // Runs with the named feeds (any input of the graph not fed must have a default); the outputs
  // stay on the device but for those in `to_host`. Outputs in `bound` are written into those
  // tensors: by the step that makes them where the plan knows their shape, else copied there
  // after the run (where the plan does not know their shape). Records the arena of the run's plan.
  std::vector<Tensor> run(const Feeds& feeds, const std::vector<std::string>& to_host, const Feeds& bound,
                          Backend* backend) {
    std::vector<Tensor> in = ordered(feeds);
    std::vector<OutputPlace> places(graph->outputs.size(), OutputPlace::kDevice);
    for (const auto& n : to_host) places[output(n)] = OutputPlace::kHost;
    const std::shared_ptr<const ExecutionPlan> plan = exec->plan_for(in);
    std::vector<Tensor> into(graph->outputs.size());
    std::vector<std::pair<size_t, Tensor>> copy_into;
    for (const auto& [name, t] : bound) {
      const size_t k = output(name);
      const ValueType& type = plan->values[graph->outputs[k]].type;
      if (type.shape.fully_known() && type.dtype == t.dtype() && type.shape.to_shape() == t.shape()) into[k] = t;
      else copy_into.emplace_back(k, t);
    }
    std::vector<Tensor> out = exec->run(in, nullptr, &places, bound.empty() ? nullptr : &into);
    for (auto& [k, t] : copy_into) {
      const Tensor& o = out[k];
      ONYX_CHECK(o.dtype() == t.dtype() && o.shape() == t.shape(), "output '", graph->values[graph->outputs[k]].name,
                 "' is ", o.type_str(), ", expected ", t.type_str());
      if (o.on_host() && t.on_host()) std::memcpy(t.raw(), o.raw(), t.bytes());
      else backend->copy_on_device(t.raw(), o.raw(), t.bytes());
      out[k] = t;
    }
    const ArenaPlan& arena = plan->main_arena();
    if (arena.bytes >= use->arena_bytes) {
      use->arena_bytes = arena.bytes;
      use->arena_lower_bound = arena.lower_bound_bytes;
      use->arena_no_reuse = arena.no_reuse_bytes;
    }
    return out;
  }
};

// The request in flight.
struct EncoderDecoderModel::Batch {
  int64_t size = 0, rows = 0, steps = 0;
  int64_t encoder_length = 0;    // the encoder output's positions (the cross-attention cache's)
  int64_t decoder_prompt = 1;    // the decoder's first run's ids per row
  Tensor encoder_mask;           // [size, prompt] int64, on the host (text encoders)
  Tensor hidden;                 // the encoder's output (the first run reads it; the steps do not)
  std::vector<Tensor> cross;     // per layer: key, value (computed by the first run, kept)
  std::vector<Tensor> past;      // per layer: key, value (the last run's presents; growing)
  std::vector<Tensor> cache;     // per layer: key, value, [size, heads, capacity, head size] (static)
  int64_t capacity = 0;          // static: the cache's positions (0: none made; language detection)
  int64_t grows = 0;             // static: times the cache grew during this request
  bool cross_in_slots = false;   // `cross` lies in the captured step's input slots (read there, never copied)
};

EncoderDecoderModel::EncoderDecoderModel(const std::string& dir, const SessionOptions& options) : options_(options) {
  folder_ = load_encoder_decoder_folder(dir);
  with_context(cat("loading the encoder-decoder pipeline '", dir, "'"), [&] {
    // One device for every component, decided here once (L8), before any file is read.
    const Device device = resolve_device(options.device);
    if (!folder_.suppress_ids.empty() || !folder_.begin_suppress_ids.empty()) {
      // generation_config.json's suppressed ids, as a bias on the logits: -inf where an id is
      // not to be drawn (every step; and at the first generated token, the begin ids too).
      const int64_t V = folder_.decoder.vocab_size;
      ONYX_CHECK(V > 0, "generation_config.json suppresses token ids, but the vocabulary's size is not known (the "
                 "decoder's logits do not declare it, and config.json has no vocab_size)");
      logit_bias_ = Tensor(DType::kFloat32, Shape{V});
      std::fill_n(logit_bias_.data<float>(), V, 0.0f);
      for (int64_t id : folder_.suppress_ids) logit_bias_.data<float>()[id] = -INFINITY;
      first_logit_bias_ = logit_bias_.clone();
      for (int64_t id : folder_.begin_suppress_ids) first_logit_bias_.data<float>()[id] = -INFINITY;
    }
    auto prepare = [&](onyx::Model& m, bool sampler) {
      // The encoder runs once a request, as a session does: its attention fuses on every device
      // (the decoders keep generation's default, fused on CUDA only).
      optimize_graph(*m.graph, options, device, OptimizeDefaults{.fuse_attention_on_cpu = !sampler});
      if (sampler) append_sampler(*m.graph, folder_.decoder.logits, logit_bias_.defined());
    };
    auto load = [&](const std::string& path, bool sampler) {
      return with_context(std::filesystem::path(path).filename().string(), [&] {
        onyx::Model m = load_model(path);
        prepare(m, sampler);
        return m;
      });
    };
    // Every graph is read (on the host) and the weights the split decoder's two files share
    // are found, before anything is placed: the budget is checked against what will be held.
    encoder_model_ = load(folder_.encoder_path, false);
    if (folder_.merged) {
      // The merged decoder's two branches (one If on use_cache_branch) become two graphs without
      // control flow, as a split export has them: the first run's and the steps'. Both read the
      // one file's weights. The steps do not return the cross-attention cache they are given.
      with_context(std::filesystem::path(folder_.first_path).filename().string(), [&] {
        const onyx::Model merged = load_model(folder_.first_path);
        for (bool steps : {false, true}) {
          onyx::Model m = merged;
          m.graph = std::make_shared<Graph>(*merged.graph);
          with_context(steps ? "its then_branch (the steps)" : "its else_branch (the first run)", [&] {
            inline_branch(*m.graph, folder_.decoder.use_cache_branch, steps);
            if (steps) {
              std::vector<std::string> cross;
              for (const auto& l : folder_.cross) cross.insert(cross.end(), {l.present_key, l.present_value});
              drop_outputs(*m.graph, cross);
            }
            prepare(m, true);
          });
          (steps ? step_model_ : first_model_) = std::move(m);
        }
      });
    } else if (folder_.genai) {
      first_model_ = load(folder_.first_path, true);  // one graph: the first run and the steps
    } else {
      first_model_ = load(folder_.first_path, true);
      step_model_ = load(folder_.step_path, true);
    }
    encoder_use_ = {"encoder", graph_weight_bytes(*encoder_model_.graph)};
    decoder_use_ = {"decoder", graph_weight_bytes(*first_model_.graph)};
    if (step_model_.graph)
      decoder_use_.weight_bytes +=
          graph_weight_bytes(*step_model_.graph) - share_weights(*first_model_.graph, *step_model_.graph);
    memory_ = std::make_unique<PipelineMemory>(device, options);
    memory_->admit({{"encoder", encoder_use_.weight_bytes}, {"decoder", decoder_use_.weight_bytes}});
    // Each component runs eagerly (a step's shapes grow with the cache); the encoder's plan and
    // arena go after each run, the decoder keeps those of its last two step shapes.
    SessionOptions enc = options, dec = options;
    enc.capture = dec.capture = CaptureMode::kOff;
    enc.plan_cache_capacity = 1;
    dec.plan_cache_capacity = 2;
    PipelineMemory::Component& ec = memory_->add("encoder", encoder_use_.weight_bytes);
    with_context("encoder_model.onnx", [&] {
      encoder_ = std::make_unique<Runner>(*encoder_model_.graph, enc, ec, &encoder_use_);
    });
    PipelineMemory::Component& dc = memory_->add("decoder", decoder_use_.weight_bytes);
    kv_pool_ = memory_->pool("decoder kv cache");
    decoder_values_ = dc.backend ? &dc.backend->allocator() : dc.host.get();
    auto weights = std::make_shared<DeviceWeights>();  // the two decoder graphs' uploads, shared
    with_context(std::filesystem::path(folder_.first_path).filename().string(), [&] {
      first_ = std::make_unique<Runner>(*first_model_.graph, dec, dc, &decoder_use_, weights);
    });
    if (step_model_.graph)
      with_context(std::filesystem::path(folder_.step_path).filename().string(), [&] {
        step_ = std::make_unique<Runner>(*step_model_.graph, dec, dc, &decoder_use_, weights);
      });
    choose_cache_mode(dc, weights);
  });
}

void EncoderDecoderModel::choose_cache_mode(const PipelineMemory::Component& dc, std::shared_ptr<DeviceWeights> weights) {
  const ModelFolder& d = folder_.decoder;
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& l : d.layers) {
    pairs.emplace_back(l.past_key, l.present_key);
    pairs.emplace_back(l.past_value, l.present_value);
  }
  static_graph_ = step_model_.graph ? *step_model_.graph : *first_model_.graph;
  const CacheRewrite r = rewrite_concat_cache(static_graph_, pairs, d.input_ids, "onyx_cache_index", true);
  if (!r.applied) {
    note_ = cat("the step graph's cache cannot be rewritten to a fixed capacity: ", r.why_not);
    static_graph_ = Graph();
    return;
  }
  index_input_ = r.index_input;
  fill_graph_ = make_fill_graph(pairs.size());
  // The steps capture as the options say (one signature a request); writing the first run's
  // presents into the cache runs eagerly.
  SessionOptions steps = options_, fill = options_;
  steps.plan_cache_capacity = 2;
  fill.capture = CaptureMode::kOff;
  fill.plan_cache_capacity = 2;
  try {
    static_ = std::make_unique<Runner>(static_graph_, steps, dc, &decoder_use_, weights);
    fill_ = std::make_unique<Runner>(fill_graph_, fill, dc, &decoder_use_, weights);
  } catch (const Error& e) {
    note_ = cat("the step graph rewritten to a fixed-capacity cache does not load: ", e.what());
    static_.reset();
    fill_.reset();
    return;
  }
  mode_ = CacheMode::kStatic;
  if (std::string why = verify_static(); !why.empty()) {
    mode_ = CacheMode::kGrowing;
    note_ = std::move(why);
    static_.reset();
    fill_.reset();
  }
  chosen_ = mode_;
}

std::string EncoderDecoderModel::verify_static() {
  const ModelFolder& d = folder_.decoder;
  const Graph& g = *first_model_.graph;
  const int hs = g.find_value(folder_.decoder_hidden_states);
  const TypeInfo* t = hs >= 0 ? &g.values[hs].declared : nullptr;
  if (!t || !t->rank_known || t->dims.size() != 3 || t->dims[2] <= 0 ||
      !(t->dtype == DType::kFloat32 || t->dtype == DType::kFloat16 || t->dtype == DType::kBFloat16))
    return cat("the decoder's input '", folder_.decoder_hidden_states, "' does not declare a float type and width, so "
               "its cache rewritten to a fixed capacity could not be checked");
  // A made-up encoder output of three positions; two prompt ids, then one step.
  const int64_t E = 3;
  Tensor hidden(DType::kFloat32, Shape{1, E, t->dims[2]});
  for (int64_t i = 0; i < hidden.numel(); ++i) hidden.data<float>()[i] = static_cast<float>(std::sin(0.7 * i + 0.3));
  hidden = as_float_type(hidden, t->dtype);
  const int64_t V = std::max<int64_t>(d.vocab_size, 8);
  const Tensor first_ids = Tensor::from_vector<int64_t>({folder_.decoder_start_id, 5 % V}, Shape{1, 2});
  const Tensor step_ids = Tensor::from_vector<int64_t>({7 % V}, Shape{1, 1});
  Draw draw;
  draw.options.assign(1, {0.f, 0.f, 1.f, 0.f, 1.f, 0.f, 0.f});
  draw.seeds.assign(1, 0);
  draw.logits = true;
  auto logits = [&](CacheMode m) {
    mode_ = m;
    batch_ = std::make_unique<Batch>();
    Batch& bt = *batch_;
    bt.size = bt.rows = 1;
    bt.hidden = hidden;
    bt.encoder_length = E;
    bt.decoder_prompt = 2;
    bt.capacity = kCacheBlock;
    if (!folder_.decoder_encoder_mask.empty()) bt.encoder_mask = int64_tensor(Shape{1, E}, 1);
    run_decoder(*first_, true, first_ids, draw, false);
    return run_decoder(m == CacheMode::kStatic ? *static_ : step_ ? *step_ : *first_, false, step_ids, draw, false)
        .logits;
  };
  Tensor a, b;
  try {
    a = logits(CacheMode::kGrowing);
    b = logits(CacheMode::kStatic);
  } catch (const Error& e) {
    batch_.reset();
    return cat("the step graph rewritten to a fixed-capacity cache does not run: ", e.what());
  }
  batch_.reset();
  return compare_rewrite_logits(a, b, d.kv_dtype,
                                "the step graph rewritten to a fixed-capacity cache gives other logits than the original");
}

void EncoderDecoderModel::use_growing_cache(bool growing) {
  mode_ = growing ? CacheMode::kGrowing : chosen_;
  batch_.reset();
}

void EncoderDecoderModel::begin_static_cache(const std::vector<Tensor>& presents, int64_t capacity) {
  Batch& bt = *batch_;
  const ModelFolder& d = folder_.decoder;
  Backend* backend = memory_->backend();
  bt.cache.clear();
  Feeds f, bound;
  for (size_t k = 0; k < presents.size(); ++k) {
    ONYX_CHECK(presents[k].shape().rank() == 4 && presents[k].shape()[2] <= capacity, "the first run's present ",
               presents[k].type_str(), " does not fit a cache of ", capacity, " positions");
    Tensor c(d.kv_dtype, Shape{bt.size, d.kv_heads, capacity, d.head_size}, *kv_pool_);
    // Unfilled positions are masked, but 0 * NaN is NaN: the cache starts as zeros.
    if (backend) backend->zero(c.raw(), c.bytes());
    else std::memset(c.raw(), 0, c.bytes());
    f.emplace_back(cat("cache_", k), c);
    f.emplace_back(cat("new_", k), presents[k]);
    bound.emplace_back(cat("out_", k), c);
    bt.cache.push_back(std::move(c));
  }
  f.emplace_back("index", Tensor::scalar<int64_t>(0));
  fill_->run(f, {}, bound, backend);
  bt.capacity = capacity;
}

void EncoderDecoderModel::grow_static_cache(int64_t need) {
  Batch& bt = *batch_;
  const ModelFolder& d = folder_.decoder;
  int64_t cap = (need + kCacheBlock - 1) / kCacheBlock * kCacheBlock;
  if (d.context_length > 0) cap = std::min(cap, d.context_length);
  ONYX_CHECK(cap >= need && cap > bt.capacity, "the cache cannot grow past the decoder's context of ",
             d.context_length, " positions");
  Backend* backend = memory_->backend();
  const size_t pos_bytes = static_cast<size_t>(d.head_size) * dtype_size(d.kv_dtype);
  const size_t old_row = static_cast<size_t>(bt.capacity) * pos_bytes, new_row = static_cast<size_t>(cap) * pos_bytes;
  std::vector<Backend::DeviceCopy> copies;  // every (tensor, row, head)'s positions: one batch
  std::vector<Tensor> old;                  // alive until the batch is enqueued
  for (Tensor& t : bt.cache) {
    Tensor bigger(d.kv_dtype, Shape{bt.size, d.kv_heads, cap, d.head_size}, *kv_pool_);
    if (backend) backend->zero(bigger.raw(), bigger.bytes());
    else std::memset(bigger.raw(), 0, bigger.bytes());
    for (int64_t r = 0; r < bt.size * d.kv_heads; ++r)
      copies.push_back({static_cast<char*>(bigger.raw()) + r * new_row, static_cast<const char*>(t.raw()) + r * old_row,
                        old_row});
    old.push_back(std::move(t));
    t = std::move(bigger);
  }
  copy_all(backend, copies);
  bt.capacity = cap;
  ++bt.grows;
}

EncoderDecoderModel::~EncoderDecoderModel() {
  // Every tensor of the components' pools goes before the pools and the backend.
  batch_.reset();
  kv_pool_.reset();
  static_.reset();
  fill_.reset();
  encoder_.reset();
  first_.reset();
  step_.reset();
}

const Tokenizer& EncoderDecoderModel::tokenizer() {
  if (!tokenizer_) {
    const std::string& dir = folder_.decoder.dir;
    ONYX_CHECK(std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"), "model folder '", dir,
               "' has no tokenizer.json: give token ids (--prompt-ids) or add the tokenizer");
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_file(dir));
  }
  return *tokenizer_;
}

void EncoderDecoderModel::set_audio(std::vector<Tensor> features) {
  ONYX_CHECK(folder_.audio, "this model's encoder reads ", folder_.encoder_input, ", not audio");
  ONYX_CHECK(!features.empty(), "no audio given");
  const AudioFeatureConfig& a = folder_.audio_features;
  for (size_t i = 0; i < features.size(); ++i)
    ONYX_CHECK(features[i].dtype() == DType::kFloat32 && features[i].on_host() &&
                   features[i].shape() == Shape({a.feature_size, a.nb_max_frames}),
               "audio ", i, ": features are ", features[i].type_str(), ", expected float32[", a.feature_size, ",",
               a.nb_max_frames, "] on the host (log_mel_spectrogram's)");
  audio_ = std::move(features);
  audio_hidden_ = Tensor();
}

void EncoderDecoderModel::run_encoder(const std::vector<std::vector<int64_t>>& prompts, int64_t size) {
  Batch& bt = *batch_;
  const ModelFolder& dec = folder_.decoder;
  const int64_t B = size;
  Feeds f;
  if (folder_.audio) {
    // Rows past the sequences repeat the first one's audio; their tokens go unread.
    const AudioFeatureConfig& a = folder_.audio_features;
    Tensor features(DType::kFloat32, Shape{B, a.feature_size, a.nb_max_frames});
    const size_t row = static_cast<size_t>(a.feature_size * a.nb_max_frames) * sizeof(float);
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(static_cast<char*>(features.raw()) + b * row, audio_[b < bt.rows ? b : 0].raw(), row);
    f.emplace_back(folder_.encoder_input, features);
  } else {
    // Rows padded on the right, masked out (the encoder attends both ways); rows past the
    // sequences repeat the first prompt, and their tokens go unread.
    int64_t S = 0;
    for (const auto& p : prompts) S = std::max<int64_t>(S, static_cast<int64_t>(p.size()));
    const int64_t pad = dec.pad_id >= 0 ? dec.pad_id : dec.eos_ids[0];
    Tensor ids = int64_tensor(Shape{B, S}, pad);
    bt.encoder_mask = int64_tensor(Shape{B, S}, 0);
    for (int64_t b = 0; b < B; ++b) {
      const auto& p = prompts[b < bt.rows ? b : 0];
      for (size_t j = 0; j < p.size(); ++j) {
        ids.data<int64_t>()[b * S + j] = p[j];
        bt.encoder_mask.data<int64_t>()[b * S + j] = 1;
      }
    }
    f.emplace_back(folder_.encoder_input, ids);
    if (!folder_.encoder_mask.empty()) f.emplace_back(folder_.encoder_mask, bt.encoder_mask);
  }
  with_context("the encoder", [&] {
    std::vector<Tensor> out = encoder_->run(f, {}, {}, memory_->backend());
    if (folder_.genai) {
      // The encoder's cross-attention caches go to the KV pool; its other outputs are dropped.
      std::vector<size_t> all(static_cast<size_t>(B));
      for (size_t b = 0; b < all.size(); ++b) all[b] = b;
      bt.cross.clear();
      for (const auto& l : folder_.cross)
        for (const std::string* n : {&l.present_key, &l.present_value}) {
          const Tensor& t = out[encoder_->output(*n)];
          ONYX_CHECK(t.shape().rank() == 4 && t.shape()[0] == B && t.shape()[1] == folder_.cross_heads &&
                         t.shape()[3] == folder_.cross_head_size,
                     "the encoder's output '", *n, "' is ", t.type_str(), ", expected [", B, ", ",
                     folder_.cross_heads, ", positions, ", folder_.cross_head_size, "]");
          bt.cross.push_back(take_rows(t, all, kv_pool_.get()));
        }
    } else {
      bt.hidden = out[encoder_->output(folder_.encoder_output)];
    }
    // The encoder runs once a request: its arena goes back now, before the decoder's steps.
    encoder_->exec->release_plans();
  });
  if (folder_.genai) {
    bt.encoder_length = bt.cross[0].shape()[2];
    return;
  }
  ONYX_CHECK(bt.hidden.shape().rank() == 3 && bt.hidden.shape()[0] == B, "the encoder's output '",
             folder_.encoder_output, "' is ", bt.hidden.type_str(), ", expected [", B, ", positions, hidden]");
  bt.encoder_length = bt.hidden.shape()[1];
  if (folder_.audio && !folder_.decoder_encoder_mask.empty())
    bt.encoder_mask = int64_tensor(Shape{B, bt.encoder_length}, 1);  // every audio position is attended
}

std::vector<int64_t> EncoderDecoderModel::detect_languages() {
  ONYX_CHECK(folder_.audio && !folder_.lang_to_id.empty(),
             "language detection needs a speech model whose generation_config.json names languages (lang_to_id)");
  ONYX_CHECK(!audio_.empty(), "language detection needs audio (set_audio)");
  batch_.reset();
  batch_ = std::make_unique<Batch>();
  Batch& bt = *batch_;
  bt.rows = static_cast<int64_t>(audio_.size());
  bt.size = bucket_for(bt.rows);
  run_encoder({}, bt.size);
  Draw draw;
  draw.options.assign(static_cast<size_t>(bt.rows), {0.f, 0.f, 1.f, 0.f, 1.f, 0.f, 0.f});
  draw.seeds.assign(static_cast<size_t>(bt.rows), 0);
  draw.logits = true;
  const Tensor hidden = bt.hidden;
  Next next = with_context("language detection", [&] {
    return run_decoder(*first_, true, int64_tensor(Shape{bt.size, 1}, folder_.decoder_start_id), draw, false);
  });
  std::vector<int64_t> langs;
  const int64_t V = next.logits.shape()[1];
  for (int64_t b = 0; b < bt.rows; ++b) {
    const float* l = next.logits.data<float>() + b * V;
    int64_t best = -1;
    for (const auto& [name, id] : folder_.lang_to_id)
      if (id >= 0 && id < V && (best < 0 || l[id] > l[best])) best = id;
    langs.push_back(best);
  }
  std::vector<Tensor> cross = folder_.genai ? bt.cross : std::vector<Tensor>{};
  batch_.reset();
  audio_hidden_ = hidden;
  audio_cross_ = std::move(cross);
  return langs;
}

Next EncoderDecoderModel::start(const std::vector<std::vector<int64_t>>& prompts, int64_t capacity, const Draw& draw) {
  ONYX_CHECK(!prompts.empty(), "no prompt to generate from");
  ONYX_CHECK(draw.options.size() == prompts.size() && draw.seeds.size() == prompts.size(),
             "the draw needs options and a seed per sequence");
  const ModelFolder& dec = folder_.decoder;
  int64_t longest = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    ONYX_CHECK(!prompts[b].empty(), "prompt ", b, " has no tokens");
    for (int64_t id : prompts[b])
      ONYX_CHECK(id >= 0 && (dec.vocab_size <= 0 || id < dec.vocab_size), "prompt ", b, ": token id ", id,
                 " is outside the vocabulary of ", dec.vocab_size);
    longest = std::max<int64_t>(longest, prompts[b].size());
  }
  if (folder_.audio) {
    ONYX_CHECK(!audio_.empty(), "this is a speech model: it transcribes audio (onyx generate --audio FILE; "
               "EncoderDecoderModel::set_audio), and its prompts are decoder prompts");
    ONYX_CHECK(audio_.size() == prompts.size(), "audio for ", audio_.size(), " sequences, ", prompts.size(),
               " decoder prompts");
    for (size_t b = 0; b < prompts.size(); ++b)
      ONYX_CHECK(static_cast<int64_t>(prompts[b].size()) == longest, "the decoder prompts of a batch must be of one "
                 "length: prompt ", b, " has ", prompts[b].size(), " ids, another ", longest);
    ONYX_CHECK(longest < dec.context_length, "a decoder prompt of ", longest, " ids fills the decoder's ",
               dec.context_length, " positions");
  } else {
    ONYX_CHECK(folder_.encoder_context <= 0 || longest <= folder_.encoder_context, "a prompt of ", longest,
               " tokens is longer than the encoder's ", folder_.encoder_context, " positions");
  }
  batch_.reset();
  batch_ = std::make_unique<Batch>();
  Batch& bt = *batch_;
  bt.rows = static_cast<int64_t>(prompts.size());
  bt.size = bucket_for(bt.rows);
  const int64_t B = bt.size;
  if (folder_.audio && audio_hidden_.defined() && audio_hidden_.shape()[0] == B) {
    bt.hidden = audio_hidden_;  // detect_languages() ran the encoder on this audio
    bt.encoder_length = bt.hidden.shape()[1];
  } else if (folder_.genai && !audio_cross_.empty() && audio_cross_[0].shape()[0] == B) {
    bt.cross = audio_cross_;  // the same, in the form whose encoder returns the cross-attention cache
    bt.encoder_length = bt.cross[0].shape()[2];
  } else {
    run_encoder(prompts, B);
  }
  audio_.clear();
  audio_hidden_ = Tensor();
  audio_cross_.clear();
  // The decoder's first run: its start token (text), or each sequence's decoder prompt (speech).
  Tensor first_ids = int64_tensor(Shape{B, folder_.audio ? longest : 1}, folder_.decoder_start_id);
  if (folder_.audio)
    for (int64_t b = 0; b < B; ++b)
      std::copy(prompts[b < bt.rows ? b : 0].begin(), prompts[b < bt.rows ? b : 0].end(),
                first_ids.data<int64_t>() + b * longest);
  bt.decoder_prompt = first_ids.shape()[1];
  if (mode_ == CacheMode::kStatic) {
    // Room for the decoder's prompt and the new tokens asked for (`capacity` counts the prompt
    // the caller gave, which for a text model is the encoder's), by whole blocks, within the
    // decoder's context; a request that needs more grows the cache.
    const int64_t fresh = std::max<int64_t>(capacity - longest, 1);
    int64_t cap = (bt.decoder_prompt + fresh + kCacheBlock - 1) / kCacheBlock * kCacheBlock;
    if (dec.context_length > 0) cap = std::min(cap, dec.context_length);
    bt.capacity = std::max(cap, bt.decoder_prompt);
  }
  Next next = with_context("the decoder's first run", [&] { return run_decoder(*first_, true, first_ids, draw); });
  if (folder_.forced_bos_id >= 0) std::fill(next.tokens.begin(), next.tokens.end(), folder_.forced_bos_id);
  return next;
}

Next EncoderDecoderModel::step(const std::vector<int64_t>& tokens, const Draw& draw) {
  ONYX_CHECK(batch_, "a decode step needs a prompt first");
  Batch& bt = *batch_;
  ONYX_CHECK(static_cast<int64_t>(tokens.size()) == bt.rows, "a step takes one token per sequence (", bt.rows,
             "), got ", tokens.size());
  ONYX_CHECK(static_cast<int64_t>(draw.options.size()) == bt.rows, "the draw needs options per sequence");
  const int64_t position = bt.decoder_prompt + bt.steps;  // the one this step's token takes
  ONYX_CHECK(folder_.decoder.context_length <= 0 || position < folder_.decoder.context_length, "the decoder's context of ",
             folder_.decoder.context_length, " positions is full");
  Tensor ids(DType::kInt64, Shape{bt.size, 1});
  for (int64_t b = 0; b < bt.size; ++b) ids.data<int64_t>()[b] = tokens[b < bt.rows ? b : 0];
  const bool fixed = mode_ == CacheMode::kStatic;
  if (fixed && position >= bt.capacity) grow_static_cache(position + 1);
  Runner& r = fixed ? *static_ : step_ ? *step_ : *first_;
  Next next = with_context("a decoder step", [&] { return run_decoder(r, false, ids, draw); });
  ++bt.steps;
  return next;
}

Next EncoderDecoderModel::run_decoder(Runner& r, bool first, const Tensor& ids, const Draw& draw, bool bias) {
  Feeds f{{folder_.decoder.input_ids, ids}};
  if (r.input_dtype(folder_.decoder.input_ids) == DType::kInt32) {
    // onnxruntime-genai's decoders take int32 ids.
    Tensor narrow(DType::kInt32, ids.shape());
    for (int64_t i = 0; i < ids.numel(); ++i) narrow.data<int32_t>()[i] = static_cast<int32_t>(ids.data<int64_t>()[i]);
    f[0].second = narrow;
  }
  Batch& bt = *batch_;
  const ModelFolder& dec = folder_.decoder;
  const int64_t B = bt.size;
  if (!folder_.decoder_encoder_mask.empty()) f.emplace_back(folder_.decoder_encoder_mask, bt.encoder_mask);
  if (r.has_input(folder_.decoder_hidden_states)) f.emplace_back(folder_.decoder_hidden_states, bt.hidden);
  if (!dec.use_cache_branch.empty())
    f.emplace_back(dec.use_cache_branch, Tensor::from_vector<bool>({!first}, Shape{1}));
  const Tensor no_self(dec.kv_dtype, Shape{B, dec.kv_heads, 0, dec.head_size});
  const Tensor no_cross(dec.kv_dtype, Shape{B, folder_.cross_heads, 0, folder_.cross_head_size});
  // A static step reads and writes the fixed-capacity cache in place, from the filled length on.
  const bool fixed = mode_ == CacheMode::kStatic && !first;
  const std::vector<Tensor>& self = fixed ? bt.cache : bt.past;
  if (fixed) f.emplace_back(index_input_, Tensor::scalar<int64_t>(bt.decoder_prompt + bt.steps));
  for (size_t l = 0; l < dec.layers.size(); ++l) {
    if (!r.has_input(dec.layers[l].past_key)) continue;  // decoder_model.onnx: no past at all
    f.emplace_back(dec.layers[l].past_key, first ? no_self : self[2 * l]);
    f.emplace_back(dec.layers[l].past_value, first ? no_self : self[2 * l + 1]);
    // (The encoder made the cross-attention cache in onnxruntime-genai's form; else the first run does.)
    const bool cross = !first || folder_.genai;
    f.emplace_back(folder_.cross[l].past_key, cross ? bt.cross[2 * l] : no_cross);
    f.emplace_back(folder_.cross[l].past_value, cross ? bt.cross[2 * l + 1] : no_cross);
  }
  // A run's logits are read at its last new position. The penalties read the decoder's ids so
  // far (its prompt and what it generated).
  const int64_t new_ids = ids.shape()[1];
  const int64_t width = (bt.steps + bt.decoder_prompt + 1 + kHistoryBlock - 1) / kHistoryBlock * kHistoryBlock;
  add_draw_inputs(f, B, bt.rows, width, std::vector<int64_t>(B, new_ids - 1), draw);
  if (logit_bias_.defined()) {
    Tensor none;
    if (!bias) {
      none = Tensor(DType::kFloat32, Shape{logit_bias_.numel()});
      std::fill_n(none.data<float>(), none.numel(), 0.0f);
    }
    f.emplace_back(kDrawLogitBias, !bias ? none : first ? first_logit_bias_ : logit_bias_);
  }
  if (fixed && !bt.cross_in_slots && memory_->backend() && options_.capture != CaptureMode::kOff) {
    // A captured step reads its inputs from slots of its own, each written before a replay. The
    // cross-attention cache is the same at every step of a request: it moves into its slots once
    // and is fed from there (a feed that is its slot is not copied).
    bt.cross_in_slots = true;
    const std::vector<Tensor> slots = r.exec->input_slots(r.ordered(f));
    for (size_t l = 0; l < folder_.cross.size(); ++l)
      for (int kv = 0; kv < 2; ++kv) {
        const std::string& name = kv ? folder_.cross[l].past_value : folder_.cross[l].past_key;
        Tensor& t = bt.cross[2 * l + kv];
        const Tensor& slot = slots[r.inputs.at(name)];
        if (!slot.defined() || slot.raw() == t.raw() || slot.bytes() != t.bytes() || t.on_host()) continue;
        memory_->backend()->copy_on_device(slot.raw(), t.raw(), t.bytes());
        t = slot;
        for (auto& [n, v] : f)
          if (n == name) v = slot;
      }
  }
  std::vector<std::string> to_host{kNextToken};
  if (draw.logits) to_host.push_back(kNextLogits);
  // The caches are written into the KV pool: self-attention one position longer than the past,
  // cross-attention (the first run) over the prompt.
  Feeds into;
  if (fixed) {
    for (size_t l = 0; l < dec.layers.size(); ++l) {
      into.emplace_back(dec.layers[l].present_key, bt.cache[2 * l]);
      into.emplace_back(dec.layers[l].present_value, bt.cache[2 * l + 1]);
    }
  } else {
    const int64_t positions = (first ? 0 : bt.past[0].shape()[2]) + new_ids;
    for (const auto& l : dec.layers)
      for (const std::string* n : {&l.present_key, &l.present_value})
        into.emplace_back(*n, Tensor(dec.kv_dtype, Shape{B, dec.kv_heads, positions, dec.head_size}, *kv_pool_));
  }
  if (first && !folder_.genai)
    for (const auto& l : folder_.cross)
      for (const std::string* n : {&l.present_key, &l.present_value})
        into.emplace_back(*n, Tensor(dec.kv_dtype, Shape{B, folder_.cross_heads, bt.encoder_length,
                                                         folder_.cross_head_size}, *kv_pool_));
  std::vector<Tensor> out = r.run(f, to_host, into, memory_->backend());
  if (!fixed) {
    std::vector<Tensor> past;
    for (const auto& l : dec.layers) {
      past.push_back(out[r.output(l.present_key)]);
      past.push_back(out[r.output(l.present_value)]);
    }
    // The first run of a static request: its presents into the fixed-capacity cache.
    if (mode_ == CacheMode::kStatic && bt.capacity > 0) begin_static_cache(past, bt.capacity);
    else bt.past = std::move(past);
  }
  if (first && !folder_.genai) {
    bt.cross.clear();
    for (const auto& l : folder_.cross) {
      bt.cross.push_back(out[r.output(l.present_key)]);
      bt.cross.push_back(out[r.output(l.present_value)]);
    }
    // The split decoder's steps do not read the encoder's output again: it goes now.
    if (step_ && !step_->has_input(folder_.decoder_hidden_states)) bt.hidden = Tensor();
  }
  Next next;
  const Tensor& tokens = out[r.output(kNextToken)];
  next.tokens.assign(tokens.data<int64_t>(), tokens.data<int64_t>() + bt.rows);
  if (draw.logits) {
    const Tensor& l = out[r.output(kNextLogits)];
    next.logits = Tensor(DType::kFloat32, Shape{bt.rows, l.shape()[1]});
    std::memcpy(next.logits.raw(), l.raw(), next.logits.bytes());
  }
  return next;
}

// t[rows[i]] along dimension 0, where t lives.
Tensor EncoderDecoderModel::take_rows(const Tensor& t, const std::vector<size_t>& rows, Allocator* alloc) const {
  if (!t.defined()) return t;
  Shape s = t.shape();
  s[0] = static_cast<int64_t>(rows.size());
  Backend* backend = memory_->backend();
  Allocator& a = alloc ? *alloc : t.on_host() ? static_cast<Allocator&>(cpu_allocator()) : backend->allocator();
  Tensor out(t.dtype(), s, a);
  ONYX_ASSERT(out.on_host() == t.on_host(), "take_rows: ", t.type_str(), " into memory of another device");
  const size_t row_bytes = t.bytes() / static_cast<size_t>(t.shape()[0]);
  std::vector<Backend::DeviceCopy> copies;
  for (size_t i = 0; i < rows.size(); ++i)
    copies.push_back({static_cast<char*>(out.raw()) + i * row_bytes,
                      static_cast<const char*>(t.raw()) + rows[i] * row_bytes, row_bytes});
  copy_all(t.on_host() ? nullptr : backend, copies);
  return out;
}

void EncoderDecoderModel::keep(const std::vector<size_t>& keep) {
  ONYX_CHECK(batch_, "nothing to keep");
  Batch& bt = *batch_;
  const std::vector<size_t> rows = kept_rows(keep, bt.rows);
  const int64_t size = static_cast<int64_t>(rows.size());
  bt.encoder_mask = take_rows(bt.encoder_mask, rows);  // the host's: fed as a feed
  bt.hidden = take_rows(bt.hidden, rows, decoder_values_);  // (kept only where steps read it)
  for (Tensor& t : bt.cross) t = take_rows(t, rows, kv_pool_.get());
  bt.cross_in_slots = false;
  for (Tensor& t : bt.past) t = take_rows(t, rows, kv_pool_.get());
  for (Tensor& t : bt.cache) t = take_rows(t, rows, kv_pool_.get());
  bt.size = size;
  bt.rows = static_cast<int64_t>(keep.size());
}

int64_t EncoderDecoderModel::bucket() const { return batch_ ? batch_->size : 0; }

size_t EncoderDecoderModel::cache_bytes() const {
  size_t n = 0;
  if (batch_) {
    for (const auto& t : batch_->past) n += t.bytes();
    for (const auto& t : batch_->cache) n += t.bytes();
    for (const auto& t : batch_->cross) n += t.bytes();
  }
  return n;
}

int64_t EncoderDecoderModel::cache_grows() const {
  return !batch_ ? 0 : mode_ == CacheMode::kStatic ? batch_->grows : batch_->steps;
}

CaptureReport EncoderDecoderModel::capture_report() const {
  return (mode_ == CacheMode::kStatic ? static_ : step_ ? step_ : first_)->exec->capture_report();
}

size_t EncoderDecoderModel::peak_device_bytes() const {
  return memory_->backend() ? memory_->governor().peak_leased() : 0;
}

std::vector<ComponentUse> EncoderDecoderModel::component_use() const {
  ComponentUse d = decoder_use_;
  d.kv_bytes = cache_bytes();
  return {encoder_use_, d};
}

std::string EncoderDecoderModel::memory_report() const {
  std::string s = cat("holders of ", memory_->device().str(), "'s governor:\n", memory_->report(),
                      "most leased at once: ", format_bytes(memory_->governor().peak_leased()), " (",
                      memory_->governor().peak_leased(), " B)\n");
  s += "per component (the arena is the largest planned by its runs, against the bytes live at its busiest step "
       "and the bytes of all its intermediates):\n";
  for (const ComponentUse& c : component_use()) {
    s += cat("  ", c.name, ": weights ", format_bytes(c.weight_bytes), ", arena ", format_bytes(c.arena_bytes),
             " (live-set lower bound ", format_bytes(c.arena_lower_bound), ", all intermediates ",
             format_bytes(c.arena_no_reuse), ")");
    if (c.name == "decoder") s += cat(", kv cache ", format_bytes(c.kv_bytes), " (self- and cross-attention)");
    s += "\n";
  }
  return s;
}

std::unique_ptr<TokenModel> load_token_model(const std::string& dir, const SessionOptions& options) {
  if (is_encoder_decoder_folder(dir)) return std::make_unique<EncoderDecoderModel>(dir, options);
  return std::make_unique<LanguageModel>(dir, options);
}

}  // namespace onyx::genai
