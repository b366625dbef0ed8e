#include "kiln/core/ops/cast.h"

#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/elementwise_impl.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace detail {
namespace {

class AsType final : public PrimitiveWithParams<AsType>, public BlockKernel {
 public:
  AsType(Stream s, Dtype t) : PrimitiveWithParams(s), dtype_(t) {}
  const char* name() const override { return "AsType"; }
  auto params() const { return std::tie(dtype_); }
  uint32_t traits() const override { return static_cast<uint32_t>(Trait::elementwise); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    out[0].allocate();
    visit_dtype<kAllTypes>(in[0].dtype(), "astype", [&](auto s) {
      using S = typename decltype(s)::type;
      visit_dtype<kAllTypes>(dtype_, "astype", [&](auto d) {
        using D = typename decltype(d)::type;
        unary_loop<S, D>(in[0], out[0], [](S v) { return convert<D>(v); });
      });
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { gpu::copy(in[0], out[0]); }
  // In a fused chain the operand (widened exactly to its compute dtype) converts to the result's.
  const char* glsl() const override { return "x0"; }
  void eval_block(std::span<const void* const> in, uint32_t scalars, Dtype in_dtype, void* out,
                  int64_t n) const override {
    const int64_t sx = block_step(scalars, 0);
    visit_dtype<kAllTypes>(in_dtype, "astype", [&](auto s) {
      using S = typename decltype(s)::type;
      visit_dtype<kAllTypes>(dtype_, "astype", [&](auto d) {
        using D = typename decltype(d)::type;
        const S* x = static_cast<const S*>(in[0]);
        D* o = static_cast<D*>(out);
        for (int64_t i = 0; i < n; ++i) o[i] = convert<D>(x[i * sx]);
      });
    });
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    return {astype(a.cotangents[0], a.primals[0].dtype(), stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {astype(a.tangents[0], dtype_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    return {{astype(a.inputs[0], dtype_, stream())}, {a.axes[0]}};
  }

 private:
  Dtype dtype_;
};

// Copies only when the evaluated input is not already row-contiguous.
class Contiguous final : public PrimitiveWithParams<Contiguous> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Contiguous"; }
  auto params() const { return std::tuple<>(); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    if (in[0].row_contiguous()) {
      out[0].set_view(in[0], in[0].strides(), 0);
      return;
    }
    out[0].allocate();
    visit_dtype<kAllTypes>(in[0].dtype(), "contiguous", [&](auto t) {
      using T = typename decltype(t)::type;
      unary_loop<T, T>(in[0], out[0], [](T v) { return v; });
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    if (in[0].row_contiguous())
      out[0].set_view(in[0], in[0].strides(), 0);
    else
      gpu::copy(in[0], out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override { return {a.cotangents[0]}; }
  std::vector<Array> jvp(const JvpArgs& a) const override { return {a.tangents[0]}; }
  VmapResult vmap(const VmapArgs& a) const override {
    return {{contiguous(a.inputs[0], stream())}, {a.axes[0]}};
  }
};

class StopGradient final : public PrimitiveWithParams<StopGradient> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "StopGradient"; }
  auto params() const { return std::tuple<>(); }
  uint32_t traits() const override { return Trait::stop_gradient | shape_polymorphic_trait; }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    out[0].set_view(in[0], in[0].strides(), 0);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override { eval_cpu(in, out); }
  std::vector<Array> vjp(const VjpArgs& a) const override { return {zeros_like(a.primals[0], stream())}; }
  std::vector<Array> jvp(const JvpArgs& a) const override { return {zeros_like(a.primals[0], stream())}; }
  VmapResult vmap(const VmapArgs& a) const override {
    return {{stop_gradient(a.inputs[0], stream())}, {a.axes[0]}};
  }
};

void check(const char* op, const Array& a) {
  if (!a.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
}

}  // namespace
}  // namespace detail

Array astype(const Array& a, Dtype dtype, StreamOrDevice s) {
  detail::check("astype", a);
  if (a.dtype() == dtype) return a;
  return Array::make(a.shape(), dtype, std::make_shared<detail::AsType>(to_stream(s), dtype), {a});
}

Array contiguous(const Array& a, StreamOrDevice s) {
  detail::check("contiguous", a);
  if (a.is_available() && a.row_contiguous()) return a;
  return Array::make(a.shape(), a.dtype(), std::make_shared<detail::Contiguous>(to_stream(s)), {a});
}

Array stop_gradient(const Array& a, StreamOrDevice s) {
  detail::check("stop_gradient", a);
  return Array::make(a.shape(), a.dtype(), std::make_shared<detail::StopGradient>(to_stream(s)), {a});
}

}  // namespace kiln
