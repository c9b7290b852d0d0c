#include "genai/json_util.h"

namespace onyx::genai {
namespace {
const Json kNull = nullptr;
}

const char* json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    default: return "an unusual value";
  }
}

void JsonNode::fail(const std::string& message) const {
  throw Error(cat(path_.empty() ? "/" : path_, ": ", message));
}

JsonNode JsonNode::at(const char* key) const {
  expect_object();
  auto it = value_->find(key);
  if (it == value_->end()) fail(cat("missing member \"", key, "\""));
  return JsonNode(*it, cat(path_, "/", key));
}

JsonNode JsonNode::get(const char* key) const {
  if (value_->is_object()) {
    auto it = value_->find(key);
    if (it != value_->end()) return JsonNode(*it, cat(path_, "/", key));
  }
  return JsonNode(kNull, cat(path_, "/", key));
}

JsonNode JsonNode::at(size_t index) const {
  expect_array();
  if (index >= value_->size()) fail(cat("index ", index, " is out of range (", value_->size(), " elements)"));
  return JsonNode((*value_)[index], cat(path_, "/", index));
}

size_t JsonNode::size() const {
  if (!value_->is_array() && !value_->is_object()) fail(cat("expected an array or object, got ", json_type_name(*value_)));
  return value_->size();
}

std::string JsonNode::as_string() const {
  if (!value_->is_string()) fail(cat("expected a string, got ", json_type_name(*value_)));
  return value_->get<std::string>();
}

int64_t JsonNode::as_int() const {
  if (!value_->is_number_integer()) fail(cat("expected an integer, got ", json_type_name(*value_)));
  return value_->get<int64_t>();
}

double JsonNode::as_number() const {
  if (!value_->is_number()) fail(cat("expected a number, got ", json_type_name(*value_)));
  return value_->get<double>();
}

bool JsonNode::as_bool() const {
  if (!value_->is_boolean()) fail(cat("expected true or false, got ", json_type_name(*value_)));
  return value_->get<bool>();
}

void JsonNode::expect_object() const {
  if (!value_->is_object()) fail(cat("expected an object, got ", json_type_name(*value_)));
}

void JsonNode::expect_array() const {
  if (!value_->is_array()) fail(cat("expected an array, got ", json_type_name(*value_)));
}

std::string JsonNode::string_or(const char* key, const std::string& fallback) const {
  JsonNode n = get(key);
  return n.is_null() ? fallback : n.as_string();
}

std::optional<std::string> JsonNode::optional_string(const char* key) const {
  JsonNode n = get(key);
  if (n.is_null()) return std::nullopt;
  return n.as_string();
}

bool JsonNode::bool_or(const char* key, bool fallback) const {
  JsonNode n = get(key);
  return n.is_null() ? fallback : n.as_bool();
}

int64_t JsonNode::int_or(const char* key, int64_t fallback) const {
  JsonNode n = get(key);
  return n.is_null() ? fallback : n.as_int();
}

}  // namespace onyx::genai
