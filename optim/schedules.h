#pragma once
// Learning-rate schedules, as MLX's mlx.optimizers schedules: each returns a function of the step
// (the number of updates applied before the current one), usable wherever a LearningRate is.
//
//   // 100 steps of linear warm-up to 1e-3, then cosine decay to 1e-5 over 900 steps:
//   optim::AdamW opt({.lr = optim::join_schedules({optim::linear_schedule(0, 1e-3, 100),
//                                                  optim::cosine_decay(1e-3, 900, 1e-5)},
//                                                 {100})});
#include <cstdint>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// init * decay_rate^floor(step / step_size). Throws ValueError if step_size < 1.
Schedule step_decay(double init, double decay_rate, int64_t step_size);

/// init * decay_rate^step.
Schedule exponential_decay(double init, double decay_rate);

/// end + (init - end) (1 + cos(pi min(step, decay_steps) / decay_steps)) / 2: from init at step 0
/// to end at decay_steps, then constant. Throws ValueError if decay_steps < 1.
Schedule cosine_decay(double init, int64_t decay_steps, double end = 0.0);

/// init + (end - init) min(step, steps) / steps: a linear ramp (a warm-up when init < end), then
/// constant. Throws ValueError if steps < 1.
Schedule linear_schedule(double init, double end, int64_t steps);

/// schedules[0] before boundaries[0], then schedules[i] from boundaries[i - 1] on, each called
/// with the steps since its boundary (step - boundaries[i - 1]). Throws ValueError unless there is
/// one boundary fewer than schedules, at least one schedule, none empty, and the boundaries are
/// >= 0 and non-decreasing.
Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int64_t> boundaries);

}  // namespace kiln::optim
