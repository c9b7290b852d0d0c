// Calling a generic kernel body with the C++ type of a runtime dtype.
#pragma once

#include <string>
#include <type_traits>

#include "onyx/dtype.h"
#include "onyx/error.h"

namespace onyx {

template <class... Ts>
struct TypeList {};

using FloatTypes = TypeList<float, double, Float16, BFloat16>;
using SignedIntTypes = TypeList<int8_t, int16_t, int32_t, int64_t>;
using IntTypes = TypeList<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;
using NumericTypes =
    TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;
using NumericBoolTypes = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t,
                                  uint16_t, uint32_t, uint64_t, bool>;
using AllTypes = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                          uint32_t, uint64_t, bool, std::string>;

namespace detail {
template <class Fn, class T, class... Rest>
void dispatch_impl(DType dt, Fn& fn, bool& done) {
  if (!done && dt == dtype_of<T>) {
    fn(std::type_identity<T>{});
    done = true;
  }
  if constexpr (sizeof...(Rest) > 0) dispatch_impl<Fn, Rest...>(dt, fn, done);
}
template <class Fn, class... Ts>
void dispatch_list(DType dt, Fn& fn, bool& done, TypeList<Ts...>) {
  dispatch_impl<Fn, Ts...>(dt, fn, done);
}
}  // namespace detail

// Calls fn(std::type_identity<T>{}) for the T of `dt` among List's types; throws
// "<what>: element type X is not supported" otherwise.
template <class List, class Fn>
void dispatch(DType dt, std::string_view what, Fn&& fn) {
  bool done = false;
  detail::dispatch_list(dt, fn, done, List{});
  if (!done) throw Error(cat(what, ": element type ", dtype_name(dt), " is not supported"));
}

// Computation type for T: float for the 16-bit floats, T otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>, float, T>;

}  // namespace onyx
