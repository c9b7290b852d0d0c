// LanguageModel's vision-language part: the embedding model joined to the front of the decoder,
// the vision model run once per request over the images, and the features of each sequence's
// images fed to its prompt run in place of its image tokens.
#include <cstring>
#include <filesystem>
#include <map>

#include "genai/language_model.h"
#include "genai/language_model_parts.h"
#include "genai/pipeline_memory.h"
#include "model/loader.h"
#include "passes/compose.h"
#include "passes/optimize.h"

namespace onyx::genai {


Tensor as_float_type(const Tensor& t, DType want) {
  if (t.dtype() == want) return t;
  auto get = [&](int64_t i) -> float {
    switch (t.dtype()) {
      case DType::kFloat32: return t.data<float>()[i];
      case DType::kFloat16: return Float16::to_float(t.data<uint16_t>()[i]);
      case DType::kBFloat16: {
        BFloat16 b;
        b.bits = t.data<uint16_t>()[i];
        return static_cast<float>(b);
      }
      default: throw Error(cat("data is ", dtype_name(t.dtype()), "; onyx converts float32, float16 and bfloat16"));
    }
  };
  Tensor out(want, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = get(i);
    switch (want) {
      case DType::kFloat32: out.data<float>()[i] = v; break;
      case DType::kFloat16: out.data<uint16_t>()[i] = Float16::from_float(v); break;
      case DType::kBFloat16: out.data<uint16_t>()[i] = BFloat16(v).bits; break;
      default: throw Error(cat("data as ", dtype_name(want), ": onyx converts to float32, float16 or bfloat16"));
    }
  }
  return out;
}

void LanguageModel::load_vision(Graph& decoder) {
  const VisionFolder& vf = folder_.vision;
  vision_ = std::make_unique<Vision>();
  Vision& v = *vision_;
  v.processor = read_image_processor(vf.processor_path);
  // The embedding model in front of the decoder: one graph from token ids (and image
  // features) to the next token.
  with_context(cat("joining embedding model '", vf.embedding_path, "' to the decoder"), [&] {
    onyx::Model embedding = load_model(vf.embedding_path);
    const int features = embedding.graph->find_value(vf.embedding_features);
    const TypeInfo& t = embedding.graph->values[features].declared;
    v.dtype = t.dtype == DType::kUndefined ? DType::kFloat32 : t.dtype;
    if (t.rank_known && t.dims.size() == 2 && t.dims[1] > 0) v.hidden = t.dims[1];
    const int embeds = decoder.find_value(vf.decoder_embeds);
    const TypeInfo& e = decoder.values[embeds].declared;
    if (!v.hidden && e.rank_known && e.dims.size() == 3 && e.dims[2] > 0) v.hidden = e.dims[2];
    ONYX_CHECK(v.hidden > 0, "the width of '", vf.embedding_features, "' is not declared by the embedding model ([tokens, "
               "hidden]) or by the decoder's '", vf.decoder_embeds, "'");
    prepend_graph(decoder, *embedding.graph, {{vf.embedding_output, vf.decoder_embeds}}, "embedding/");
  });
  with_context(cat("loading vision model '", vf.vision_path, "'"), [&] {
    v.model = load_model(vf.vision_path);
    // It runs once a request, as an encoder does: its attention fuses on every device.
    optimize_graph(*v.model.graph, options_, device_, OptimizeDefaults{.fuse_attention_on_cpu = true});
    v.weight_bytes = graph_weight_bytes(*v.model.graph);
    if (backend_) {
      // Both components' weights must fit before either is placed (one budget, L9).
      admit_weights(backend_->governor(), device_, true,
                    {{"decoder", graph_weight_bytes(decoder)}, {"vision", v.weight_bytes}});
      v.backend = component_backend(*backend_, "vision");
    }
    SessionOptions o = options_;
    o.capture = CaptureMode::kOff;
    o.plan_cache_capacity = 1;
    v.exec = std::make_unique<GraphExecutor>(*v.model.graph, OpRegistry::global(), host_, o, v.backend.get());
    const Graph& g = *v.model.graph;
    for (size_t i = 0; i < g.inputs.size(); ++i)
      if (g.values[g.inputs[i]].name == vf.pixel_values) v.pixel_input = i;
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (g.values[g.outputs[i]].name == vf.vision_features) v.features_output = i;
  });
}

const ImageProcessor& LanguageModel::image_processor() const {
  ONYX_CHECK(vision_, "model folder '", folder_.dir, "' has no vision model: it takes no images");
  return vision_->processor;
}

std::vector<Tensor> LanguageModel::encode_images(const std::vector<Tensor>& pixels) {
  if (backend_) backend_->make_current();
  ONYX_CHECK(vision_, "model folder '", folder_.dir, "' has no vision model: it takes no images");
  Vision& v = *vision_;
  const Graph& g = *v.model.graph;
  DType want = g.values[g.inputs[v.pixel_input]].declared.dtype;
  if (want == DType::kUndefined) want = DType::kFloat32;
  ONYX_CHECK(want == DType::kFloat32 || want == DType::kFloat16 || want == DType::kBFloat16, "the vision model's '",
             folder_.vision.pixel_values, "' is ", dtype_name(want), "; onyx feeds float32, float16 or bfloat16 pixels");
  std::vector<Tensor> out;
  size_t at = 0;
  while (at < pixels.size()) {
    // Images of one size run as one batch.
    size_t end = at + 1;
    for (const Tensor& p : pixels)
      ONYX_CHECK(p.dtype() == DType::kFloat32 && p.rank() == 3 && p.shape()[0] == 3, "an image's pixels are float32 [3, "
                 "height, width], got ", p.type_str());
    while (end < pixels.size() && pixels[end].shape() == pixels[at].shape()) ++end;
    const int64_t n = static_cast<int64_t>(end - at);
    const Shape& s = pixels[at].shape();
    Tensor batch(DType::kFloat32, Shape{n, s[0], s[1], s[2]});
    const size_t image_bytes = pixels[at].bytes();
    for (size_t i = at; i < end; ++i)
      std::memcpy(static_cast<char*>(batch.raw()) + (i - at) * image_bytes, pixels[i].raw(), image_bytes);
    std::vector<Tensor> in(g.inputs.size());
    in[v.pixel_input] = as_float_type(batch, want);
    Tensor features = with_context(cat("vision model '", std::filesystem::path(folder_.vision.vision_path).filename().string(),
                                       "' on ", n, " image", n == 1 ? "" : "s", " of ", s[2], "x", s[1]), [&] {
      const std::shared_ptr<const ExecutionPlan> plan = v.exec->plan_for(in);
      const ArenaPlan& arena = plan->main_arena();
      if (arena.bytes >= v.arena_bytes) {
        v.arena_bytes = arena.bytes;
        v.arena_lower_bound = arena.lower_bound_bytes;
        v.arena_no_reuse = arena.no_reuse_bytes;
      }
      std::vector<OutputPlace> places(g.outputs.size(), OutputPlace::kDevice);
      places[v.features_output] = OutputPlace::kHost;
      Tensor f = v.exec->run(in, nullptr, &places)[v.features_output];
      v.exec->release_plans();  // the arena goes back: the next request plans again
      // In the embedding model's type (a float16 vision model before a float32 decoder).
      return dtype_is_float(f.dtype()) && f.dtype() != DType::kFloat64 ? as_float_type(f, v.dtype) : f;
    });
    // [images, tokens, hidden], or the tokens of all images as rows of [images * tokens, hidden].
    const Shape& fs = features.shape();
    const bool per_image = features.rank() == 3 && fs[0] == n;
    ONYX_CHECK((per_image || (features.rank() == 2 && fs[0] % n == 0)) && fs[fs.rank() - 1] == v.hidden &&
                   features.dtype() == v.dtype,
               "the vision model's '", folder_.vision.vision_features, "' is ", features.type_str(), " for ", n,
               " images; the embedding model takes ", dtype_name(v.dtype), " [tokens, ", v.hidden, "]");
    const int64_t tokens = per_image ? fs[1] : fs[0] / n;
    const size_t bytes = static_cast<size_t>(tokens * v.hidden) * dtype_size(v.dtype);
    for (int64_t i = 0; i < n; ++i) {
      Tensor one(v.dtype, Shape{tokens, v.hidden});
      std::memcpy(one.raw(), static_cast<const char*>(features.raw()) + i * bytes, bytes);
      out.push_back(std::move(one));
    }
    at = end;
  }
  return out;
}

void LanguageModel::set_image_features(std::vector<std::vector<Tensor>> per_sequence) {
  ONYX_CHECK(vision_, "model folder '", folder_.dir, "' has no vision model: it takes no images");
  for (const auto& seq : per_sequence)
    for (const Tensor& t : seq)
      ONYX_CHECK(t.dtype() == vision_->dtype && t.rank() == 2 && t.shape()[1] == vision_->hidden, "image features are ",
                 dtype_name(vision_->dtype), " [tokens, ", vision_->hidden, "], got ", t.type_str());
  vision_->pending = std::move(per_sequence);
}

void LanguageModel::add_image_feeds(Feeds& feeds, bool prompt) {
  if (!vision_) return;
  // A prompt run takes the features start() gathered (once); every other run none.
  Tensor t = prompt && vision_->batch.defined() ? std::move(vision_->batch) : Tensor(vision_->dtype, Shape{0, vision_->hidden});
  vision_->batch = Tensor();
  feeds.emplace_back(folder_.vision.embedding_features, std::move(t));
}

void LanguageModel::set_image_rows(Tensor rows) {
  ONYX_CHECK(vision_, "model folder '", folder_.dir, "' has no vision model: it takes no images");
  ONYX_CHECK(rows.dtype() == vision_->dtype && rows.rank() == 2 && rows.shape()[1] == vision_->hidden,
             "image features are ", dtype_name(vision_->dtype), " [tokens, ", vision_->hidden, "], got ", rows.type_str());
  vision_->batch = std::move(rows);
}

void LanguageModel::check_prefill_images(const std::vector<int64_t>& ids) {
  if (!vision_) return;
  int64_t want = 0;
  for (int64_t id : ids) want += id == folder_.vision.image_token_id;
  const int64_t have = vision_->batch.defined() ? vision_->batch.shape()[0] : 0;
  if (want != have) {
    vision_->batch = Tensor();
    throw Error(cat("the prefill's ids hold ", want, " image tokens (id ", folder_.vision.image_token_id, ") and ", have,
                    " rows of image features were set"));
  }
}

// The image features of the prompt run of `rows` (the bucket's rows; those past `sequences`
// pad it, repeating the first): each row's image tokens take its images' feature rows in order.
void LanguageModel::take_image_features(const std::vector<std::vector<int64_t>>& rows, size_t sequences) {
  if (!vision_) return;
  Vision& v = *vision_;
  std::vector<std::vector<Tensor>> pending = std::move(v.pending);
  v.pending.clear();
  v.batch = Tensor();
  ONYX_CHECK(pending.empty() || pending.size() == sequences, "image features were given for ", pending.size(),
             " sequences; the prompts are ", sequences);
  const int64_t token = folder_.vision.image_token_id;
  int64_t total = 0;
  std::vector<const std::vector<Tensor>*> of_row(rows.size(), nullptr);
  for (size_t b = 0; b < rows.size(); ++b) {
    const size_t seq = b < sequences ? b : 0;
    int64_t want = 0, have = 0;
    for (int64_t id : rows[b]) want += id == token;
    if (!pending.empty()) {
      of_row[b] = &pending[seq];
      for (const Tensor& t : pending[seq]) have += t.shape()[0];
    }
    ONYX_CHECK(want == have, "prompt ", seq, " holds ", want, " image tokens (id ", token, ") and its images have ",
               have, " feature rows: each image's token is expanded to its rows (expand_image_tokens)");
    total += have;
  }
  if (total == 0) return;
  Tensor batch(v.dtype, Shape{total, v.hidden});
  size_t at = 0;
  for (const auto* list : of_row)
    if (list)
      for (const Tensor& t : *list) {
        std::memcpy(static_cast<char*>(batch.raw()) + at, t.raw(), t.bytes());
        at += t.bytes();
      }
  v.batch = std::move(batch);
}

std::string LanguageModel::vision_report() const {
  if (!vision_) return "";
  const Vision& v = *vision_;
  return cat("vision model: weights ", format_bytes(v.weight_bytes), ", arena ", format_bytes(v.arena_bytes),
             " (live-set lower bound ", format_bytes(v.arena_lower_bound), ", all intermediates ",
             format_bytes(v.arena_no_reuse), ")\n");
}

std::vector<int64_t> expand_image_tokens(const std::vector<int64_t>& prompt, int64_t image_token,
                                         const std::vector<int64_t>& tokens_per_image) {
  size_t found = 0;
  for (int64_t id : prompt) found += id == image_token;
  ONYX_CHECK(found == tokens_per_image.size(), "the prompt holds ", found, " image token", found == 1 ? "" : "s",
             " (id ", image_token, ") for ", tokens_per_image.size(), " image", tokens_per_image.size() == 1 ? "" : "s",
             ": put the model's image token where each image goes");
  std::vector<int64_t> out;
  size_t k = 0;
  for (int64_t id : prompt) {
    if (id != image_token) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), static_cast<size_t>(tokens_per_image[k++]), image_token);
  }
  return out;
}

}  // namespace onyx::genai
