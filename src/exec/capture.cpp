#include "exec/capture.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace onyx {

SignatureCapture::SignatureCapture(Backend& backend, CaptureMode mode, bool validate_replays, Notices& notices,
                                   CaptureReport& report, std::string signature, std::string blocker,
                                   std::vector<ValueType> input_types, std::vector<Slot> output_roots)
    : backend_(backend),
      mode_(mode),
      validate_(validate_replays),
      notices_(notices),
      report_(report),
      signature_(std::move(signature)),
      blocker_(std::move(blocker)),
      input_types_(std::move(input_types)),
      output_roots_(std::move(output_roots)) {}

const std::vector<Tensor>& SignatureCapture::input_slots() {
  if (!input_slots_.empty() || input_types_.empty()) return input_slots_;
  const size_t align = std::max<size_t>(backend_.alignment(), 16);
  size_t total = 0;
  slot_offsets_.assign(input_types_.size(), 0);
  for (size_t i = 0; i < input_types_.size(); ++i) {
    const ValueType& t = input_types_[i];
    if (dtype_is_object(t.dtype)) continue;
    slot_offsets_[i] = total;
    total += (static_cast<size_t>(t.shape.to_shape().numel()) * dtype_size(t.dtype) + align - 1) / align * align;
  }
  const Tensor all(DType::kUInt8, Shape{static_cast<int64_t>(std::max<size_t>(total, 1))}, backend_.allocator());
  char* base = static_cast<char*>(all.raw());
  for (size_t i = 0; i < input_types_.size(); ++i) {
    const ValueType& t = input_types_[i];
    input_slots_.push_back(dtype_is_object(t.dtype) ? Tensor()
                                                     : Tensor::borrow(t.dtype, t.shape.to_shape(),
                                                                      base + slot_offsets_[i], all.storage(),
                                                                      all.device()));
  }
  return input_slots_;
}

void SignatureCapture::release_graph() {
  graph_.reset();
  output_slots_.clear();
  adopted_.clear();
  adopted_in_.clear();
}

bool SignatureCapture::same_binding(const std::map<int, Tensor>& bound, const std::vector<Tensor>& inputs) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool adopted = inputs[i].defined() && i < input_slots_.size() && inputs[i].raw() != input_slots_[i].raw();
    auto it = adopted_in_.find(i);
    if (adopted != (it != adopted_in_.end()) || (adopted && it->second != inputs[i].raw())) return false;
  }
  if (bound.size() != adopted_.size()) return false;
  for (const auto& [root, t] : bound) {
    auto it = adopted_.find(root);
    if (it == adopted_.end() || it->second != t.raw()) return false;
  }
  return true;
}

// A device feed that is also a bound output's tensor: read in place (never copied into a slot).
static bool fed_and_bound(const Tensor& feed, const std::map<int, Tensor>& bound) {
  if (feed.on_host() || !feed.storage()) return false;
  for (const auto& [root, t] : bound)
    if (t.storage() == feed.storage()) return true;
  return false;
}

// Each feed goes into its slot on the stream (nothing to do when the feed is the slot);
// returns what the steps read per input. Host feeds of neighbouring slots are gathered on the
// host and go over in one copy (a decode step's ids, positions, sampling options and so on
// are one copy, not one each); device feeds go over together (a bound past cache of 32
// tensors is one launch, not 32 copies at 5-8 us of the host's time each).
std::vector<Tensor> SignatureCapture::write_inputs(const std::vector<Tensor>& feeds,
                                                   const std::map<int, Tensor>& bound) {
  const std::vector<Tensor>& slots = input_slots();
  std::vector<Tensor> inputs(slots.size());
  std::vector<Backend::DeviceCopy> device_copies;
  size_t run_first = 0, run_end = 0;  // the host feeds gathered so far: slots [run_first, run_end)
  auto flush = [&] {
    if (run_end == run_first) return;
    const size_t from = slot_offsets_[run_first];
    const size_t last = run_end - 1;
    const size_t bytes = slot_offsets_[last] + feeds[last].bytes() - from;
    if (run_end - run_first == 1) {
      backend_.copy_from_host(slots[run_first].raw(), feeds[run_first].raw(), bytes);
    } else {
      host_run_.resize(std::max(host_run_.size(), bytes));
      for (size_t k = run_first; k < run_end; ++k)
        std::memcpy(host_run_.data() + (slot_offsets_[k] - from), feeds[k].raw(), feeds[k].bytes());
      backend_.copy_from_host(slots[run_first].raw(), host_run_.data(), bytes);
    }
    run_first = run_end = 0;
  };
  for (size_t i = 0; i < slots.size(); ++i) {
    ONYX_CHECK(i < feeds.size() && feeds[i].defined(), "a captured run needs every input fed; input ", i, " was not");
    const Tensor& feed = feeds[i];
    const Tensor& slot = slots[i];
    if (!slot.defined() || fed_and_bound(feed, bound)) {  // strings stay on the host; a bound cache is read in place
      inputs[i] = feed;
      flush();
      continue;
    }
    ONYX_ASSERT(feed.shape() == slot.shape() && feed.dtype() == slot.dtype(), "feed ", feed.type_str(),
                " does not fit its slot ", slot.type_str());
    inputs[i] = slot;
    if (feed.raw() == slot.raw() || feed.bytes() == 0) {
      flush();
      continue;
    }
    if (!feed.on_host()) {
      flush();
      device_copies.push_back({slot.raw(), feed.raw(), feed.bytes()});
      continue;
    }
    if (run_end != i) flush();  // not the neighbour of the run gathered so far
    if (run_end == run_first) run_first = i;
    run_end = i + 1;
  }
  flush();
  backend_.copy_many_on_device(device_copies);
  return inputs;
}

void SignatureCapture::run_eagerly(const std::vector<Tensor>& inputs, const Record& record,
                                   const std::map<int, Tensor>& bound) {
  ++report_.eager_runs;
  record(inputs, bound.empty() ? nullptr : &bound, nullptr);
}

// A graph made against another arena is captured again (a larger signature moved the
// shared arena: expected); one whose host staging changed under it is a bug, never replayed.
void SignatureCapture::check_contract(const Arena& arena) {
  if (!graph_) return;
  if (captured_against_.base != arena.base || captured_against_.generation != arena.generation) {
    release_graph();
    ++report_.recaptures;
    return;
  }
  if (std::string broken = graph_->check_staging(); !broken.empty()) {
    ++report_.recaptures;
    contract_broken(broken);
  }
}

void SignatureCapture::contract_broken(const std::string& why) {
  release_graph();
  throw Error(cat("replay contract broken for inputs ", signature_, ": ", why,
                  "; the graph was dropped and the next run captures it again"));
}

// Returns false when the capture failed under auto: the signature runs eagerly from now on.
bool SignatureCapture::capture(const std::vector<Tensor>& inputs, const Arena& arena, const Record& record,
                               const std::map<int, Tensor>& bound) {
  for (const auto& [root, t] : bound) {  // the graph writes these groups where the caller wants them
    output_slots_[root] = t;
    adopted_[root] = t.raw();
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && (i >= input_slots_.size() || inputs[i].raw() != input_slots_[i].raw()))
      adopted_in_[i] = inputs[i].raw();
  for (const Slot& s : output_roots_)
    if (!output_slots_.count(s.root))
      output_slots_[s.root] = Tensor(DType::kUInt8, Shape{static_cast<int64_t>(s.bytes)}, backend_.allocator());
  captured_against_ = arena;
  AfterStep check = [this](const Node& node) {
    std::string v = backend_.take_capture_violation();
    ONYX_CHECK(v.empty(), node.describe(), ": ", v);
  };
  auto t0 = std::chrono::steady_clock::now();
  try {
    graph_ = backend_.capture([&] { record(inputs, &output_slots_, check); });
  } catch (const Error& e) {
    release_graph();
    if (mode_ == CaptureMode::kRequire) throw;
    blocker_ = cat("its capture failed: ", e.what());
    notices_.say_once(signature_, cat("onyx: inputs ", signature_, " run eagerly, not from a CUDA graph: ", blocker_));
    return false;
  }
  report_.capture_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++report_.captures;
  return true;
}

bool SignatureCapture::run(const std::vector<Tensor>& feeds, const Arena& arena, const Record& record,
                           const std::map<int, Tensor>& bound) {
  if (!blocker_.empty()) {
    ONYX_CHECK(mode_ != CaptureMode::kRequire, "capture=require: inputs ", signature_, " cannot be captured: ", blocker_);
    notices_.say_once(signature_, cat("onyx: inputs ", signature_, " run eagerly, not from a CUDA graph: ", blocker_));
    run_eagerly(write_inputs(feeds, bound), record, bound);
    return false;
  }
  if (runs_++ == 0) {
    run_eagerly(write_inputs(feeds, bound), record, bound);
    return false;
  }
  check_contract(arena);
  std::vector<Tensor> inputs = write_inputs(feeds, bound);
  if (graph_ && !same_binding(bound, inputs)) {  // the graph reads or writes other tensors than these: capture again
    release_graph();
    ++report_.recaptures;
  }
  if (!graph_ && !capture(inputs, arena, record, bound)) {
    run_eagerly(inputs, record, bound);
    return false;
  }
  if (validate_) {
    // Validation mode: the staged bytes hash as at capture, and every intermediate starts
    // as NaN, so a kernel reading what no earlier step wrote shows up.
    if (std::string changed = graph_->verify_staging_checksums(); !changed.empty()) contract_broken(changed);
    if (arena.base) backend_.poison(arena.base, arena.bytes);
  }
  graph_->replay();
  ++report_.replays;
  return true;
}

}  // namespace onyx
