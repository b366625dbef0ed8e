// The collective ops and their primitives: argument checks, graph nodes, and eval_cpu bodies that
// hand host memory to the group's communicator (communicator_impl.h).
#include <climits>
#include <cstring>

#include "kiln/core/distributed/communicator_impl.h"
#include "kiln/core/distributed/distributed_primitives.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"

namespace kiln::distributed {
namespace detail {

/// The internal transpose of broadcast: the sum over ranks on `root`, zeros on the other ranks.
/// vjp: broadcast of the root's cotangent; jvp and vmap: itself.
class SumToRoot final : public CollectivePrimitive {
 public:
  SumToRoot(Group group, int root) : CollectivePrimitive(std::move(group), root) {}
  const char* name() const override { return "SumToRoot"; }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;
};

namespace {

// An array's values, row-major, in host memory: its own buffer when it is laid out so, else a copy.
struct HostBytes {
  const void* data;
  std::shared_ptr<const void> owner;
};
HostBytes host_bytes(const Array& a) {
  if (a.row_contiguous()) return {a.raw_data(), a.node().buffer};
  Array dense = Array::empty_available(a.shape(), a.dtype());
  ::kiln::detail::gather_row_major(a, dense.raw_data(), a.dtype());
  return {dense.raw_data(), dense.node().buffer};
}

// `out` allocated and holding `in`'s values row-major (or `in`'s buffer, when it may be reused).
void copy_into(const Array& in, Array& out) {
  if (out.donate_from(in)) return;
  out.allocate();
  ::kiln::detail::gather_row_major(in, out.raw_data(), in.dtype());
}

Communicator& comm(const Group& g) { return *g.communicator(); }

}  // namespace

CollectivePrimitive::CollectivePrimitive(Group group, int peer)
    : Primitive(default_stream(Device::cpu)), group_(std::move(group)), peer_(peer) {}

bool CollectivePrimitive::is_equivalent(const Primitive& other) const {
  if (typeid(other) != typeid(*this)) return false;
  const auto& o = static_cast<const CollectivePrimitive&>(other);
  return o.group_ == group_ && o.peer() == peer();
}

void CollectivePrimitive::print(std::ostream& os) const {
  os << name() << "(rank " << group_.rank() << " of " << group_.size();
  if (peer() >= 0) os << ", peer " << peer();
  os << ")";
}

std::vector<Shape> AllSum::output_shapes(std::span<const Array> in) const { return {in[0].shape()}; }

void AllSum::eval_cpu(std::span<const Array> in, std::span<Array> out) const {
  copy_into(in[0], out[0]);
  comm(group()).all_sum("all_sum", out[0].raw_data(), out[0].size(), out[0].dtype(), {out[0].node().buffer});
}

std::vector<Array> AllSum::vjp(const VjpArgs& a) const { return {all_sum(a.cotangents[0], group())}; }
std::vector<Array> AllSum::jvp(const JvpArgs& a) const { return {all_sum(a.tangents[0], group())}; }
VmapResult AllSum::vmap(const VmapArgs& a) const { return {{all_sum(a.inputs[0], group())}, {a.axes[0]}}; }

std::vector<Shape> AllGather::output_shapes(std::span<const Array> in) const {
  Shape s = in[0].shape();
  if (s.empty()) return {{group().size()}};
  s[0] *= group().size();
  return {s};
}

void AllGather::eval_cpu(std::span<const Array> in, std::span<Array> out) const {
  const HostBytes x = host_bytes(in[0]);
  out[0].allocate();
  comm(group()).all_gather("all_gather", x.data, out[0].raw_data(), in[0].nbytes(),
                           {x.owner, out[0].node().buffer});
}

std::vector<Array> AllGather::vjp(const VjpArgs& a) const {
  const Array& x = a.primals[0];
  const Array& ct = a.cotangents[0];
  const int64_t n = x.ndim() == 0 ? 1 : x.shape(0);
  Shape start(ct.ndim(), 0), stop = ct.shape();
  start[0] = group().rank() * n;
  stop[0] = start[0] + n;
  return {reshape(slice(ct, start, stop), x.shape())};
}

std::vector<Array> AllGather::jvp(const JvpArgs& a) const { return {all_gather(a.tangents[0], group())}; }

VmapResult AllGather::vmap(const VmapArgs& a) const {
  const Array& x = a.inputs[0];
  const int b = a.axes[0];
  if (b < 0) return {{all_gather(x, group())}, {-1}};
  if (x.ndim() == 1) {  // a batch of scalars: (B,) gathers to (size * B,), i.e. (size, B)
    const Array g = all_gather(x, group());
    return {{reshape(g, {group().size(), x.shape(0)})}, {1}};
  }
  // With the batch axis last, axis 0 is the examples' own first axis, which is gathered.
  const int last = x.ndim() - 1;
  return {{all_gather(moveaxis(x, b, last), group())}, {last}};
}

std::vector<Shape> Broadcast::output_shapes(std::span<const Array> in) const { return {in[0].shape()}; }

void Broadcast::eval_cpu(std::span<const Array> in, std::span<Array> out) const {
  if (group().rank() == peer()) {
    copy_into(in[0], out[0]);
  } else {
    out[0].allocate();
  }
  comm(group()).broadcast("broadcast", out[0].raw_data(), out[0].nbytes(), peer(), {out[0].node().buffer});
}

std::vector<Array> Broadcast::vjp(const VjpArgs& a) const {
  return {Array::make(a.cotangents[0].shape(), a.cotangents[0].dtype(),
                      std::make_shared<SumToRoot>(group(), peer()), {a.cotangents[0]})};
}
std::vector<Array> Broadcast::jvp(const JvpArgs& a) const {
  return {broadcast(a.tangents[0], peer(), group())};
}
VmapResult Broadcast::vmap(const VmapArgs& a) const {
  return {{broadcast(a.inputs[0], peer(), group())}, {a.axes[0]}};
}

void SumToRoot::eval_cpu(std::span<const Array> in, std::span<Array> out) const {
  copy_into(in[0], out[0]);
  comm(group()).all_sum("broadcast (vjp)", out[0].raw_data(), out[0].size(), out[0].dtype(),
                        {out[0].node().buffer});
  if (group().rank() != peer()) std::memset(out[0].raw_data(), 0, static_cast<size_t>(out[0].nbytes()));
}

std::vector<Array> SumToRoot::vjp(const VjpArgs& a) const {
  return {broadcast(a.cotangents[0], peer(), group())};
}
std::vector<Array> SumToRoot::jvp(const JvpArgs& a) const {
  return {Array::make(a.tangents[0].shape(), a.tangents[0].dtype(),
                      std::make_shared<SumToRoot>(group(), peer()), {a.tangents[0]})};
}
VmapResult SumToRoot::vmap(const VmapArgs& a) const {
  const Array& x = a.inputs[0];
  return {{Array::make(x.shape(), x.dtype(), std::make_shared<SumToRoot>(group(), peer()), {x})},
          {a.axes[0]}};
}

std::vector<Shape> Send::output_shapes(std::span<const Array> in) const { return {in[0].shape()}; }

void Send::eval_cpu(std::span<const Array> in, std::span<Array> out) const {
  const HostBytes x = host_bytes(in[0]);
  comm(group()).send("send", x.data, in[0].nbytes(), peer(), {x.owner});
  out[0].set_view(in[0], in[0].strides(), 0);
}

std::vector<Array> Send::vjp(const VjpArgs& a) const {
  // The receive waits for this send (its input): dst sends the cotangent back only after it has
  // received, and the backward pass alone may never evaluate the send otherwise.
  const Array& x = a.primals[0];
  const Array received = Array::make(
      x.shape(), x.dtype(), std::make_shared<Recv>(group(), x.shape(), x.dtype(), peer()), {a.outputs[0]});
  return {add(a.cotangents[0], received)};
}

VmapResult Send::vmap(const VmapArgs& a) const { return {{send(a.inputs[0], peer(), group())}, {a.axes[0]}}; }

std::vector<Shape> Recv::output_shapes(std::span<const Array>) const { return {shape_}; }

void Recv::eval_cpu(std::span<const Array>, std::span<Array> out) const {
  out[0].allocate();
  comm(group()).recv("recv", out[0].raw_data(), out[0].nbytes(), peer(), {out[0].node().buffer});
}

std::vector<Array> Recv::vjp(const VjpArgs& a) const {
  std::vector<Array> zero;
  for (int i : a.argnums) zero.push_back(zeros_like(a.primals[i]));
  return zero;
}
std::vector<Array> Recv::jvp(const JvpArgs&) const { return {zeros(shape_, dtype_)}; }

}  // namespace detail

namespace {

Group resolve(const std::optional<Group>& group) { return group ? *group : init(); }

void check_valid(const char* op, const Array& x) {
  if (!x.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
}

void check_peer(const char* op, const char* what, int peer, const Group& g, bool self_allowed) {
  if (peer < 0 || peer >= g.size())
    throw ValueError::of(op, "rank out of range", "{} {} for a group of {}", what, peer, g.size());
  if (!self_allowed && peer == g.rank())
    throw ValueError::of(op, "a rank cannot send to or receive from itself", "{} {} is this rank", what,
                         peer);
}

void check_point_to_point(const char* op, const Group& g) {
  if (g.size() == 1)
    throw ValueError::of(op, "a group of one process has no other rank",
                         "launch several with mpirun (docs/distributed.md)");
}

}  // namespace

Array all_sum(const Array& x, std::optional<Group> group) {
  check_valid("all_sum", x);
  if (x.dtype() == bool_)
    throw DtypeError::of("all_sum", "cannot sum bool arrays", "cast to an integer dtype first");
  const Group g = resolve(group);
  if (g.size() == 1) return x;
  return Array::make(x.shape(), x.dtype(), std::make_shared<detail::AllSum>(g), {x});
}

Array all_mean(const Array& x, std::optional<Group> group) {
  check_valid("all_mean", x);
  const Group g = resolve(group);
  if (g.size() == 1 && is_floating(x.dtype())) return x;
  return divide(all_sum(x, g), g.size());
}

Array all_gather(const Array& x, std::optional<Group> group) {
  check_valid("all_gather", x);
  const Group g = resolve(group);
  if (g.size() == 1) return x.ndim() == 0 ? reshape(x, {1}) : x;
  if (x.nbytes() > INT_MAX)  // one MPI message per rank, counted in an int
    throw ValueError::of("all_gather", "too large for one MPI message", "{} bytes per rank, at most {}",
                         x.nbytes(), INT_MAX);
  Shape shape = x.shape();
  if (shape.empty())
    shape = {g.size()};
  else
    shape[0] *= g.size();
  return Array::make(std::move(shape), x.dtype(), std::make_shared<detail::AllGather>(g), {x});
}

Array broadcast(const Array& x, int root, std::optional<Group> group) {
  check_valid("broadcast", x);
  const Group g = resolve(group);
  check_peer("broadcast", "root", root, g, true);
  if (g.size() == 1) return x;
  return Array::make(x.shape(), x.dtype(), std::make_shared<detail::Broadcast>(g, root), {x});
}

Array send(const Array& x, int dst, std::optional<Group> group) {
  check_valid("send", x);
  const Group g = resolve(group);
  check_point_to_point("send", g);
  check_peer("send", "destination", dst, g, false);
  return Array::make(x.shape(), x.dtype(), std::make_shared<detail::Send>(g, dst), {x});
}

Array recv(const Shape& shape, Dtype dtype, int src, std::optional<Group> group) {
  for (int64_t d : shape)
    if (d < 0) throw ShapeError::of("recv", "negative dimension", "shape {}", shape_str(shape));
  const Group g = resolve(group);
  check_point_to_point("recv", g);
  check_peer("recv", "source", src, g, false);
  return Array::make(shape, dtype, std::make_shared<detail::Recv>(g, shape, dtype, src), {});
}

}  // namespace kiln::distributed
