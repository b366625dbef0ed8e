#pragma once
// Operand: an Array or a C++ scalar passed to an op. Scalars are weak-typed, like Python literals
// in NumPy/JAX/MLX: `x_bf16 * 2.0` stays bfloat16, `x_int32 + 1` stays int32.
#include <cstdint>

#include "kiln/core/array.h"

namespace kiln {

class MaterializedArray;

class Operand {
 public:
  Operand(const Array& a) : array_(&a) {}  // NOLINT: implicit by design
  // Its own constructor: C++ allows one user-defined conversion, so `m + 1` needs this.
  Operand(const MaterializedArray& a);  // NOLINT: implicit by design
  template <Scalar T>
  Operand(T v) : kind_(scalar_kind<T>()) {  // NOLINT
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, float16_t> ||
                  std::is_same_v<T, bfloat16_t>)
      float_ = static_cast<double>(v);
    else
      int_ = static_cast<int64_t>(v);
  }

  bool is_scalar() const { return array_ == nullptr; }
  const Array& array() const { return *array_; }
  ScalarKind kind() const { return kind_; }
  double as_double() const { return kind_ == ScalarKind::floating ? float_ : static_cast<double>(int_); }
  /// The dtype this operand has on its own (an array's dtype; int32/float32/bool for scalars).
  Dtype dtype() const { return array_ ? array_->dtype() : default_dtype(kind_); }
  /// The operand as an array of dtype `t` (scalars converted exactly from their C++ value).
  Array to_array(Dtype t, StreamOrDevice s = {}) const;

 private:
  const Array* array_ = nullptr;
  ScalarKind kind_ = ScalarKind::floating;
  double float_ = 0;
  int64_t int_ = 0;
};

/// Dtype of combining operands: arrays promote with NumPy rules; scalars adopt it when they fit.
Dtype result_type(std::initializer_list<const Operand*> operands);

}  // namespace kiln
