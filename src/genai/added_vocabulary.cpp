#include "genai/added_vocabulary.h"

#include <algorithm>

#include "genai/normalizer.h"
#include "genai/unicode.h"

namespace onyx::genai {
namespace {

char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  char32_t cp;
  utf8_next(s, i, cp);
  return cp;
}

// Start of the run of whitespace that ends s (s.size() when there is none).
size_t trailing_space_start(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t b = e - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    char32_t cp;
    utf8_next(s, b, cp);
    if (!is_white_space(cp)) break;
    e = b;
  }
  return e;
}

size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    size_t n = utf8_next(s, i, cp);
    if (!is_white_space(cp)) break;
    i += n;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  int32_t node = 0;
  for (unsigned char c : pattern) {
    auto& ch = nodes[node].children;
    auto it = std::find_if(ch.begin(), ch.end(), [c](const auto& p) { return p.first == c; });
    if (it != ch.end()) {
      node = it->second;
    } else {
      int32_t next = static_cast<int32_t>(nodes.size());
      ch.emplace_back(c, next);
      nodes.emplace_back();
      node = next;
    }
  }
  nodes[node].token = token;
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_at(std::string_view text, size_t i) const {
  int32_t node = 0, best = -1;
  size_t best_len = 0;
  for (size_t k = i; k < text.size(); ++k) {
    unsigned char c = static_cast<unsigned char>(text[k]);
    const auto& ch = nodes[node].children;
    auto it = std::find_if(ch.begin(), ch.end(), [c](const auto& p) { return p.first == c; });
    if (it == ch.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      best_len = k + 1 - i;
    }
  }
  return {best, best_len};
}

void AddedVocabulary::load(const JsonNode& list, const Vocab& model_vocab, const Normalizer* normalizer) {
  if (list.is_null()) return;
  list.expect_array();
  int32_t next_id = static_cast<int32_t>(model_vocab.size());
  for (size_t i = 0; i < list.size(); ++i) {
    JsonNode n = list.at(i);
    AddedToken t;
    t.content = n.at("content").as_string();
    t.single_word = n.bool_or("single_word", false);
    t.lstrip = n.bool_or("lstrip", false);
    t.rstrip = n.bool_or("rstrip", false);
    t.normalized = n.bool_or("normalized", true);
    t.special = n.bool_or("special", false);
    if (n.has("id")) n.at("id").as_int();  // must be an integer, though the reference renumbers
    if (t.content.empty()) continue;
    if (auto existing = find(t.content)) {
      t.id = *existing;
    } else if (auto in_model = model_vocab.find(t.content)) {
      t.id = *in_model;
    } else {
      t.id = next_id++;
    }
    if (t.special) special_.insert(t.content);
    id_of_content_[t.content] = t.id;
    if (size_t(t.id) >= index_of_id_.size()) index_of_id_.resize(size_t(t.id) + 1, -1);
    int32_t& at = index_of_id_[t.id];
    if (at >= 0) {
      tokens_[at] = t;  // same id again: the later entry wins
    } else {
      at = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(t);
    }
  }
  for (size_t k = 0; k < tokens_.size(); ++k) {
    AddedToken& t = tokens_[k];
    t.decoded = t.content;
    if (!t.normalized) {
      raw_.insert(t.content, static_cast<int32_t>(k));
      continue;
    }
    if (normalizer) normalizer->normalize(t.decoded);
    if (!t.decoded.empty()) normalized_.insert(t.decoded, static_cast<int32_t>(k));
  }
}

void AddedVocabulary::split(std::string_view text, bool normalized_pass, std::vector<TextSplit>& out) const {
  out.clear();
  const Trie& trie = normalized_pass ? normalized_ : raw_;
  if (text.empty()) return;
  if (trie.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0, pos = 0, n = text.size();
  while (pos < n) {
    int32_t tok = -1;
    size_t mstart = 0, mlen = 0;
    for (size_t i = pos; i < n; ++i) {
      if (!trie.first_byte[static_cast<unsigned char>(text[i])]) continue;
      auto [t, len] = trie.longest_at(text, i);
      if (t >= 0) {
        tok = t;
        mstart = i;
        mlen = len;
        break;
      }
    }
    if (tok < 0) break;
    size_t start = mstart, stop = mstart + mlen;
    pos = stop;  // the search goes on after the match, whatever is done with it
    const AddedToken& t = tokens_[tok];
    if (t.single_word) {
      bool space_before = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      char32_t next = 0;
      if (stop < n) utf8_next(text, stop, next);
      bool space_after = stop == n || !is_word_char(next);
      if (!space_before || !space_after) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (t.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset != n) out.push_back({start_offset, n, -1});
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  if (id < 0 || size_t(id) >= index_of_id_.size() || index_of_id_[id] < 0) return nullptr;
  return &tokens_[index_of_id_[id]];
}

std::optional<int32_t> AddedVocabulary::find(std::string_view content) const {
  auto it = id_of_content_.find(content);
  if (it == id_of_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace onyx::genai
