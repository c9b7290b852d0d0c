#include "genai/pipeline_memory.h"

#include <mutex>

namespace onyx::genai {

namespace {

// Host memory of one component, counted under its lease: the lease grows before the bytes
// are asked of the system (an allocation past the budget is refused naming every holder).
class LeasedHostAllocator final : public Allocator {
 public:
  LeasedHostAllocator(std::unique_ptr<MemoryGovernor::Lease> lease, size_t budget)
      : lease_(std::move(lease)), inner_(make_cpu_allocator()) {
    inner_->set_budget(budget);
  }
  void* allocate(size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      lease_->resize(lease_->bytes() + bytes);
    }
    try {
      return inner_->allocate(bytes);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      lease_->resize(lease_->bytes() - bytes);
      throw;
    }
  }
  void deallocate(void* ptr, size_t bytes) override {
    inner_->deallocate(ptr, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    lease_->resize(lease_->bytes() - bytes);
  }
  std::string name() const override { return lease_->holder(); }
  AllocatorStats stats() const override { return inner_->stats(); }
  void reset_high_water() override { inner_->reset_high_water(); }

 private:
  std::mutex mu_;
  std::unique_ptr<MemoryGovernor::Lease> lease_;
  std::shared_ptr<CpuAllocator> inner_;
};

// The pipeline's backend as one component sees it: the same device, stream and kernels, with
// the component's own pools for its values and its weights.
class ComponentBackend final : public Backend {
 public:
  ComponentBackend(Backend& inner, const std::string& name)
      : inner_(inner), values_(inner.make_pool(name + " values")), weights_(inner.make_pool(name + " weights")) {}
  Device device() const override { return inner_.device(); }
  Allocator& allocator() override { return *values_; }
  Allocator& weights_allocator() override { return *weights_; }
  std::shared_ptr<Allocator> make_pool(const std::string& holder) override { return inner_.make_pool(holder); }
  MemoryGovernor& governor() override { return inner_.governor(); }
  size_t alignment() const override { return inner_.alignment(); }
  bool has_kernel(const Node& node) const override { return inner_.has_kernel(node); }
  KernelFn find_kernel(const Node& node, const std::vector<ValueType>& inputs, std::string* why_not) override {
    return inner_.find_kernel(node, inputs, why_not);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { inner_.copy_from_host(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { inner_.copy_to_host(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { inner_.download(dst, src, bytes); }
  void copy_on_device(void* dst, const void* src, size_t bytes) override { inner_.copy_on_device(dst, src, bytes); }
  void copy_many_on_device(const std::vector<DeviceCopy>& copies) override { inner_.copy_many_on_device(copies); }
  std::string finish() override { return inner_.finish(); }
  std::unique_ptr<DeviceReadback> make_readback(size_t capacity) override { return inner_.make_readback(capacity); }
  void* stream_handle() override { return inner_.stream_handle(); }
  std::string memory_report() const override { return inner_.memory_report(); }
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& record) override { return inner_.capture(record); }
  std::string take_capture_violation() override { return inner_.take_capture_violation(); }
  void poison(void* ptr, size_t bytes) override { inner_.poison(ptr, bytes); }
  void zero(void* ptr, size_t bytes) override { inner_.zero(ptr, bytes); }

 private:
  Backend& inner_;
  std::shared_ptr<Allocator> values_, weights_;
};

}  // namespace

size_t graph_weight_bytes(const Graph& g) {
  size_t n = 0;
  for (const auto& [id, t] : g.initializers) n += t.bytes();
  return n;
}

std::unique_ptr<Backend> component_backend(Backend& inner, const std::string& name) {
  return std::make_unique<ComponentBackend>(inner, name);
}

PipelineMemory::PipelineMemory(Device device, const SessionOptions& options) : device_(device) {
  backend_ = make_backend(device_, options);
  if (backend_) {
    governor_ = std::shared_ptr<MemoryGovernor>(&backend_->governor(), [](MemoryGovernor*) {});
  } else {
    const size_t budget = options.host_memory_budget_bytes ? options.host_memory_budget_bytes
                                                           : default_host_memory_budget();
    governor_ = MemoryGovernor::create("cpu", budget);
  }
}

PipelineMemory::~PipelineMemory() {
  components_.clear();  // their pools return to the governor before the backend goes
}

// A device pool leases from its governor in whole blocks (backends/cuda/device_allocator.h's
// default block): a component's weights take their size rounded up to it.
constexpr size_t kDevicePoolBlockBytes = 64ull << 20;

void admit_weights(const MemoryGovernor& governor, const Device& device, bool device_pools,
                   const std::vector<std::pair<std::string, size_t>>& weights) {
  size_t need = 0;
  for (const auto& [name, bytes] : weights)
    need += device_pools ? (bytes + kDevicePoolBlockBytes - 1) / kDevicePoolBlockBytes * kDevicePoolBlockBytes : bytes;
  const size_t budget = governor.budget(), held = governor.leased();
  if (held + need <= budget) return;
  std::string table;
  for (const auto& [name, bytes] : weights)
    table += cat("  ", name, " weights: ", format_bytes(bytes), " (", bytes, " B",
                 device_pools ? ", leased in 64 MiB blocks" : "", ")\n");
  throw Error(cat("the pipeline does not fit the memory budget of ", device.str(), ": its weights need ",
                  format_bytes(need), " and ", format_bytes(budget > held ? budget - held : 0),
                  " is left; nothing was placed. The components:\n", table, "held on ", device.str(), " already:\n",
                  governor.report()));
}

void PipelineMemory::admit(const std::vector<std::pair<std::string, size_t>>& weights) const {
  admit_weights(*governor_, device_, backend_ != nullptr, weights);
}

PipelineMemory::Component& PipelineMemory::add(const std::string& name, size_t weight_bytes) {
  auto c = std::make_unique<Component>();
  c->name = name;
  c->weight_bytes = weight_bytes;
  if (backend_) {
    c->host = make_cpu_allocator();
    c->backend = std::make_unique<ComponentBackend>(*backend_, name);
  } else {
    c->weights_lease = governor_->lease(name + " weights", weight_bytes);
    c->host = std::make_shared<LeasedHostAllocator>(governor_->lease(name + " values", 0), governor_->budget());
  }
  components_.push_back(std::move(c));
  return *components_.back();
}

std::shared_ptr<Allocator> PipelineMemory::pool(const std::string& holder) {
  if (backend_) return backend_->make_pool(holder);
  return std::make_shared<LeasedHostAllocator>(governor_->lease(holder, 0), governor_->budget());
}

std::string PipelineMemory::report() const { return governor_->report() + "\n"; }

}  // namespace onyx::genai
