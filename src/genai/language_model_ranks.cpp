#include "genai/language_model_ranks.h"

namespace onyx::genai {

LanguageModel::Ranks::Ranks(std::vector<std::unique_ptr<LanguageModel>> others, std::shared_ptr<Communicator> g)
    : group(std::move(g)), models(std::move(others)), errors(models.size()) {
  for (size_t i = 0; i < models.size(); ++i)
    threads.emplace_back([this, i] {
      uint64_t seen = 0;
      while (true) {
        std::function<void(LanguageModel&)> t;
        {
          std::unique_lock<std::mutex> lock(mutex);
          posted_cv.wait(lock, [&] { return quit || posted > seen; });
          if (quit) return;
          seen = posted;
          t = task;
        }
        std::string error;
        try {
          t(*models[i]);
        } catch (const std::exception& e) {
          error = e.what();
          group->abort(cat("rank ", i + 1, " failed: ", error));  // no rank waits for this one
        }
        std::lock_guard<std::mutex> lock(mutex);
        errors[i] = std::move(error);
        ++finished;
        done_cv.notify_all();
      }
    });
}

LanguageModel::Ranks::~Ranks() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    quit = true;
  }
  posted_cv.notify_all();
  for (auto& t : threads) t.join();
}

void LanguageModel::Ranks::post(std::function<void(LanguageModel&)> t) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    task = std::move(t);
    finished = 0;
    ++posted;
  }
  posted_cv.notify_all();
}

void LanguageModel::Ranks::wait() {
  std::unique_lock<std::mutex> lock(mutex);
  done_cv.wait(lock, [&] { return finished == models.size(); });
}

void LanguageModel::lead_ranks(std::vector<std::unique_ptr<LanguageModel>> others,
                               std::shared_ptr<Communicator> group) {
  ONYX_CHECK(!ranks_, "this model already leads a tensor-parallel group");
  ONYX_CHECK(group && group->world() == static_cast<int>(others.size()) + 1, "a group of ",
             group ? group->world() : 0, " ranks cannot be led with ", others.size(), " other ranks");
  ONYX_CHECK(!batch_ && !slots_, "lead_ranks comes before the first generation or open_slots");
  for (const auto& m : others) ONYX_CHECK(m && !m->ranks_, "each other rank is a model of its own, leading none");
  ranks_ = std::make_unique<Ranks>(std::move(others), std::move(group));
}

int LanguageModel::tensor_parallel_ranks() const {
  return ranks_ ? static_cast<int>(ranks_->models.size()) + 1 : 1;
}

}  // namespace onyx::genai
