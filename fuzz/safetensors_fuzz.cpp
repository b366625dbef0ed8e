// libFuzzer target: io::read_safetensors on mutated safetensors files. Any outcome but a value or a
// kiln::Error (a crash, a sanitizer report, a leak, another exception) is a finding. The seeds are
// valid files: every dtype kiln writes, 0-d and empty tensors, metadata.
#include <kiln/io/safetensors.h>
#include <kiln/kiln.h>

#include "fuzz_file.h"

namespace {

using kiln::Array;

void write_seeds(const std::filesystem::path& dir) {
  namespace io = kiln::io;
  kiln::nn::ParamTree small;
  small.set("w", kiln::random::normal({3, 2}, kiln::random::key(1)));
  io::save_safetensors(dir / "small.safetensors", small);

  kiln::nn::ParamTree full;
  full.set("model.embed_tokens.weight", kiln::random::normal({4, 5}, kiln::random::key(2)));
  full.set("model.norm.weight",
           kiln::astype(kiln::random::normal({4}, kiln::random::key(3)), kiln::bfloat16));
  full.set("model.ids", kiln::random::randint({2, 3}, kiln::random::key(4), 0, 60000, kiln::uint16));
  full.set("mask", kiln::random::bernoulli({5}, kiln::random::key(5)));
  full.set("step", Array(int64_t{12}));
  full.set("empty", kiln::zeros({0, 3}));
  io::save_safetensors(dir / "full.safetensors", full, {{"format", "pt"}});
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln_fuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiln_fuzz::load_input("safetensors", data, size, [](const std::filesystem::path& path) {
    const kiln::io::SafetensorsFile f = kiln::io::read_safetensors(path);
    for (const auto& [key, value] : f.tensors)
      (void)kiln::sum(kiln::astype(value, kiln::float32)).item<float>();
  });
}
