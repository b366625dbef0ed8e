#pragma once
// Reduction primitives (internal; tests and the GPU backend may include this header).
#include <tuple>

#include "kiln/core/cpu/reduce.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"

namespace kiln::detail {

/// sum, prod, max, min, all or any over sorted, normalized `axes`; the output drops the reduced
/// axes unless `keepdims`. Gradients: sum and mean broadcast back; prod gives the product of the
/// other elements from exclusive cumprods (exact with zeros, as JAX); max/min split the cotangent
/// equally among tied extremes (as JAX); all/any and integer inputs get zero.
class Reduce final : public PrimitiveWithParams<Reduce> {
 public:
  Reduce(Stream s, ReduceKind kind, Axes axes, bool keepdims)
      : PrimitiveWithParams(s), kind_(kind), axes_(std::move(axes)), keepdims_(keepdims) {}
  const char* name() const override;
  auto params() const { return std::tie(kind_, axes_, keepdims_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  ReduceKind kind() const { return kind_; }
  const Axes& axes() const { return axes_; }
  bool keepdims() const { return keepdims_; }

  std::vector<Shape> output_shapes(std::span<const Array> in) const override;
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override;
  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;

 private:
  const ReduceKind kind_;
  const Axes axes_;
  const bool keepdims_;
};

/// Index (int32) of the first max or min along one axis. Not differentiable (zero gradient).
class ArgReduce final : public PrimitiveWithParams<ArgReduce> {
 public:
  ArgReduce(Stream s, bool is_max, int axis, bool keepdims)
      : PrimitiveWithParams(s), is_max_(is_max), axis_(axis), keepdims_(keepdims) {}
  const char* name() const override { return is_max_ ? "ArgMax" : "ArgMin"; }
  auto params() const { return std::tie(is_max_, axis_, keepdims_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }

  std::vector<Shape> output_shapes(std::span<const Array> in) const override;
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override;
  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;

 private:
  const bool is_max_;
  const int axis_;
  const bool keepdims_;
};

/// Shape of reducing `shape` over sorted, normalized `axes`.
Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdims);

}  // namespace kiln::detail
