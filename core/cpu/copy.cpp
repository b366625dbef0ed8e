#include "kiln/core/cpu/copy.h"

#include <algorithm>
#include <cstring>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/strided.h"

namespace kiln::detail {
namespace {

// Same-dtype copies move raw bits, so one instantiation per element size serves every dtype.
template <int N>
struct Bits;
template <>
struct Bits<1> {
  using type = uint8_t;
};
template <>
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};
template <>
struct Bits<8> {
  using type = uint64_t;
};

template <class S, class D>
D cast_value(S v) {
  if constexpr (std::is_same_v<S, D>)
    return v;
  else
    return convert<D>(v);
}

// Index of the outer (all but the last two) dims of a layout decomposed from a flat number.
template <int N>
std::array<int64_t, N> outer_offsets(const StridedLayout<N>& l, int64_t flat, int outer_dims) {
  std::array<int64_t, N> off{};
  for (int d = outer_dims - 1; d >= 0; --d) {
    const int64_t i = flat % l.shape[d];
    flat /= l.shape[d];
    for (int k = 0; k < N; ++k) off[k] += i * l.strides[k][d];
  }
  return off;
}

// A transpose-like copy (the source is dense along the second-to-last dim, the destination along
// the last) walks 32x32 tiles so both sides stay in cache; a plain row walk would touch a new
// source cache line for every element.
template <class S, class D>
void copy_tiled(const S* src, D* dst, const StridedLayout<2>& l) {
  constexpr int64_t kTile = 32;
  const int nd = static_cast<int>(l.shape.size());
  const int64_t rows = l.shape[nd - 2], cols = l.shape[nd - 1];
  const int64_t ds_r = l.strides[0][nd - 2], ss_c = l.strides[1][nd - 1];  // dst row, src column
  const int64_t tr = (rows + kTile - 1) / kTile, tc = (cols + kTile - 1) / kTile;
  int64_t outer = 1;
  for (int d = 0; d < nd - 2; ++d) outer *= l.shape[d];
  parallel_for(outer * tr * tc, std::max<int64_t>(1, kElementwiseGrain / (kTile * kTile)),
               [&](int64_t b, int64_t e) {
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t o = t / (tr * tc), r0 = (t / tc) % tr * kTile, c0 = t % tc * kTile;
                   const auto off = outer_offsets(l, o, nd - 2);
                   const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
                   for (int64_t r = r0; r < r1; ++r) {
                     D* drow = dst + off[0] + r * ds_r;
                     const S* srow = src + off[1] + r;  // source stride along rows is 1
                     for (int64_t c = c0; c < c1; ++c) drow[c] = cast_value<S, D>(srow[c * ss_c]);
                   }
                 }
               });
}

template <class S, class D>
void copy_typed(const S* src, D* dst, const StridedLayout<2>& l) {
  const int nd = static_cast<int>(l.shape.size());
  const int64_t inner = l.shape[nd - 1];
  const int64_t ds = l.strides[0][nd - 1], ss = l.strides[1][nd - 1];
  constexpr bool same = std::is_same_v<S, D>;
  if (nd == 1) {
    parallel_for(inner, kElementwiseGrain, [&](int64_t b, int64_t e) {
      if constexpr (same) {
        if (ds == 1 && ss == 1) {
          std::memcpy(dst + b, src + b, static_cast<size_t>(e - b) * sizeof(D));
          return;
        }
      }
      if (ss == 0) {
        const D v = cast_value<S, D>(*src);
        for (int64_t i = b; i < e; ++i) dst[i * ds] = v;
      } else {
        for (int64_t i = b; i < e; ++i) dst[i * ds] = cast_value<S, D>(src[i * ss]);
      }
    });
    return;
  }
  if (ds == 1 && ss != 1 && ss != 0 && l.strides[1][nd - 2] == 1 && l.strides[0][nd - 2] != 0 && inner >= 8 &&
      l.shape[nd - 2] >= 8) {
    copy_tiled(src, dst, l);
    return;
  }
  const int64_t rows = row_count(l);
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t rb, int64_t re) {
                 for_each_row(l, rb, re, [&](const auto& off, int64_t n, const auto& st) {
                   D* o = dst + off[0];
                   const S* x = src + off[1];
                   if constexpr (same) {
                     if (st[0] == 1 && st[1] == 1) {
                       std::memcpy(o, x, static_cast<size_t>(n) * sizeof(D));
                       return;
                     }
                   }
                   if (st[1] == 0) {
                     const D v = cast_value<S, D>(*x);
                     for (int64_t i = 0; i < n; ++i) o[i * st[0]] = v;
                   } else {
                     for (int64_t i = 0; i < n; ++i) o[i * st[0]] = cast_value<S, D>(x[i * st[1]]);
                   }
                 });
               });
}

}  // namespace

void copy_strided(const void* src, Dtype src_t, const Strides& src_strides, void* dst, Dtype dst_t,
                  const Strides& dst_strides, const Shape& shape) {
  if (shape_size(shape) == 0) return;
  const auto l = collapse<2>(shape, {&dst_strides, &src_strides});
  if (src_t == dst_t) {
    auto run = [&]<int N>() {
      using T = typename Bits<N>::type;
      copy_typed(static_cast<const T*>(src), static_cast<T*>(dst), l);
    };
    switch (size_of(src_t)) {
      case 1:
        return run.template operator()<1>();
      case 2:
        return run.template operator()<2>();
      case 4:
        return run.template operator()<4>();
      default:
        return run.template operator()<8>();
    }
  }
  visit_dtype<kAllTypes>(src_t, "copy", [&](auto s) {
    using S = typename decltype(s)::type;
    visit_dtype<kAllTypes>(dst_t, "copy", [&](auto d) {
      using D = typename decltype(d)::type;
      copy_typed(static_cast<const S*>(src), static_cast<D*>(dst), l);
    });
  });
}

void copy_strided(const Array& src, Array& dst) {
  if (src.shape() == dst.shape()) {
    copy_strided(src.raw_data(), src.dtype(), src.strides(), dst.raw_data(), dst.dtype(), dst.strides(),
                 dst.shape());
    return;
  }
  const Strides st = broadcast_strides(src.shape(), src.strides(), dst.shape());
  copy_strided(src.raw_data(), src.dtype(), st, dst.raw_data(), dst.dtype(), dst.strides(), dst.shape());
}

Array dense_copy(const Array& a, Dtype dtype) {
  if (a.row_contiguous() && a.dtype() == dtype) return a;
  Array out = Array::empty_available(a.shape(), dtype);
  copy_strided(a, out);
  return out;
}

}  // namespace kiln::detail
