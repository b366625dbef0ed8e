#pragma once
// Overlap shown without timing. A gated copy is a CPU copy whose evaluation waits until the host
// thread opens its gate. A loop that opens step s's gate only after its call for step s returned
// (when it goes on to prepare step s + 1) finds every gate opened in time if, and only if, that
// call did not wait for the step's work. A deadline keeps a loop that does wait (a synchronous
// eval) from hanging: its gates report that they timed out.
#include <chrono>
#include <memory>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

class HostGates {
 public:
  explicit HostGates(std::chrono::milliseconds deadline);

  /// A copy of `x`, evaluated on the CPU, whose evaluation waits for gate `gate` to open (or for
  /// the deadline).
  Array gated_copy(const Array& x, int gate) const;
  /// Opens gate `gate`: a copy waiting on it goes on, one evaluated later does not wait.
  void open(int gate) const;
  /// The gates whose copies gave up waiting at the deadline, in the order they did.
  std::vector<int> timed_out() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kiln::test
