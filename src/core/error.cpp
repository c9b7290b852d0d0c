#include "onyx/error.h"

namespace onyx {

void fail_assertion(const char* expr, const char* file, int line, const std::string& msg) {
  std::string text = cat("internal error (a bug in onyx): ", expr, " failed at ", file, ":", line);
  if (!msg.empty()) text += cat(" (", msg, ")");
  throw Error(text);
}

}  // namespace onyx
