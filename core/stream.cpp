#include "kiln/core/stream.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kiln/core/error.h"

namespace kiln {

const Device Device::cpu{Device::Type::cpu, 0};
const Device Device::gpu{Device::Type::gpu, 0};

std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << (d.type == Device::Type::cpu ? "Device(cpu, " : "Device(gpu, ") << d.index << ")";
}

namespace {
Device initial_device() {
  if (const char* env = std::getenv("KILN_DEVICE"); env && std::strcmp(env, "gpu") == 0)
    throw DeviceError::of("default_device", "KILN_DEVICE=gpu but kiln has no GPU backend in this build");
  return Device::cpu;
}
// Guarded by being atomic: read on every op, written rarely.
std::atomic<Device::Type>& default_type() {
  static std::atomic<Device::Type> t{initial_device().type};
  return t;
}
}  // namespace

Device default_device() { return Device{default_type().load(std::memory_order_relaxed), 0}; }

void set_default_device(Device d) {
  if (d.type == Device::Type::gpu)
    throw DeviceError::of("set_default_device", "kiln was built without a GPU backend");
  default_type().store(d.type);
}

Stream default_stream(Device d) { return Stream{d.type == Device::Type::cpu ? 0 : 1, d}; }

Stream to_stream(const StreamOrDevice& s) {
  if (const auto* st = std::get_if<Stream>(&s)) return *st;
  if (const auto* d = std::get_if<Device>(&s)) return default_stream(*d);
  return default_stream(default_device());
}

}  // namespace kiln
