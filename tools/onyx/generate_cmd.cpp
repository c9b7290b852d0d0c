// onyx generate DIR: text from a language-model folder, streamed as it decodes, then the
// figures of the run (or, with --json, one JSON object).
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "onyx/npy.h"
#include "genai/encoder_decoder_model.h"
#include "genai/generator.h"
#include "onyx/communicator.h"
#include "onyx/device.h"
#include "genai/image.h"

namespace onyx::cli {

namespace {

constexpr const char* kGenerateUsage = R"(usage: onyx generate DIR [prompt] [options]

DIR: a decoder-only folder (onnxruntime-genai's genai_config.json, or an Optimum/torch.onnx
export), or an encoder-decoder export (encoder_model.onnx with decoder_model.onnx and
decoder_with_past_model.onnx, or decoder_model_merged.onnx: T5, BART, Whisper); docs/pipelines.md

prompt (one of):
  --prompt TEXT                 the prompt
  --prompt-file FILE            the prompt, from a file
  --prompt-ids "1 2 3"          the prompt as token ids (no tokenizer needed)
  --prompts-file FILE           a batch: JSON lines, each {"prompt": TEXT} or {"prompt_ids": [...]}
  --audio FILE                  a speech model's (Whisper's) input: WAV, FLAC, Ogg, MP3, ... at any
                                rate, up to the model's window (30 s); repeat for a batch
  --language L                  the audio's language ("en" or "<|en|>"; default: detected, as
                                transformers does, when the model knows languages)
  --task transcribe|translate   a speech model's task (default: the model's, or transcribe)
  --image FILE                  a vision-language model's image (JPEG, PNG, TIFF, WebP, BMP, ...),
                                placed at the prompt's next image token (LLaVA's "<image>"); repeat
                                for more images in the one prompt

options:
  --max-new-tokens N            tokens to generate at most (default: the folder's max_length
                                less the prompt, at most 128)
  --temperature T  --top-k K  --top-p P  --min-p M
                                sampling (any of them turns sampling on; --greedy turns it off)
  --repetition-penalty R        > 1: tokens of the prompt or generated already are less likely
  --presence-penalty P  --frequency-penalty F
                                OpenAI's penalties, in [-2, 2], on the tokens generated already:
                                a token's logit less P once it occurs, less F per occurrence
  --seed N                      seed of the sampler (default 0: reproducible)
  --stop TEXT                   stop when TEXT appears (repeatable; not part of the output)
  --no-special                  encode the prompt without the tokenizer's special tokens
  --kv-capacity N               positions the KV cache starts with (default: the prompt and
                                --max-new-tokens); a full cache grows by 64 positions
  --device DEVICE               cpu (default), cuda or cuda:N
  --fuse-attention on|off|auto  the attention fusion (auto, the default: on CUDA devices only)
  --fuse-rotary-cache on|off|auto
                                a layer's rotary embeddings and KV-cache writes as one node (auto, the
                                default: on CUDA devices only; it needs the attention fusion)
  --fuse-rotary-attention on|off|auto
                                a layer's rotary embeddings, in-place KV-cache writes and attention as
                                one node, one CUDA kernel for a decode step (auto, the default: on CUDA
                                devices only; it needs the rotary-cache fusion)
  --position-tables on|off      the rotary cos and sin that transformers' exports compute from the
                                positions, made once at load for every position and gathered each step
                                (default on; docs/genai.md)
  --intra-op-threads N          threads of the CPU kernels (default 0: every CPU this process may use)
  --tensor-parallel N           split the decoder over N ranks, each a thread of this process with its
                                share of the heads and the MLP (onnxruntime-genai builder folders;
                                docs/tensor-parallel.md); the tokens are those of one rank. On the
                                CPU the ranks share its cores; with --device cuda:K rank r runs on
                                cuda:K+r and the ranks are joined by NCCL (libnccl.so.2, or the file
                                ONYX_NCCL_LIBRARY names)
  --capture off|auto|require    on a GPU, replay decode steps from CUDA graphs (default auto)
  --no-run-ahead                on a GPU, launch each decode step only once the step before it has
                                given its tokens to the host (default: launch it before, fed them on
                                the device; the tokens are the same)
  --memory-report               print the memory governor's holders after the run (a pipeline:
                                per component, its weights, arena and KV cache)
  --memory-budget BYTES         on a GPU, the device memory the model may hold; an
                                encoder-decoder pipeline's budget on the CPU too (a pipeline
                                whose weights do not fit is refused at load)
  --json                        print one JSON object instead of streaming
  --logits-out FILE             write the logits each token of the (first) sequence was drawn
                                from as .npy, float32 [tokens, vocabulary]
  --growing-cache               keep the KV cache as the decoder was exported (each step's present
                                is the next step's past: one shape a step, never captured), for
                                comparison with the fixed-capacity form onyx chooses
  --verify-cache STEPS          instead of generating: run STEPS greedy steps with the cache as
                                onyx keeps it and again as the decoder was exported, and print
                                the largest logit difference per step (exit 1 above 1e-4)
)";

std::atomic<bool> g_interrupt{false};
extern "C" void on_sigint(int) {
  g_interrupt.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the program at once
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ONYX_CHECK(in, "cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) ids.push_back(to_int(word));
  return ids;
}

struct GenerateArgs {
  std::string dir;
  std::vector<std::string> texts;            // prompts as text
  std::vector<std::vector<int64_t>> id_prompts;  // prompts as ids (in order with texts: see `order`)
  std::vector<std::pair<bool, size_t>> order;    // (is ids, index) per prompt
  genai::SearchOptions search;
  bool max_new_given = false, sampling_given = false, greedy = false;
  bool special = true, json = false, memory_report = false;
  int64_t verify_steps = -1;
  bool growing_cache = false;
  std::string logits_out;
  std::vector<std::string> audio;
  std::vector<std::string> images;
  std::string language, task;
  int tensor_parallel = 1;
  SessionOptions session;
};

GenerateArgs parse(const std::vector<std::string>& args) {
  GenerateArgs g;
  g.session.capture = CaptureMode::kAuto;
  Args a(args);
  ONYX_CHECK(!a.done(), "generate needs a model folder");
  g.dir = a.next();
  auto number = [&](const std::string& s) {
    try {
      size_t pos = 0;
      double v = std::stod(s, &pos);
      if (pos == s.size()) return v;
    } catch (...) {
    }
    throw UsageError(cat("'", s, "' is not a number"));
  };
  auto add_text = [&](std::string t) {
    g.order.push_back({false, g.texts.size()});
    g.texts.push_back(std::move(t));
  };
  auto add_ids = [&](std::vector<int64_t> ids) {
    g.order.push_back({true, g.id_prompts.size()});
    g.id_prompts.push_back(std::move(ids));
  };
  while (!a.done()) {
    const std::string& opt = a.next();
    if (opt == "--prompt") add_text(a.value());
    else if (opt == "--prompt-file") add_text(read_file(a.value()));
    else if (opt == "--prompt-ids") add_ids(parse_ids(a.value()));
    else if (opt == "--prompts-file") {
      std::istringstream lines(read_file(a.value()));
      std::string line;
      for (int n = 1; std::getline(lines, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        with_context(cat("--prompts-file line ", n), [&] {
          nlohmann::json j;
          try {
            j = nlohmann::json::parse(line);
          } catch (const std::exception& e) {
            throw Error(cat("not JSON: ", e.what()));
          }
          if (j.contains("prompt_ids")) add_ids(j.at("prompt_ids").get<std::vector<int64_t>>());
          else if (j.contains("prompt")) add_text(j.at("prompt").get<std::string>());
          else throw Error("needs \"prompt\" or \"prompt_ids\"");
        });
      }
    } else if (opt == "--max-new-tokens") {
      g.search.max_new_tokens = to_int(a.value());
      g.max_new_given = true;
    } else if (opt == "--temperature") g.search.temperature = number(a.value()), g.sampling_given = true;
    else if (opt == "--top-k") g.search.top_k = static_cast<int>(to_int(a.value())), g.sampling_given = true;
    else if (opt == "--top-p") g.search.top_p = number(a.value()), g.sampling_given = true;
    else if (opt == "--min-p") g.search.min_p = number(a.value()), g.sampling_given = true;
    else if (opt == "--repetition-penalty") g.search.repetition_penalty = number(a.value());
    else if (opt == "--presence-penalty") g.search.presence_penalty = number(a.value());
    else if (opt == "--frequency-penalty") g.search.frequency_penalty = number(a.value());
    else if (opt == "--greedy") g.greedy = true;
    else if (opt == "--seed") g.search.seed = static_cast<uint64_t>(to_int(a.value()));
    else if (opt == "--stop") g.search.stop.push_back(a.value());
    else if (opt == "--no-special") g.special = false;
    else if (opt == "--kv-capacity") {
      g.search.kv_capacity = to_int(a.value());
      if (g.search.kv_capacity <= 0) throw UsageError("--kv-capacity must be positive");
    }
    else if (opt == "--audio") g.audio.push_back(a.value());
    else if (opt == "--image") g.images.push_back(a.value());
    else if (opt == "--language") g.language = a.value();
    else if (opt == "--task") g.task = a.value();
    else if (opt == "--device") g.session.device = a.value();
    else if (opt == "--fuse-attention" || opt == "--fuse-rotary-cache" || opt == "--fuse-rotary-attention") {
      const std::string v = a.value();
      if (v != "on" && v != "off" && v != "auto") throw UsageError(opt + " takes on, off or auto, got '" + v + "'");
      auto& field = opt == "--fuse-attention"      ? g.session.fuse_attention
                    : opt == "--fuse-rotary-cache" ? g.session.fuse_rotary_cache
                                                   : g.session.fuse_rotary_attention;
      if (v == "auto") field.reset();
      else field = v == "on";
    }
    else if (opt == "--position-tables") {
      const std::string v = a.value();
      if (v != "on" && v != "off") throw UsageError("--position-tables takes on or off, got '" + v + "'");
      g.session.position_tables = v == "on";
    }
    else if (opt == "--intra-op-threads") {
      const int64_t t = to_int(a.value());
      if (t < 0 || t > 4096) throw UsageError("--intra-op-threads takes 0 (every available CPU) to 4096");
      g.session.intra_op_threads = static_cast<int>(t);
    }
    else if (opt == "--tensor-parallel") {
      const int64_t n = to_int(a.value());
      if (n < 1 || n > 64) throw UsageError("--tensor-parallel takes 1 to 64 ranks");
      g.tensor_parallel = static_cast<int>(n);
    }
    else if (opt == "--memory-report") g.memory_report = true;
    else if (opt == "--memory-budget") {
      const int64_t b = to_int(a.value());
      if (b <= 0) throw UsageError("--memory-budget must be positive");
      g.session.memory_budget_bytes = g.session.host_memory_budget_bytes = static_cast<size_t>(b);
    }
    else if (opt == "--json") g.json = true;
    else if (opt == "--logits-out") g.logits_out = a.value(), g.search.return_logits = true;
    else if (opt == "--verify-cache") g.verify_steps = to_int(a.value());
    else if (opt == "--growing-cache") g.growing_cache = true;
    else if (opt == "--no-run-ahead") g.search.run_ahead = false;
    else if (opt == "--capture") {
      std::string m = a.value();
      if (m == "off") g.session.capture = CaptureMode::kOff;
      else if (m == "auto") g.session.capture = CaptureMode::kAuto;
      else if (m == "require") g.session.capture = CaptureMode::kRequire;
      else throw UsageError(cat("--capture takes off, auto or require, not '", m, "'"));
    } else {
      throw UsageError(cat("unknown option '", opt, "'"));
    }
  }
  if (g.order.empty() && g.audio.empty())
    throw UsageError("generate needs a prompt (--prompt, --prompt-file, --prompt-ids or --prompts-file) or, for a "
                     "speech model, --audio");
  if (!g.order.empty() && !g.audio.empty())
    throw UsageError("--audio is a speech model's whole input: give it without a text prompt");
  if (g.audio.empty() && (!g.language.empty() || !g.task.empty()))
    throw UsageError("--language and --task go with --audio (a speech model)");
  if (!g.images.empty() && g.order.size() != 1)
    throw UsageError("--image goes with one prompt (--prompt, --prompt-file or --prompt-ids) that holds its image tokens");
  if (g.search.max_new_tokens < 0) throw UsageError("--max-new-tokens must be >= 0");
  if (g.session.device == "cpu" && g.session.capture == CaptureMode::kAuto) g.session.capture = CaptureMode::kOff;
  return g;
}

// The cache's form (shared, static, growing).
std::string cache_form(genai::TokenModel& m) { return std::string(genai::cache_mode_name(m.cache_mode())); }

std::string cache_note(genai::TokenModel& m) {
  std::string note = m.cache_note();
  if (dynamic_cast<genai::EncoderDecoderModel*>(&m))
    note += cat(note.empty() ? "" : "; ", "encoder-decoder: the cross-attention cache is computed once per request");
  return note;
}

void print_figures(const genai::GenerationStats& s, genai::TokenModel& lm, bool memory_report) {
  const double prefill_tps = s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0;
  const double ms_per_token = s.decode_steps ? 1e3 * s.decode_seconds / s.decode_steps : 0;
  std::fprintf(stderr,
               "\n---\nprompt tokens: %lld; prefill %.2f ms (%.1f tokens/s)\n"
               "generated tokens: %lld; decode %.3f ms/step (%.1f tokens/s over %lld sequence%s)\n",
               static_cast<long long>(s.prompt_tokens), s.prefill_seconds * 1e3, prefill_tps,
               static_cast<long long>(s.generated_tokens), ms_per_token,
               s.decode_seconds > 0 ? s.generated_tokens / s.decode_seconds : 0.0, static_cast<long long>(s.sequences),
               s.sequences == 1 ? "" : "s");
  std::fprintf(stderr, "kv cache: %s, %s", cache_form(lm).c_str(), human_bytes(double(s.kv_cache_bytes)).c_str());
  if (s.kv_cache_grows) std::fprintf(stderr, " (grew %lld times)", static_cast<long long>(s.kv_cache_grows));
  if (!cache_note(lm).empty()) std::fprintf(stderr, " (%s)", cache_note(lm).c_str());
  std::fprintf(stderr, "\ndevice: %s", lm.device().str().c_str());
  if (!lm.device().is_cpu())
    std::fprintf(stderr, "; cuda graphs: %zu captured, %zu replays, %zu eager steps; peak device memory %s",
                 s.capture.captures, s.capture.replays, s.capture.eager_runs,
                 human_bytes(double(lm.peak_device_bytes())).c_str());
  std::fprintf(stderr, "\n");
  if (memory_report) std::fprintf(stderr, "memory report:\n%s", lm.memory_report().c_str());
}

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kGenerateUsage;
    return 0;
  }
  GenerateArgs g = parse(args);
  // Tensor parallelism: rank 0 is `model`, the others are loaded after it (each shards the
  // decoder for itself) and generate on threads of their own.
  std::shared_ptr<Communicator> group;
  std::vector<std::string> rank_devices(g.tensor_parallel, g.session.device);
  if (g.tensor_parallel > 1) {
    ONYX_CHECK(g.verify_steps < 0, "--verify-cache does not take --tensor-parallel");
    rank_devices = tensor_parallel_group(g.tensor_parallel, g.session);
    group = g.session.communicator;
  }
  std::unique_ptr<genai::TokenModel> model = genai::load_token_model(g.dir, g.session);
  std::vector<std::unique_ptr<genai::TokenModel>> other_ranks;
  if (g.tensor_parallel > 1) {
    auto* decoder = dynamic_cast<genai::LanguageModel*>(model.get());
    ONYX_CHECK(decoder && !decoder->folder().has_vision, "--tensor-parallel takes decoder-only language-model "
               "folders; '", g.dir, "' is not one");
    for (int r = 1; r < g.tensor_parallel; ++r) {
      SessionOptions o = g.session;
      o.tensor_parallel_rank = r;
      o.device = rank_devices[r];
      other_ranks.push_back(with_context(cat("tensor-parallel rank ", r), [&] { return genai::load_token_model(g.dir, o); }));
    }
  }
  genai::TokenModel& lm = *model;
  const genai::ModelFolder& f = lm.folder();
  genai::SearchOptions& s = g.search;
  const genai::SearchDefaults& d = f.search;
  if (!g.sampling_given) {  // the folder's defaults, unless the command line chose
    s.do_sample = d.do_sample;
    s.temperature = d.temperature;
    s.top_k = d.top_k;
    s.top_p = d.top_p;
    s.min_p = d.min_p;
  } else {
    s.do_sample = true;
  }
  if (s.repetition_penalty == 1.0) s.repetition_penalty = d.repetition_penalty;
  if (g.greedy) s.do_sample = false;
  std::vector<std::vector<int64_t>> prompts;
  auto* pipeline = dynamic_cast<genai::EncoderDecoderModel*>(model.get());
  const bool speech = pipeline && pipeline->pipeline().audio;
  if (speech && g.audio.empty())
    throw Error(cat("'", g.dir, "' is a speech model (its encoder reads input_features): give it --audio FILE"));
  if (!speech && !g.audio.empty())
    throw Error(cat("'", g.dir, "' is not a speech model (its encoder reads no input_features): --audio does not "
                    "apply"));
  std::vector<Tensor> features_given;  // a speech model's features, for --verify-cache
  if (speech) {
    // Each file's log-mel features, then each sequence's decoder prompt (its language detected
    // first when none is given and the model knows languages).
    const genai::EncoderDecoderFolder& pf = pipeline->pipeline();
    std::vector<Tensor> features;
    for (const auto& file : g.audio)
      features.push_back(with_context(cat("--audio '", file, "'"), [&] {
        return genai::log_mel_spectrogram(genai::read_audio(file, pf.audio_features.sampling_rate),
                                          pf.audio_features);
      }));
    pipeline->set_audio(features);
    features_given = features;
    std::vector<int64_t> detected(g.audio.size(), -1);
    if (genai::speech_needs_language(pf, g.language)) {
      detected = pipeline->detect_languages();
      for (size_t b = 0; b < detected.size(); ++b)
        for (const auto& [name, id] : pf.lang_to_id)
          if (id == detected[b]) std::fprintf(stderr, "%slanguage detected: %s\n",
                                              g.audio.size() > 1 ? cat("[", b, "] ").c_str() : "", name.c_str());
    }
    for (size_t b = 0; b < g.audio.size(); ++b) prompts.push_back(genai::speech_prompt(pf, g.language, g.task, detected[b]));
  }
  for (auto [is_ids, i] : g.order) {
    if (is_ids) prompts.push_back(g.id_prompts[i]);
    else {
      std::vector<int32_t> ids = lm.tokenizer().encode(g.texts[i], g.special);
      prompts.emplace_back(ids.begin(), ids.end());
    }
  }
  auto* decoder_only = dynamic_cast<genai::LanguageModel*>(model.get());
  const bool vision = decoder_only && f.has_vision;
  if (!g.images.empty() && !vision)
    throw Error(cat("'", g.dir, "' is not a vision-language model (its genai_config.json names no vision and embedding "
                    "models): --image does not apply"));
  if (vision) {
    // Each image preprocessed and encoded; each image token of the prompt then expanded to its
    // image's rows of features, which the prompt run places there.
    std::vector<Tensor> pixels;
    for (const auto& file : g.images)
      pixels.push_back(with_context("--image", [&] {
        return genai::preprocess_image(genai::read_image(file), decoder_only->image_processor());
      }));
    std::vector<Tensor> features = pixels.empty() ? std::vector<Tensor>{} : decoder_only->encode_images(pixels);
    std::vector<int64_t> rows;
    for (const Tensor& t : features) rows.push_back(t.shape()[0]);
    const int64_t token = f.vision.image_token_id;
    const std::string name = std::filesystem::exists(std::filesystem::path(f.dir) / "tokenizer.json")
                                 ? lm.tokenizer().id_to_token(static_cast<int32_t>(token)).value_or("")
                                 : "";
    for (auto& p : prompts)
      p = with_context(cat("the prompt's image tokens", name.empty() ? "" : cat(" ('", name, "')")),
                       [&] { return genai::expand_image_tokens(p, token, prompts.size() == 1 ? rows : std::vector<int64_t>{}); });
    std::vector<std::vector<Tensor>> per_sequence;
    if (prompts.size() == 1) per_sequence.push_back(std::move(features));
    decoder_only->set_image_features(std::move(per_sequence));
  }
  if (!g.max_new_given) {
    size_t longest = 0;
    for (const auto& p : prompts) longest = std::max(longest, p.size());
    const int64_t limit = (d.max_length > 0 ? d.max_length : f.context_length) - static_cast<int64_t>(longest);
    s.max_new_tokens = std::max<int64_t>(0, std::min<int64_t>(128, limit));
  }
  // One text prompt streams its text as it decodes; batches and id prompts print at the end.
  std::function<void(size_t, const std::string&)> on_text;
  // (A speech model's text needs its tokenizer; without one its ids print at the end.)
  const bool have_tokenizer = std::filesystem::exists(std::filesystem::path(f.dir) / "tokenizer.json");
  if (!g.json && prompts.size() == 1 && (speech ? have_tokenizer : !g.order[0].first))
    on_text = [](size_t, const std::string& t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
    };
  if (g.verify_steps >= 0) {
    ONYX_CHECK(prompts.size() == 1, "--verify-cache takes one prompt");
    std::function<void()> again;  // a speech model's start takes its audio: given again before each
    if (speech) again = [&] { pipeline->set_audio(features_given); };
    std::vector<double> diff = genai::compare_with_growing_cache(lm, prompts[0], g.verify_steps, again);
    double worst = 0;
    for (size_t t = 0; t < diff.size(); ++t) {
      std::printf("step %zu: max relative logit difference %.3g\n", t, diff[t]);
      worst = std::max(worst, diff[t]);
    }
    const double tol = lm.folder().kv_dtype == DType::kFloat32 ? 1e-4 : 2e-2;
    std::printf("kv cache: %s; worst %.3g over %zu steps (tolerance %g)\n",
                cache_form(lm).c_str(), worst, diff.size(), tol);
    return worst <= tol ? 0 : 1;
  }
  std::signal(SIGINT, on_sigint);
  if (g.growing_cache) lm.use_growing_cache(true);
  genai::Generator gen(lm);
  std::vector<genai::SequenceResult> results;
  if (other_ranks.empty()) {
    results = gen.generate(prompts, s, on_text, &g_interrupt);
  } else {
    std::vector<std::unique_ptr<genai::Generator>> rank_gens;
    std::vector<genai::Generator*> ranks{&gen};
    for (auto& m : other_ranks) {
      rank_gens.push_back(std::make_unique<genai::Generator>(*m));
      ranks.push_back(rank_gens.back().get());
    }
    results = genai::generate_on_ranks(ranks, *group, prompts, s, on_text, &g_interrupt);
  }
  std::signal(SIGINT, SIG_DFL);
  const genai::GenerationStats& st = gen.stats();
  if (!g.logits_out.empty()) {
    const std::vector<float>& l = results[0].logits;
    const int64_t n = static_cast<int64_t>(results[0].generated_ids.size());
    Tensor t(DType::kFloat32, Shape{n, n ? static_cast<int64_t>(l.size()) / n : 0});
    std::copy(l.begin(), l.end(), t.data<float>());
    write_npy(g.logits_out, t);
  }
  if (g.json) {
    using J = nlohmann::ordered_json;
    auto one = [&](const genai::SequenceResult& r) {
      J j = {{"prompt_ids", r.prompt_ids}, {"generated_ids", r.generated_ids}, {"stop_reason", r.stop_reason}};
      if (std::filesystem::exists(std::filesystem::path(f.dir) / "tokenizer.json")) {
        std::vector<int32_t> ids(r.generated_ids.begin(), r.generated_ids.end());
        j["text"] = r.text.empty() ? lm.tokenizer().decode(ids) : r.text;
      }
      return j;
    };
    J out;
    if (results.size() == 1) out = one(results[0]);
    else {
      out["sequences"] = J::array();
      for (const auto& r : results) out["sequences"].push_back(one(r));
    }
    out["stats"] = {{"prompt_tokens", st.prompt_tokens},   {"generated_tokens", st.generated_tokens},
                    {"prefill_ms", st.prefill_seconds * 1e3}, {"decode_steps", st.decode_steps},
                    {"decode_ms", st.decode_seconds * 1e3}, {"kv_cache", cache_form(lm)},
                    {"kv_cache_note", cache_note(lm)},       {"kv_cache_bytes", st.kv_cache_bytes},
                    {"kv_cache_grows", st.kv_cache_grows},
                    {"device", lm.device().str()},           {"captures", st.capture.captures},
                    {"replays", st.capture.replays},         {"eager_steps", st.capture.eager_runs},
                    {"peak_device_bytes", lm.peak_device_bytes()},
                    {"tensor_parallel", g.tensor_parallel}};
    if (g.memory_report) {
      out["memory_report"] = lm.memory_report();
      if (auto* p = dynamic_cast<genai::EncoderDecoderModel*>(model.get())) {
        out["components"] = J::array();
        for (const auto& c : p->component_use())
          out["components"].push_back({{"name", c.name}, {"weight_bytes", c.weight_bytes},
                                       {"arena_bytes", c.arena_bytes}, {"arena_lower_bound", c.arena_lower_bound},
                                       {"arena_no_reuse", c.arena_no_reuse},
                                       {"kv_bytes", c.kv_bytes}});
      }
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (!on_text) {  // batches and id prompts: each sequence at the end
    for (size_t b = 0; b < results.size(); ++b) {
      std::vector<int32_t> ids(results[b].generated_ids.begin(), results[b].generated_ids.end());
      std::string text = results[b].text;
      bool have_tokenizer = std::filesystem::exists(std::filesystem::path(f.dir) / "tokenizer.json");
      if (text.empty() && have_tokenizer) text = lm.tokenizer().decode(ids);
      if (results.size() > 1) std::cout << "[" << b << "] ";
      if (have_tokenizer) std::cout << text;
      else for (int32_t id : ids) std::cout << id << " ";
      std::cout << "\n";
    }
  } else {
    std::cout << "\n";
  }
  for (size_t b = 0; b < results.size(); ++b)
    if (results[b].stop_reason == "interrupted") std::fprintf(stderr, "(interrupted)\n");
  print_figures(st, lm, g.memory_report);
  if (g.memory_report)  // each rank holds its own share: its report too
    for (size_t r = 0; r < other_ranks.size(); ++r)
      std::fprintf(stderr, "memory report of tensor-parallel rank %zu:\n%s", r + 1, other_ranks[r]->memory_report().c_str());
  if (g.tensor_parallel > 1)
    std::fprintf(stderr, "tensor parallel: %d ranks (threads of this process%s); the kv cache above is rank 0's\n",
                 g.tensor_parallel, rank_devices[0] == "cpu" ? "" : cat(", on ", rank_devices[0], " to ",
                                                                         rank_devices.back()).c_str());
  return 0;
}

}  // namespace onyx::cli
