// The one-time notices of a session (CPU fallbacks, signatures run eagerly, broken
// replay contracts): to the session's log function, else stderr.
#pragma once

#include <functional>
#include <iostream>
#include <set>
#include <string>

namespace onyx {

class Notices {
 public:
  explicit Notices(std::function<void(const std::string&)> log) : log_(std::move(log)) {}
  void say(const std::string& message) const {
    if (log_) log_(message);
    else std::cerr << message << "\n";
  }
  // Says `message` the first time `key` comes; returns whether it said it.
  bool say_once(const std::string& key, const std::string& message) {
    if (!said_.insert(key).second) return false;
    say(message);
    return true;
  }

 private:
  std::function<void(const std::string&)> log_;
  std::set<std::string> said_;
};

}  // namespace onyx
