// The capture state of one input-shape signature (DESIGN section 2, "a captured graph
// is an object that owns its world"): its warm-up count, its input and output slots,
// the captured graph with the staging it retains, and the replay contract checked
// before every replay. It knows the backend and a callback that records the steps,
// and nothing else of the executor.
//
//   run 1          eager warm-up (library handles, lazy module loading), inputs via the slots
//   run 2          capture the steps into a graph, then replay it
//   later runs     check the contract (same arena, staging untouched), write the inputs, replay
//   blocked        eager every run, said once (auto) or an error (require)
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "exec/notices.h"
#include "onyx/session.h"

namespace onyx {

class SignatureCapture {
 public:
  using AfterStep = std::function<void(const Node&)>;
  // Runs the steps once on `inputs` (per graph input: its slot, or the feed itself
  // where no slot can hold it), writing the groups that hold graph outputs into
  // `output_slots` when given, and calling `after_step` after each step.
  using Record = std::function<void(const std::vector<Tensor>& inputs, const std::map<int, Tensor>* output_slots,
                                    const AfterStep& after_step)>;
  // The device arena the steps use: a graph is valid only for the arena it was captured against.
  struct Arena {
    void* base = nullptr;
    size_t bytes = 0;
    uint64_t generation = 0;
  };
  struct Slot {
    int root = -1;     // the value whose group holds a graph output
    size_t bytes = 0;
  };

  // `blocker` says why the signature cannot be captured ("" when it can).
  SignatureCapture(Backend& backend, CaptureMode mode, bool validate_replays, Notices& notices, CaptureReport& report,
                   std::string signature, std::string blocker, std::vector<ValueType> input_types,
                   std::vector<Slot> output_roots);
  SignatureCapture(const SignatureCapture&) = delete;
  SignatureCapture& operator=(const SignatureCapture&) = delete;

  // One run: writes the feeds into the input slots and runs eagerly, captures, or
  // replays. Returns true when it replayed (the outputs are then in output_slots()).
  // `bound` holds the caller's tensors for some output groups (by root value id): runs
  // write those groups there, and a graph captured with them is replayed only while the
  // same tensors are bound (else it is captured again). A device feed that is one of those
  // tensors (a KV cache fed and updated in place) is read where it is, not copied into a slot.
  bool run(const std::vector<Tensor>& feeds, const Arena& arena, const Record& record,
           const std::map<int, Tensor>& bound = {});

  // The device tensors the graph reads its inputs from (allocated on first need, side by side
  // in one allocation, so that host feeds of neighbouring slots go over in one copy).
  // They outlive a released graph, so a caller that writes into them stays valid.
  const std::vector<Tensor>& input_slots();
  const std::map<int, Tensor>& output_slots() const { return output_slots_; }
  bool has_graph() const { return graph_ != nullptr; }
  size_t retained_staging_bytes() const { return graph_ ? graph_->retained_staging_bytes() : 0; }
  // Drops the graph and its output slots; the next run captures again.
  void release_graph();

 private:
  std::vector<Tensor> write_inputs(const std::vector<Tensor>& feeds, const std::map<int, Tensor>& bound);
  void run_eagerly(const std::vector<Tensor>& inputs, const Record& record, const std::map<int, Tensor>& bound);
  void check_contract(const Arena& arena);
  [[noreturn]] void contract_broken(const std::string& why);
  bool capture(const std::vector<Tensor>& inputs, const Arena& arena, const Record& record,
               const std::map<int, Tensor>& bound);
  bool same_binding(const std::map<int, Tensor>& bound, const std::vector<Tensor>& inputs) const;

  Backend& backend_;
  CaptureMode mode_;
  bool validate_;
  Notices& notices_;
  CaptureReport& report_;
  std::string signature_, blocker_;
  std::vector<ValueType> input_types_;
  std::vector<Slot> output_roots_;
  size_t runs_ = 0;
  std::vector<Tensor> input_slots_;
  std::vector<size_t> slot_offsets_;  // each slot's byte offset in the slots' allocation
  std::vector<char> host_run_;        // host feeds of neighbouring slots gathered for one copy
  std::map<int, Tensor> output_slots_;
  std::map<int, const void*> adopted_;        // output groups the graph writes into the caller's tensors
  std::map<size_t, const void*> adopted_in_;  // inputs the graph reads from the caller's tensors
  std::unique_ptr<CapturedWork> graph_;
  Arena captured_against_;
};

}  // namespace onyx
