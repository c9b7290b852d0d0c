#include "onyx/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "onyx/error.h"

namespace onyx {

namespace {

// One rendezvous per collective: each rank posts its buffer and waits until all have (phase
// 1), then reads the others' buffers and waits until all have read (phase 2), so no rank
// returns, and reuses its buffer, while another still reads it.
class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(int world, std::chrono::milliseconds timeout)
      : world_(world), timeout_(timeout), posted_(world, nullptr) {}
  int world() const override { return world_; }

  void all_reduce_sum(int rank, const float* x, float* y, size_t count) override {
    std::vector<float> sum(count, 0.f);
    exchange(rank, x, "AllReduce", [&] {
      for (int r = 0; r < world_; ++r) {
        const float* p = static_cast<const float*>(posted_[r]);
        for (size_t i = 0; i < count; ++i) sum[i] += p[i];
      }
    });
    std::copy(sum.begin(), sum.end(), y);
  }

  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) return;
    broken_ = true;
    broken_why_ = why;
    cv_.notify_all();
  }

  void reset() override {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_ = false;
    broken_why_.clear();
    arrived_ = left_ = 0;
    phase1_done_ = calls_;  // a collective cut short counts as done: the next one starts afresh
    std::fill(posted_.begin(), posted_.end(), nullptr);
  }

  void all_gather(int rank, const void* x, void* y, size_t bytes) override {
    exchange(rank, x, "AllGather", [&] {
      for (int r = 0; r < world_; ++r)
        std::copy_n(static_cast<const char*>(posted_[r]), bytes, static_cast<char*>(y) + r * bytes);
    });
  }

 private:
  template <class Read>
  void exchange(int rank, const void* x, const char* what, Read read) {
    ONYX_CHECK(rank >= 0 && rank < world_, what, ": rank ", rank, " is outside the group of ", world_);
    std::unique_lock<std::mutex> lock(mutex_);
    ONYX_CHECK(!broken_, what, " on rank ", rank, ": the tensor-parallel group is broken (", broken_why_, ")");
    const uint64_t call = calls_;
    posted_[rank] = x;
    wait_phase(lock, rank, what, call, arrived_, /*phase=*/1);
    read();  // every buffer is posted and stays until phase 2 completes
    wait_phase(lock, rank, what, call, left_, /*phase=*/2);
  }

  // Counts this rank in; the last rank in wakes the others. Throws when the others do not come
  // within the timeout (and marks the group broken).
  void wait_phase(std::unique_lock<std::mutex>& lock, int rank, const char* what, uint64_t call, int& count,
                  int phase) {
    if (++count == world_) {
      count = 0;
      if (phase == 1) ++phase1_done_;
      else ++calls_;
      cv_.notify_all();
      return;
    }
    const uint64_t target = call + 1;
    const auto done = [&] { return phase == 1 ? phase1_done_ >= target : calls_ >= target; };
    const bool ok = cv_.wait_for(lock, timeout_, [&] { return broken_ || done(); });
    if (done()) return;
    if (!ok) {
      broken_ = true;
      broken_why_ = cat("rank ", rank, " waited ", timeout_.count(), " ms at collective #", call + 1, " (", what,
                        ") for ", world_ - count, " other rank(s) that did not come");
      cv_.notify_all();
    }
    throw Error(cat(what, " on rank ", rank, ": ", ok ? "the tensor-parallel group is broken (" + broken_why_ + ")"
                                                      : broken_why_));
  }

  const int world_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<const void*> posted_;
  int arrived_ = 0, left_ = 0;
  uint64_t calls_ = 0, phase1_done_ = 0;
  bool broken_ = false;
  std::string broken_why_;
};

std::mutex g_registry_mutex;
std::map<int64_t, std::weak_ptr<Communicator>> g_registry;
int64_t g_next_id = 1;

}  // namespace

void Communicator::all_reduce_sum_device(int, const void*, void*, size_t, DType, void*) {
  throw Error("this tensor-parallel group's ranks are host threads: its collectives take host memory, not a GPU's "
              "(give GPU sessions a group of make_nccl_communicator)");
}

void Communicator::all_gather_device(int, const void*, void*, size_t, void*) {
  throw Error("this tensor-parallel group's ranks are host threads: its collectives take host memory, not a GPU's "
              "(give GPU sessions a group of make_nccl_communicator)");
}

std::shared_ptr<Communicator> make_thread_communicator(int world, std::chrono::milliseconds timeout) {
  ONYX_CHECK(world >= 1, "a tensor-parallel group needs at least one rank, got ", world);
  ONYX_CHECK(timeout.count() > 0, "the collectives' timeout must be positive");
  return std::make_shared<ThreadCommunicator>(world, timeout);
}

int64_t register_communicator(const std::shared_ptr<Communicator>& c) {
  ONYX_CHECK(c != nullptr, "no communicator to register");
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  for (auto it = g_registry.begin(); it != g_registry.end();) {  // the same one again: its number
    if (it->second.expired()) {
      it = g_registry.erase(it);
    } else if (it->second.lock() == c) {
      return it->first;
    } else {
      ++it;
    }
  }
  g_registry[g_next_id] = c;
  return g_next_id++;
}

std::shared_ptr<Communicator> find_communicator(int64_t id) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  auto it = g_registry.find(id);
  return it == g_registry.end() ? nullptr : it->second.lock();
}

}  // namespace onyx
