#pragma once
// kiln's CPU pool. Large elementwise and reduction loops and large GEMMs split across all cores
// (OpenBLAS itself runs on one thread: core/cpu/gemm.cpp).
#include <cstdint>
#include <functional>

namespace kiln::detail {

/// Number of threads parallel_for may use (KILN_NUM_THREADS, else the hardware's count).
int num_threads();

/// Runs fn(begin, end) over [0, n) in chunks of at least `grain` items, on the pool when n is
/// large and the pool is free; serially otherwise (nested calls and concurrent callers included).
/// The chunks depend only on n, grain and num_threads(), so a result never depends on whether the
/// pool was busy.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/// Items per task below which splitting does not pay (~32 KiB of float32 work).
inline constexpr int64_t kElementwiseGrain = 1 << 15;

}  // namespace kiln::detail
