// `onyx tokenize`: encode text to ids, decode ids to text, or run a whole file of lines
// (the parity tests' batch mode: one process per tokenizer, not per line).
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "genai/token_stream.h"
#include "cli.h"
#include "genai/tokenizer.h"
#include "onyx/error.h"

namespace onyx::cli {

namespace {

using onyx::cat;
using onyx::genai::Tokenizer;

constexpr const char* kTokenizeUsage = R"(usage:
  onyx tokenize DIR_OR_TOKENIZER_JSON TEXT          print the ids of TEXT, space separated
  onyx tokenize DIR_OR_TOKENIZER_JSON --decode IDS  print the text of IDS ("1 2 3")
  onyx tokenize DIR_OR_TOKENIZER_JSON --lines FILE  one line of ids per input line
  onyx tokenize DIR_OR_TOKENIZER_JSON --decode-lines FILE
                                                    decode one JSON array of ids per line

options:
  --no-special      encode without the post-processor's special tokens (BOS, [CLS] ...)
  --keep-special    decode special tokens too (the default skips them)
  --lines FILE      FILE holds one JSON string per line (so \r, tabs and any space survive);
                    prints one line of space-separated ids per input line
  --json            with --lines: print one JSON object per line instead: ids, ids_no_special,
                    text (decode of ids), text_keep_special, stream (concatenated TokenStream output)
  --decode-lines FILE  FILE holds one JSON array of ids per line; prints one JSON object per
                    line: text, text_keep_special, stream (concatenated TokenStream output);
                    with --lines too, these come after the --lines results
  --bench N         with --lines: encode the lines N times, print the first and the best pass's
                    CPU time
  --info            print vocabulary size and the bos/eos/pad ids
)";

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::istringstream in(s);
  std::string word;
  while (in >> word) {
    try {
      size_t pos = 0;
      long long v = std::stoll(word, &pos);
      if (pos == word.size() && v >= INT32_MIN && v <= INT32_MAX) {
        ids.push_back(static_cast<int32_t>(v));
        continue;
      }
    } catch (...) {
    }
    throw Usage(cat("'", word, "' is not a token id"));
  }
  return ids;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ONYX_CHECK(in, "cannot open '", path, "'");
  std::vector<std::string> lines;
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw onyx::Error(cat(path, ":", number, ": not a JSON string: ", e.what()));
    }
    ONYX_CHECK(j.is_string(), path, ":", number, ": expected a JSON string");
    lines.push_back(j.get<std::string>());
  }
  return lines;
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', true); }

void run_lines(const Tokenizer& tok, const std::string& file, bool special, bool keep_special, bool json, int bench) {
  std::vector<std::string> lines = read_lines(file);
  if (bench > 0) {
    size_t bytes = 0, tokens = 0;
    for (const auto& l : lines) bytes += l.size();
    double best = 0, first = 0;
    for (int r = 0; r < bench; ++r) {
      tokens = 0;
      double t0 = cpu_seconds();
      for (const auto& l : lines) tokens += tok.encode(l, special).size();
      double s = cpu_seconds() - t0;
      if (r == 0) first = best = s;
      best = std::min(best, s);
    }
    // The first pass starts with an empty piece cache; later passes find every piece there.
    // CPU time of the process, so that a busy machine does not count against it.
    std::printf("onyx: %zu lines, %zu bytes, %zu tokens; first pass: %.4f s (%.0f lines/s, %.2f MB/s); "
                "best of %d passes: %.4f s (%.0f lines/s, %.2f MB/s)\n",
                lines.size(), bytes, tokens, first, double(lines.size()) / first, double(bytes) / first / 1e6, bench,
                best, double(lines.size()) / best, double(bytes) / best / 1e6);
    return;
  }
  std::string out;
  for (size_t n = 0; n < lines.size(); ++n) {
    onyx::with_context(cat(file, ": line ", n + 1), [&] {
      std::vector<int32_t> ids = tok.encode(lines[n], special);
      if (!json) {
        out += join(ids);
        out += '\n';
        return;
      }
      nlohmann::json j;
      j["ids"] = ids;
      j["ids_no_special"] = tok.encode(lines[n], false);
      j["text"] = tok.decode(ids, !keep_special);
      j["text_keep_special"] = tok.decode(ids, false);
      onyx::genai::TokenStream stream = tok.stream(!keep_special);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.step(id);
      streamed += stream.finish();
      j["stream"] = streamed;
      out += dump(j);
      out += '\n';
    });
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

// Decodes arbitrary id sequences (what a model may generate), whole and streamed.
void run_decode_lines(const Tokenizer& tok, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ONYX_CHECK(in, "cannot open '", path, "'");
  std::string line, out;
  for (size_t number = 1; std::getline(in, line); ++number) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw onyx::Error(cat(path, ":", number, ": not JSON: ", e.what()));
    }
    ONYX_CHECK(j.is_array(), path, ":", number, ": expected a JSON array of ids");
    std::vector<int32_t> ids;
    for (const auto& v : j) {
      ONYX_CHECK(v.is_number_integer(), path, ":", number, ": expected integer ids");
      ids.push_back(v.get<int32_t>());
    }
    nlohmann::json r;
    r["text"] = tok.decode(ids, true);
    r["text_keep_special"] = tok.decode(ids, false);
    onyx::genai::TokenStream stream = tok.stream(true);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.step(id);
    r["stream"] = streamed + stream.finish();
    out += dump(r);
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int cmd_tokenize(const std::vector<std::string>& args) {
  try {
    std::vector<std::string> positional;
    std::string decode_ids, lines_file, decode_lines_file;
    bool special = true, keep_special = false, json = false, info = false, decode = false;
    int bench = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw Usage(cat(a, " needs a value"));
        return args[++i];
      };
      if (a == "--no-special") special = false;
      else if (a == "--keep-special") keep_special = true;
      else if (a == "--decode") { decode = true; decode_ids = value(); }
      else if (a == "--lines") lines_file = value();
      else if (a == "--decode-lines") decode_lines_file = value();
      else if (a == "--json") json = true;
      else if (a == "--info") info = true;
      else if (a == "--bench") {
        const std::string& v = value();
        bench = std::atoi(v.c_str());
        if (bench <= 0) throw Usage(cat("--bench takes a positive count, not '", v, "'"));
      }
      else if (a == "-h" || a == "--help") { std::cout << kTokenizeUsage; return 0; }
      else if (a.size() > 1 && a[0] == '-' && a[1] == '-') throw Usage(cat("unknown option '", a, "'"));
      else positional.push_back(a);
    }
    if (positional.empty()) throw Usage("tokenize needs a tokenizer.json or a model folder");
    bool has_text = positional.size() >= 2;
    if (positional.size() > 2) throw Usage(cat("unexpected argument '", positional[2], "' (quote the text)"));
    // --lines and --decode-lines may go together (one process, one load): --lines results first.
    bool batch = !lines_file.empty() || !decode_lines_file.empty();
    int modes = int(has_text) + int(decode) + int(batch) + int(info);
    if (modes != 1) throw Usage("give exactly one of TEXT, --decode IDS, --lines / --decode-lines FILE or --info");
    if ((json || bench) && lines_file.empty()) throw Usage("--json and --bench go with --lines");

    Tokenizer tok = Tokenizer::from_file(positional[0]);
    if (info) {
      auto show = [](const std::optional<int32_t>& id) { return id ? std::to_string(*id) : std::string("none"); };
      std::cout << "vocab size: " << tok.vocab_size() << "\nbos: " << show(tok.bos_id()) << "\neos: " << show(tok.eos_id())
                << "\npad: " << show(tok.pad_id()) << "\n";
      return 0;
    }
    if (decode) {
      std::cout << tok.decode(parse_ids(decode_ids), !keep_special) << "\n";
      return 0;
    }
    if (batch) {
      if (!lines_file.empty()) run_lines(tok, lines_file, special, keep_special, json, bench);
      if (!decode_lines_file.empty()) run_decode_lines(tok, decode_lines_file);
      return 0;
    }
    std::cout << join(tok.encode(positional[1], special)) << "\n";
    return 0;
  } catch (const Usage& e) {
    std::cerr << "onyx tokenize: " << e.what() << "\n\n" << kTokenizeUsage;
    return 2;
  }
}

}  // namespace onyx::cli
