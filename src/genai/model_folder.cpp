#include "genai/model_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "genai/json_util.h"
#include "onyx/session.h"

namespace onyx::genai {

namespace fs = std::filesystem;

Json read_json_file(const std::string& path) {
  const fs::path p(path);
  std::ifstream in(p);
  ONYX_CHECK(in, "cannot read '", p.string(), "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return Json::parse(ss.str());
  } catch (const std::exception& e) {
    throw Error(cat("'", p.string(), "' is not valid JSON: ", e.what()));
  }
}

// A JSON number or list of numbers (eos_token_id takes both).
std::vector<int64_t> json_ids(const JsonNode& n) {
  std::vector<int64_t> out;
  if (n.is_null()) return out;
  if (n.is_array()) {
    for (size_t i = 0; i < n.size(); ++i) out.push_back(n.at(i).as_int());
    return out;
  }
  out.push_back(n.as_int());
  return out;
}

namespace {

int64_t int_or(const JsonNode& n, const char* key, int64_t fallback) {
  JsonNode v = n.get(key);
  return v.is_null() ? fallback : v.as_int();
}

double number_or(const JsonNode& n, const char* key, double fallback) {
  JsonNode v = n.get(key);
  return v.is_null() ? fallback : v.as_number();
}

}  // namespace

std::string format_name(const std::string& pattern, int layer) {
  size_t at = pattern.find("%d");
  ONYX_CHECK(at != std::string::npos, "name template '", pattern, "' has no %d for the layer number");
  return pattern.substr(0, at) + std::to_string(layer) + pattern.substr(at + 2);
}

namespace {

// The decoder file of a folder without genai_config.json.
fs::path find_decoder(const fs::path& dir) {
  for (const char* name : {"decoder_model_merged.onnx", "model.onnx", "decoder_model.onnx"})
    if (fs::exists(dir / name)) return dir / name;
  std::vector<fs::path> onnx;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".onnx") onnx.push_back(e.path());
  ONYX_CHECK(!onnx.empty(), "no genai_config.json and no .onnx file");
  if (onnx.size() > 1) {
    std::string names;
    for (const auto& p : onnx) names += (names.empty() ? "" : ", ") + p.filename().string();
    throw Error(cat("no genai_config.json, and which of its .onnx files is the decoder is ambiguous (", names,
                    "); name it in genai_config.json"));
  }
  return onnx[0];
}

// Past/present names by layer, as Optimum, torch.onnx and the builder spell them.
void infer_cache_names(ModelFolder& f, const ModelInfo& info) {
  static const std::regex kPast(R"((past_key_values|past)\.(\d+)\.(key|value))");
  static const std::regex kPresent(R"((present|present_key_values)\.(\d+)\.(key|value))");
  std::map<int, CacheNames> layers;
  std::smatch m;
  for (const auto& in : info.inputs)
    if (std::regex_match(in.name, m, kPast))
      (m[3] == "key" ? layers[std::stoi(m[2])].past_key : layers[std::stoi(m[2])].past_value) = in.name;
  for (const auto& out : info.outputs)
    if (std::regex_match(out.name, m, kPresent))
      (m[3] == "key" ? layers[std::stoi(m[2])].present_key : layers[std::stoi(m[2])].present_value) = out.name;
  for (auto& [i, l] : layers) {
    ONYX_CHECK(i == static_cast<int>(f.layers.size()), "the decoder's cache names skip layer ", f.layers.size());
    f.layers.push_back(l);
  }
}

const ValueDesc* find_io(const std::vector<ValueDesc>& list, const std::string& name) {
  for (const auto& d : list)
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace

void read_genai_config(ModelFolder& f, const fs::path& path) {
  Json doc = read_json_file(path);
  JsonNode root(doc, "");
  JsonNode model = root.at("model");
  JsonNode decoder = model.at("decoder");
  f.decoder_path = (fs::path(f.dir) / decoder.at("filename").as_string()).string();
  JsonNode inputs = decoder.get("inputs"), outputs = decoder.get("outputs");
  auto name = [](const JsonNode& n, const char* key, const char* fallback) {
    JsonNode v = n.get(key);
    return v.is_null() ? std::string(fallback) : v.as_string();
  };
  f.input_ids = name(inputs, "input_ids", "input_ids");
  f.attention_mask = name(inputs, "attention_mask", "attention_mask");
  f.position_ids = name(inputs, "position_ids", "position_ids");
  f.logits = name(outputs, "logits", "logits");
  const std::string pk = name(inputs, "past_key_names", "past_key_values.%d.key");
  const std::string pv = name(inputs, "past_value_names", "past_key_values.%d.value");
  const std::string qk = name(outputs, "present_key_names", "present.%d.key");
  const std::string qv = name(outputs, "present_value_names", "present.%d.value");
  const int64_t layers = decoder.at("num_hidden_layers").as_int();
  ONYX_CHECK(layers > 0 && layers < 100000, "num_hidden_layers ", layers, " is not a layer count");
  for (int i = 0; i < layers; ++i)
    f.layers.push_back({format_name(pk, i), format_name(pv, i), format_name(qk, i), format_name(qv, i)});
  f.kv_heads = int_or(decoder, "num_key_value_heads", 0);
  f.head_size = int_or(decoder, "head_size", 0);
  f.context_length = int_or(model, "context_length", 0);
  f.vocab_size = int_or(model, "vocab_size", 0);
  f.bos_id = int_or(model, "bos_token_id", -1);
  f.pad_id = int_or(model, "pad_token_id", -1);
  f.eos_ids = json_ids(model.get("eos_token_id"));
  if (model.has("vision") || model.has("embedding")) {
    // A vision-language pipeline: both components, the decoder reading embeddings.
    f.has_vision = true;
    VisionFolder& v = f.vision;
    JsonNode vision = model.at("vision"), embedding = model.at("embedding");
    v.vision_path = (fs::path(f.dir) / vision.at("filename").as_string()).string();
    v.embedding_path = (fs::path(f.dir) / embedding.at("filename").as_string()).string();
    JsonNode vin = vision.get("inputs"), vout = vision.get("outputs");
    JsonNode ein = embedding.get("inputs"), eout = embedding.get("outputs");
    v.pixel_values = name(vin, "pixel_values", "pixel_values");
    v.vision_features = name(vout, "image_features", "image_features");
    v.embedding_ids = name(ein, "input_ids", "input_ids");
    v.embedding_features = name(ein, "image_features", "image_features");
    v.embedding_output = name(eout, "inputs_embeds", "inputs_embeds");
    v.decoder_embeds = name(inputs, "inputs_embeds", "inputs_embeds");
    v.image_token_id = int_or(model, "image_token_id", -1);
    f.input_ids = v.embedding_ids;
  }
  JsonNode search = root.get("search");
  if (!search.is_null()) {
    f.search.do_sample = search.has("do_sample") && search.at("do_sample").as_bool();
    f.search.temperature = number_or(search, "temperature", 1.0);
    f.search.top_k = static_cast<int>(int_or(search, "top_k", 50));
    f.search.top_p = number_or(search, "top_p", 1.0);
    if (f.search.top_p <= 0) f.search.top_p = 1.0;  // onnxruntime-genai writes 0 for "off"
    f.search.repetition_penalty = number_or(search, "repetition_penalty", 1.0);
    f.search.max_length = int_or(search, "max_length", 0);
    f.shared_buffer = search.has("past_present_share_buffer") && search.at("past_present_share_buffer").as_bool();
  }
}

void read_hf_configs(ModelFolder& f, int64_t& num_heads, int64_t& hidden) {
  fs::path dir(f.dir);
  if (fs::exists(dir / "config.json")) {
    Json doc = read_json_file(dir / "config.json");
    JsonNode c(doc, "");
    if (!f.kv_heads) f.kv_heads = int_or(c, "num_key_value_heads", int_or(c, "num_attention_heads", 0));
    num_heads = int_or(c, "num_attention_heads", 0);
    hidden = int_or(c, "hidden_size", 0);
    if (!f.head_size) f.head_size = int_or(c, "head_dim", 0);
    if (!f.vocab_size) f.vocab_size = int_or(c, "vocab_size", 0);
    if (!f.context_length) f.context_length = int_or(c, "max_position_embeddings", 0);
    if (f.bos_id < 0) f.bos_id = int_or(c, "bos_token_id", -1);
    if (f.pad_id < 0) f.pad_id = int_or(c, "pad_token_id", -1);
    if (f.eos_ids.empty()) f.eos_ids = json_ids(c.get("eos_token_id"));
    if (f.has_vision && f.vision.image_token_id < 0)
      f.vision.image_token_id = int_or(c, "image_token_index", int_or(c, "image_token_id", -1));
    // A vision-language model's config.json keeps the decoder's facts under text_config.
    JsonNode text = c.get("text_config");
    if (!text.is_null() && text.is_object()) {
      if (!f.kv_heads) f.kv_heads = int_or(text, "num_key_value_heads", int_or(text, "num_attention_heads", 0));
      if (!num_heads) num_heads = int_or(text, "num_attention_heads", 0);
      if (!hidden) hidden = int_or(text, "hidden_size", 0);
      if (!f.head_size) f.head_size = int_or(text, "head_dim", 0);
      if (!f.vocab_size) f.vocab_size = int_or(text, "vocab_size", 0);
      if (!f.context_length) f.context_length = int_or(text, "max_position_embeddings", 0);
    }
  }
  if (fs::exists(dir / "generation_config.json")) {
    Json doc = read_json_file(dir / "generation_config.json");
    JsonNode g(doc, "");
    if (f.eos_ids.empty()) f.eos_ids = json_ids(g.get("eos_token_id"));
    if (f.source != "genai_config.json") {
      f.search.do_sample = g.has("do_sample") && g.at("do_sample").as_bool();
      f.search.temperature = number_or(g, "temperature", f.search.temperature);
      f.search.top_k = static_cast<int>(int_or(g, "top_k", f.search.top_k));
      f.search.top_p = number_or(g, "top_p", f.search.top_p);
      f.search.repetition_penalty = number_or(g, "repetition_penalty", f.search.repetition_penalty);
    }
  }
}

namespace {

// Every role the folder names must be in the decoder, and the cache geometry known.
void check_against_decoder(ModelFolder& f, const ModelInfo& info, int64_t num_heads, int64_t hidden) {
  const std::string where = cat("decoder '", fs::path(f.decoder_path).filename().string(), "'");
  if (f.has_vision)
    ONYX_CHECK(find_io(info.inputs, f.vision.decoder_embeds), where, " has no input '", f.vision.decoder_embeds,
               "' (the embeddings the embedding model makes)");
  else
    ONYX_CHECK(find_io(info.inputs, f.input_ids), where, " has no input '", f.input_ids,
               "' (the token ids); its inputs are the roles onyx feeds");
  ONYX_CHECK(find_io(info.outputs, f.logits), where, " has no output '", f.logits, "'");
  if (!find_io(info.inputs, f.attention_mask)) f.attention_mask.clear();
  if (!find_io(info.inputs, f.position_ids)) f.position_ids.clear();
  if (find_io(info.inputs, "use_cache_branch")) f.use_cache_branch = "use_cache_branch";
  ONYX_CHECK(!f.layers.empty(), where, " has no past/present cache inputs and outputs (past_key_values.N.key, "
             "present.N.key): onyx generates with a KV cache");
  for (size_t i = 0; i < f.layers.size(); ++i) {
    const CacheNames& l = f.layers[i];
    for (const std::string* n : {&l.past_key, &l.past_value})
      ONYX_CHECK(!n->empty() && find_io(info.inputs, *n), where, ": layer ", i, " has no cache input '", *n, "'");
    for (const std::string* n : {&l.present_key, &l.present_value})
      ONYX_CHECK(!n->empty() && find_io(info.outputs, *n), where, ": layer ", i, " has no cache output '", *n, "'");
  }
  const ValueDesc& past = *find_io(info.inputs, f.layers[0].past_key);
  f.kv_dtype = past.dtype;
  if (past.rank_known && past.dims.size() == 4) {
    if (past.dims[1] > 0) f.kv_heads = past.dims[1];
    if (past.dims[3] > 0) f.head_size = past.dims[3];
  }
  if (!f.head_size && num_heads > 0 && hidden > 0) f.head_size = hidden / num_heads;
  ONYX_CHECK(f.kv_heads > 0 && f.head_size > 0, where, ": the cache's KV heads and head size are not in its "
             "declared shapes, genai_config.json or config.json");
  const ValueDesc& logits = *find_io(info.outputs, f.logits);
  if (logits.rank_known && !logits.dims.empty() && logits.dims.back() > 0) f.vocab_size = logits.dims.back();
}

// The vision and embedding models have the roles the folder names, and the images their
// preprocessing and token.
void check_vision(ModelFolder& f) {
  VisionFolder& v = f.vision;
  const ModelInfo vision = with_context(cat("vision model '", v.vision_path, "'"), [&] { return inspect_model(v.vision_path); });
  const std::string vw = cat("vision model '", fs::path(v.vision_path).filename().string(), "'");
  ONYX_CHECK(find_io(vision.inputs, v.pixel_values), vw, " has no input '", v.pixel_values, "'");
  ONYX_CHECK(find_io(vision.outputs, v.vision_features), vw, " has no output '", v.vision_features, "'");
  for (const auto& in : vision.inputs)
    ONYX_CHECK(in.name == v.pixel_values, vw, " has an input '", in.name, "' onyx does not know how to feed (it feeds "
               "the preprocessed images, '", v.pixel_values, "')");
  const ModelInfo embedding =
      with_context(cat("embedding model '", v.embedding_path, "'"), [&] { return inspect_model(v.embedding_path); });
  const std::string ew = cat("embedding model '", fs::path(v.embedding_path).filename().string(), "'");
  ONYX_CHECK(find_io(embedding.inputs, v.embedding_ids), ew, " has no input '", v.embedding_ids, "'");
  ONYX_CHECK(find_io(embedding.inputs, v.embedding_features), ew, " has no input '", v.embedding_features, "'");
  ONYX_CHECK(find_io(embedding.outputs, v.embedding_output), ew, " has no output '", v.embedding_output, "'");
  ONYX_CHECK(v.image_token_id >= 0, "the image token's id is not in genai_config.json (model.image_token_id) or "
             "config.json (image_token_index)");
  ONYX_CHECK(f.vocab_size <= 0 || v.image_token_id < f.vocab_size, "the image token's id ", v.image_token_id,
             " is outside the vocabulary of ", f.vocab_size);
  v.processor_path = (fs::path(f.dir) / "preprocessor_config.json").string();
  ONYX_CHECK(fs::exists(v.processor_path), "no preprocessor_config.json (the images' preprocessing, as Hugging "
             "Face's image processors save it)");
}

}  // namespace

ModelFolder load_model_folder(const std::string& dir) {
  return with_context(cat("model folder '", dir, "'"), [&] {
    ONYX_CHECK(fs::is_directory(dir), "is not a folder");
    ModelFolder f;
    f.dir = dir;
    const fs::path config = fs::path(dir) / "genai_config.json";
    ModelInfo info;
    if (fs::exists(config)) {
      f.source = "genai_config.json";
      with_context("genai_config.json", [&] { read_genai_config(f, config); });
      info = inspect_model(f.decoder_path);
    } else {
      f.source = "inferred from the decoder";
      f.decoder_path = find_decoder(dir).string();
      info = inspect_model(f.decoder_path);
      f.input_ids = "input_ids";
      f.attention_mask = "attention_mask";
      f.position_ids = "position_ids";
      f.logits = "logits";
      infer_cache_names(f, info);
      f.shared_buffer = info.summary.op_histogram.count("com.microsoft::GroupQueryAttention") > 0;
    }
    int64_t num_heads = 0, hidden = 0;
    read_hf_configs(f, num_heads, hidden);
    check_against_decoder(f, info, num_heads, hidden);
    if (f.has_vision) check_vision(f);
    if (!f.context_length) f.context_length = 2048;
    return f;
  });
}

}  // namespace onyx::genai
