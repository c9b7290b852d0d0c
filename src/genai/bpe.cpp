#include "genai/bpe.h"

#include <cstdio>
#include <queue>

#include "genai/unicode.h"

namespace onyx::genai {
namespace {
constexpr size_t kCacheCapacity = 20000;
constexpr size_t kCacheMaxPieceBytes = 256;
}  // namespace

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  count_ = 0;
}

void MergeTable::insert(int32_t a, int32_t b, Merge m) {
  ONYX_ASSERT(!slots_.empty() && count_ * 2 < slots_.size(), "MergeTable::reserve was not called with enough room");
  uint64_t key = pack(a, b);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) { s.merge = m; return; }
    if (s.key == kEmpty) { s.key = key; s.merge = m; ++count_; return; }
  }
}

Bpe::Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  plain_chars_ = options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty();
  if (options_.unk_token) {
    unk_id_ = vocab_.find(*options_.unk_token);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[b] = vocab_.find(name).value_or(-1);
  }
  small_char_ids_.assign(0x800, -1);
  for (char32_t c = 0; c < 0x800; ++c) {
    std::string s;
    utf8_append(s, c);
    small_char_ids_[c] = vocab_.find(s).value_or(-1);
  }
  merges_.reserve(merges.size());
  size_t prefix_len = options_.continuing_subword_prefix.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    ONYX_CHECK(ia, "/model/merges/", rank, ": token \"", a, "\" is not in the vocabulary");
    ONYX_CHECK(ib, "/model/merges/", rank, ": token \"", b, "\" is not in the vocabulary");
    // The merged token drops the right part's subword prefix ("##").
    std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : b);
    auto im = vocab_.find(merged);
    ONYX_CHECK(im, "/model/merges/", rank, ": the merged token \"", merged, "\" is not in the vocabulary");
    merges_.insert(*ia, *ib, {static_cast<uint32_t>(rank), *im});
  }
}

int32_t Bpe::char_id(std::string_view ch, bool first, bool last) const {
  if (plain_chars_ && ch.size() <= 2) {
    char32_t cp;
    utf8_next(ch, 0, cp);
    return small_char_ids_[cp];
  }
  if (plain_chars_) return vocab_.find(ch).value_or(-1);
  std::string s;
  if (!first) s += options_.continuing_subword_prefix;
  s += ch;
  if (last) s += options_.end_of_word_suffix;
  return vocab_.find(s).value_or(-1);
}

void Bpe::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = vocab_.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  bool cacheable = piece.size() <= kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  merge_word(piece, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(start), out.end()));
  }
}

void Bpe::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(w.size());
  auto push = [&](int32_t id) {
    int32_t i = static_cast<int32_t>(sym.size());
    sym.push_back({id, i - 1, i + 1, true});
  };
  // Pending unknown-token run: HF adds it when the next known symbol (or the end) arrives.
  bool have_unk = false;
  auto flush_unk = [&] {
    if (have_unk) push(*unk_id_);
    have_unk = false;
  };
  for (size_t i = 0; i < w.size();) {
    size_t len = utf8_len(static_cast<unsigned char>(w[i]));
    std::string_view ch = w.substr(i, len);
    bool first = i == 0, last = i + len >= w.size();
    i += len;
    int32_t id = char_id(ch, first, last);
    if (id >= 0) {
      flush_unk();
      push(id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        // As the reference does, a pending unknown run is not flushed before byte tokens.
        for (unsigned char b : ch) push(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (have_unk && !options_.fuse_unk) push(*unk_id_);
      have_unk = true;
    } else if (options_.unk_token) {
      throw Error(cat("the unknown token \"", *options_.unk_token, "\" is not in the vocabulary"));
    }
  }
  flush_unk();
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  for (size_t i = 0; i + 1 < sym.size(); ++i)
    if (const auto* m = merges_.find(sym[i].id, sym[i + 1].id)) queue.push({m->rank, int32_t(i), m->id});
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    const auto* m = merges_.find(left.id, right.id);
    if (!m || m->id != top.id) continue;  // stale: one side has merged since
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0)
      if (const auto* pm = merges_.find(sym[left.prev].id, left.id)) queue.push({pm->rank, left.prev, pm->id});
    if (left.next >= 0)
      if (const auto* nm = merges_.find(left.id, sym[left.next].id)) queue.push({nm->rank, top.pos, nm->id});
  }
  for (const Symbol& s : sym)
    if (s.alive) out.push_back(s.id);
}

std::unique_ptr<Model> make_bpe(const JsonNode& node) {
  JsonNode dropout = node.get("dropout");
  if (!dropout.is_null() && dropout.as_number() != 0.0)
    dropout.fail("BPE dropout is not supported by onyx (it makes encoding random)");
  Vocab vocab = Vocab::from_json(node.at("vocab"));
  JsonNode list = node.at("merges");
  list.expect_array();
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& m = list.value()[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      if (s.rfind("#version", 0) == 0) continue;
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        list.at(i).fail(cat("expected \"a b\" (two tokens and one space), got \"", s, "\""));
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      list.at(i).fail(cat("expected a string \"a b\" or a pair of strings, got ", json_type_name(m)));
    }
  }
  BpeOptions o;
  o.unk_token = node.optional_string("unk_token");
  o.continuing_subword_prefix = node.string_or("continuing_subword_prefix", "");
  o.end_of_word_suffix = node.string_or("end_of_word_suffix", "");
  o.fuse_unk = node.bool_or("fuse_unk", false);
  o.byte_fallback = node.bool_or("byte_fallback", false);
  o.ignore_merges = node.bool_or("ignore_merges", false);
  return std::make_unique<Bpe>(std::move(vocab), merges, std::move(o));
}

}  // namespace onyx::genai
