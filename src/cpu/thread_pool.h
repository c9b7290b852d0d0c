// The intra-op thread pool: a session's heavy CPU kernels (matrix products, convolutions,
// softmax, normalizations, large elementwise ops) split their work over it. A session owns one
// pool of `intra_op_threads` threads (the caller's thread is one of them) and makes it the
// current pool of the thread that runs it (PoolScope); kernels reach it through parallel_for,
// so no kernel signature carries it. Constant folding at load runs with no pool: serially.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace onyx::cpu {

// A reference to a callable of (begin, end) for work done before the call that takes it
// returns. Unlike std::function it never copies the callable: a lambda that captures more
// than two references would be copied to the heap on every call of a kernel.
class ChunkFn {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, ChunkFn> && std::is_invocable_v<F&, int64_t, int64_t>)
  ChunkFn(F&& f) noexcept  // NOLINT: implicit, as std::function's
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, int64_t begin, int64_t end) { (*static_cast<std::remove_reference_t<F>*>(o))(begin, end); }) {}
  void operator()(int64_t begin, int64_t end) const { call_(object_, begin, end); }

 private:
  void* object_;
  void (*call_)(void*, int64_t, int64_t);
};

// The CPUs this process may run on (its affinity mask), at least 1.
int available_cpus();

class ThreadPool {
 public:
  // `threads` >= 1 counts the calling thread: threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over chunks covering [0, n) of at least `grain` items each (at most
  // 4 per thread, their sizes differing by at most one item), on the
  // calling thread and the workers, and returns when every chunk is done. Thread j (the caller
  // 0, worker i i + 1) first takes the j-th of `threads` equal runs of chunks, in order, then
  // what is left of the others: kernels that split the same items the same way (a product by
  // output pixels, the depthwise convolution after it by bands of rows) find their part of the
  // data in their own core's caches. The first
  // exception a chunk throws is rethrown here (the remaining chunks still run). A second
  // caller while the pool is busy (two runs of one session at once), or a call from inside
  // a chunk, runs serially on its own thread.
  void run(int64_t n, int64_t grain, ChunkFn fn);

 private:
  void worker_loop(int self);
  void run_chunks(int self);

  // A thread's run of chunks in the current job: the next one to take, and its end.
  struct alignas(64) Run {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };

  std::vector<std::thread> workers_;
  std::mutex busy_;  // held by the caller of run() for the whole job
  std::mutex m_;
  std::condition_variable wake_, done_;
  // The current job (valid while a generation is in flight).
  const ChunkFn* fn_ = nullptr;
  int64_t n_ = 0, parts_ = 1;  // chunk i is [i n / parts, (i + 1) n / parts)
  std::unique_ptr<Run[]> runs_;  // one per thread
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> open_{0};  // the generation workers may still enter (0: none)
  std::atomic<int> active_{0};     // workers inside the current job
  bool stop_ = false;
  std::exception_ptr error_;
};

// The pool of the calling thread (null: run serially).
ThreadPool* current_pool();

// Makes `pool` the calling thread's current pool for its lifetime (restores the previous one).
class PoolScope {
 public:
  explicit PoolScope(ThreadPool* pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  ThreadPool* previous_;
};

// The number of threads parallel_for may use here (1 with no pool or inside a chunk).
int parallelism();

// fn(begin, end) over [0, n) on the current pool, serially when there is none or when the
// work is too small to split (n <= grain).
void parallel_for(int64_t n, int64_t grain, ChunkFn fn);

// How many chunks a matrix product's `row_blocks` blocks of rows split into, its tasks being
// (column tile, chunk of row blocks): one chunk while its `col_tiles` column tiles give every
// thread four tasks, more when they do not (up to one per row block).
int64_t row_chunks(int64_t col_tiles, int64_t row_blocks);

}  // namespace onyx::cpu
