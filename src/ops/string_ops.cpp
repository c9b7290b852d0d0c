// String ops: StringConcat, StringSplit, StringNormalizer and RegexFullMatch. Strings are
// UTF-8; case changes go through utf8proc and regular expressions through PCRE2 (UTF and
// Unicode properties on, so \w and \b know more than ASCII, as RE2's do for these tests).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <memory>
#include <unordered_set>

#include "ops/broadcast.h"
#include "ops/common.h"

namespace onyx {

namespace {

void check_strings(const InferContext& ctx, size_t i) {
  ONYX_CHECK(ctx.input_dtype(i) == DType::kString, "input ", i, " must be strings, got ",
             dtype_name(ctx.input_dtype(i)));
}

// ---- StringConcat: elementwise a + b with numpy broadcasting ----

void infer_concat(InferContext& ctx) {
  check_strings(ctx, 0);
  check_strings(ctx, 1);
  infer_broadcast(ctx);
}

void concat_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.output(0);
  const std::string* pa = a.data<std::string>();
  const std::string* pb = b.data<std::string>();
  std::string* po = out.data<std::string>();
  for_each_broadcast<2>(out.shape(), {&a.shape(), &b.shape()},
                        [&](int64_t o, const std::array<int64_t, 2>& i) { po[o] = pa[i[0]] + pb[i[1]]; });
}

// ---- StringSplit(X) -> (Y [..., max parts] padded with "", Z [...] part counts) ----

// Python's str.split: by `delimiter` when it is not empty (empty parts kept), else on runs of
// whitespace (no empty parts); at most `maxsplit` splits when it is >= 0.
std::vector<std::string> split(const std::string& s, const std::string& delimiter, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (!delimiter.empty()) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t at = s.find(delimiter, start);
      if (at == std::string::npos) break;
      parts.push_back(s.substr(start, at - start));
      start = at + delimiter.size();
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  size_t i = 0;
  while (true) {
    while (i < s.size() && space(s[i])) ++i;
    if (i == s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t end = s.size();
      while (end > i && space(s[end - 1])) --end;
      parts.push_back(s.substr(i, end - i));
      break;
    }
    size_t j = i;
    while (j < s.size() && !space(s[j])) ++j;
    parts.push_back(s.substr(i, j - i));
    i = j;
  }
  return parts;
}

void infer_split(InferContext& ctx) {
  check_strings(ctx, 0);
  PartialShape y = ctx.input_shape(0);
  if (y.rank_known) y.dims.push_back(PartialShape::kUnknown);  // the most parts: data
  ctx.set_output(0, DType::kString, y);
  if (ctx.has_output(1)) ctx.set_output(1, DType::kInt64, ctx.input_shape(0));
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string delimiter = ctx.attr_string("delimiter", "");
  const int64_t maxsplit = ctx.attr_int("maxsplit", -1);
  std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
  int64_t most = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    parts[i] = split(x.data<std::string>()[i], delimiter, maxsplit);
    most = std::max<int64_t>(most, static_cast<int64_t>(parts[i].size()));
  }
  std::vector<int64_t> dims = x.shape().dims();
  dims.push_back(most);
  Tensor& y = ctx.allocate_output(0, DType::kString, Shape(dims));
  for (int64_t i = 0; i < x.numel(); ++i)
    for (size_t k = 0; k < parts[i].size(); ++k) y.data<std::string>()[i * most + static_cast<int64_t>(k)] = parts[i][k];
  if (ctx.has_output(1))
    for (int64_t i = 0; i < x.numel(); ++i) ctx.output(1).data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
}

// ---- StringNormalizer: drops the elements that are stop words, then changes case ----

// s with each code point mapped by fn (utf8proc's case mappings); invalid UTF-8 is an error.
std::string map_code_points(const std::string& s, utf8proc_int32_t (*fn)(utf8proc_int32_t)) {
  std::string out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    ONYX_CHECK(n > 0, "the string \"", s, "\" is not valid UTF-8");
    utf8proc_uint8_t buf[4];
    const utf8proc_ssize_t m = utf8proc_encode_char(fn(cp), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(m));
    p += n;
    left -= n;
  }
  return out;
}

std::string lower(const std::string& s) { return map_code_points(s, utf8proc_tolower); }
std::string upper(const std::string& s) { return map_code_points(s, utf8proc_toupper); }

void infer_normalizer(InferContext& ctx) {
  check_strings(ctx, 0);
  const PartialShape& x = ctx.input_shape(0);
  ONYX_CHECK(!x.rank_known || x.dims.size() == 1 || (x.dims.size() == 2 && x.dims[0] == 1),
             "input must be [C] or [1, C], got ", x.str());
  const std::string action = ctx.attr_string("case_change_action", "NONE");
  ONYX_CHECK(action == "NONE" || action == "LOWER" || action == "UPPER",
             "case_change_action must be NONE, LOWER or UPPER, got \"", action, "\"");
  PartialShape y = x;
  if (y.rank_known) y.dims.back() = PartialShape::kUnknown;  // the stop words removed: data
  ctx.set_output(0, DType::kString, y);
}

void normalizer_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::string action = ctx.attr_string("case_change_action", "NONE");
  const bool sensitive = ctx.attr_int("is_case_sensitive", 0) != 0;
  std::unordered_set<std::string> stops;
  for (const auto& w : ctx.attr_strings("stopwords")) stops.insert(sensitive ? w : lower(w));
  std::vector<std::string> kept;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const std::string& s = x.data<std::string>()[i];
    if (stops.count(sensitive ? s : lower(s))) continue;
    kept.push_back(action == "LOWER" ? lower(s) : action == "UPPER" ? upper(s) : s);
  }
  if (kept.empty()) kept.emplace_back();  // an all-stop-word input gives one empty string
  const int64_t n = static_cast<int64_t>(kept.size());
  Tensor& y = ctx.allocate_output(0, DType::kString, x.rank() == 2 ? Shape{1, n} : Shape{n});
  std::copy(kept.begin(), kept.end(), y.data<std::string>());
}

// ---- RegexFullMatch: whether each string matches the pattern as a whole ----

struct Pcre2Code {
  pcre2_code* code = nullptr;
  ~Pcre2Code() { pcre2_code_free(code); }
};

void infer_regex(InferContext& ctx) {
  check_strings(ctx, 0);
  ctx.set_output(0, DType::kBool, ctx.input_shape(0));
}

void regex_kernel(KernelContext& ctx) {
  const std::string pattern = ctx.attr_string("pattern", "");
  int err = 0;
  PCRE2_SIZE offset = 0;
  Pcre2Code re;
  re.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &offset, nullptr);
  if (!re.code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(cat("pattern \"", pattern, "\" does not compile at offset ", offset, ": ",
                    reinterpret_cast<const char*>(msg)));
  }
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(re.code, nullptr), pcre2_match_data_free);
  const Tensor& x = ctx.input(0);
  bool* y = ctx.output(0).data<bool>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const std::string& s = x.data<std::string>()[i];
    const int rc = pcre2_match(re.code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md.get(), nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(cat("matching element ", i, " against \"", pattern, "\": ", reinterpret_cast<const char*>(msg)));
    }
    y[i] = rc >= 0;
  }
}

}  // namespace

void register_string_ops(OpRegistry& r) {
  r.add(onnx_op("StringConcat", 20, infer_concat, concat_kernel));
  r.add(onnx_op("StringSplit", 20, infer_split, split_kernel));
  r.add(onnx_op("StringNormalizer", 10, infer_normalizer, normalizer_kernel));
  r.add(onnx_op("RegexFullMatch", 20, infer_regex, regex_kernel));
}

}  // namespace onyx
