#include "kiln/optim/schedules.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "kiln/core/error.h"

namespace kiln::optim {

Schedule step_decay(double init, double decay_rate, int64_t step_size) {
  if (step_size < 1) throw ValueError::of("step_decay", "step_size must be >= 1", "got {}", step_size);
  return [=](int64_t step) { return init * std::pow(decay_rate, static_cast<double>(step / step_size)); };
}

Schedule exponential_decay(double init, double decay_rate) {
  return [=](int64_t step) { return init * std::pow(decay_rate, static_cast<double>(step)); };
}

Schedule cosine_decay(double init, int64_t decay_steps, double end) {
  if (decay_steps < 1)
    throw ValueError::of("cosine_decay", "decay_steps must be >= 1", "got {}", decay_steps);
  return [=](int64_t step) {
    const double s = static_cast<double>(std::min(step, decay_steps));
    const double decay = 0.5 * (1.0 + std::cos(std::numbers::pi / static_cast<double>(decay_steps) * s));
    return end + decay * (init - end);
  };
}

Schedule linear_schedule(double init, double end, int64_t steps) {
  if (steps < 1) throw ValueError::of("linear_schedule", "steps must be >= 1", "got {}", steps);
  return [=](int64_t step) {
    const double s = static_cast<double>(std::min(step, steps));
    return s * ((end - init) / static_cast<double>(steps)) + init;
  };
}

Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int64_t> boundaries) {
  if (schedules.empty()) throw ValueError::of("join_schedules", "needs at least one schedule");
  if (boundaries.size() + 1 != schedules.size())
    throw ValueError::of("join_schedules", "needs one boundary fewer than schedules",
                         "got {} schedules, {} boundaries", schedules.size(), boundaries.size());
  for (size_t i = 0; i < schedules.size(); ++i)
    if (!schedules[i]) throw ValueError::of("join_schedules", "empty schedule", "schedules[{}]", i);
  for (size_t i = 0; i < boundaries.size(); ++i)
    if (boundaries[i] < 0 || (i > 0 && boundaries[i] < boundaries[i - 1]))
      throw ValueError::of("join_schedules", "boundaries must be >= 0 and non-decreasing", "got {}",
                           fmt::join(boundaries, ", "));
  return [schedules = std::move(schedules), boundaries = std::move(boundaries)](int64_t step) {
    // The last boundary reached picks the schedule (MLX evaluates all and selects the same one).
    size_t i = 0;
    while (i < boundaries.size() && step >= boundaries[i]) ++i;
    return schedules[i](i == 0 ? step : step - boundaries[i - 1]);
  };
}

}  // namespace kiln::optim
