#pragma once
// axpby: z = alpha * x + beta * y as a primitive defined outside kiln, against its installed
// headers only. docs/extensions.md walks through it.
#include <kiln/kiln.h>

namespace axpby_ext {

/// alpha * x + beta * y with NumPy broadcasting. Arrays promote as in kiln::add, scalars are weak;
/// integer and bool inputs are computed in float32. Throws ValueError for an empty (default-constructed)
/// array and ShapeError if x and y do not broadcast.
kiln::Array axpby(const kiln::Operand& x, const kiln::Operand& y, double alpha, double beta,
                  kiln::StreamOrDevice s = {});

/// The primitive behind axpby. Its inputs are x and y already cast to the output dtype (a float
/// type) but not broadcast: the kernel reads broadcast inputs through zero strides.
class Axpby final : public kiln::PrimitiveWithParams<Axpby> {
 public:
  Axpby(kiln::Stream stream, double alpha, double beta)
      : PrimitiveWithParams(stream), alpha_(alpha), beta_(beta) {}

  const char* name() const override { return "Axpby"; }
  auto params() const { return std::tie(alpha_, beta_); }
  double alpha() const { return alpha_; }
  double beta() const { return beta_; }

  std::vector<kiln::Shape> output_shapes(std::span<const kiln::Array> inputs) const override;
  /// cblas_saxpby for row-contiguous float32 x and y of the output's shape; a strided loop
  /// (any strides, broadcasting, every float dtype) otherwise.
  void eval_cpu(std::span<const kiln::Array> inputs, std::span<kiln::Array> outputs) const override;
  std::vector<kiln::Array> vjp(const kiln::VjpArgs& args) const override;
  std::vector<kiln::Array> jvp(const kiln::JvpArgs& args) const override;
  kiln::VmapResult vmap(const kiln::VmapArgs& args) const override;

 private:
  const double alpha_;
  const double beta_;
};

}  // namespace axpby_ext
