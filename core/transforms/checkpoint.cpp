// checkpoint: one Checkpoint node stands for the whole function, so the forward graph holds fn's
// inputs and outputs but none of its intermediates, and the vjp rule traces fn again (MLX builds
// its checkpoint the same way, from a Custom primitive whose vjp re-runs the function).
#include "kiln/core/custom_transforms.h"
#include "kiln/core/ops/creation.h"

namespace kiln {
namespace detail {

std::vector<Array> call_function(const ArrayFn& fn, const std::vector<Array>& inputs, const char* op) {
  std::vector<Array> outputs = fn(inputs);
  if (outputs.empty()) throw ValueError::of(op, "the function returned no outputs");
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].valid())
      throw ValueError::of(op, "the function returned an empty (default-constructed) array", "output {}", i);
  return outputs;
}

void eval_function(const ArrayFn& fn, const char* op, std::span<const Array> inputs,
                   std::span<Array> outputs) {
  // The copies of the inputs keep their nodes shared, so fn's ops never overwrite them in place.
  const std::vector<Array> results = call_function(fn, {inputs.begin(), inputs.end()}, op);
  if (results.size() != outputs.size())
    throw RuntimeError::of(op, "the function returned a different number of outputs than when it was called",
                           "{} now, {} before", results.size(), outputs.size());
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].shape() != outputs[i].shape() || results[i].dtype() != outputs[i].dtype())
      throw RuntimeError::of(op, "the function returned a different output than when it was called",
                             "output {}: {} {} now, {} {} before", i, shape_str(results[i].shape()),
                             dtype_name(results[i].dtype()), shape_str(outputs[i].shape()),
                             dtype_name(outputs[i].dtype()));
  eval(results);
  // Views, not copies: the outputs take over the buffers, and fn's intermediates go with `results`.
  for (size_t i = 0; i < results.size(); ++i) outputs[i].set_view(results[i], results[i].strides(), 0);
}

namespace {

// fn with only the inputs in `argnums` as arguments (the traced ones); the others enter fn as
// they are in `primals`.
ArrayFn restrict_to(const ArrayFn& fn, const std::vector<Array>& primals, std::span<const int> argnums) {
  return [&fn, &primals, argnums](const std::vector<Array>& tracers) {
    std::vector<Array> x = primals;
    for (size_t k = 0; k < tracers.size(); ++k) x[argnums[k]] = tracers[k];
    return fn(x);
  };
}

std::vector<Array> pick(const std::vector<Array>& all, std::span<const int> argnums) {
  std::vector<Array> out;
  for (int i : argnums) out.push_back(all[i]);
  return out;
}

}  // namespace

std::vector<Array> vjp_of_function(const ArrayFn& fn, const VjpArgs& args) {
  const std::vector<Array> primals(args.primals.begin(), args.primals.end());
  return kiln::vjp(restrict_to(fn, primals, args.argnums), pick(primals, args.argnums),
                   {args.cotangents.begin(), args.cotangents.end()})
      .second;
}

std::vector<Array> jvp_of_function(const ArrayFn& fn, const JvpArgs& args) {
  const std::vector<Array> primals(args.primals.begin(), args.primals.end());
  return kiln::jvp(restrict_to(fn, primals, args.argnums), pick(primals, args.argnums),
                   {args.tangents.begin(), args.tangents.end()})
      .second;
}

namespace {

using SharedFn = std::shared_ptr<const ArrayFn>;

ArrayFn make_checkpoint(SharedFn fn);

// Immutable; two nodes are equivalent when they hold the same function object (std::function
// cannot be compared, and a copy of a checkpointed function shares the object).
class Checkpoint final : public PrimitiveWithParams<Checkpoint> {
 public:
  Checkpoint(Stream s, SharedFn fn) : PrimitiveWithParams(s), fn_(std::move(fn)) {}
  const char* name() const override { return "Checkpoint"; }
  auto params() const { return std::tie(fn_); }

  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    std::vector<Shape> shapes;
    for (const Array& o : call_function(*fn_, {in.begin(), in.end()}, "checkpoint"))
      shapes.push_back(o.shape());
    return shapes;
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    eval_function(*fn_, "checkpoint", in, out);
  }
  // fn's own ops pick their devices; this node only runs them.
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    eval_function(*fn_, "checkpoint", in, out);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override { return vjp_of_function(*fn_, a); }

  // The tangents are a checkpoint of their own, so reverse mode over them recomputes too.
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const size_t n = a.primals.size();
    const std::vector<int> argnums(a.argnums.begin(), a.argnums.end());
    auto tangent_fn = std::make_shared<const ArrayFn>([fn = fn_, n, argnums](const std::vector<Array>& x) {
      const std::vector<Array> primals(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
      const std::vector<Array> tangents(x.begin() + static_cast<std::ptrdiff_t>(n), x.end());
      return jvp_of_function(*fn, {primals, tangents, argnums});
    });
    std::vector<Array> inputs(a.primals.begin(), a.primals.end());
    inputs.insert(inputs.end(), a.tangents.begin(), a.tangents.end());
    return make_checkpoint(std::move(tangent_fn))(inputs);
  }

  VmapResult vmap(const VmapArgs& a) const override {
    auto batched = std::make_shared<const ArrayFn>(kiln::vmap(
        [fn = fn_](const std::vector<Array>& x) { return (*fn)(x); }, {a.axes.begin(), a.axes.end()}));
    std::vector<Array> outputs = make_checkpoint(std::move(batched))({a.inputs.begin(), a.inputs.end()});
    std::vector<int> axes(outputs.size(), 0);
    return {std::move(outputs), std::move(axes)};
  }

 private:
  const SharedFn fn_;
};

ArrayFn make_checkpoint(SharedFn fn) {
  return [fn = std::move(fn)](const std::vector<Array>& inputs) {
    for (const Array& x : inputs)
      if (!x.valid()) throw ValueError::of("checkpoint", "an input is an empty (default-constructed) array");
    // Tracing fn here only builds a graph (nothing is evaluated); it gives the output shapes and
    // dtypes, then goes.
    std::vector<Shape> shapes;
    std::vector<Dtype> dtypes;
    for (const Array& o : call_function(*fn, inputs, "checkpoint")) {
      shapes.push_back(o.shape());
      dtypes.push_back(o.dtype());
    }
    return Array::make_many(std::move(shapes), std::move(dtypes),
                            std::make_shared<Checkpoint>(to_stream({}), fn), inputs);
  };
}

}  // namespace
}  // namespace detail

ArrayFn checkpoint(ArrayFn fn) {
  if (!fn) throw ValueError::of("checkpoint", "the function is empty");
  return detail::make_checkpoint(std::make_shared<const ArrayFn>(std::move(fn)));
}

}  // namespace kiln
