#include "kiln/core/materialize.h"

#include "kiln/core/operand.h"

namespace kiln {
namespace {

void check_materializable(const Array& x) {
  if (!x.valid()) throw ValueError::of("materialize", "the array is empty (default-constructed)");
  // A traced value stands for every value the transform will feed through it (vmap traces one
  // example and replays the batch); freezing it here would silently drop that dependence.
  if (x.node().tracer && detail::in_trace())
    throw ValueError::of("materialize",
                         "cannot materialize a value traced by a transform; materialize outside it",
                         "shape {}", shape_str(x.shape()));
}

}  // namespace

// A new leaf on x's buffer rather than x's own node: x may still carry its graph (a tracer keeps
// it after the trace) or belong to a multi-output group whose siblings can be recreated through it.
MaterializedArray materialize(const Array& x) {
  check_materializable(x);
  x.eval();
  const detail::ArrayNode& src = x.node();  // available: its storage fields no longer change
  auto leaf = std::make_shared<detail::ArrayNode>(src.shape, src.dtype);
  leaf->buffer = src.buffer;
  leaf->offset = src.offset;
  leaf->strides = src.strides;
  leaf->row_contiguous = src.row_contiguous;
  leaf->state.store(detail::NodeState::available, std::memory_order_release);
  return MaterializedArray(Array(std::move(leaf)));
}

std::vector<MaterializedArray> materialize(const std::vector<Array>& xs) {
  for (const Array& x : xs) check_materializable(x);
  eval(xs);
  std::vector<MaterializedArray> out;
  out.reserve(xs.size());
  for (const Array& x : xs) out.push_back(materialize(x));
  return out;
}

std::ostream& operator<<(std::ostream& os, const MaterializedArray& a) { return os << a.array(); }

Operand::Operand(const MaterializedArray& a) : array_(&a.array()) {}

}  // namespace kiln
