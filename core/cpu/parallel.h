#pragma once
// kiln's CPU pool. Large elementwise and reduction loops split across all cores; BLAS calls are
// never made from pool tasks, so OpenBLAS's own threads and these never run at once.
#include <cstdint>
#include <functional>

namespace kiln::detail {

/// Number of threads parallel_for may use (KILN_NUM_THREADS, else the hardware's count).
int num_threads();

/// Runs fn(begin, end) over [0, n) in chunks of at least `grain` items, on the pool when n is
/// large and the pool is free; serially otherwise (nested calls and concurrent callers included).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/// Items per task below which splitting does not pay (~32 KiB of float32 work).
inline constexpr int64_t kElementwiseGrain = 1 << 15;

}  // namespace kiln::detail
