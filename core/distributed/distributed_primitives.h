#pragma once
// Collective primitives (internal; tests may include this header). They run on the CPU stream:
// eval_gpu is the base's, and GPU inputs reach eval_cpu through host memory.
#include "kiln/core/distributed/distributed.h"
#include "kiln/core/primitive.h"

namespace kiln::distributed::detail {

/// Base of the collectives: the group they communicate in, compared by identity.
class CollectivePrimitive : public Primitive {
 public:
  /// peer: the other rank it names (root, destination, source), or -1; compared and printed.
  explicit CollectivePrimitive(Group group, int peer = -1);
  const Group& group() const { return group_; }
  int peer() const { return peer_; }
  bool is_equivalent(const Primitive& other) const override;
  void print(std::ostream& os) const override;

 private:
  Group group_;
  int peer_;
};

/// The sum over ranks. vjp and jvp: all_sum of the cotangent or tangent; vmap: all_sum of the batch.
class AllSum final : public CollectivePrimitive {
 public:
  using CollectivePrimitive::CollectivePrimitive;
  const char* name() const override { return "AllSum"; }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override;
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;
};

/// Concatenation over ranks along axis 0 (a 0-d input gives (size,)). vjp: this rank's slice.
class AllGather final : public CollectivePrimitive {
 public:
  using CollectivePrimitive::CollectivePrimitive;
  const char* name() const override { return "AllGather"; }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override;
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;
};

/// The root's array on every rank. vjp: the all_sum of the cotangents on the root, zeros elsewhere.
class Broadcast final : public CollectivePrimitive {
 public:
  Broadcast(Group group, int root) : CollectivePrimitive(std::move(group), root) {}
  const char* name() const override { return "Broadcast"; }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override;
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;
};

/// Sends its input to `dst`; its output is the input (a view). vjp: the cotangent plus the one
/// received from dst. A side effect: compile never merges two sends.
class Send final : public CollectivePrimitive {
 public:
  Send(Group group, int dst) : CollectivePrimitive(std::move(group), dst) {}
  const char* name() const override { return "Send"; }
  uint32_t traits() const override { return static_cast<uint32_t>(Trait::side_effect); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override;
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  std::vector<Array> vjp(const VjpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;
};

/// Receives an array from `src`. Its inputs, if any, are only evaluated first, not read (Send's vjp
/// receives after its own send); the received values do not depend on them, so their cotangents
/// and the output's tangent are zero. A side effect: compile never merges two receives.
class Recv final : public CollectivePrimitive {
 public:
  Recv(Group group, Shape shape, Dtype dtype, int src)
      : CollectivePrimitive(std::move(group), src), shape_(std::move(shape)), dtype_(dtype) {}
  const char* name() const override { return "Recv"; }
  uint32_t traits() const override { return static_cast<uint32_t>(Trait::side_effect); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override;
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;

 private:
  const Shape shape_;
  const Dtype dtype_;
};

}  // namespace kiln::distributed::detail
