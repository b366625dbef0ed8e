#include "kiln/core/ops/creation.h"

#include <bit>
#include <cmath>

#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/elementwise_impl.h"

namespace kiln {
namespace detail {
namespace {

void check_shape(const char* op, const Shape& shape) {
  if (static_cast<int>(shape.size()) > kMaxDims)
    throw ShapeError::of(op, "too many dimensions", "{} > {}", shape.size(), kMaxDims);
  for (int64_t d : shape)
    if (d < 0) throw ShapeError::of(op, "negative dimension", "shape {}", shape_str(shape));
}

// Broadcasts its 0-d input to the output shape. A node (not an eager buffer) so that zeros()
// inside traced functions stays lazy and cheap until used.
class Full final : public PrimitiveWithParams<Full> {
 public:
  Full(Stream s, Shape shape) : PrimitiveWithParams(s), shape_(std::move(shape)) {}
  const char* name() const override { return "Full"; }
  auto params() const { return std::tie(shape_); }
  std::vector<Shape> output_shapes(std::span<const Array>) const override { return {shape_}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    out[0].allocate();
    visit_dtype<kAllTypes>(out[0].dtype(), "full", [&](auto t) {
      using T = typename decltype(t)::type;
      const T v = *in[0].strided_data<T>();
      T* o = out[0].strided_data<T>();
      parallel_for(out[0].size(), kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) o[i] = v;
      });
    });
  }
  // The value (a 0-d array, broadcast) as stored.
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::elementwise("v0", out[0].dtype(), in, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override { return {sum(a.cotangents[0])}; }
  std::vector<Array> jvp(const JvpArgs& a) const override { return {full(shape_, a.tangents[0], stream())}; }
  // A batch of values (B,) fills B arrays: the values broadcast over the shape, batch axis first.
  VmapResult vmap(const VmapArgs& a) const override {
    const Array& v = a.inputs[0];
    const int64_t batch = v.shape(a.axes[0]);
    Shape target = shape_;
    target.insert(target.begin(), batch);
    Shape column(target.size(), 1);
    column[0] = batch;
    return {{contiguous(broadcast_to(reshape(v, column, stream()), target, stream()), stream())}, {0}};
  }

 private:
  Shape shape_;
};

// Values start + i * step computed in double, then converted (arange, linspace).
class Range final : public PrimitiveWithParams<Range> {
 public:
  Range(Stream s, double start, double step) : PrimitiveWithParams(s), start_(start), step_(step) {}
  const char* name() const override { return "Range"; }
  auto params() const { return std::tie(start_, step_); }
  void eval_cpu(std::span<const Array>, std::span<Array> out) const override {
    out[0].allocate();
    visit_dtype<kNumericTypes>(out[0].dtype(), "arange", [&](auto t) {
      using T = typename decltype(t)::type;
      T* o = out[0].strided_data<T>();
      for (int64_t i = 0; i < out[0].size(); ++i)
        o[i] = static_cast<T>(start_ + static_cast<double>(i) * step_);
    });
  }
  // The same double arithmetic where the device has float64; else in float32 (or int32 when start
  // and step are integers), which can differ from the CPU in the last bits of large values.
  void eval_gpu(std::span<const Array>, std::span<Array> out) const override {
    const Dtype t = out[0].dtype();
    if (gpu::supports(float64)) {
      auto literal = [](double v) {
        const uint64_t b = std::bit_cast<uint64_t>(v);
        return fmt::format("packDouble2x32(uvec2({}u, {}u))", static_cast<uint32_t>(b), b >> 32);
      };
      return gpu::elementwise(fmt::format("{} + double(j) * {}", literal(start_), literal(step_)), float64,
                              {}, out[0]);
    }
    const bool integral = std::nearbyint(start_) == start_ && std::nearbyint(step_) == step_ &&
                          std::abs(start_) < 0x1p31 && std::abs(step_) < 0x1p31;
    if (!is_floating(t) && integral)
      return gpu::elementwise(fmt::format("{} + int(j) * {}", start_, step_), int32, {}, out[0]);
    gpu::elementwise(fmt::format("uintBitsToFloat({}u) + float(j) * uintBitsToFloat({}u)",
                                 std::bit_cast<uint32_t>(static_cast<float>(start_)),
                                 std::bit_cast<uint32_t>(static_cast<float>(step_))),
                     float32, {}, out[0]);
  }

 private:
  double start_, step_;
};

class Eye final : public PrimitiveWithParams<Eye> {
 public:
  Eye(Stream s, int k) : PrimitiveWithParams(s), k_(k) {}
  const char* name() const override { return "Eye"; }
  auto params() const { return std::tie(k_); }
  void eval_cpu(std::span<const Array>, std::span<Array> out) const override {
    out[0].allocate();
    const int64_t n = out[0].shape(0), m = out[0].shape(1);
    visit_dtype<kAllTypes>(out[0].dtype(), "eye", [&](auto t) {
      using T = typename decltype(t)::type;
      T* o = out[0].strided_data<T>();
      for (int64_t i = 0; i < n * m; ++i) o[i] = T(0);
      for (int64_t i = 0; i < n; ++i)
        if (i + k_ >= 0 && i + k_ < m) o[i * m + i + k_] = T(1);
    });
  }
  void eval_gpu(std::span<const Array>, std::span<Array> out) const override {
    const int64_t m = std::max<int64_t>(out[0].shape(1), 1);
    gpu::elementwise(fmt::format("int(j % {0}u) - int(j / {0}u) == {1} ? 1 : 0", m, k_), int32, {}, out[0]);
  }

 private:
  int k_;
};

}  // namespace
}  // namespace detail

Array full(const Shape& shape, const Operand& value, Dtype dtype, StreamOrDevice s) {
  detail::check_shape("full", shape);
  Array v = value.to_array(dtype, s);
  if (v.ndim() != 0) {
    if (v.shape() == shape) return v;
    return broadcast_to(v, shape, s);
  }
  return Array::make(shape, dtype, std::make_shared<detail::Full>(to_stream(s), shape), {v});
}
Array full(const Shape& shape, const Operand& value, StreamOrDevice s) {
  return full(shape, value, value.dtype(), s);
}
Array zeros(const Shape& shape, Dtype dtype, StreamOrDevice s) { return full(shape, 0, dtype, s); }
Array ones(const Shape& shape, Dtype dtype, StreamOrDevice s) { return full(shape, 1, dtype, s); }
Array zeros_like(const Array& a, StreamOrDevice s) { return zeros(a.shape(), a.dtype(), s); }
Array ones_like(const Array& a, StreamOrDevice s) { return ones(a.shape(), a.dtype(), s); }
Array full_like(const Array& a, const Operand& value, StreamOrDevice s) {
  return full(a.shape(), value, a.dtype(), s);
}

Array arange(double start, double stop, double step, Dtype dtype, StreamOrDevice s) {
  if (step == 0) throw ValueError::of("arange", "step must be nonzero");
  if (!std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    throw ValueError::of("arange", "start, stop and step must be finite");
  if (dtype == bool_) throw DtypeError::of("arange", "dtype not supported", "bool");
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((stop - start) / step)));
  return Array::make({n}, dtype, std::make_shared<detail::Range>(to_stream(s), start, step), {});
}
Array arange(int64_t stop, StreamOrDevice s) { return arange(0, static_cast<double>(stop), 1, int32, s); }

Array linspace(double start, double stop, int64_t num, Dtype dtype, StreamOrDevice s) {
  return linspace(start, stop, num, true, dtype, s);
}

Array linspace(double start, double stop, int64_t num, bool endpoint, Dtype dtype, StreamOrDevice s) {
  if (num < 0) throw ValueError::of("linspace", "num must be >= 0", "got {}", num);
  if (dtype == bool_) throw DtypeError::of("linspace", "dtype not supported", "bool");
  // NumPy's divisor: the gaps between the values, one more than shown when stop is excluded.
  const int64_t div = endpoint ? num - 1 : num;
  const double step = div > 0 ? (stop - start) / static_cast<double>(div) : 0.0;
  return Array::make({num}, dtype, std::make_shared<detail::Range>(to_stream(s), start, step), {});
}

Array eye(int64_t n, int64_t m, int k, Dtype dtype, StreamOrDevice s) {
  if (m < 0) m = n;
  if (n < 0) throw ValueError::of("eye", "n must be >= 0", "got {}", n);
  return Array::make({n, m}, dtype, std::make_shared<detail::Eye>(to_stream(s), k), {});
}
Array identity(int64_t n, Dtype dtype, StreamOrDevice s) { return eye(n, n, 0, dtype, s); }

}  // namespace kiln
