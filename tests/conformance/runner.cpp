// Runs the ONNX backend tests (model.onnx + test_data_set_*/input_*.pb, output_*.pb; the
// node set and the wheel's other sets, one --data folder each) against onyx and writes a
// report per set. Each test runs in a forked child, so a crash or hang in one test is
// recorded as that test's failure and the run goes on.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "model/loader.h"
#include "onnx/onnx.pb.h"
#include "onyx/session.h"

namespace fs = std::filesystem;
using onyx::cat;
using onyx::DType;
using onyx::Tensor;

namespace {

struct Options {
  std::vector<std::string> data_dirs;  // one test set each
  std::string filter = ".*";
  std::string report;
  std::string skips_file;
  std::string baseline_file;
  int timeout_s = 30;
  bool verbose = false;
  onyx::MemoryMode memory = onyx::MemoryMode::kPlanned;
};

enum class Status { kPass, kFail, kSkip };

struct Result {
  std::string test;
  std::string op;
  Status status = Status::kFail;
  std::string reason;
};

struct SkipRule {
  std::regex pattern;
  std::string text;
  std::string reason;
};

// skips.txt: one rule a line, "REGEX  # reason"; every rule must give a reason.
std::vector<SkipRule> read_skips(const std::string& path) {
  std::vector<SkipRule> rules;
  if (path.empty()) return rules;
  std::ifstream in(path);
  if (!in) throw onyx::Error(cat("cannot read skip list '", path, "'"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    size_t hash = line.find(" #");
    if (hash == std::string::npos) throw onyx::Error(cat(path, ":", n, ": a skip rule needs a reason after ' # '"));
    std::string pat = line.substr(0, hash);
    pat.erase(pat.find_last_not_of(" \t") + 1);
    std::string reason = line.substr(hash + 2);
    reason.erase(0, reason.find_first_not_of(" \t"));
    rules.push_back({std::regex(pat), pat, reason});
  }
  return rules;
}

// Why a test is out of scope by its declared types, or "" when it is in scope.
std::string type_skip_reason(const onnx::ModelProto& m) {
  std::function<std::string(const onnx::TypeProto&)> check_type = [&](const onnx::TypeProto& t) -> std::string {
    switch (t.value_case()) {
      case onnx::TypeProto::kSequenceType: return check_type(t.sequence_type().elem_type());
      case onnx::TypeProto::kOptionalType: return check_type(t.optional_type().elem_type());
      case onnx::TypeProto::kMapType: return check_type(t.map_type().value_type());
      case onnx::TypeProto::kSparseTensorType: return "uses sparse tensors, which onyx does not support";
      case onnx::TypeProto::kTensorType: {
        int e = t.tensor_type().elem_type();
        if (e == 14 || e == 15) return "uses complex tensors, which onyx does not support";
        if (e >= 17) {
          try {
            onyx::dtype_from_onnx(e);
          } catch (const onyx::Error& err) {
            return err.what();
          }
        }
        return "";
      }
      default: return "";
    }
  };
  for (const auto& v : m.graph().input()) if (auto r = check_type(v.type()); !r.empty()) return r;
  for (const auto& v : m.graph().output()) if (auto r = check_type(v.type()); !r.empty()) return r;
  for (const auto& n : m.graph().node())
    for (const auto& a : n.attribute())
      if (a.name() == "to" && a.type() == onnx::AttributeProto::INT && (a.i() >= 17 || a.i() == 14 || a.i() == 15)) {
        try {
          onyx::dtype_from_onnx(static_cast<int32_t>(a.i()));
        } catch (const onyx::Error& err) {
          return err.what();
        }
      }
  return "";
}

std::string op_label(const std::string& test, const onnx::ModelProto& m, const fs::path& dir) {
  const std::string suffix = "_expanded";
  if (test.size() > suffix.size() && test.compare(test.size() - suffix.size(), suffix.size(), suffix) == 0) {
    std::string base = test.substr(0, test.size() - suffix.size());
    onnx::ModelProto bm;
    std::ifstream in(dir.parent_path() / base / "model.onnx", std::ios::binary);
    if (in && bm.ParseFromIstream(&in)) return op_label(base, bm, dir) + " (expanded)";
    return "(expanded)";
  }
  std::set<std::string> ops;
  for (const auto& n : m.graph().node()) ops.insert(n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type() : n.domain() + "::" + n.op_type());
  std::string label;
  for (const auto& o : ops) label += (label.empty() ? "" : "+") + o;
  return label.empty() ? "(no nodes)" : label;
}

bool close_enough(double a, double b, double rtol, double atol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= atol + rtol * std::abs(b);
}

// "" when equal within the dtype's tolerance, else what differs; sequences and optionals
// element by element.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return cat("dtype ", onyx::dtype_name(got.dtype()), ", expected ", onyx::dtype_name(want.dtype()));
  if (got.shape() != want.shape()) return cat("shape ", got.shape().str(), ", expected ", want.shape().str());
  if (got.dtype() == DType::kSequence || got.dtype() == DType::kOptional || got.dtype() == DType::kMap) {
    for (int64_t i = 0; i < got.numel(); ++i)
      if (std::string d = compare(got.elements()[i], want.elements()[i]); !d.empty()) return cat("element ", i, ": ", d);
    return "";
  }
  if (got.dtype() == DType::kString) {
    for (int64_t i = 0; i < got.numel(); ++i)
      if (got.data<std::string>()[i] != want.data<std::string>()[i])
        return cat("element ", i, ": '", got.data<std::string>()[i], "', expected '", want.data<std::string>()[i], "'");
    return "";
  }
  double rtol = 0, atol = 0;
  switch (got.dtype()) {
    case DType::kFloat32: case DType::kFloat64: rtol = 1e-3; atol = 1e-5; break;
    case DType::kFloat16: rtol = 1e-2; atol = 1e-3; break;
    case DType::kBFloat16: rtol = 2e-2; atol = 1e-2; break;
    default: break;  // integers and bool compare exactly
  }
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double a = got.get_as_double(i), b = want.get_as_double(i);
    if (got.dtype() == DType::kInt64 || got.dtype() == DType::kUInt64) {
      if (got.get_as_int64(i) == want.get_as_int64(i)) continue;
    } else if (close_enough(a, b, rtol, atol)) {
      continue;
    }
    if (first < 0) first = i;
    ++bad;
    if (!std::isnan(a - b)) worst = std::max(worst, std::abs(a - b));
  }
  if (!bad) return "";
  return cat(bad, " of ", got.numel(), " elements differ (first at ", first, ": ", got.get_as_double(first), " vs ",
             want.get_as_double(first), "; max abs diff ", worst, ")");
}

// How a .pb file of the value declared `t` is read: a SequenceProto, an OptionalProto or a TensorProto.
DType value_kind(const onnx::TypeProto& t) {
  if (t.has_sequence_type()) return DType::kSequence;
  if (t.has_optional_type()) return DType::kOptional;
  return DType::kUndefined;
}

// Runs one test in this (child) process; returns "PASS", "SKIP reason" or "FAIL reason".
std::string run_test(const fs::path& dir, const onnx::ModelProto& model, onyx::MemoryMode memory) {
  try {
    onyx::SessionOptions so;
    so.memory = memory;
    auto session = onyx::Session::load((dir / "model.onnx").string(), so);
    int sets = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_directory() || entry.path().filename().string().rfind("test_data_set_", 0) != 0) continue;
      ++sets;
      onyx::NamedTensors feeds;
      const auto& inputs = session->inputs();
      for (size_t i = 0;; ++i) {
        fs::path p = entry.path() / cat("input_", i, ".pb");
        if (!fs::exists(p)) break;
        if (i >= inputs.size()) return cat("FAIL test data has more inputs than the model (", inputs.size(), ")");
        DType kind = DType::kUndefined;
        for (const auto& v : model.graph().input())
          if (v.name() == inputs[i].name) kind = value_kind(v.type());
        feeds.emplace_back(inputs[i].name, onyx::load_value_proto_file(p.string(), kind));
      }
      auto outputs = session->run(feeds);
      for (size_t i = 0; i < outputs.size(); ++i) {
        fs::path p = entry.path() / cat("output_", i, ".pb");
        if (!fs::exists(p)) return cat("FAIL no expected data for output ", i);
        const DType kind = static_cast<int>(i) < model.graph().output_size()
                               ? value_kind(model.graph().output(static_cast<int>(i)).type()) : DType::kUndefined;
        Tensor want = onyx::load_value_proto_file(p.string(), kind);
        std::string diff = compare(outputs[i].second, want);
        if (!diff.empty()) return cat("FAIL output '", outputs[i].first, "': ", diff);
      }
    }
    if (!sets) return "FAIL no test_data_set_* folders";
    return "PASS";
  } catch (const std::exception& e) {
    return cat("FAIL ", e.what());
  }
}

Result run_isolated(const fs::path& dir, const onnx::ModelProto& model, int timeout_s, onyx::MemoryMode memory) {
  Result r;
  int fds[2];
  if (pipe(fds) != 0) throw onyx::Error("pipe() failed");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(static_cast<unsigned>(timeout_s));
    std::string out = run_test(dir, model, memory);
    (void)!write(fds[1], out.data(), out.size());
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    r.reason = sig == SIGALRM ? cat("timed out after ", timeout_s, " s") : cat("crashed with signal ", sig, " (", strsignal(sig), ")");
    return r;
  }
  if (text.rfind("PASS", 0) == 0) r.status = Status::kPass;
  else if (text.rfind("SKIP ", 0) == 0) { r.status = Status::kSkip; r.reason = text.substr(5); }
  else r.reason = text.size() > 5 ? text.substr(5) : "no result from the test process";
  return r;
}

std::string one_line(std::string s, size_t max = 300) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '|', '/');
  if (s.size() > max) s = s.substr(0, max) + "...";
  return s;
}

// One folder of tests (the wheel's node, simple, pytorch-converted, pytorch-operator sets).
struct TestSet {
  std::string name;
  std::vector<Result> results;
  int passed = 0, failed = 0, skipped = 0;
};

void write_set(std::ofstream& out, const TestSet& set, bool per_op) {
  out << "\n## " << set.name << ": " << set.passed << " passed, " << set.failed << " failed, " << set.skipped
      << " skipped of " << set.results.size() << "\n";
  if (per_op) {
    out << "\n### Per op\n\n| op | passed | failed | skipped |\n|---|---:|---:|---:|\n";
    std::map<std::string, std::array<int, 3>> counts;
    for (const auto& r : set.results) ++counts[r.op][static_cast<int>(r.status)];
    for (const auto& [op, c] : counts) out << "| " << op << " | " << c[0] << " | " << c[1] << " | " << c[2] << " |\n";
  } else {
    out << "\n| test | ops | result |\n|---|---|---|\n";
    for (const auto& r : set.results)
      out << "| " << r.test << " | " << r.op << " | "
          << (r.status == Status::kPass ? "pass" : r.status == Status::kFail ? "FAIL" : "skipped") << " |\n";
  }
  bool any = false;
  for (const auto& r : set.results)
    if (r.status == Status::kSkip) {
      if (!any) out << "\n### " << set.name << ": skipped (with reasons)\n\n| test | reason |\n|---|---|\n";
      any = true;
      out << "| " << r.test << " | " << one_line(r.reason) << " |\n";
    }
  any = false;
  for (const auto& r : set.results)
    if (r.status == Status::kFail) {
      if (!any) out << "\n### " << set.name << ": failed\n\n| test | reason |\n|---|---|\n";
      any = true;
      out << "| " << r.test << " | " << one_line(r.reason) << " |\n";
    }
}

void write_report(const std::string& path, const std::vector<TestSet>& sets) {
  std::ofstream out(path);
  if (!out) throw onyx::Error(cat("cannot write report '", path, "'"));
  out << "# ONNX backend tests\n\n"
      << "Generated by `scripts/conformance.sh` (tests/conformance/runner.cpp) over the test sets shipped in the "
         "onnx 1.22.0 wheel (`onnx/backend/test/data/`; paths below are relative to each set's folder). "
         "Tolerances: float32/float64 rtol 1e-3 atol 1e-5; float16 rtol 1e-2 atol 1e-3; "
         "bfloat16 rtol 2e-2 atol 1e-2; integers, bool, strings and the 8-, 4- and 2-bit types exact.\n\n"
      << "| set | passed | failed | skipped | total |\n|---|---:|---:|---:|---:|\n";
  for (const auto& set : sets)
    out << "| " << set.name << " | " << set.passed << " | " << set.failed << " | " << set.skipped << " | "
        << set.results.size() << " |\n";
  for (size_t k = 0; k < sets.size(); ++k) write_set(out, sets[k], k == 0);
}

// s with every occurrence of `what` removed (the data folder's absolute path in error messages).
std::string without(std::string s, const std::string& what) {
  for (size_t at; !what.empty() && (at = s.find(what)) != std::string::npos;) s.erase(at, what.size());
  return s;
}

TestSet run_set(const fs::path& folder, const Options& opt, const std::vector<SkipRule>& skips) {
  TestSet set;
  set.name = folder.filename().string();
  std::regex filter(opt.filter);
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.is_directory() && std::regex_search(e.path().filename().string(), filter)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  const std::string prefix = fs::absolute(folder).lexically_normal().string() + "/";
  for (const auto& dir : dirs) {
    Result r;
    std::string test = dir.filename().string();
    onnx::ModelProto m;
    {
      std::ifstream in(dir / "model.onnx", std::ios::binary);
      if (!m.ParseFromIstream(&in)) m.Clear();
    }
    std::string reason;
    for (const auto& rule : skips)
      if (std::regex_search(test, rule.pattern)) { reason = rule.reason; break; }
    if (reason.empty()) reason = type_skip_reason(m);
    if (!reason.empty()) {
      r.status = Status::kSkip;
      r.reason = reason;
    } else {
      r = run_isolated(fs::absolute(dir).lexically_normal(), m, opt.timeout_s, opt.memory);
      r.reason = without(r.reason, prefix);
    }
    r.test = test;
    r.op = op_label(test, m, dir);
    (r.status == Status::kPass ? set.passed : r.status == Status::kFail ? set.failed : set.skipped)++;
    if (opt.verbose || r.status == Status::kFail)
      std::cout << (r.status == Status::kPass ? "PASS " : r.status == Status::kFail ? "FAIL " : "SKIP ") << set.name
                << "/" << test << (r.reason.empty() ? "" : ": " + one_line(r.reason, 400)) << "\n";
    set.results.push_back(std::move(r));
  }
  return set;
}

// The baseline: "SET COUNT" lines (a bare number is the first set's count).
std::map<std::string, int> read_baseline(const std::string& path, const std::string& first_set) {
  std::ifstream in(path);
  if (!in) throw onyx::Error(cat("cannot read the baseline '", path, "'"));
  std::map<std::string, int> counts;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string a, b;
    fields >> a >> b;
    try {
      if (b.empty()) counts[first_set] = std::stoi(a);
      else counts[a] = std::stoi(b);
    } catch (const std::exception&) {
      throw onyx::Error(cat("baseline '", path, "': cannot read a pass count from \"", line, "\""));
    }
  }
  return counts;
}

int main_impl(const Options& opt) {
  if (opt.data_dirs.empty()) throw onyx::Error("no test data folder (give --data DIR)");
  for (const auto& d : opt.data_dirs)
    if (!fs::is_directory(d)) throw onyx::Error(cat("test data folder '", d, "' does not exist"));
  auto skips = read_skips(opt.skips_file);
  std::vector<TestSet> sets;
  for (const auto& d : opt.data_dirs) sets.push_back(run_set(fs::path(d).lexically_normal(), opt, skips));
  if (!opt.report.empty()) write_report(opt.report, sets);
  int status = 0;
  std::map<std::string, int> baseline;
  if (!opt.baseline_file.empty()) baseline = read_baseline(opt.baseline_file, sets[0].name);
  for (const auto& set : sets) {
    auto it = baseline.find(set.name);
    if (it != baseline.end()) {
      std::cout << "baseline: " << set.name << " " << it->second << " passed\n";
      if (set.passed < it->second) {
        std::cout << "conformance fell below the committed baseline (" << set.name << ": " << set.passed << " < "
                  << it->second << ")\n";
        status = 1;
      } else if (set.passed > it->second) {
        std::cout << "conformance rose above the baseline: raise " << set.name << " in " << opt.baseline_file
                  << " to " << set.passed << "\n";
      }
    }
    std::cout << "conformance: " << set.name << ": " << set.passed << " passed, " << set.failed << " failed, "
              << set.skipped << " skipped\n";
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) { std::cerr << args[i] << " needs a value\n"; std::exit(2); }
      return args[++i];
    };
    if (args[i] == "--data") opt.data_dirs.push_back(next());
    else if (args[i] == "--filter") opt.filter = next();
    else if (args[i] == "--report") opt.report = next();
    else if (args[i] == "--skips") opt.skips_file = next();
    else if (args[i] == "--baseline") opt.baseline_file = next();
    else if (args[i] == "--timeout") opt.timeout_s = std::stoi(next());
    else if (args[i] == "-v" || args[i] == "--verbose") opt.verbose = true;
    else if (args[i] == "--memory") {
      std::string m = next();
      if (m == "planned") opt.memory = onyx::MemoryMode::kPlanned;
      else if (m == "release") opt.memory = onyx::MemoryMode::kRelease;
      else if (m == "keep") opt.memory = onyx::MemoryMode::kKeepAll;
      else { std::cerr << "--memory takes planned, release or keep\n"; return 2; }
    }
    else {
      std::cerr << "usage: onyx_conformance --data DIR [--data DIR...] [--filter REGEX] [--skips FILE] [--report FILE.md]\n"
                   "                        [--baseline FILE] [--timeout SECONDS] [--memory planned|release|keep] [-v]\n";
      return 2;
    }
  }
  try {
    return main_impl(opt);
  } catch (const std::exception& e) {
    std::cerr << "onyx_conformance: error: " << e.what() << "\n";
    return 1;
  }
}
