#include "cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace onyx::cpu {

namespace {

thread_local ThreadPool* t_pool = nullptr;
thread_local bool t_in_chunk = false;

// How long a worker (or the caller, waiting for the workers) spins before it sleeps: about
// 0.1 ms. Kernels come back to back in a run; a futex wake-up per kernel would cost more
// than most elementwise kernels take.
constexpr int kSpins = 2000;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int threads) {
  const int workers = std::max(threads, 1) - 1;
  runs_ = std::make_unique<Run[]>(static_cast<size_t>(workers) + 1);
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this, i] { worker_loop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(int self) {
  const bool was_in = t_in_chunk;
  t_in_chunk = true;
  const int threads = this->threads();
  for (int k = 0; k < threads; ++k) {  // its own run first, then the others' left-overs
    Run& run = runs_[(self + k) % threads];
    for (;;) {
      const int64_t part = run.next.fetch_add(1, std::memory_order_relaxed);
      if (part >= run.end) break;
      try {
        (*fn_)(part * n_ / parts_, (part + 1) * n_ / parts_);
      } catch (...) {
        std::lock_guard<std::mutex> lk(m_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }
  t_in_chunk = was_in;
}

void ThreadPool::worker_loop(int self) {
  uint64_t seen = 0;
  for (;;) {
    bool changed = false;
    for (int i = 0; i < kSpins; ++i) {
      if (generation_.load(std::memory_order_acquire) != seen) {
        changed = true;
        break;
      }
      relax();
    }
    if (!changed) {
      std::unique_lock<std::mutex> lk(m_);
      wake_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
    }
    seen = generation_.load(std::memory_order_acquire);
    // Enter the job only while it is open: a worker that wakes after the caller has taken
    // every chunk leaves it alone, so the caller never waits for a thread that is not running.
    // (Sequentially consistent with the caller's close-then-count: one of the two sees the other.)
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (open_.load(std::memory_order_seq_cst) == seen) run_chunks(self);
    if (active_.fetch_sub(1, std::memory_order_seq_cst) == 1) {
      std::lock_guard<std::mutex> lk(m_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t n, int64_t grain, ChunkFn fn) {
  if (n <= 0) return;
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (workers_.empty() || t_in_chunk || !busy.owns_lock()) {
    fn(0, n);
    return;
  }
  // Exactly `parts` chunks whose sizes differ by at most one item. (Chunks of ceil(n / parts)
  // items came out fewer and odd: mobilenet_v3's 14 x 14 products, 7 column tiles x 2 row
  // chunks = 14 tasks, as 7 chunks of 2: 8 tasks against 6 on two threads.)
  const int64_t parts = std::min<int64_t>(threads() * 4, std::max<int64_t>(1, n / std::max<int64_t>(grain, 1)));
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lk(m_);
    fn_ = &fn;
    n_ = n;
    parts_ = parts;
    // Thread j's run: chunks [ceil(j parts / T), ceil((j + 1) parts / T)); with fewer chunks than
    // threads the caller's run is never the empty one (it need not wait for a worker to wake).
    const int64_t t = threads();
    for (int64_t j = 0; j < t; ++j) {
      runs_[j].next.store((j * parts + t - 1) / t, std::memory_order_relaxed);
      runs_[j].end = ((j + 1) * parts + t - 1) / t;
    }
    error_ = nullptr;
    gen = generation_.load(std::memory_order_relaxed) + 1;
    open_.store(gen, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks(0);
  // Every chunk is taken: close the job, then wait for the workers inside it (each is running
  // a chunk it took, or leaving).
  open_.store(0, std::memory_order_seq_cst);
  bool done = false;
  for (int i = 0; i < kSpins && !done; ++i) {
    done = active_.load(std::memory_order_seq_cst) == 0;
    if (!done) relax();
  }
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lk(m_);
    done_.wait(lk, [&] { return active_.load(std::memory_order_seq_cst) == 0; });
    fn_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

ThreadPool* current_pool() { return t_pool; }

PoolScope::PoolScope(ThreadPool* pool) : previous_(t_pool) { t_pool = pool; }
PoolScope::~PoolScope() { t_pool = previous_; }

int parallelism() { return t_pool && !t_in_chunk ? t_pool->threads() : 1; }

void parallel_for(int64_t n, int64_t grain, ChunkFn fn) {
  if (n <= 0) return;
  if (!t_pool || t_in_chunk || n <= grain || t_pool->threads() == 1) {
    fn(0, n);
    return;
  }
  t_pool->run(n, grain, fn);
}

int64_t row_chunks(int64_t col_tiles, int64_t row_blocks) {
  const int threads = parallelism();
  if (threads <= 1 || col_tiles >= 4 * threads) return 1;
  return std::max<int64_t>(1, std::min<int64_t>(row_blocks, (4 * threads + col_tiles - 1) / col_tiles));
}

}  // namespace onyx::cpu
