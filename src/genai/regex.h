// A compiled Unicode regular expression (PCRE2, UTF + UCP, JIT when available), with the
// semantics of the Oniguruma expressions that Hugging Face tokenizers runs.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace onyx::genai {

// [begin, end) byte offsets of one match.
using Span = std::pair<size_t, size_t>;

class Regex {
 public:
  // Throws onyx::Error naming the pattern and PCRE2's message when it does not compile.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match, left to right (an empty match is skipped forward by one
  // character). Thread-safe.
  void find_all(std::string_view text, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }
  // A pattern that matches `literal` exactly (Split and Replace with a String pattern).
  static std::string escape(std::string_view literal);

 private:
  std::string pattern_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx::genai
