// Reading tokenizer.json: typed field access whose errors name the JSON path of what is wrong
// ("/model/merges/12: expected a string "a b" or a pair of strings").
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "onyx/error.h"

namespace onyx::genai {

using Json = nlohmann::json;

// A JSON value together with its path from the document root, for error messages.
class JsonNode {
 public:
  JsonNode(const Json& value, std::string path) : value_(&value), path_(std::move(path)) {}

  const Json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }
  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }
  bool has(const char* key) const { return value_->is_object() && value_->contains(key); }

  // The member `key`; a missing member is an error naming the path.
  JsonNode at(const char* key) const;
  // The member `key`, or a null node when it is absent.
  JsonNode get(const char* key) const;
  JsonNode at(size_t index) const;
  size_t size() const;

  std::string as_string() const;
  int64_t as_int() const;
  bool as_bool() const;
  double as_number() const;
  void expect_object() const;
  void expect_array() const;

  // Member shortcuts with defaults for absent or null members.
  std::string string_or(const char* key, const std::string& fallback) const;
  std::optional<std::string> optional_string(const char* key) const;
  bool bool_or(const char* key, bool fallback) const;
  int64_t int_or(const char* key, int64_t fallback) const;

  // The "type" member of a component object.
  std::string type() const { return at("type").as_string(); }

  [[noreturn]] void fail(const std::string& message) const;

 private:
  const Json* value_;
  std::string path_;
};

const char* json_type_name(const Json& v);

}  // namespace onyx::genai
