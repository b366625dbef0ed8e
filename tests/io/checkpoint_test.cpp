// Checkpoint files: bit-exact round trips, atomic saves (a save killed mid-write leaves the old
// file), and every kind of damaged file reported as a FormatError naming the path and section.
// Also the default key sequence's state (random::default_key_state), which checkpoints store.
#define XXH_INLINE_ALL  // the test reseals files it edits; inline, so it needs no link to xxHash
#include "kiln/io/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "support/temp_dir.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using Bytes = std::vector<unsigned char>;

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// The row-major bytes of an array, whatever its layout.
Bytes bytes_of(const Array& a) {
  a.eval();
  Bytes b(static_cast<size_t>(a.nbytes()));
  detail::gather_row_major(a, b.data(), a.dtype());
  return b;
}

void expect_same(const Array& got, const Array& want, const std::string& key) {
  ASSERT_EQ(got.valid(), want.valid()) << key;
  if (!want.valid()) return;
  EXPECT_EQ(got.dtype(), want.dtype()) << key;
  EXPECT_EQ(got.shape(), want.shape()) << key;
  EXPECT_TRUE(got.row_contiguous()) << key;
  EXPECT_EQ(bytes_of(got), bytes_of(want)) << key;
}

void expect_same(const nn::ParamTree& got, const nn::ParamTree& want) {
  ASSERT_EQ(got.keys(), want.keys());
  for (const auto& [key, value] : want) expect_same(got.at(key), value, key);
}

void expect_same(const Checkpoint& got, const Checkpoint& want) {
  expect_same(got.parameters, want.parameters);
  expect_same(got.optimizer_state, want.optimizer_state);
  expect_same(got.grad_scaler_state, want.grad_scaler_state);
  EXPECT_EQ(got.step, want.step);
  expect_same(got.random_key, want.random_key, "random_key");
  EXPECT_EQ(got.default_key_state, want.default_key_state);
  EXPECT_EQ(got.data_position, want.data_position);
  EXPECT_EQ(got.metadata, want.metadata);
}

Array key(uint64_t seed) { return random::key(seed); }

// A forked child must not evaluate anything (the thread pool is not there): evaluate first.
void eval_all(const Checkpoint& c) {
  nn::eval(std::vector<const nn::ParamTree*>{&c.parameters, &c.optimizer_state});
  if (c.random_key.valid()) c.random_key.eval();
}

// Every dtype, 0-d, empty and strided views (transposed, stepped, broadcast, offset), special
// floats, and one array above the 1 MiB I/O buffer.
Checkpoint full_checkpoint() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Array base = random::normal({6, 5}, key(1));
  Checkpoint c;
  c.parameters.set("specials", Array(std::vector<float>{nan, -0.0f, inf, -inf, 1e-45f, 3.5f}, {6}));
  c.parameters.set("f32", random::normal({3, 4}, key(2)));
  c.parameters.set("f64", random::normal({2, 3, 2}, key(3), 0, 1, float64));
  c.parameters.set("f16", random::normal({7}, key(4), 0, 1, float16));
  c.parameters.set("bf16", random::normal({2, 5}, key(5), 0, 1, bfloat16));
  c.parameters.set("i8", random::randint({9}, key(6), -128, 128, int8));
  c.parameters.set("u8", random::randint({3, 3}, key(7), 0, 256, uint8));
  c.parameters.set("i32", random::randint({4}, key(8), -(int64_t{1} << 31), int64_t{1} << 31, int32));
  c.parameters.set("i64", random::randint({5}, key(9), -(int64_t{1} << 62), int64_t{1} << 62, int64));
  c.parameters.set("u32", random::randint({2, 2}, key(10), 0, int64_t{1} << 32, uint32));
  c.parameters.set("i16", random::randint({6}, key(16), -32768, 32768, int16));
  c.parameters.set("u16", random::randint({2, 3}, key(17), 0, 65536, uint16));
  c.parameters.set("u64", random::randint({4}, key(18), 0, std::numeric_limits<int64_t>::max(), uint64));
  c.parameters.set("bool", random::bernoulli({11}, key(11)));
  c.parameters.set("scalar", random::normal({}, key(12)));
  c.parameters.set("empty", random::normal({0, 3}, key(13)));
  c.parameters.set("empty_int", zeros({2, 0, 4}, int64));
  c.parameters.set("transposed", transpose(base));
  c.parameters.set("stepped", slice(base, {0, 1}, {6, 5}, {2, 2}));
  c.parameters.set("broadcast", broadcast_to(Array(std::vector<int32_t>{1, -2, 3}, {3}), {4, 3}));
  c.parameters.set("offset_row", slice(base, {2, 0}, {3, 5}));
  c.parameters.set("big", random::normal({600, 600}, key(14)));
  c.optimizer_state.set("step", Array(int64_t{7}));
  c.optimizer_state.set("f32.exp_avg", random::normal({3, 4}, key(15)));
  c.optimizer_state.set("f32.step", Array(int64_t{7}));
  c.step = 1234;
  c.random_key = key(42);
  c.default_key_state = random::DefaultKeyState{.seed = 123, .count = 456};
  c.data_position = DataPosition{.epoch = 3, .batch = 2};
  c.metadata = {
      {"config", "mlp-512"}, {"empty", ""}, {std::string("bin\0ary", 7), std::string("\xff\x00\x01", 3)}};
  c.grad_scaler_state = optim::GradScaler({.init_scale = 1024}).state();
  return c;
}

// Small enough to damage at every byte: one parameter "w" (float32 (2, 3)), a bool "b" (3).
Checkpoint small_checkpoint() {
  Checkpoint c;
  c.parameters.set("w", random::normal({2, 3}, key(20)));
  c.parameters.set("b", random::bernoulli({3}, key(21)));
  c.optimizer_state.set("step", Array(int64_t{2}));
  c.step = 2;
  c.random_key = key(22);
  c.default_key_state = random::DefaultKeyState{.seed = 5, .count = 9};
  c.data_position = DataPosition{.epoch = 1, .batch = 0};
  c.metadata = {{"k", "v"}};
  return c;
}

TEST(Checkpoint, RoundTripIsBitExact) {
  TempDir dir;
  const Checkpoint c = full_checkpoint();
  eval(c.parameters);
  ASSERT_FALSE(c.parameters.at("transposed").row_contiguous());  // the views really are strided
  ASSERT_FALSE(c.parameters.at("stepped").row_contiguous());
  ASSERT_FALSE(c.parameters.at("broadcast").row_contiguous());
  save_checkpoint(dir / "a.ckpt", c);
  expect_same(load_checkpoint(dir / "a.ckpt"), c);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.ckpt"});  // no temporary file left
}

TEST(Checkpoint, RoundTripOfAnEmptyCheckpoint) {
  TempDir dir;
  save_checkpoint(dir / "empty.ckpt", Checkpoint{});
  const Checkpoint got = load_checkpoint(dir / "empty.ckpt");
  expect_same(got, Checkpoint{});
  EXPECT_FALSE(got.default_key_state.has_value());
  EXPECT_FALSE(got.data_position.has_value());
}

TEST(Checkpoint, SavingAgainReplacesTheFile) {
  TempDir dir;
  save_checkpoint(dir / "c.ckpt", full_checkpoint());
  const Checkpoint small = small_checkpoint();
  save_checkpoint(dir / "c.ckpt", small);
  expect_same(load_checkpoint(dir / "c.ckpt"), small);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"c.ckpt"});
}

TEST(Checkpoint, LazyArraysAreEvaluatedBeforeSaving) {
  TempDir dir;
  const Array x = random::normal({4, 3}, key(30));
  Checkpoint c;
  c.parameters.set("y", x * 2.0f + 1.0f);  // not evaluated yet
  save_checkpoint(dir / "lazy.ckpt", c);
  EXPECT_EQ(bytes_of(load_checkpoint(dir / "lazy.ckpt").parameters.at("y")), bytes_of(x * 2.0f + 1.0f));
}

// ---- the file layout, to damage it on purpose (see checkpoint.h) ----

struct Section {
  std::string tag;
  size_t frame, begin, end;  // frame offset, payload [begin, end)
};

uint64_t get_le(const Bytes& b, size_t at, int n) {
  uint64_t v = 0;
  for (int k = n; k-- > 0;) v = (v << 8) | b[at + k];
  return v;
}
void put_le(Bytes& b, size_t at, uint64_t v, int n) {
  for (int k = 0; k < n; ++k) b[at + k] = static_cast<unsigned char>(v >> (8 * k));
}

std::vector<Section> layout(const Bytes& b) {
  std::vector<Section> out;
  size_t at = 24;
  for (uint32_t i = 0; i < get_le(b, 12, 4); ++i) {
    const size_t length = get_le(b, at + 8, 8);
    out.push_back({std::string(reinterpret_cast<const char*>(&b[at]),
                               strnlen(reinterpret_cast<const char*>(&b[at]), 8)),
                   at, at + 32, at + 32 + length});
    at += 32 + length;
  }
  return out;
}

const char* section_name(const std::string& tag) {
  if (tag == "STATE") return "state";
  if (tag == "PARAMS") return "parameters";
  if (tag == "OPTIM") return "optimizer_state";
  if (tag == "SCALER") return "grad_scaler_state";
  return "metadata";
}

// Recomputes every checksum, so that only the edit itself can be caught.
void reseal(Bytes& b, const std::vector<Section>& sections) {
  put_le(b, 16, XXH3_64bits(b.data(), 16), 8);
  for (const Section& s : sections) {
    const size_t end = std::min(s.end, b.size());
    put_le(b, s.frame + 16, XXH3_64bits(b.data() + s.begin, end - s.begin), 8);
    put_le(b, s.frame + 24, XXH3_64bits(b.data() + s.frame, 24), 8);
  }
}

// The message of the FormatError that loading `path` throws; a failure for anything else.
std::string format_error(const fs::path& path) {
  try {
    load_checkpoint(path);
  } catch (const FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a FormatError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error for " << path;
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CheckpointErrors, MissingFileIsARuntimeErrorNamingThePath) {
  TempDir dir;
  const fs::path path = dir / "absent.ckpt";
  try {
    load_checkpoint(path);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    FAIL() << "a missing file is not a format problem: " << e.what();
  } catch (const RuntimeError& e) {
    EXPECT_TRUE(contains(e.what(), path.string())) << e.what();
  }
}

TEST(CheckpointErrors, AFolderIsARuntimeErrorNamingThePath) {
  TempDir dir;
  try {
    load_checkpoint(dir.path());
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_TRUE(contains(e.what(), dir.path().string())) << e.what();
  }
}

TEST(CheckpointErrors, EmptyFileBadMagicAndUnsupportedVersions) {
  TempDir dir;
  const fs::path path = dir / "c.ckpt";
  write_bytes(path, {});
  EXPECT_TRUE(contains(format_error(path), "empty file"));

  save_checkpoint(path, small_checkpoint());
  const Bytes good = read_bytes(path);
  Bytes b = good;
  b[0] = 'X';
  write_bytes(path, b);
  EXPECT_TRUE(contains(format_error(path), "bad magic"));
  write_bytes(path, Bytes{'P', 'K', 0x03, 0x04});  // a zip file, say
  EXPECT_TRUE(contains(format_error(path), "bad magic"));

  for (uint32_t version : {0u, kCheckpointVersion + 1, 0xffffffffu}) {
    b = good;
    put_le(b, 8, version, 4);
    put_le(b, 16, XXH3_64bits(b.data(), 16), 8);  // a well-formed header of another version
    write_bytes(path, b);
    const std::string e = format_error(path);
    EXPECT_TRUE(contains(e, "unsupported version") && contains(e, std::to_string(version))) << e;
  }
  b = good;
  put_le(b, 12, 6, 4);  // the section count, without resealing: the header checksum catches it
  write_bytes(path, b);
  EXPECT_TRUE(contains(format_error(path), "corrupted header"));
  b = good;
  b.push_back(0);
  write_bytes(path, b);
  EXPECT_TRUE(contains(format_error(path), "trailing bytes"));
}

TEST(CheckpointErrors, VersionOneFilesStillLoad) {
  // A version 1 file is a version 2 file without the last section (SCALER).
  TempDir dir;
  const fs::path path = dir / "c.ckpt";
  const Checkpoint c = small_checkpoint();
  save_checkpoint(path, c);
  Bytes b = read_bytes(path);
  const std::vector<Section> sections = layout(b);
  ASSERT_EQ(sections.back().tag, "SCALER");
  b.resize(sections.back().frame);
  put_le(b, 8, 1, 4);
  put_le(b, 12, 4, 4);
  put_le(b, 16, XXH3_64bits(b.data(), 16), 8);
  write_bytes(path, b);
  expect_same(load_checkpoint(path), c);
  // Version 1 with five sections is refused.
  save_checkpoint(path, c);
  b = read_bytes(path);
  put_le(b, 8, 1, 4);
  put_le(b, 16, XXH3_64bits(b.data(), 16), 8);
  write_bytes(path, b);
  EXPECT_TRUE(contains(format_error(path), "wrong number of sections"));
}

TEST(CheckpointErrors, TruncatedAtEveryOffset) {
  TempDir dir;
  const fs::path path = dir / "c.ckpt";
  save_checkpoint(path, small_checkpoint());
  const Bytes good = read_bytes(path);
  const std::vector<Section> sections = layout(good);
  ASSERT_EQ(sections.size(), 5u);
  for (size_t size = 0; size < good.size(); ++size) {
    write_bytes(path, Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(size)));
    const std::string e = format_error(path);
    EXPECT_TRUE(contains(e, path.string())) << e;
    for (const Section& s : sections) {
      if (size >= s.frame && size < s.end) {
        EXPECT_TRUE(contains(e, section_name(s.tag))) << "cut at " << size << ": " << e;
      }
    }
  }
}

TEST(CheckpointErrors, AFlippedByteAnywhereIsCaught) {
  TempDir dir;
  const fs::path path = dir / "c.ckpt";
  save_checkpoint(path, small_checkpoint());
  const Bytes good = read_bytes(path);
  const std::vector<Section> sections = layout(good);
  for (size_t at = 0; at < good.size(); ++at) {
    Bytes b = good;
    b[at] ^= at % 2 ? 0x80 : 0x01;  // the lowest bit of one byte, the highest of the next
    write_bytes(path, b);
    const std::string e = format_error(path);
    EXPECT_TRUE(contains(e, path.string())) << e;
    for (const Section& s : sections) {
      if (at >= s.frame && at < s.end) {
        EXPECT_TRUE(contains(e, section_name(s.tag))) << "byte " << at << ": " << e;
      }
    }
  }
}

// Lengths and values a damaged or hostile file could hold behind valid checksums. Each must be a
// FormatError naming the section, with nothing allocated beyond the bytes that remain (ASan in
// CI fails a huge allocation).
TEST(CheckpointErrors, ImplausibleContentsBehindValidChecksums) {
  TempDir dir;
  const fs::path path = dir / "c.ckpt";
  save_checkpoint(path, small_checkpoint());
  const Bytes good = read_bytes(path);
  const std::vector<Section> sections = layout(good);
  const Section& state = sections[0];
  const Section& params = sections[1];
  const Section& meta = sections[3];
  // PARAMS payload: endianness byte, u64 count, then "w": u64 key length, 'w', u8 dtype, u8 rank,
  // i64 dims[2], 24 data bytes; then "b": u64 key length, 'b', u8 dtype, u8 rank, i64 dim, 3 bytes.
  const size_t w_key = params.begin + 9, w_dtype = w_key + 9, w_rank = w_dtype + 1, w_dim0 = w_rank + 1;
  const size_t w_dim1 = w_dim0 + 8, b_key = w_dim1 + 8 + 24, b_data = b_key + 8 + 1 + 2 + 8;
  // STATE payload: endianness byte, i64 step, flag, u64 seed, u64 count, flag, i64 epoch, i64 batch.
  const size_t step = state.begin + 1, key_flag = step + 8, epoch = key_flag + 17 + 1;
  struct Edit {
    const char* what;
    size_t at;
    uint64_t value;
    int bytes;
    const Section* section;
    const char* message;
  };
  const uint64_t huge = uint64_t{1} << 62;
  const Edit edits[] = {
      {"entry count", params.begin + 1, huge, 8, &params, "length exceeds the section"},
      {"one entry too many", params.begin + 1, 3, 8, &params, "truncated section"},
      {"key length", w_key, huge, 8, &params, "length exceeds the section"},
      {"key length 2^64 - 1", w_key, ~uint64_t{0}, 8, &params, "length exceeds the section"},
      {"empty key", w_key, 0, 8, &params, "empty key"},
      {"dtype code", w_dtype, 200, 1, &params, "unknown dtype"},
      {"rank", w_rank, 17, 1, &params, "rank too large"},
      {"negative dimension", w_dim0, static_cast<uint64_t>(-1), 8, &params, "negative dimension"},
      {"huge dimension", w_dim0, uint64_t{1} << 40, 8, &params, "length exceeds the section"},
      {"dimensions overflowing int64", w_dim0, uint64_t{1} << 40, 8, &params, "shape too large"},
      {"rows beyond the section", w_dim0, 8, 8, &params, "length exceeds the section"},
      {"one row too few", w_dim0, 1, 8, &params, ""},
      {"duplicate key", b_key + 8, 'w', 1, &params, "duplicate key"},
      {"bool byte", b_data, 2, 1, &params, "bool array"},
      {"endianness byte", params.begin, 7, 1, &params, "endianness"},
      {"negative step", step, static_cast<uint64_t>(-5), 8, &state, "negative step"},
      {"flag", key_flag, 2, 1, &state, "flag"},
      {"negative epoch", epoch, static_cast<uint64_t>(-1), 8, &state, "negative data position"},
      {"metadata count", meta.begin + 1, huge, 8, &meta, "length exceeds the section"},
      {"metadata value length", meta.begin + 1 + 8 + 8 + 1, huge, 8, &meta, "length exceeds the section"},
  };
  for (const Edit& edit : edits) {
    Bytes b = good;
    put_le(b, edit.at, edit.value, edit.bytes);
    if (std::string(edit.what) == "dimensions overflowing int64") put_le(b, w_dim1, uint64_t{1} << 40, 8);
    reseal(b, sections);
    write_bytes(path, b);
    const std::string e = format_error(path);
    EXPECT_TRUE(contains(e, path.string()) && contains(e, section_name(edit.section->tag)) &&
                contains(e, edit.message))
        << edit.what << ": " << e;
  }

  // A frame declaring more bytes than the file has.
  Bytes b = good;
  put_le(b, params.frame + 8, huge, 8);
  put_le(b, params.frame + 24, XXH3_64bits(b.data() + params.frame, 24), 8);
  write_bytes(path, b);
  std::string e = format_error(path);
  EXPECT_TRUE(contains(e, "parameters") && contains(e, "declares")) << e;

  // Another section's tag where the optimizer state belongs.
  b = good;
  b[sections[2].frame + 4] = 'X';  // "OPTIX"
  reseal(b, sections);
  write_bytes(path, b);
  e = format_error(path);
  EXPECT_TRUE(contains(e, "optimizer_state") && contains(e, "unexpected section")) << e;

  // Bytes after the last entry of a section.
  b = good;
  b.insert(b.begin() + static_cast<std::ptrdiff_t>(meta.end), 0);
  put_le(b, meta.frame + 8, meta.end + 1 - meta.begin, 8);
  std::vector<Section> longer = sections;
  longer[3].end += 1;
  for (size_t i = 4; i < longer.size(); ++i) {  // the sections after it move up by one byte
    ++longer[i].frame;
    ++longer[i].begin;
    ++longer[i].end;
  }
  reseal(b, longer);
  write_bytes(path, b);
  e = format_error(path);
  EXPECT_TRUE(contains(e, "metadata") && contains(e, "trailing bytes in the section")) << e;
}

// ---- saving: errors leave the old file and no temporary file ----

TEST(CheckpointSave, BadCheckpointsAreRejectedBeforeAnyFileIsTouched) {
  TempDir dir;
  const fs::path path = dir / "c.ckpt";
  save_checkpoint(path, small_checkpoint());
  const Bytes before = read_bytes(path);

  Checkpoint c = small_checkpoint();
  c.optimizer_state.set("w.exp_avg", Array());
  try {
    save_checkpoint(path, c);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "w.exp_avg")) << e.what();
  }
  c = small_checkpoint();
  c.step = -1;
  EXPECT_THROW(save_checkpoint(path, c), ValueError);
  c = small_checkpoint();
  c.data_position = DataPosition{.epoch = 0, .batch = -2};
  EXPECT_THROW(save_checkpoint(path, c), ValueError);
  EXPECT_THROW(save_checkpoint(dir.path() / "", small_checkpoint()), ValueError);  // names no file

  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"c.ckpt"});
}

TEST(CheckpointSave, FileSystemErrorsAreRuntimeErrorsAndLeaveNothingBehind) {
  TempDir dir;
  const fs::path missing = dir / "no_such_folder" / "c.ckpt";
  try {
    save_checkpoint(missing, small_checkpoint());
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_TRUE(contains(e.what(), missing.string())) << e.what();
  }
  // A folder in the way: the rename fails, the folder stays, the temporary file goes.
  fs::create_directory(dir / "taken.ckpt");
  fs::path inside = dir / "taken.ckpt" / "keep";
  write_bytes(inside, {1, 2, 3});
  try {
    save_checkpoint(dir / "taken.ckpt", small_checkpoint());
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_TRUE(contains(e.what(), (dir / "taken.ckpt").string())) << e.what();
  }
  EXPECT_EQ(read_bytes(inside), (Bytes{1, 2, 3}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"taken.ckpt"});
}

// A child process whose file size limit stops the save halfway: save_checkpoint throws a
// RuntimeError, the old checkpoint is untouched and the temporary file is gone.
TEST(CheckpointSave, AWriteErrorMidwayLeavesTheOldFile) {
  TempDir dir;
  const fs::path path = dir / "c.ckpt";
  save_checkpoint(path, small_checkpoint());
  const Bytes before = read_bytes(path);
  const Checkpoint big = full_checkpoint();
  eval_all(big);  // the child only writes
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // so write() fails with EFBIG instead of killing the process
    const rlimit limit{64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 1;
    try {
      save_checkpoint(path, big);
    } catch (const RuntimeError& e) {
      code = contains(e.what(), path.string()) ? 0 : 2;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: the message lacks the path, 3: another error";
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"c.ckpt"});
}

// A child saves a 16 MiB checkpoint over an older one and is SIGKILLed as soon as its temporary
// file appears. The file at the path is then the old checkpoint, whole (or, if the child won
// the race and renamed first, the new one, whole); never anything in between.
TEST(CheckpointSave, AKillDuringTheSaveLeavesTheOldCheckpoint) {
  TempDir dir;
  const fs::path path = dir / "c.ckpt";
  const Checkpoint old_one = small_checkpoint();
  Checkpoint big;
  for (int i = 0; i < 4; ++i)
    big.parameters.set(fmt::format("w{}", i), random::normal({1024, 1024}, key(50 + i)));
  eval_all(big);  // the child only writes: no evaluation (and no thread pool) after fork
  auto temporary_files = [&] {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir.path()))
      if (e.path().filename().string().starts_with(".c.ckpt.tmp-")) found.push_back(e.path());
    return found;
  };
  int killed_mid_write = 0;
  for (int trial = 0; trial < 4; ++trial) {
    save_checkpoint(path, old_one);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        save_checkpoint(path, big);
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    bool exited = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    int status = 0;
    while (temporary_files().empty() && std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (!exited) {
      ::kill(pid, SIGKILL);
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    }
    const std::vector<fs::path> left = temporary_files();
    if (!left.empty()) {
      ++killed_mid_write;
      expect_same(load_checkpoint(path), old_one);
      for (const fs::path& p : left) fs::remove(p);
    } else {
      expect_same(load_checkpoint(path), big);
    }
  }
  EXPECT_GE(killed_mid_write, 1) << "every child finished before the kill; the test proved nothing";
}

// ---- the default key sequence ----

std::vector<uint32_t> words(const Array& k) { return k.to_vector<uint32_t>(); }

TEST(DefaultKeyState, SavesAndRestoresTheSequence) {
  const random::DefaultKeyState outer = random::default_key_state();
  random::seed(77);
  EXPECT_EQ(random::default_key_state(), (random::DefaultKeyState{.seed = 77, .count = 0}));
  random::next_key();
  random::next_key();
  const random::DefaultKeyState state = random::default_key_state();
  EXPECT_EQ(state, (random::DefaultKeyState{.seed = 77, .count = 2}));
  const std::vector<uint32_t> third = words(random::next_key()), fourth = words(random::next_key());
  EXPECT_NE(third, fourth);

  random::seed(5);  // elsewhere in the sequence of another seed
  random::set_default_key_state(state);
  EXPECT_EQ(words(random::next_key()), third);
  EXPECT_EQ(words(random::next_key()), fourth);
  random::set_default_key_state({.seed = 77, .count = 0});
  random::next_key();
  random::next_key();
  EXPECT_EQ(words(random::next_key()), third);  // the same as counting there by drawing
  random::set_default_key_state(outer);
}

}  // namespace
}  // namespace kiln::io
