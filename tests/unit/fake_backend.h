// A backend for tests without a GPU. Its "device" memory is host memory tagged as
// cuda:0 (so tensors there are not on the host and every cross-device path is taken);
// its kernels are the ops' CPU kernels. Under capture it records closures instead of
// running them, and replaying runs the closures again on the same tensors: the same
// contract as a CUDA graph (fixed addresses, inputs read at replay time), so the
// executor's capture state machine can be tested in CI.
#pragma once

#include <cstdlib>
#include <cstring>
#include <set>

#include "backends/backend.h"

namespace onyx::test {

class FakeDeviceAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    ONYX_CHECK(!capturing, "allocating ", bytes, " bytes from the device pool during a capture");
    if (bytes == 0) return nullptr;
    stats_.allocated(bytes);
    return std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  }
  void deallocate(void* p, size_t bytes) override {
    if (!p) return;
    if (capturing) violation = "a device buffer was freed during a capture";
    stats_.freed(bytes);
    std::free(p);
  }
  std::string name() const override { return "fake device"; }
  Device device() const override { return Device::cuda(0); }
  AllocatorStats stats() const override { return stats_; }
  void reset_high_water() override { stats_.high_water_bytes = stats_.in_use_bytes; }

  bool capturing = false;
  std::string violation;

 private:
  AllocatorStats stats_;
};

class FakeBackend;

// What a capture recorded: closures run again at every replay, and the host bytes its
// copies read, retained with it (L1).
class FakeGraph final : public CapturedWork {
 public:
  void replay() override {
    for (auto& op : ops) op();
    ++replays;
  }
  std::string check_staging() const override { return staging_changed ? "a staging buffer was reused" : ""; }
  size_t retained_staging_bytes() const override {
    size_t n = 0;
    for (const auto& s : staging) n += s.size();
    return n;
  }
  std::string verify_staging_checksums() const override { return ""; }
  size_t retained_staging_buffers() const override { return staging.size(); }

  std::vector<std::function<void()>> ops;
  std::vector<std::vector<char>> staging;
  bool staging_changed = false;
  int replays = 0;
};

class FakeBackend final : public Backend {
 public:
  // Ops with a fake kernel; every other op falls back to the CPU.
  std::set<std::string> ops = {"Add",    "Sub",     "Mul",     "Relu", "Tanh",       "Sigmoid",
                               "Neg",    "MatMul",  "Softmax", "Exp",  "CacheUpdate"};
  // Ops whose fake kernel takes scratch memory from the pool each time (capture then fails).
  std::set<std::string> allocating_ops;

  Device device() const override { return Device::cuda(0); }
  Allocator& allocator() override { return *values_; }
  Allocator& weights_allocator() override { return *weights_; }
  std::shared_ptr<Allocator> make_pool(const std::string&) override { return std::make_shared<FakeDeviceAllocator>(); }
  MemoryGovernor& governor() override { return *governor_; }
  size_t alignment() const override { return 256; }
  bool has_kernel(const Node& node) const override { return ops.count(node.op_type) > 0; }

  KernelFn find_kernel(const Node& node, const std::vector<ValueType>&, std::string* why_not) override {
    ++lookups;
    if (!has_kernel(node)) {
      if (why_not) *why_not = cat("no fake kernel for ", node.op_type);
      return {};
    }
    return [this, &node](KernelContext& ctx) {
      // The CPU kernel reads the "device" bytes as host tensors (they are host memory).
      auto as_host = [](const Tensor& t) {
        return Tensor::borrow(t.dtype(), t.shape(), t.raw(), t.storage(), Device::cpu());
      };
      std::vector<Tensor> ins(ctx.num_inputs()), outs(ctx.num_outputs());
      for (size_t i = 0; i < ins.size(); ++i)
        if (ctx.has_input(i)) ins[i] = as_host(ctx.input(i));
      for (size_t o = 0; o < outs.size(); ++o)
        if (ctx.has_output(o)) outs[o] = as_host(ctx.output(o));
      if (allocating_ops.count(node.op_type)) Tensor scratch(DType::kFloat32, Shape{64}, *values_);
      auto work = [&node, ins, outs]() mutable {
        std::vector<const Tensor*> p;
        for (const Tensor& t : ins) p.push_back(t.defined() ? &t : nullptr);
        KernelContext k(node, p, outs, cpu_allocator(), nullptr);
        node.def->kernel(k);
      };
      ++launches;
      if (recording_) recording_->ops.push_back(std::move(work));
      else work();
    };
  }

  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    ++uploads;
    if (!recording_) {
      std::memcpy(dst, src, bytes);
      return;
    }
    // The recorded copy reads its own staging bytes at every replay.
    recording_->staging.emplace_back(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    const char* staged = recording_->staging.back().data();
    recording_->ops.push_back([dst, staged, bytes] { std::memcpy(dst, staged, bytes); });
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    ONYX_CHECK(!recording_, "a synchronizing copy during a capture");
    ++syncs;
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    ONYX_CHECK(!recording_, "a download during a capture");
    ++downloads;
    pending_.push_back({dst, src, bytes});
  }
  void copy_on_device(void* dst, const void* src, size_t bytes) override {
    ++device_copies;
    if (recording_) recording_->ops.push_back([dst, src, bytes] { std::memmove(dst, src, bytes); });
    else std::memmove(dst, src, bytes);
  }
  std::string finish() override {
    ++syncs;
    for (const auto& p : pending_) std::memcpy(p.dst, p.src, p.bytes);
    pending_.clear();
    return "";
  }
  void* stream_handle() override { return nullptr; }
  std::string memory_report() const override { return ""; }

  std::unique_ptr<CapturedWork> capture(const std::function<void()>& record) override {
    auto graph = std::make_unique<FakeGraph>();
    recording_ = graph.get();
    values_->capturing = weights_->capturing = true;
    auto done = [&] {
      recording_ = nullptr;
      values_->capturing = weights_->capturing = false;
    };
    try {
      record();
    } catch (...) {
      done();
      throw;
    }
    done();
    std::string v = take_capture_violation();
    ONYX_CHECK(v.empty(), v);
    ++captures;
    last_graph = graph.get();
    return graph;
  }
  std::string take_capture_violation() override {
    std::string v = values_->violation.empty() ? weights_->violation : values_->violation;
    values_->violation.clear();
    weights_->violation.clear();
    return v;
  }
  void poison(void* ptr, size_t bytes) override {
    ++poisons;
    std::memset(ptr, 0xFF, bytes);
  }
  void zero(void* ptr, size_t bytes) override { std::memset(ptr, 0, bytes); }

  int lookups = 0, launches = 0, uploads = 0, downloads = 0, device_copies = 0, syncs = 0, captures = 0, poisons = 0;
  FakeGraph* last_graph = nullptr;  // the graph of the last capture (owned by the executor)

 private:
  struct Pending {
    void* dst;
    const void* src;
    size_t bytes;
  };
  std::shared_ptr<FakeDeviceAllocator> values_ = std::make_shared<FakeDeviceAllocator>();
  std::shared_ptr<FakeDeviceAllocator> weights_ = std::make_shared<FakeDeviceAllocator>();
  std::shared_ptr<MemoryGovernor> governor_ = MemoryGovernor::create("fake", size_t{1} << 30);
  FakeGraph* recording_ = nullptr;
  std::vector<Pending> pending_;
};

}  // namespace onyx::test
