// The gpu facade in a build without the Vulkan backend (KILN_VULKAN=OFF): recording calls throw
// DeviceError, and the storage and memory calls find no device. This one file is what such a build
// needs; every eval_gpu still compiles against core/vulkan/gpu.h.
#include "kiln/core/vulkan/gpu.h"

namespace kiln::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw DeviceError::of(what, "kiln was built without Vulkan (KILN_VULKAN=OFF)");
}
}  // namespace

bool available() { return false; }
std::string unavailable_reason() { return "kiln was built without Vulkan (KILN_VULKAN=OFF)"; }
bool supports(Dtype) { return false; }

void allocate(Array&) { no_gpu("gpu allocate"); }
void copy(const Array&, Array&) { no_gpu("gpu copy"); }
void elementwise(std::string_view, Dtype, std::span<const Array>, Array&) { no_gpu("gpu elementwise"); }
void matmul(const Array&, const Array&, Array&, const Array*, double, double) { no_gpu("gpu matmul"); }
void linear(const Array&, const Array&, const Array*, Array&) { no_gpu("gpu linear"); }
void adam_step(std::span<const Array>, std::span<Array>, const AdamStepConstants&) {
  no_gpu("gpu adam_step");
}
void elementwise_chain(std::span<const ChainStep>, std::string_view, std::span<const Array>, Array&) {
  no_gpu("gpu elementwise_chain");
}
void keyed_elementwise(std::string_view, Dtype, const Array&, int64_t, Array&) { no_gpu("gpu random"); }
void random_permutation(const Array&, int64_t, Array&) { no_gpu("gpu permutation"); }

bool has_pending() { return false; }
void submit_pending() {}
void discard_pending() noexcept {}

std::shared_ptr<detail::vk::DeviceBuffer> upload(const void*, size_t) { no_gpu("gpu upload"); }
void download(const detail::vk::DeviceBuffer&, void*, size_t, size_t) { no_gpu("gpu download"); }

MemoryCounters memory_counters() noexcept { return {}; }
void reset_peak_memory() noexcept {}
void clear_cache() noexcept {}

}  // namespace kiln::gpu
