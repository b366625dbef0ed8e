#pragma once
// Shared by the fuzz targets: the loaders read paths, so each input is written to one file per
// process first; KILN_FUZZ_WRITE_SEEDS=<dir> makes a target write its seed corpus and exit.
#include <kiln/core/error.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace kiln_fuzz {

/// The file the current input is written to (under /dev/shm when it exists: no disk traffic).
inline const std::filesystem::path& input_path(const char* name) {
  static const std::filesystem::path path = [&] {
    const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    return dir / (std::string("kiln-fuzz-") + name + "-" + std::to_string(::getpid()));
  }();
  return path;
}

inline void write_input(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

/// One fuzz input: `data` written to input_path(name), then `load(path)`. A kiln::Error is what a
/// damaged file must give; anything else (a crash, a sanitizer report, another exception) is a
/// finding.
template <class Load>
int load_input(const char* name, const uint8_t* data, size_t size, Load&& load) {
  const std::filesystem::path& path = input_path(name);
  write_input(path, data, size);
  try {
    load(path);
  } catch (const kiln::Error&) {
  }
  return 0;
}

/// When KILN_FUZZ_WRITE_SEEDS names a folder: calls write_seeds(folder) and exits the process.
inline void maybe_write_seeds(const std::function<void(const std::filesystem::path&)>& write_seeds) {
  const char* dir = std::getenv("KILN_FUZZ_WRITE_SEEDS");
  if (!dir) return;
  std::filesystem::create_directories(dir);
  write_seeds(dir);
  std::exit(0);
}

}  // namespace kiln_fuzz
