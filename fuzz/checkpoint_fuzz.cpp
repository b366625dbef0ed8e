// libFuzzer target: io::load_checkpoint on mutated checkpoint files. Any outcome but a value or a
// kiln::Error (a crash, a sanitizer report, a leak, another exception) is a finding. The seeds are
// valid checkpoints: arrays of several dtypes and shapes, optimizer state, metadata, a position.
#include <kiln/io/checkpoint.h>
#include <kiln/kiln.h>

#include "fuzz_file.h"

namespace {

using kiln::Array;

void write_seeds(const std::filesystem::path& dir) {
  namespace io = kiln::io;
  const Array k = kiln::random::key(7);
  io::Checkpoint small;
  small.parameters.set("w", kiln::random::normal({3, 2}, k));
  small.step = 3;
  io::save_checkpoint(dir / "small.ckpt", small);

  io::Checkpoint full;
  full.parameters.set("fc1.weight", kiln::random::normal({4, 5}, kiln::random::key(1)));
  full.parameters.set("fc1.bias",
                      kiln::astype(kiln::random::normal({4}, kiln::random::key(2)), kiln::bfloat16));
  full.parameters.set("count", kiln::random::randint({2, 3}, kiln::random::key(3), -5, 5, kiln::int64));
  full.parameters.set("mask", kiln::random::bernoulli({5}, kiln::random::key(4)));
  full.optimizer_state.set("fc1.weight.exp_avg", kiln::random::normal({4, 5}, kiln::random::key(5)));
  full.optimizer_state.set("step", Array(int64_t{12}));
  full.step = 12;
  full.random_key = k;
  full.default_key_state = kiln::random::DefaultKeyState{42, 9};
  full.data_position = kiln::io::DataPosition{1, 4};
  full.metadata = {{"model", "mlp"}, {"note", "seed corpus"}};
  io::save_checkpoint(dir / "full.ckpt", full);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln_fuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return kiln_fuzz::load_input("checkpoint", data, size, [](const std::filesystem::path& path) {
    const kiln::io::Checkpoint c = kiln::io::load_checkpoint(path);
    for (const auto& [key, value] : c.parameters) (void)value.nbytes();
  });
}
