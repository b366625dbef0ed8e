#include "kiln/core/stream.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {

const Device Device::cpu{Device::Type::cpu, 0};
const Device Device::gpu{Device::Type::gpu, 0};

std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << (d.type == Device::Type::cpu ? "Device(cpu, " : "Device(gpu, ") << d.index << ")";
}

namespace {
void require_gpu(const char* what) {
  if (!gpu::available()) throw DeviceError::of(what, "no usable GPU", "{}", gpu::unavailable_reason());
}
// KILN_DEVICE=gpu|cpu picks; without it the CPU is the default while the GPU backend does not yet
// cover every primitive (docs/environment.md).
Device initial_device() {
  const char* env = std::getenv("KILN_DEVICE");
  if (!env || std::strcmp(env, "cpu") == 0 || *env == 0) return Device::cpu;
  if (std::strcmp(env, "gpu") == 0) {
    require_gpu("KILN_DEVICE=gpu");
    return Device::gpu;
  }
  throw ValueError::of("KILN_DEVICE", "must be cpu or gpu", "got '{}'", env);
}
// Guarded by being atomic: read on every op, written rarely.
std::atomic<Device::Type>& default_type() {
  static std::atomic<Device::Type> t{initial_device().type};
  return t;
}
}  // namespace

bool is_available(Device d) { return d.type == Device::Type::cpu || gpu::available(); }

// The innermost StreamScope's stream on this thread.
static thread_local std::optional<Stream> tls_scoped_stream;

Device default_device() {
  if (tls_scoped_stream) return tls_scoped_stream->device;
  return Device{default_type().load(std::memory_order_relaxed), 0};
}

void set_default_device(Device d) {
  if (d.type == Device::Type::gpu) require_gpu("set_default_device");
  default_type().store(d.type);
}

Stream default_stream(Device d) { return Stream{d.type == Device::Type::cpu ? 0 : 1, d}; }

Stream to_stream(const StreamOrDevice& s) {
  if (const auto* st = std::get_if<Stream>(&s)) return *st;
  if (const auto* d = std::get_if<Device>(&s)) return default_stream(*d);
  if (tls_scoped_stream) return *tls_scoped_stream;
  return default_stream(default_device());
}

Stream new_stream(Device d) {
  if (d.type == Device::Type::gpu) require_gpu("new_stream");
  static std::atomic<int> next{2};  // 0 and 1 are the CPU's and the GPU's default streams
  return Stream{next.fetch_add(1, std::memory_order_relaxed), d};
}

StreamScope::StreamScope(const StreamOrDevice& s) : previous_(tls_scoped_stream) {
  if (std::holds_alternative<std::monostate>(s))
    throw ValueError::of("StreamScope", "needs a stream or a device");
  const Stream st = to_stream(s);
  if (st.device.type == Device::Type::gpu) require_gpu("StreamScope");
  tls_scoped_stream = st;
}

StreamScope::~StreamScope() { tls_scoped_stream = previous_; }

}  // namespace kiln
