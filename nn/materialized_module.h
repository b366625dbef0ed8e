#pragma once
// MaterializedModule<M>: a frozen, immutable model that any number of threads may call at once.
#include <memory>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/materialize.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

namespace detail {
/// Materializes every parameter of `m` in place and sets evaluation mode.
void materialize_parameters(Module& m);
}  // namespace detail

/// Owns a model whose parameters are all materialized arrays (evaluated, detached, immutable),
/// in evaluation mode, and exposes only const access: its call operator and const members such
/// as parameters(). update, freeze, train and other non-const members cannot be called through
/// it; such code does not compile. One instance serves any number of threads at once; the model
/// it came from may keep training meanwhile, and this one's outputs never change.
template <class M>
class MaterializedModule {
 public:
  /// Takes the model (held by unique_ptr: modules do not move). Throws ValueError if it is null.
  explicit MaterializedModule(std::unique_ptr<M> model) {
    if (!model) throw ValueError::of("MaterializedModule", "the model is null");
    detail::materialize_parameters(*model);
    model_ = std::shared_ptr<const M>(std::move(model));
  }

  /// A snapshot of `trained`: a new M constructed from `args` (same architecture) takes
  /// trained's current parameters, materialized on their buffers without copying them.
  /// Throws what Module::update throws if the architectures differ.
  template <class... A>
  static MaterializedModule snapshot(const M& trained, A&&... args) {
    auto fresh = std::make_unique<M>(std::forward<A>(args)...);
    const ParamTree current = trained.parameters();
    eval(current);  // one graph walk for every pending parameter, then each is only wrapped
    ParamTree params;
    for (const auto& [key, value] : current) params.set(key, materialize(value));
    fresh->update(params);
    return MaterializedModule(std::move(fresh));
  }

  /// Calls the model's const call operator.
  template <class... A>
  decltype(auto) operator()(A&&... args) const {
    return (*model_)(std::forward<A>(args)...);
  }
  const M& module() const { return *model_; }
  const M* operator->() const { return model_.get(); }
  ParamTree parameters() const { return model_->parameters(); }

 private:
  std::shared_ptr<const M> model_;
};

}  // namespace kiln::nn
