#include "kiln/core/operand.h"

#include "kiln/core/ops/cast.h"

namespace kiln {

namespace {
// Integer range of each integer dtype, for rejecting scalars that would wrap (NumPy 2 and JAX raise).
bool fits(int64_t v, Dtype t) {
  switch (t) {
    case uint8:
      return v >= 0 && v <= 255;
    case int8:
      return v >= -128 && v <= 127;
    case int16:
      return v >= INT16_MIN && v <= INT16_MAX;
    case uint16:
      return v >= 0 && v <= UINT16_MAX;
    case int32:
      return v >= INT32_MIN && v <= INT32_MAX;
    case uint32:
      return v >= 0 && v <= static_cast<int64_t>(UINT32_MAX);
    case uint64:
      return v >= 0;
    default:
      return true;
  }
}
}  // namespace

Array Operand::to_array(Dtype t, StreamOrDevice s) const {
  if (array_) return astype(*array_, t, s);
  if (kind_ == ScalarKind::floating) return Array(float_, t);
  if (kind_ == ScalarKind::integer && !fits(int_, t))
    throw ValueError::of("scalar", "integer scalar out of range for the array's dtype", "{} does not fit {}",
                         int_, dtype_name(t));
  return Array(int_, t);
}

Dtype result_type(std::initializer_list<const Operand*> operands) {
  // Arrays decide among themselves; scalars then join by kind (a float scalar lifts ints to float32).
  bool have_array = false;
  Dtype t = bool_;
  ScalarKind widest = ScalarKind::boolean;
  for (const Operand* o : operands) {
    if (o->is_scalar()) {
      if (o->kind() > widest) widest = o->kind();
    } else {
      t = have_array ? promote_types(t, o->dtype()) : o->dtype();
      have_array = true;
    }
  }
  if (!have_array) return default_dtype(widest);
  return promote_weak(t, widest);
}

}  // namespace kiln
