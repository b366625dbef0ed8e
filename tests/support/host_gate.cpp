#include "support/host_gate.h"

#include <condition_variable>
#include <mutex>
#include <set>

#include "kiln/core/primitive.h"

namespace kiln::test {

struct HostGates::State {
  std::chrono::milliseconds deadline;
  mutable std::mutex mutex;
  mutable std::condition_variable opened_cv;
  std::set<int> opened;
  std::vector<int> timed_out;
};

namespace {

class GatedCopy final : public Primitive {
 public:
  GatedCopy(std::shared_ptr<HostGates::State> state, int gate)
      : Primitive(default_stream(Device::cpu)), state_(std::move(state)), gate_(gate) {}
  const char* name() const override { return "GatedCopy"; }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  bool is_equivalent(const Primitive& other) const override { return &other == this; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    {
      std::unique_lock lock(state_->mutex);
      if (!state_->opened_cv.wait_for(lock, state_->deadline, [&] { return state_->opened.contains(gate_); }))
        state_->timed_out.push_back(gate_);
    }
    out[0].allocate();
    detail::gather_row_major(in[0], out[0].raw_data(), in[0].dtype());
  }

 private:
  std::shared_ptr<HostGates::State> state_;
  int gate_;
};

}  // namespace

HostGates::HostGates(std::chrono::milliseconds deadline) : state_(std::make_shared<State>()) {
  state_->deadline = deadline;
}

Array HostGates::gated_copy(const Array& x, int gate) const {
  return Array::make(x.shape(), x.dtype(), std::make_shared<GatedCopy>(state_, gate), {x});
}

void HostGates::open(int gate) const {
  {
    std::lock_guard lock(state_->mutex);
    state_->opened.insert(gate);
  }
  state_->opened_cv.notify_all();
}

std::vector<int> HostGates::timed_out() const {
  std::lock_guard lock(state_->mutex);
  return state_->timed_out;
}

}  // namespace kiln::test
