#include "genai/encoder_decoder_folder.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>

#include "onyx/session.h"

namespace onyx::genai {

namespace fs = std::filesystem;

namespace {

const ValueDesc* find_io(const std::vector<ValueDesc>& list, const std::string& name) {
  for (const auto& d : list)
    if (d.name == name) return &d;
  return nullptr;
}

// Optimum's cache names: past_key_values.N.{decoder,encoder}.{key,value} in, present.N.* out.
void cache_names(const ModelInfo& info, const std::string& where, std::vector<CacheNames>& self,
                 std::vector<CacheNames>& cross, bool want_past) {
  static const std::regex kPast(R"(past_key_values\.(\d+)\.(decoder|encoder)\.(key|value))");
  static const std::regex kPresent(R"(present\.(\d+)\.(decoder|encoder)\.(key|value))");
  std::map<int, CacheNames> s, c;
  std::smatch m;
  auto put = [&](std::map<int, CacheNames>& side, int layer, bool key, bool past, const std::string& name) {
    CacheNames& l = side[layer];
    (past ? (key ? l.past_key : l.past_value) : (key ? l.present_key : l.present_value)) = name;
  };
  for (const auto& in : info.inputs)
    if (std::regex_match(in.name, m, kPast)) put(m[2] == "decoder" ? s : c, std::stoi(m[1]), m[3] == "key", true, in.name);
  for (const auto& out : info.outputs)
    if (std::regex_match(out.name, m, kPresent))
      put(m[2] == "decoder" ? s : c, std::stoi(m[1]), m[3] == "key", false, out.name);
  self.clear();
  cross.clear();
  for (auto* side : {&s, &c})
    for (auto& [i, l] : *side) {
      auto& list = side == &s ? self : cross;
      ONYX_CHECK(i == static_cast<int>(list.size()), where, ": the cache names skip layer ", list.size());
      list.push_back(l);
    }
  ONYX_CHECK(!self.empty(), where, " has no self-attention cache (present.N.decoder.key): onyx generates with a KV "
             "cache; export with --task text2text-generation-with-past");
  if (want_past)
    for (size_t i = 0; i < self.size(); ++i)
      ONYX_CHECK(!self[i].past_key.empty() && !self[i].past_value.empty(), where, ": layer ", i,
                 " has no past input past_key_values.", i, ".decoder.key/value");
}

void need_input(const ModelInfo& info, const std::string& where, const std::string& name, const char* role) {
  ONYX_CHECK(find_io(info.inputs, name), where, " has no input '", name, "' (", role, ")");
}

}  // namespace

namespace {

// Whether `dir` has onnxruntime-genai's genai_config.json naming an encoder (its Whisper form).
bool is_genai_encoder_decoder(const fs::path& d) {
  if (!fs::exists(d / "genai_config.json")) return false;
  Json doc = read_json_file((d / "genai_config.json").string());
  JsonNode root(doc, "genai_config.json");
  if (!root.is_object() || !root.has("model")) return false;
  JsonNode model = root.at("model");
  return model.is_object() && model.has("encoder");
}

}  // namespace

bool is_encoder_decoder_folder(const std::string& dir) {
  return fs::exists(fs::path(dir) / "encoder_model.onnx") || is_genai_encoder_decoder(fs::path(dir));
}

namespace {

// Optimum's files: encoder_model.onnx, and decoder_model.onnx with decoder_with_past_model.onnx
// or decoder_model_merged.onnx.
void read_optimum_components(EncoderDecoderFolder& f, const fs::path& d, const std::string& dir) {
  ModelFolder& dec = f.decoder;
  dec.source = "an encoder-decoder export (encoder_model.onnx)";
  f.encoder_path = (d / "encoder_model.onnx").string();
  ONYX_CHECK(fs::exists(f.encoder_path), "has no encoder_model.onnx");
  // The split form first; a merged decoder (one If node) is split into the same two graphs at
  // load (passes/compose.h).
  if (fs::exists(d / "decoder_model.onnx") && fs::exists(d / "decoder_with_past_model.onnx")) {
    f.first_path = (d / "decoder_model.onnx").string();
    f.step_path = (d / "decoder_with_past_model.onnx").string();
  } else {
    ONYX_CHECK(fs::exists(d / "decoder_model_merged.onnx"),
               "has encoder_model.onnx but neither decoder_model_merged.onnx nor both decoder_model.onnx and "
               "decoder_with_past_model.onnx (onyx decodes with a KV cache: export with "
               "--task text2text-generation-with-past)");
    f.first_path = f.step_path = (d / "decoder_model_merged.onnx").string();
    f.merged = true;
  }
  dec.decoder_path = f.step_path;

  // The encoder: token ids (and their mask) in, hidden states out.
  const ModelInfo enc = inspect_model(f.encoder_path);
  const std::string ew = "encoder 'encoder_model.onnx'";
  if (const ValueDesc* features = find_io(enc.inputs, "input_features")) {
    // A speech encoder: the log-mel spectrogram of preprocessor_config.json's front end.
    f.audio = true;
    f.encoder_input = "input_features";
    f.audio_features = AudioFeatureConfig::from_folder(dir);
    const AudioFeatureConfig& a = f.audio_features;
    ONYX_CHECK(features->dtype == DType::kFloat32 || features->dtype == DType::kFloat16, ew,
               ": input_features is ", features->type_str(), ", expected float32 or float16");
    if (features->rank_known) {
      ONYX_CHECK(features->dims.size() == 3, ew, ": input_features is ", features->type_str(),
                 ", expected [batch, mels, frames]");
      ONYX_CHECK(features->dims[1] <= 0 || features->dims[1] == a.feature_size, ew, ": input_features has ",
                 features->dims[1], " mel bins, preprocessor_config.json's feature_size is ", a.feature_size);
      ONYX_CHECK(features->dims[2] <= 0 || features->dims[2] == a.nb_max_frames, ew, ": input_features has ",
                 features->dims[2], " frames, preprocessor_config.json's nb_max_frames is ", a.nb_max_frames);
    }
  } else {
    need_input(enc, ew, "input_ids", "the prompt's token ids");
    f.encoder_input = "input_ids";
  }
  if (find_io(enc.inputs, "attention_mask")) f.encoder_mask = "attention_mask";
  for (const auto& in : enc.inputs)
    ONYX_CHECK(in.name == f.encoder_input || in.name == f.encoder_mask || in.has_default, ew, ": input '", in.name,
               "' has no role onyx knows how to feed (input_ids or input_features, attention_mask)");
  ONYX_CHECK(!enc.outputs.empty(), ew, " has no outputs");
  f.encoder_output = find_io(enc.outputs, "last_hidden_state") ? "last_hidden_state" : enc.outputs[0].name;

  // The decoder's first run and its steps.
  const ModelInfo first = inspect_model(f.first_path);
  const ModelInfo step = f.merged ? first : inspect_model(f.step_path);
  const std::string fw = cat("decoder '", fs::path(f.first_path).filename().string(), "'");
  const std::string sw = cat("decoder '", fs::path(f.step_path).filename().string(), "'");
  need_input(first, fw, "input_ids", "the decoder's token ids");
  need_input(first, fw, "encoder_hidden_states", "the encoder's output");
  ONYX_CHECK(find_io(first.outputs, "logits"), fw, " has no output 'logits'");
  dec.input_ids = "input_ids";
  dec.logits = "logits";
  f.decoder_hidden_states = "encoder_hidden_states";
  if (find_io(first.inputs, "encoder_attention_mask")) f.decoder_encoder_mask = "encoder_attention_mask";
  if (f.merged) {
    need_input(first, fw, "use_cache_branch", "the merged decoder's switch between its first run and its steps");
    dec.use_cache_branch = "use_cache_branch";
  }
  std::vector<CacheNames> first_self, first_cross;
  cache_names(first, fw, first_self, first_cross, f.merged);
  cache_names(step, sw, dec.layers, f.cross, true);
  ONYX_CHECK(first_cross.size() == first_self.size(), fw, " returns the cross-attention cache of ",
             first_cross.size(), " layers for ", first_self.size(), " decoder layers");
  ONYX_CHECK(first_self.size() == dec.layers.size(), fw, " has ", first_self.size(), " layers, ", sw, " ",
             dec.layers.size());
  for (size_t i = 0; i < f.cross.size(); ++i) {
    // The first run's encoder presents are the steps' encoder pasts.
    f.cross[i].present_key = first_cross[i].present_key;
    f.cross[i].present_value = first_cross[i].present_value;
    ONYX_CHECK(!f.cross[i].past_key.empty() && !f.cross[i].past_value.empty(), sw, ": layer ", i,
               " has no cross-attention past input past_key_values.", i, ".encoder.key/value");
  }
  ONYX_CHECK(f.cross.size() == dec.layers.size(), sw, " has the cross-attention cache of ", f.cross.size(),
             " layers for ", dec.layers.size(), " decoder layers");
  for (const auto* info : {&first, &step})
    for (const auto& in : info->inputs) {
      bool known = in.name == dec.input_ids || in.name == f.decoder_encoder_mask ||
                   in.name == f.decoder_hidden_states || in.name == dec.use_cache_branch || in.has_default;
      for (size_t i = 0; i < dec.layers.size(); ++i)
        known |= in.name == dec.layers[i].past_key || in.name == dec.layers[i].past_value ||
                 in.name == f.cross[i].past_key || in.name == f.cross[i].past_value;
      ONYX_CHECK(known, info == &first ? fw : sw, ": input '", in.name,
                 "' has no role onyx knows how to feed (input_ids, encoder_attention_mask, "
                 "encoder_hidden_states, past_key_values.N.decoder/encoder.key/value, use_cache_branch)");
    }
  auto geometry = [&](const std::string& name, int64_t& heads, int64_t& size, DType* dtype) {
    const ValueDesc& past = *find_io(step.inputs, name);
    if (dtype) *dtype = past.dtype;
    if (past.rank_known && past.dims.size() == 4) {
      heads = past.dims[1];
      size = past.dims[3];
    }
    ONYX_CHECK(heads > 0 && size > 0, sw, ": input '", name, "' does not declare its heads and head size (",
               past.type_str(), ")");
  };
  geometry(dec.layers[0].past_key, dec.kv_heads, dec.head_size, &dec.kv_dtype);
  geometry(f.cross[0].past_key, f.cross_heads, f.cross_head_size, nullptr);
  const ValueDesc& logits = *find_io(first.outputs, "logits");
  if (logits.rank_known && !logits.dims.empty() && logits.dims.back() > 0) dec.vocab_size = logits.dims.back();
}

// onnxruntime-genai's Whisper form (its model builder's): genai_config.json names an encoder,
// which reads audio_features and returns every layer's cross-attention keys and values, and one
// decoder, which runs the first run (an empty self-attention past) and the steps; the log-mel
// front end's settings come from preprocessor_config.json or audio_processor_config.json.
void read_genai_components(EncoderDecoderFolder& f, const fs::path& d, const std::string& dir) {
  ModelFolder& dec = f.decoder;
  dec.source = "onnxruntime-genai's encoder-decoder form (genai_config.json with model.encoder)";
  const fs::path config = d / "genai_config.json";
  with_context("genai_config.json", [&] { read_genai_config(dec, config); });
  Json doc = read_json_file(config.string());
  JsonNode root(doc, "genai_config.json");
  JsonNode model = root.at("model");
  const std::string type = model.string_or("type", "");
  ONYX_CHECK(type == "whisper", "genai_config.json: model.type is '", type,
             "'; onyx reads onnxruntime-genai encoder-decoder folders of type 'whisper'");
  f.genai = true;
  f.audio = true;
  f.first_path = f.step_path = dec.decoder_path;
  JsonNode e = model.at("encoder"), dj = model.at("decoder");
  f.encoder_path = (d / e.at("filename").as_string()).string();
  auto name = [](const JsonNode& n, const char* key, const char* fallback) {
    if (n.is_null() || !n.has(key) || n.at(key).is_null()) return std::string(fallback);
    return n.at(key).as_string();
  };
  JsonNode ein = e.get("inputs"), eout = e.get("outputs"), din = dj.get("inputs");
  f.encoder_input = name(ein, "audio_features", "audio_features");
  f.encoder_output = name(eout, "encoder_hidden_states", "");
  const std::string ck = name(eout, "cross_present_key_names", "present_key_cross_%d");
  const std::string cv = name(eout, "cross_present_value_names", "present_value_cross_%d");
  const std::string pk = name(din, "cross_past_key_names", "past_key_cross_%d");
  const std::string pv = name(din, "cross_past_value_names", "past_value_cross_%d");
  for (int i = 0; i < static_cast<int>(dec.layers.size()); ++i)
    f.cross.push_back({format_name(pk, i), format_name(pv, i), format_name(ck, i), format_name(cv, i)});
  ONYX_CHECK(fs::exists(d / "generation_config.json"),
             "has no generation_config.json, which a Whisper folder needs for the decoder's prompt (its languages "
             "and tasks) and the suppressed tokens; onnxruntime-genai's builder does not copy it: put the Hugging "
             "Face model's generation_config.json beside genai_config.json");
  f.audio_features = fs::exists(d / "preprocessor_config.json") ? AudioFeatureConfig::from_folder(dir)
                                                                : AudioFeatureConfig::from_genai_folder(dir);

  const std::string ew = cat("encoder '", fs::path(f.encoder_path).filename().string(), "'");
  const std::string dw = cat("decoder '", fs::path(f.first_path).filename().string(), "'");
  ONYX_CHECK(fs::exists(f.encoder_path), "genai_config.json names the encoder '", f.encoder_path,
             "', which does not exist");
  ONYX_CHECK(fs::exists(f.first_path), "genai_config.json names the decoder '", f.first_path,
             "', which does not exist");
  const ModelInfo enc = inspect_model(f.encoder_path);
  const ModelInfo dm = inspect_model(f.first_path);
  const ValueDesc* features = find_io(enc.inputs, f.encoder_input);
  ONYX_CHECK(features, ew, " has no input '", f.encoder_input, "' (the audio's log-mel features)");
  ONYX_CHECK(features->dtype == DType::kFloat32 || features->dtype == DType::kFloat16, ew, ": ", f.encoder_input,
             " is ", features->type_str(), ", expected float32 or float16");
  for (const auto& in : enc.inputs)
    ONYX_CHECK(in.name == f.encoder_input || in.has_default, ew, ": input '", in.name,
               "' has no role onyx knows how to feed (", f.encoder_input, ")");
  if (!f.encoder_output.empty() && !find_io(enc.outputs, f.encoder_output)) f.encoder_output.clear();
  for (const auto& c : f.cross)
    for (const std::string* n : {&c.present_key, &c.present_value})
      ONYX_CHECK(find_io(enc.outputs, *n), ew, " has no output '", *n, "' (a layer's cross-attention cache)");
  need_input(dm, dw, dec.input_ids, "the decoder's token ids");
  ONYX_CHECK(find_io(dm.outputs, dec.logits), dw, " has no output '", dec.logits, "'");
  // The decoder reads no mask and no positions: those genai_config.json defaults do not apply.
  if (!find_io(dm.inputs, dec.attention_mask)) dec.attention_mask.clear();
  if (!find_io(dm.inputs, dec.position_ids)) dec.position_ids.clear();
  for (size_t i = 0; i < dec.layers.size(); ++i) {
    for (const std::string* n : {&dec.layers[i].past_key, &dec.layers[i].past_value, &f.cross[i].past_key,
                                 &f.cross[i].past_value})
      need_input(dm, dw, *n, "a layer's cache");
    for (const std::string* n : {&dec.layers[i].present_key, &dec.layers[i].present_value})
      ONYX_CHECK(find_io(dm.outputs, *n), dw, " has no output '", *n, "' (a layer's self-attention cache)");
  }
  for (const auto& in : dm.inputs) {
    bool known = in.name == dec.input_ids || in.name == dec.attention_mask || in.name == dec.position_ids ||
                 in.has_default;
    for (size_t i = 0; i < dec.layers.size(); ++i)
      known |= in.name == dec.layers[i].past_key || in.name == dec.layers[i].past_value ||
               in.name == f.cross[i].past_key || in.name == f.cross[i].past_value;
    ONYX_CHECK(known, dw, ": input '", in.name, "' has no role onyx knows how to feed");
  }
  auto geometry = [&](const std::string& n, int64_t& heads, int64_t& size, DType* dtype) {
    const ValueDesc& past = *find_io(dm.inputs, n);
    if (dtype) *dtype = past.dtype;
    if (past.rank_known && past.dims.size() == 4) {
      if (past.dims[1] > 0) heads = past.dims[1];
      if (past.dims[3] > 0) size = past.dims[3];
    }
    ONYX_CHECK(heads > 0 && size > 0, dw, ": input '", n, "' does not declare its heads and head size (",
               past.type_str(), ")");
  };
  geometry(dec.layers[0].past_key, dec.kv_heads, dec.head_size, &dec.kv_dtype);
  f.cross_heads = dec.kv_heads;
  f.cross_head_size = dec.head_size;
  geometry(f.cross[0].past_key, f.cross_heads, f.cross_head_size, nullptr);
  const ValueDesc& logits = *find_io(dm.outputs, dec.logits);
  if (logits.rank_known && !logits.dims.empty() && logits.dims.back() > 0) dec.vocab_size = logits.dims.back();
}

}  // namespace

EncoderDecoderFolder load_encoder_decoder_folder(const std::string& dir) {
  return with_context(cat("model folder '", dir, "'"), [&] {
    ONYX_CHECK(fs::is_directory(dir), "is not a folder");
    const fs::path d(dir);
    EncoderDecoderFolder f;
    ModelFolder& dec = f.decoder;
    dec.dir = dir;
    if (fs::exists(d / "encoder_model.onnx")) read_optimum_components(f, d, dir);
    else read_genai_components(f, d, dir);

    // config.json / generation_config.json: ids, context, search defaults, the start token.
    int64_t num_heads = 0, hidden = 0;
    read_hf_configs(dec, num_heads, hidden);
    // generation_config.json first, as transformers reads them.
    auto id_in_configs = [&](const char* key) {
      for (const char* file : {"generation_config.json", "config.json"}) {
        if (!fs::exists(d / file)) continue;
        Json doc = read_json_file((d / file).string());
        JsonNode c(doc, file);
        if (c.has(key) && !c.at(key).is_null()) return c.at(key).as_int();
      }
      return int64_t{-1};
    };
    const int64_t start = id_in_configs("decoder_start_token_id");
    f.forced_bos_id = id_in_configs("forced_bos_token_id");
    // Logit processors and a speech decoder's prompt (generation_config.json).
    if (fs::exists(d / "generation_config.json")) {
      Json doc = read_json_file((d / "generation_config.json").string());
      JsonNode g(doc, "generation_config.json");
      auto ids = [&](const char* key) {
        std::vector<int64_t> out;
        if (g.has(key) && !g.at(key).is_null()) out = json_ids(g.at(key));
        for (int64_t id : out)
          ONYX_CHECK(id >= 0 && (dec.vocab_size <= 0 || id < dec.vocab_size), "generation_config.json: ", key,
                     " holds id ", id, ", outside the vocabulary of ", dec.vocab_size);
        return out;
      };
      f.suppress_ids = ids("suppress_tokens");
      f.begin_suppress_ids = ids("begin_suppress_tokens");
      auto names = [&](const char* key) {
        std::vector<std::pair<std::string, int64_t>> out;
        if (!g.has(key) || g.at(key).is_null()) return out;
        JsonNode m = g.at(key);
        m.expect_object();
        for (const auto& [name, v] : m.value().items())
          out.emplace_back(name, JsonNode(v, cat(m.path(), "/", name)).as_int());
        return out;
      };
      f.lang_to_id = names("lang_to_id");
      f.task_to_id = names("task_to_id");
      f.no_timestamps_id = g.int_or("no_timestamps_token_id", -1);
      if (g.has("forced_decoder_ids") && !g.at("forced_decoder_ids").is_null()) {
        JsonNode forced = g.at("forced_decoder_ids");
        forced.expect_array();
        for (size_t i = 0; i < forced.size(); ++i) {
          JsonNode pair = forced.at(i);
          pair.expect_array();
          ONYX_CHECK(pair.size() == 2, pair.path(), ": expected [position, id]");
          // Only the run from position 1 on is a prompt (as transformers reads it).
          if (pair.at(size_t{0}).as_int() != static_cast<int64_t>(f.forced_prefix.size()) + 1) break;
          f.forced_prefix.push_back(pair.at(1).is_null() ? -1 : pair.at(1).as_int());
        }
      }
    }
    if (fs::exists(d / "config.json")) {
      Json doc = read_json_file((d / "config.json").string());
      JsonNode c(doc, "config.json");
      f.model_type = c.string_or("model_type", "");
      if (c.has("n_positions") && !c.at("n_positions").is_null()) f.encoder_context = c.at("n_positions").as_int();
      if (c.has("max_position_embeddings") && !c.at("max_position_embeddings").is_null())
        f.encoder_context = c.at("max_position_embeddings").as_int();
    }
    ONYX_CHECK(start >= 0, "neither generation_config.json nor config.json names decoder_start_token_id, the "
               "token the decoder starts from");
    ONYX_CHECK(dec.vocab_size <= 0 || start < dec.vocab_size, "decoder_start_token_id ", start,
               " is outside the vocabulary of ", dec.vocab_size);
    f.decoder_start_id = start;
    if (!dec.context_length) dec.context_length = 2048;
    if (f.genai) f.encoder_context = 0;
    if (f.audio && fs::exists(d / "config.json")) {
      // A speech decoder's positions: config.json's max_target_positions (Whisper's 448).
      Json doc = read_json_file((d / "config.json").string());
      JsonNode c(doc, "config.json");
      if (c.has("max_target_positions") && !c.at("max_target_positions").is_null())
        dec.context_length = c.at("max_target_positions").as_int();
      f.encoder_context = 0;
    }
    ONYX_CHECK(!dec.eos_ids.empty(), "neither generation_config.json nor config.json names eos_token_id");
    return f;
  });
}

namespace {

int64_t token_by_name(const std::vector<std::pair<std::string, int64_t>>& table, const std::string& name) {
  for (const auto& [n, id] : table)
    if (n == name) return id;
  return -1;
}

std::string known_names(const std::vector<std::pair<std::string, int64_t>>& table) {
  std::string s;
  for (size_t i = 0; i < table.size() && i < 120; ++i) s += (i ? ", " : "") + table[i].first;
  if (table.size() > 120) s += ", ...";
  return s;
}

bool is_task_id(const EncoderDecoderFolder& f, int64_t id) {
  for (const auto& [n, t] : f.task_to_id)
    if (t == id) return true;
  return false;
}

}  // namespace

bool speech_needs_language(const EncoderDecoderFolder& f, const std::string& language) {
  return language.empty() && !f.lang_to_id.empty() && (f.forced_prefix.empty() || f.forced_prefix[0] < 0);
}

std::vector<int64_t> speech_prompt(const EncoderDecoderFolder& f, const std::string& language,
                                   const std::string& task, int64_t detected) {
  std::vector<int64_t> p{f.decoder_start_id};
  p.insert(p.end(), f.forced_prefix.begin(), f.forced_prefix.end());
  int64_t lang = -1;
  if (!language.empty()) {
    ONYX_CHECK(!f.lang_to_id.empty(), "this model names no languages (generation_config.json has no lang_to_id): "
               "it takes no language");
    const std::string token = language.rfind("<|", 0) == 0 ? language : cat("<|", language, "|>");
    lang = token_by_name(f.lang_to_id, token);
    ONYX_CHECK(lang >= 0, "unknown language '", language, "'; this model knows ", known_names(f.lang_to_id));
  } else if (speech_needs_language(f, language)) {
    ONYX_CHECK(detected >= 0, "no language given and none detected");
    lang = detected;
  }
  if (lang >= 0) {
    if (p.size() > 1) p[1] = lang;
    else p.push_back(lang);
  }
  if (!task.empty()) {
    const int64_t t = token_by_name(f.task_to_id, task);
    ONYX_CHECK(t >= 0, "unknown task '", task, "'",
               f.task_to_id.empty() ? std::string(": this model names no tasks")
                                    : cat("; this model knows ", known_names(f.task_to_id)));
    auto at = std::find_if(p.begin() + 1, p.end(), [&](int64_t id) { return is_task_id(f, id); });
    if (at != p.end()) *at = t;
    else p.push_back(t);
  } else if (!language.empty() && !f.task_to_id.empty() &&
             std::none_of(p.begin(), p.end(), [&](int64_t id) { return is_task_id(f, id); })) {
    p.push_back(token_by_name(f.task_to_id, "transcribe"));
  }
  if (f.no_timestamps_id >= 0 && p.back() != f.no_timestamps_id) p.push_back(f.no_timestamps_id);
  p.erase(std::remove(p.begin(), p.end(), int64_t{-1}), p.end());
  return p;
}

}  // namespace onyx::genai
