// Python dicts as onyx's options (options.cpp).
#pragma once

#include <nanobind/nanobind.h>

#include "genai/generator.h"
#include "onyx/options.h"

namespace onyx::py {

namespace nb = nanobind;

// A session's options from a dict of SessionOptions' field names (Session(..., options) and
// Model(..., session_options)).
SessionOptions parse_options(const nb::dict& o);
// A generation's search options from a dict (max_new_tokens, do_sample, temperature, ...).
genai::SearchOptions parse_search(const nb::dict& o);

}  // namespace onyx::py
