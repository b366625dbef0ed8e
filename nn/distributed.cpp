#include "kiln/nn/distributed.h"

#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/shape.h"

namespace kiln::nn {
namespace {

using distributed::Group;

Group resolve(const std::optional<Group>& group) { return group ? *group : distributed::init(); }

// FNV-1a, 64 bits: a digest both sides compute the same way (std::hash may differ between builds).
class Digest {
 public:
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  void word(uint64_t v) { bytes(&v, sizeof v); }
  int64_t value() const { return static_cast<int64_t>(h_); }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// Keys, shapes and dtypes, in order.
int64_t layout_digest(const ParamTree& tree) {
  Digest d;
  for (const auto& [key, value] : tree) {
    d.bytes(key.data(), key.size() + 1);  // with the terminating NUL: "a"+"bc" differs from "ab"+"c"
    d.word(static_cast<uint64_t>(value.dtype()));
    d.word(static_cast<uint64_t>(value.ndim()));
    for (int64_t n : value.shape()) d.word(static_cast<uint64_t>(n));
  }
  return d.value();
}

// The values' bits, row-major. Word-wise (not FNV's byte loop): parameters run to megabytes.
int64_t value_digest(const Array& a) {
  a.eval();
  std::vector<unsigned char> dense;
  const unsigned char* p = nullptr;
  if (a.row_contiguous()) {
    p = static_cast<const unsigned char*>(a.raw_data());
  } else {
    dense.resize(static_cast<size_t>(a.nbytes()));
    kiln::detail::gather_row_major(a, dense.data(), a.dtype());
    p = dense.data();
  }
  const auto n = static_cast<size_t>(a.nbytes());
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return static_cast<int64_t>(h);
}

// Every rank's `mine` (the same length on each), rank 0's first.
std::vector<int64_t> gather_from_ranks(const std::vector<int64_t>& mine, const Group& group) {
  const Array gathered =
      distributed::all_gather(Array(mine, Shape{static_cast<int64_t>(mine.size())}), group);
  return gathered.to_vector<int64_t>();
}

std::string describe(const ParamTree& tree, size_t limit) {
  std::string out;
  size_t shown = 0;
  for (const auto& [key, value] : tree) {
    if (shown == limit) {
      out += fmt::format(", ... ({} more)", tree.size() - shown);
      break;
    }
    out += fmt::format("{}{} {} {}", shown ? ", " : "", key, shape_str(value.shape()),
                       dtype_name(value.dtype()));
    ++shown;
  }
  return out.empty() ? "nothing" : out;
}

// Throws RuntimeError on every rank when the ranks' trees differ in keys, shapes or dtypes.
void check_same_layout(const char* op, const ParamTree& tree, const Group& group) {
  const std::vector<int64_t> all =
      gather_from_ranks({static_cast<int64_t>(tree.size()), layout_digest(tree)}, group);
  std::string ranks;
  bool differ = false;
  for (int r = 0; r < group.size(); ++r) {
    const int64_t count = all[2 * r], digest = all[2 * r + 1];
    if (count != all[0] || digest != all[1]) differ = true;
    ranks += fmt::format("{}rank {}: {} arrays (digest {:016x})", r ? ", " : "", r, count,
                         static_cast<uint64_t>(digest));
  }
  if (differ)
    throw RuntimeError::of(op, "the ranks' trees differ (keys, shapes or dtypes)",
                           "{}; this rank ({}) has {}", ranks, group.rank(), describe(tree, 8));
}

// After a step that may have failed on some ranks (`own`: this rank's error, if any): rethrows this
// rank's error, or throws RuntimeError naming the ranks that failed, on every rank alike.
void agree(const char* op, const std::exception_ptr& own, const std::string& what, const Group& group) {
  const std::vector<int64_t> failed = gather_from_ranks({own ? 1 : 0}, group);
  if (own) std::rethrow_exception(own);
  std::string ranks;
  for (int r = 0; r < group.size(); ++r)
    if (failed[r]) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
  if (!ranks.empty()) throw RuntimeError::of(op, "failed on another rank", "rank(s) {}: {}", ranks, what);
}

void eval_checkpoint(const io::Checkpoint& c) {
  nn::eval({&c.parameters, &c.optimizer_state});
  if (c.random_key.valid()) c.random_key.eval();
}

// Rank `root`'s string on every rank.
std::string broadcast_string(const std::string& s, int root, const Group& group) {
  const Array length = distributed::broadcast(Array(static_cast<int64_t>(s.size())), root, group);
  const auto n = length.item<int64_t>();
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  if (group.rank() == root) bytes.assign(s.begin(), s.end());
  const std::vector<uint8_t> got =
      distributed::broadcast(Array(bytes, Shape{n}), root, group).to_vector<uint8_t>();
  return {got.begin(), got.end()};
}

}  // namespace

ParamTree average_gradients(const ParamTree& grads, std::optional<Group> group_arg,
                            AverageGradientsOptions options) {
  if (options.bucket_bytes < 1)
    throw ValueError::of("average_gradients", "bucket_bytes must be >= 1", "got {}", options.bucket_bytes);
  for (const auto& [key, g] : grads)
    if (!g.valid())
      throw ValueError::of("average_gradients", "an array is empty (default-constructed)", "at {}", key);
  const Group group = resolve(group_arg);
  if (group.size() == 1) return grads;
  if (options.check_trees) check_same_layout("average_gradients", grads, group);

  // Buckets: arrays of one dtype in tree order, each bucket up to bucket_bytes. The same tree gives
  // the same buckets, hence the same collectives, on every rank.
  const std::vector<std::string> keys = grads.keys();
  const std::vector<Array> values = grads.values();
  struct Bucket {
    std::vector<size_t> items;
    int64_t bytes = 0;
  };
  std::vector<Bucket> buckets;
  std::map<Dtype, size_t> open;  // the bucket still filling, per dtype
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t bytes = values[i].nbytes();
    auto it = open.find(values[i].dtype());
    if (it == open.end() || buckets[it->second].bytes + bytes > options.bucket_bytes) {
      buckets.emplace_back();
      it = open.insert_or_assign(values[i].dtype(), buckets.size() - 1).first;
    }
    buckets[it->second].items.push_back(i);
    buckets[it->second].bytes += bytes;
  }

  const auto n = static_cast<double>(group.size());
  std::vector<Array> averaged(values.size());
  for (const Bucket& b : buckets) {
    if (b.items.size() == 1) {
      averaged[b.items[0]] = divide(distributed::all_sum(values[b.items[0]], group), n);
      continue;
    }
    std::vector<Array> flat;
    for (size_t i : b.items) flat.push_back(reshape(values[i], {values[i].size()}));
    const Array sum = divide(distributed::all_sum(concatenate(flat, 0), group), n);
    int64_t offset = 0;
    for (size_t i : b.items) {
      const int64_t size = values[i].size();
      averaged[i] = reshape(slice(sum, {offset}, {offset + size}), values[i].shape());
      offset += size;
    }
  }
  ParamTree out;
  for (size_t i = 0; i < keys.size(); ++i) out.set(keys[i], averaged[i]);
  return out;
}

void broadcast_parameters(Module& model, int root, std::optional<Group> group_arg) {
  const Group group = resolve(group_arg);
  if (root < 0 || root >= group.size())
    throw ValueError::of("broadcast_parameters", "root out of range", "{} for a group of {}", root,
                         group.size());
  if (group.size() == 1) return;
  const ParamTree params = model.parameters();
  check_same_layout("broadcast_parameters", params, group);
  const ParamTree rooted =
      params.map([&](const std::string&, const Array& v) { return distributed::broadcast(v, root, group); });
  nn::eval(rooted);
  model.update(rooted);
}

void check_replicas(const ParamTree& tree, std::optional<Group> group_arg) {
  const Group group = resolve(group_arg);
  if (group.size() == 1) return;
  check_same_layout("check_replicas", tree, group);
  std::vector<int64_t> mine;
  for (const auto& [key, value] : tree) mine.push_back(value_digest(value));
  const std::vector<int64_t> all = gather_from_ranks(mine, group);
  const std::vector<std::string> keys = tree.keys();
  std::vector<std::string> differing;
  for (size_t k = 0; k < keys.size(); ++k)
    for (int r = 1; r < group.size(); ++r)
      if (all[r * keys.size() + k] != all[k]) {
        differing.push_back(fmt::format("{} (rank 0 vs rank {})", keys[k], r));
        break;
      }
  if (!differing.empty()) {
    if (differing.size() > 5) differing.resize(5);
    throw RuntimeError::of("check_replicas", "the replicas differ", "{}", fmt::join(differing, ", "));
  }
}

void save_checkpoint_from_rank0(const std::filesystem::path& path, const io::Checkpoint& checkpoint,
                                std::optional<Group> group_arg) {
  const Group group = resolve(group_arg);
  eval_checkpoint(checkpoint);
  std::exception_ptr error;
  if (group.rank() == 0) try {
      io::save_checkpoint(path, checkpoint);
    } catch (...) {
      error = std::current_exception();
    }
  agree("save_checkpoint_from_rank0", error, fmt::format("rank 0 could not write {}", path.string()), group);
}

std::filesystem::path save_checkpoint_from_rank0(io::CheckpointManager& manager,
                                                 const io::Checkpoint& checkpoint,
                                                 std::optional<Group> group_arg) {
  const Group group = resolve(group_arg);
  eval_checkpoint(checkpoint);
  std::exception_ptr error;
  if (group.rank() == 0) try {
      manager.save(checkpoint);
    } catch (...) {
      error = std::current_exception();
    }
  const std::filesystem::path path = manager.path_for(checkpoint.step);
  agree("save_checkpoint_from_rank0", error, fmt::format("rank 0 could not write {}", path.string()), group);
  return path;
}

io::Checkpoint load_checkpoint_on_every_rank(const std::filesystem::path& path,
                                             std::optional<Group> group_arg) {
  const Group group = resolve(group_arg);
  std::optional<io::Checkpoint> checkpoint;
  std::exception_ptr error;
  try {
    checkpoint = io::load_checkpoint(path);
  } catch (...) {
    error = std::current_exception();
  }
  agree("load_checkpoint_on_every_rank", error, fmt::format("could not read {}", path.string()), group);
  Digest d;
  for (const auto& [key, value] : checkpoint->parameters) d.word(static_cast<uint64_t>(value_digest(value)));
  const std::vector<int64_t> all = gather_from_ranks({checkpoint->step, d.value()}, group);
  for (int r = 1; r < group.size(); ++r)
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
      throw RuntimeError::of("load_checkpoint_on_every_rank", "the ranks read different checkpoints",
                             "{}: rank 0 step {}, rank {} step {}{} (do all ranks see the same folder?)",
                             path.string(), all[0], r, all[2 * r],
                             all[2 * r] == all[0] ? " with other parameters" : "");
  return std::move(*checkpoint);
}

std::optional<io::Checkpoint> load_latest_on_every_rank(const io::CheckpointManager& manager,
                                                        std::optional<Group> group_arg) {
  const Group group = resolve(group_arg);
  std::string latest;
  std::exception_ptr error;
  if (group.rank() == 0) try {
      if (auto p = manager.latest()) latest = p->string();
    } catch (...) {
      error = std::current_exception();
    }
  agree("load_latest_on_every_rank", error,
        fmt::format("rank 0 could not list {}", manager.folder().string()), group);
  latest = broadcast_string(latest, 0, group);
  if (latest.empty()) return std::nullopt;
  return load_checkpoint_on_every_rank(latest, group);
}

}  // namespace kiln::nn
