// One device decision and one budget for the components of a pipeline (DESIGN L8, L9). The
// pipeline resolves its device once and makes one backend; each component (encoder, decoder)
// gets its memory under holders of its own name in that device's one governor:
//   on a GPU   "<component> weights" and "<component> values" are pools of the backend's
//              governor (a Backend view whose allocators are those pools), so every byte the
//              component's executors place there is leased under its name;
//   on the CPU the pipeline keeps a governor of the host budget: "<component> weights" leases
//              the bytes of its initializers, "<component> values" counts every allocation its
//              executors make (arenas, run-time values, outputs).
// A component's KV cache is a pool of its own, "<component> kv cache", on either device.
// Before any component is placed, admit() checks that the weights of all of them fit; a
// pipeline that does not is refused then, with the table of what it would hold.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "model/ir.h"
#include "onyx/governor.h"
#include "onyx/options.h"

namespace onyx::genai {

// The bytes of a graph's initializers (a component's weights).
size_t graph_weight_bytes(const Graph& g);

// The backend `inner` as component `name` sees it: the same device, stream and kernels, its
// values and weights in pools of their own ("<name> values", "<name> weights").
std::unique_ptr<Backend> component_backend(Backend& inner, const std::string& name);

// Refuses a set of components (an Error with the table of their weights, the holders of
// `governor` already and its budget) unless all their weights fit what is left; `device_pools`:
// the weights are leased in a device pool's whole blocks.
void admit_weights(const MemoryGovernor& governor, const Device& device, bool device_pools,
                   const std::vector<std::pair<std::string, size_t>>& weights);

class PipelineMemory {
 public:
  // What one component runs with: the host allocator of its executors and, on a GPU, the
  // backend view whose allocators are its pools (null on the CPU).
  struct Component {
    std::string name;
    size_t weight_bytes = 0;
    std::shared_ptr<Allocator> host;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<MemoryGovernor::Lease> weights_lease;  // the CPU's
    Backend* backend_or_null() const { return backend.get(); }
  };

  PipelineMemory(Device device, const SessionOptions& options);
  ~PipelineMemory();

  Device device() const { return device_; }
  Backend* backend() const { return backend_.get(); }
  MemoryGovernor& governor() const { return *governor_; }

  // Refuses the pipeline (an Error with the table of its components' weights, the holders
  // there already and the budget) unless the weights of all components fit what is left.
  void admit(const std::vector<std::pair<std::string, size_t>>& weights) const;
  // The allocators of component `name`, whose weights are `weight_bytes` (admitted first).
  Component& add(const std::string& name, size_t weight_bytes);
  // A pool of the device's memory under a holder of its own (a KV cache).
  std::shared_ptr<Allocator> pool(const std::string& holder);
  // Every holder of the governor, then the budget.
  std::string report() const;

 private:
  Device device_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<MemoryGovernor> governor_;
  std::vector<std::unique_ptr<Component>> components_;
};

}  // namespace onyx::genai
