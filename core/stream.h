#pragma once
// Devices and streams. A stream is a queue of work on one device; streams are not tied to threads.
#include <cstdint>
#include <optional>
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
/// The default device: a StreamScope's on this thread, else the CPU unless KILN_DEVICE=gpu or
/// set_default_device says otherwise.
Device default_device();
/// Sets the default device for this process (throws DeviceError if it is unavailable).
void set_default_device(Device d);
/// The default stream of a device.
Stream default_stream(Device d);
/// Resolves an op's StreamOrDevice argument to a stream: the one given, a device's default stream,
/// or (nothing given) this thread's StreamScope's stream, else the default device's default stream.
Stream to_stream(const StreamOrDevice& s);

/// A new stream on `d`, distinct from every other (MLX's new_stream). kiln orders work by data
/// dependencies alone, on every stream: a stream says which device computes an op, and arrays on
/// different streams of one device are evaluated as any independent arrays are (together when
/// evaluated together, concurrently from several threads or with async_eval). Thread-safe. Throws
/// DeviceError for the GPU when none is usable.
Stream new_stream(Device d);

/// While it lives, ops on this thread given no stream or device run on `s` (a stream, or a
/// device's default stream), and default_device() is its device: `StreamScope on_gpu(Device::gpu);`
/// (MLX's `with mx.stream(...)`). Scopes nest; each restores the one before when it ends, and must
/// end on the thread that made it, in reverse order (as any scope object). Throws DeviceError for a
/// GPU that is not usable, ValueError for an empty StreamOrDevice.
class StreamScope {
 public:
  explicit StreamScope(const StreamOrDevice& s);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  std::optional<Stream> previous_;
};

}  // namespace kiln
