#pragma once
// Selection and clipping.
#include <optional>

#include "kiln/core/operand.h"

namespace kiln {

/// Elementwise `condition ? x : y` with broadcasting; x and y promote like a binary op.
Array where(const Operand& condition, const Operand& x, const Operand& y, StreamOrDevice s = {});
/// Limits values to [lo, hi]; either bound may be absent. Gradient passes where not clipped.
Array clip(const Array& a, const std::optional<Operand>& lo, const std::optional<Operand>& hi,
           StreamOrDevice s = {});

}  // namespace kiln
