#include "genai/encoder_decoder_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "genai/language_model.h"
#include "genai/language_model_parts.h"
#include "model/loader.h"
#include "onyx/session.h"
#include "passes/optimize.h"

namespace onyx::genai {

namespace {

constexpr int64_t kHistoryBlock = 64;  // the penalties' id window grows by this many ids

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
  size_t output(const std::string& n) const {
    auto it = outputs.find(n);
    ONYX_ASSERT(it != outputs.end(), "graph '", graph->name, "' has no output '", n, "'");
    return it->second;
  }

  // Runs with the named feeds (any input of the graph not fed must have a default); the outputs
  // stay on the device but for those in `to_host`. Outputs in `bound` are written into those
  // tensors: by the step that makes them where the plan knows their shape, else copied there
  // after the run (a merged decoder's If). Records the arena of the run's plan.
  std::vector<Tensor> run(const Feeds& feeds, const std::vector<std::string>& to_host, const Feeds& bound,
                          Backend* backend) {
    std::vector<Tensor> in(graph->inputs.size());
    for (const auto& [name, t] : feeds) {
      auto it = inputs.find(name);
      if (it != inputs.end()) in[it->second] = t;
    }
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
  Tensor hidden;                 // the encoder's output (the merged decoder reads it every run)
  std::vector<Tensor> cross;     // per layer: key, value (computed by the first run, kept)
  std::vector<Tensor> past;      // per layer: key, value (the last run's presents)
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
    auto load = [&](const std::string& path, bool sampler) {
      return with_context(std::filesystem::path(path).filename().string(), [&] {
        onyx::Model m = load_model(path);
        // The encoder runs once a request, as a session does: its attention fuses on every device
        // (the decoders keep generation's default, fused on CUDA only).
        optimize_graph(*m.graph, options, device, OptimizeDefaults{.fuse_attention_on_cpu = !sampler});
        if (sampler) append_sampler(*m.graph, folder_.decoder.logits, logit_bias_.defined());
        return m;
      });
    };
    // Every graph is read (on the host) and the weights the split decoder's two files share
    // are found, before anything is placed: the budget is checked against what will be held.
    encoder_model_ = load(folder_.encoder_path, false);
    first_model_ = load(folder_.first_path, true);
    encoder_use_ = {"encoder", graph_weight_bytes(*encoder_model_.graph)};
    decoder_use_ = {"decoder", graph_weight_bytes(*first_model_.graph)};
    if (!folder_.merged) {
      step_model_ = load(folder_.step_path, true);
      decoder_use_.weight_bytes +=
          graph_weight_bytes(*step_model_.graph) - share_weights(*first_model_.graph, *step_model_.graph);
    }
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
    if (!folder_.merged)
      with_context(std::filesystem::path(folder_.step_path).filename().string(), [&] {
        step_ = std::make_unique<Runner>(*step_model_.graph, dec, dc, &decoder_use_, weights);
      });
  });
}

EncoderDecoderModel::~EncoderDecoderModel() {
  // Every tensor of the components' pools goes before the pools and the backend.
  batch_.reset();
  kv_pool_.reset();
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
    bt.hidden = encoder_->run(f, {}, {}, memory_->backend())[encoder_->output(folder_.encoder_output)];
    // The encoder runs once a request: its arena goes back now, before the decoder's steps.
    encoder_->exec->release_plans();
  });
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
  batch_.reset();
  audio_hidden_ = hidden;
  return langs;
}

Next EncoderDecoderModel::start(const std::vector<std::vector<int64_t>>& prompts, int64_t, const Draw& draw) {
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
  } else {
    run_encoder(prompts, B);
  }
  audio_.clear();
  audio_hidden_ = Tensor();
  // The decoder's first run: its start token (text), or each sequence's decoder prompt (speech).
  Tensor first_ids = int64_tensor(Shape{B, folder_.audio ? longest : 1}, folder_.decoder_start_id);
  if (folder_.audio)
    for (int64_t b = 0; b < B; ++b)
      std::copy(prompts[b < bt.rows ? b : 0].begin(), prompts[b < bt.rows ? b : 0].end(),
                first_ids.data<int64_t>() + b * longest);
  bt.decoder_prompt = first_ids.shape()[1];
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
  ONYX_CHECK(bt.steps + 1 < folder_.decoder.context_length, "the decoder's context of ",
             folder_.decoder.context_length, " positions is full");
  Tensor ids(DType::kInt64, Shape{bt.size, 1});
  for (int64_t b = 0; b < bt.size; ++b) ids.data<int64_t>()[b] = tokens[b < bt.rows ? b : 0];
  Runner& r = step_ ? *step_ : *first_;
  Next next = with_context("a decoder step", [&] { return run_decoder(r, false, ids, draw); });
  ++bt.steps;
  return next;
}

Next EncoderDecoderModel::run_decoder(Runner& r, bool first, const Tensor& ids, const Draw& draw, bool bias) {
  Feeds f{{folder_.decoder.input_ids, ids}};
  Batch& bt = *batch_;
  const ModelFolder& dec = folder_.decoder;
  const int64_t B = bt.size;
  if (!folder_.decoder_encoder_mask.empty()) f.emplace_back(folder_.decoder_encoder_mask, bt.encoder_mask);
  if (r.has_input(folder_.decoder_hidden_states)) f.emplace_back(folder_.decoder_hidden_states, bt.hidden);
  if (!dec.use_cache_branch.empty())
    f.emplace_back(dec.use_cache_branch, Tensor::from_vector<bool>({!first}, Shape{1}));
  const Tensor no_self(dec.kv_dtype, Shape{B, dec.kv_heads, 0, dec.head_size});
  const Tensor no_cross(dec.kv_dtype, Shape{B, folder_.cross_heads, 0, folder_.cross_head_size});
  for (size_t l = 0; l < dec.layers.size(); ++l) {
    if (!r.has_input(dec.layers[l].past_key)) continue;  // decoder_model.onnx: no past at all
    f.emplace_back(dec.layers[l].past_key, first ? no_self : bt.past[2 * l]);
    f.emplace_back(dec.layers[l].past_value, first ? no_self : bt.past[2 * l + 1]);
    f.emplace_back(folder_.cross[l].past_key, first ? no_cross : bt.cross[2 * l]);
    f.emplace_back(folder_.cross[l].past_value, first ? no_cross : bt.cross[2 * l + 1]);
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
  std::vector<std::string> to_host{kNextToken};
  if (draw.logits) to_host.push_back(kNextLogits);
  // The caches are written into the KV pool: self-attention one position longer than the past,
  // cross-attention (the first run) over the prompt.
  Feeds into;
  const int64_t positions = (first ? 0 : bt.past[0].shape()[2]) + new_ids;
  for (const auto& l : dec.layers)
    for (const std::string* n : {&l.present_key, &l.present_value})
      into.emplace_back(*n, Tensor(dec.kv_dtype, Shape{B, dec.kv_heads, positions, dec.head_size}, *kv_pool_));
  if (first)
    for (const auto& l : folder_.cross)
      for (const std::string* n : {&l.present_key, &l.present_value})
        into.emplace_back(*n, Tensor(dec.kv_dtype, Shape{B, folder_.cross_heads, bt.encoder_length,
                                                         folder_.cross_head_size}, *kv_pool_));
  std::vector<Tensor> out = r.run(f, to_host, into, memory_->backend());
  std::vector<Tensor> past;
  for (const auto& l : dec.layers) {
    past.push_back(out[r.output(l.present_key)]);
    past.push_back(out[r.output(l.present_value)]);
  }
  bt.past = std::move(past);
  if (first) {
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
  for (size_t i = 0; i < rows.size(); ++i) {
    char* dst = static_cast<char*>(out.raw()) + i * row_bytes;
    const char* src = static_cast<const char*>(t.raw()) + rows[i] * row_bytes;
    if (t.on_host()) std::memcpy(dst, src, row_bytes);
    else backend->copy_on_device(dst, src, row_bytes);
  }
  return out;
}

void EncoderDecoderModel::keep(const std::vector<size_t>& keep) {
  ONYX_CHECK(batch_, "nothing to keep");
  Batch& bt = *batch_;
  const std::vector<size_t> rows = kept_rows(keep, bt.rows);
  const int64_t size = static_cast<int64_t>(rows.size());
  bt.encoder_mask = take_rows(bt.encoder_mask, rows);  // the host's: fed as a feed
  bt.hidden = take_rows(bt.hidden, rows, decoder_values_);  // read by the merged decoder's steps
  for (Tensor& t : bt.cross) t = take_rows(t, rows, kv_pool_.get());
  for (Tensor& t : bt.past) t = take_rows(t, rows, kv_pool_.get());
  bt.size = size;
  bt.rows = static_cast<int64_t>(keep.size());
}

int64_t EncoderDecoderModel::bucket() const { return batch_ ? batch_->size : 0; }

size_t EncoderDecoderModel::cache_bytes() const {
  size_t n = 0;
  if (batch_) {
    for (const auto& t : batch_->past) n += t.bytes();
    for (const auto& t : batch_->cross) n += t.bytes();
  }
  return n;
}

int64_t EncoderDecoderModel::cache_grows() const { return batch_ ? batch_->steps : 0; }

CaptureReport EncoderDecoderModel::capture_report() const {
  return (step_ ? step_ : first_)->exec->capture_report();
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
