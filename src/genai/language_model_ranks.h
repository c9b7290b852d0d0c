// Tensor parallelism in LanguageModel (lead_ranks): rank 0's calls run on every rank at once.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "genai/language_model.h"

namespace onyx::genai {

// The other ranks of the group rank 0 leads: a thread each, which runs one task at a time.
struct LanguageModel::Ranks {
  std::shared_ptr<Communicator> group;
  std::vector<std::unique_ptr<LanguageModel>> models;  // ranks 1..N-1
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable posted_cv, done_cv;
  std::function<void(LanguageModel&)> task;
  uint64_t posted = 0;
  size_t finished = 0;
  bool quit = false;
  std::vector<std::string> errors;  // per rank 1..N-1, the last task's ("" when it ran)

  Ranks(std::vector<std::unique_ptr<LanguageModel>> others, std::shared_ptr<Communicator> g);
  ~Ranks();
  // Runs `t` on every other rank, each on its thread; returns at once (wait() waits for them).
  void post(std::function<void(LanguageModel&)> t);
  void wait();
};

// Runs `f(model)` on every rank (rank 0 on the calling thread) and returns rank 0's result; a
// rank's error aborts the group and is thrown once every rank is out, the group reset.
template <class F>
auto LanguageModel::on_every_rank(F f) -> decltype(f(*this)) {
  using R = decltype(f(*this));
  if (!ranks_ || fanning_) return f(*this);
  Ranks& rk = *ranks_;
  rk.post([&f](LanguageModel& m) { f(m); });
  std::string mine;
  fanning_ = true;
  auto settle = [&] {
    fanning_ = false;
    rk.wait();
    std::string first = mine.empty() ? std::string() : cat("tensor-parallel rank 0: ", mine);
    for (size_t r = 0; r < rk.errors.size() && first.empty(); ++r)
      if (!rk.errors[r].empty() && rk.errors[r].find("group is broken") == std::string::npos)
        first = cat("tensor-parallel rank ", r + 1, ": ", rk.errors[r]);
    for (size_t r = 0; r < rk.errors.size() && first.empty(); ++r)
      if (!rk.errors[r].empty()) first = cat("tensor-parallel rank ", r + 1, ": ", rk.errors[r]);
    if (!first.empty()) {
      rk.group->reset();
      throw Error(first);
    }
  };
  if constexpr (std::is_void_v<R>) {
    try {
      f(*this);
    } catch (const std::exception& e) {
      mine = e.what();
      rk.group->abort(cat("rank 0 failed: ", mine));
    }
    settle();
  } else {
    std::optional<R> out;
    try {
      out.emplace(f(*this));
    } catch (const std::exception& e) {
      mine = e.what();
      rk.group->abort(cat("rank 0 failed: ", mine));
    }
    settle();
    return std::move(*out);
  }
}

}  // namespace onyx::genai
