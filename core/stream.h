#pragma once
// Devices and streams. A stream is a queue of work on one device; streams are not tied to threads.
#include <cstdint>
#include <ostream>
#include <variant>

namespace kiln {

struct Device {
  enum class Type : uint8_t { cpu, gpu };
  Type type = Type::cpu;
  int index = 0;
  static const Device cpu;
  static const Device gpu;
  bool operator==(const Device&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Device& d);

struct Stream {
  int index = 0;
  Device device;
  bool operator==(const Stream&) const = default;
};

/// Where an op runs: nothing (the default device's stream), a device, or a stream.
using StreamOrDevice = std::variant<std::monostate, Stream, Device>;

/// Whether arrays can be computed on `d`: always for the CPU; for the GPU, when kiln was built with
/// Vulkan and a device exists (a CPU-type one only with KILN_VULKAN_ALLOW_CPU=1). Never throws.
bool is_available(Device d);
/// The default device: the CPU unless KILN_DEVICE=gpu or set_default_device says otherwise.
Device default_device();
/// Sets the default device for this process (throws DeviceError if it is unavailable).
void set_default_device(Device d);
/// The default stream of a device.
Stream default_stream(Device d);
/// Resolves an op's StreamOrDevice argument to a stream.
Stream to_stream(const StreamOrDevice& s);

}  // namespace kiln
