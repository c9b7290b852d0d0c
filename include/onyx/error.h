// The one error type of onyx: a chain of contexts, printed whole (DESIGN L7).
#pragma once

#include <exception>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace onyx {

// Concatenates its arguments with operator<< (a small stand-in for std::format).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// An error carries the innermost message and the contexts that each layer added
// on the way out ("loading m.onnx", "node /layers.3/Concat", "input 2").
// what() prints all of it, outermost first.
class Error : public std::exception {
 public:
  explicit Error(std::string message) : chain_{std::move(message)} { rebuild(); }

  // Adds an outer context and returns *this, so that a catch block can rethrow.
  Error& add_context(std::string context) {
    chain_.insert(chain_.begin(), std::move(context));
    rebuild();
    return *this;
  }

  const char* what() const noexcept override { return text_.c_str(); }
  const std::vector<std::string>& chain() const { return chain_; }
  // The innermost message, without contexts.
  const std::string& message() const { return chain_.back(); }

 private:
  void rebuild() {
    text_.clear();
    for (size_t i = 0; i < chain_.size(); ++i) {
      if (i) text_ += ": ";
      text_ += chain_[i];
    }
  }
  std::vector<std::string> chain_;
  std::string text_;
};

// Runs fn(); an onyx::Error escaping it gets `context` added, and any other
// std::exception becomes an onyx::Error with that context.
template <class Fn>
decltype(auto) with_context(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (Error& e) {
    e.add_context(context);
    throw;
  } catch (const std::bad_alloc&) {
    throw Error("out of memory").add_context(context);
  } catch (const std::exception& e) {
    throw Error(e.what()).add_context(context);
  }
}

// The same, with the context made by ctx() only when an error passes: for hot paths (every
// node of every run), where building the string each time would cost more than the work.
template <class Ctx, class Fn>
decltype(auto) with_lazy_context(Ctx&& ctx, Fn&& fn) {
  try {
    return fn();
  } catch (Error& e) {
    e.add_context(ctx());
    throw;
  } catch (const std::bad_alloc&) {
    throw Error("out of memory").add_context(ctx());
  } catch (const std::exception& e) {
    throw Error(e.what()).add_context(ctx());
  }
}

[[noreturn]] void fail_assertion(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace onyx

// A user-facing check: throws onyx::Error with the message when cond is false.
#define ONYX_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) throw ::onyx::Error(::onyx::cat(__VA_ARGS__)); \
  } while (0)

// An invariant inside the engine; violating it is a bug in onyx, reported with file and line.
#define ONYX_ASSERT(cond, ...)                                                            \
  do {                                                                                    \
    if (!(cond)) ::onyx::fail_assertion(#cond, __FILE__, __LINE__, ::onyx::cat("" __VA_OPT__(,) __VA_ARGS__)); \
  } while (0)
