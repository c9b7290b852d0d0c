#include "genai/post_processor.h"

#include <map>
#include <string>

namespace onyx::genai {
namespace {

// [before..., sequence, after...]: the shape of every single-sequence template.
class Surround : public PostProcessor {
 public:
  Surround(std::vector<int32_t> before, std::vector<int32_t> after) : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }
  size_t added_tokens() const override { return before_.size() + after_.size(); }

 private:
  std::vector<int32_t> before_, after_;
};

// A template that may name the sequence more than once or not at all.
class Template : public PostProcessor {
 public:
  // Each item: the ids of a special token, or an empty vector standing for the sequence.
  explicit Template(std::vector<std::vector<int32_t>> items, std::vector<bool> is_sequence)
      : items_(std::move(items)), is_sequence_(std::move(is_sequence)) {}
  void process(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    for (size_t i = 0; i < items_.size(); ++i) {
      if (is_sequence_[i]) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), items_[i].begin(), items_[i].end());
    }
    ids.swap(out);
  }
  size_t added_tokens() const override {
    size_t n = 0;
    for (size_t i = 0; i < items_.size(); ++i)
      if (!is_sequence_[i]) n += items_[i].size();
    return n;
  }

 private:
  std::vector<std::vector<int32_t>> items_;
  std::vector<bool> is_sequence_;
};

class NoOp : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
  size_t added_tokens() const override { return 0; }
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->process(ids);
  }
  size_t added_tokens() const override {
    size_t n = 0;
    for (const auto& p : parts_) n += p->added_tokens();
    return n;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// ["token", id] as BertProcessing and RobertaProcessing spell their tokens.
int32_t token_pair_id(const JsonNode& pair) {
  pair.expect_array();
  if (pair.size() != 2) pair.fail("expected [\"token\", id]");
  pair.at(size_t(0)).as_string();
  int64_t id = pair.at(1).as_int();
  if (id < 0 || id > INT32_MAX) pair.at(1).fail("token id out of range");
  return static_cast<int32_t>(id);
}

std::unique_ptr<PostProcessor> make_template(const JsonNode& node) {
  std::map<std::string, std::vector<int32_t>> specials;
  JsonNode st = node.get("special_tokens");
  if (!st.is_null()) {
    st.expect_object();
    for (auto it = st.value().begin(); it != st.value().end(); ++it) {
      JsonNode tok(it.value(), cat(st.path(), "/", it.key()));
      JsonNode ids = tok.at("ids");
      std::vector<int32_t> v;
      for (size_t i = 0; i < ids.size(); ++i) v.push_back(static_cast<int32_t>(ids.at(i).as_int()));
      specials[tok.string_or("id", it.key())] = v;
    }
  }
  JsonNode single = node.at("single");
  std::vector<std::vector<int32_t>> items;
  std::vector<bool> is_sequence;
  for (size_t i = 0; i < single.size(); ++i) {
    JsonNode item = single.at(i);
    if (item.has("Sequence")) {
      std::string id = item.at("Sequence").string_or("id", "A");
      if (id != "A") item.fail(cat("a single-sequence template can only name sequence A, not ", id));
      items.emplace_back();
      is_sequence.push_back(true);
    } else if (item.has("SpecialToken")) {
      std::string id = item.at("SpecialToken").at("id").as_string();
      auto it = specials.find(id);
      if (it == specials.end()) item.fail(cat("special token \"", id, "\" is not listed in special_tokens"));
      items.push_back(it->second);
      is_sequence.push_back(false);
    } else {
      item.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  return std::make_unique<Template>(std::move(items), std::move(is_sequence));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node) {
  if (node.is_null()) return nullptr;
  std::string type = node.type();
  if (type == "TemplateProcessing") return make_template(node);
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return std::make_unique<Surround>(std::vector<int32_t>{token_pair_id(node.at("cls"))},
                                      std::vector<int32_t>{token_pair_id(node.at("sep"))});
  if (type == "ByteLevel") return std::make_unique<NoOp>();  // it only trims offsets
  if (type == "Sequence") {
    JsonNode list = node.at("processors");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_post_processor(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  node.fail(cat("post-processor type \"", type, "\" is not supported by onyx"));
}

}  // namespace onyx::genai
