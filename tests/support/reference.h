#pragma once
// Building blocks for naive float64 references in tests: plain row-major index loops, written
// independently of kiln's kernels.
#include <kiln/kiln.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::test {

using Idx = std::vector<int64_t>;

/// Calls f(multi_index) for every index of `shape` in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const Idx&)>& f);
/// Row-major flat position of multi-index i in `shape`.
int64_t flat(const Shape& shape, const Idx& i);

}  // namespace kiln::test
