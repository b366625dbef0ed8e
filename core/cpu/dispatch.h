#pragma once
// The one place that maps a runtime Dtype to a C++ type for CPU kernels.
#include <cstdint>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"

namespace kiln::detail {

template <class T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<T>{}) with the C++ type of `t`, if `t` is in Set; otherwise throws DtypeError.
template <DtypeSet Set, class F>
decltype(auto) visit_dtype(Dtype t, const char* op, F&& f) {
  switch (t) {
    case Dtype::bool_:
      if constexpr (Set.has(Dtype::bool_)) return f(TypeTag<bool>{});
      break;
    case Dtype::uint8:
      if constexpr (Set.has(Dtype::uint8)) return f(TypeTag<uint8_t>{});
      break;
    case Dtype::int8:
      if constexpr (Set.has(Dtype::int8)) return f(TypeTag<int8_t>{});
      break;
    case Dtype::int16:
      if constexpr (Set.has(Dtype::int16)) return f(TypeTag<int16_t>{});
      break;
    case Dtype::uint16:
      if constexpr (Set.has(Dtype::uint16)) return f(TypeTag<uint16_t>{});
      break;
    case Dtype::int32:
      if constexpr (Set.has(Dtype::int32)) return f(TypeTag<int32_t>{});
      break;
    case Dtype::int64:
      if constexpr (Set.has(Dtype::int64)) return f(TypeTag<int64_t>{});
      break;
    case Dtype::uint32:
      if constexpr (Set.has(Dtype::uint32)) return f(TypeTag<uint32_t>{});
      break;
    case Dtype::uint64:
      if constexpr (Set.has(Dtype::uint64)) return f(TypeTag<uint64_t>{});
      break;
    case Dtype::float16:
      if constexpr (Set.has(Dtype::float16)) return f(TypeTag<float16_t>{});
      break;
    case Dtype::bfloat16:
      if constexpr (Set.has(Dtype::bfloat16)) return f(TypeTag<bfloat16_t>{});
      break;
    case Dtype::float32:
      if constexpr (Set.has(Dtype::float32)) return f(TypeTag<float>{});
      break;
    case Dtype::float64:
      if constexpr (Set.has(Dtype::float64)) return f(TypeTag<double>{});
      break;
  }
  throw DtypeError::of(op, "dtype not supported on the CPU", "{}", dtype_name(t));
}

/// Converts between any two kiln element types (bool maps to 0/1; floats to ints truncate).
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_same_v<From, float16_t> || std::is_same_v<From, bfloat16_t>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<From> && std::is_unsigned_v<To>) {
    // A negative float wraps through int64 (what x86 gives uint8/uint32, and the GPU's rule),
    // rather than the undefined direct cast.
    return v < From(0) ? static_cast<To>(static_cast<int64_t>(v)) : static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace kiln::detail
