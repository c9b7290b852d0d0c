// What the commands of the `onyx` program share: option parsing, random inputs,
// summaries of tensors and sizes.
#pragma once

#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "onyx/session.h"

namespace onyx::cli {

// A mistake in the command line: the program prints it with the usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Walks a command's arguments: `next()` is the current option, `value()` its value.
class Args {
 public:
  explicit Args(const std::vector<std::string>& args) : args_(args) {}
  bool done() const { return i_ >= args_.size(); }
  const std::string& next() { return args_[i_++]; }
  std::string value() {
    if (i_ >= args_.size()) throw UsageError(cat(args_[i_ - 1], " needs a value"));
    return args_[i_++];
  }

 private:
  const std::vector<std::string>& args_;
  size_t i_ = 0;
};

// NAME=VALUE, as --input, --dim and --shape take them.
std::pair<std::string, std::string> split(const std::string& kv);
int64_t to_int(const std::string& s);
// A file name for value NAME: characters other than letters, digits, '.', '_', '-' become '_'.
std::string safe_file_name(const std::string& name);
std::string human_bytes(double bytes);
// "min .. max .. mean .. [first five]" of a host tensor.
std::string summarize(const Tensor& t);
struct Stats {
  double min = 0, max = 0, mean = 0;
  int64_t nan = 0;
};
Stats stats_of(const Tensor& t);
// Random values for an input: normal floats, small integers, symbolic dims from `dims` (default 1).
Tensor random_input(const ValueDesc& d, const std::map<std::string, int64_t>& dims, std::mt19937_64& rng);

// A tensor-parallel group of `ranks` for `onyx generate` and `onyx serve`: threads of this
// process on the CPU, or one GPU a rank from the one `session.device` names (cuda:K .. cuda:K+N-1,
// joined by NCCL: ONYX_NCCL_LIBRARY, else libnccl.so.2). Sets the session's world, group and
// rank 0's device; the devices of the ranks come back in order.
std::vector<std::string> tensor_parallel_group(int ranks, SessionOptions& session);

int cmd_info(const std::string& path, const std::vector<std::string>& args);
int cmd_plan(const std::string& path, const std::vector<std::string>& args);
int cmd_run(const std::string& path, const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);  // tokenize_cmd.cpp
int cmd_generate(const std::vector<std::string>& args);  // generate_cmd.cpp
int cmd_serve(const std::vector<std::string>& args);     // serve_cmd.cpp

}  // namespace onyx::cli
