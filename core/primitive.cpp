#include "kiln/core/primitive.h"

namespace kiln {

void Primitive::eval_gpu(std::span<const Array>, std::span<Array>) const {
  throw NotImplemented::of(name(), "no GPU kernel yet", "run it on the CPU (Device::cpu)");
}
std::vector<Array> Primitive::vjp(const VjpArgs&) const {
  throw NotImplemented::of(name(), "vjp is not implemented");
}
std::vector<Array> Primitive::jvp(const JvpArgs&) const {
  throw NotImplemented::of(name(), "jvp is not implemented");
}
VmapResult Primitive::vmap(const VmapArgs&) const {
  throw NotImplemented::of(name(), "vmap is not implemented");
}
std::vector<Shape> Primitive::output_shapes(std::span<const Array>) const {
  throw NotImplemented::of(name(), "output_shapes is not implemented");
}
bool Primitive::is_equivalent(const Primitive& other) const { return this == &other; }

}  // namespace kiln
