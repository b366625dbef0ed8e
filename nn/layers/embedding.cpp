#include "kiln/nn/layers/embedding.h"

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/quantized.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/random.h"
#include "kiln/core/shape.h"
#include "kiln/nn/init.h"

namespace kiln::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions o)
    : num_(num_embeddings), dim_(embedding_dim) {
  if (num_embeddings < 1 || embedding_dim < 1)
    throw ValueError::of("Embedding", "sizes must be >= 1", "num_embeddings {}, embedding_dim {}",
                         num_embeddings, embedding_dim);
  if (o.padding_idx) {
    const int64_t p = *o.padding_idx;
    if (p < -num_embeddings || p >= num_embeddings)
      throw ValueError::of("Embedding", "padding_idx must be within num_embeddings",
                           "got {} for {} embeddings", p, num_embeddings);
    padding_idx_ = p < 0 ? p + num_embeddings : p;
  }
  Array w = init::normal({num_embeddings, embedding_dim}, 0.0, 1.0, o.dtype,
                         o.key.valid() ? o.key : random::next_key());
  if (padding_idx_)
    w = slice_update(w, zeros({1, embedding_dim}, o.dtype), {Slice{*padding_idx_, *padding_idx_ + 1}});
  weight.set(w);
}

Array Embedding::operator()(const Array& indices) const {
  if (!indices.valid())
    throw ValueError::of("Embedding", "the indices are an empty (default-constructed) array");
  if (!is_integral(indices.dtype()))
    throw DtypeError::of("Embedding", "indices must be integers", "got {}", dtype_name(indices.dtype()));
  Array idx = indices;
  if (indices.is_available()) {
    // Checked here, so the error names the layer and surfaces at the call.
    for (int64_t i : indices.to_vector<int64_t>())
      if (i < 0 || i >= num_)
        throw ValueError::of("Embedding", "index out of range", "index {} for {} embeddings (indices {})", i,
                             num_, shape_str(indices.shape()));
  } else if (!is_unsigned(indices.dtype())) {
    // take would wrap a negative index; send it out of range instead, so eval throws.
    if (idx.dtype() == int8) idx = astype(idx, int32);
    idx = where(idx < 0, num_, idx);
  }
  if (quantization_) {  // frozen: the padding row needs no gradient guard
    const QuantizeOptions& q = *quantization_;
    return dequantize(take(weight.value(), idx, 0), take(scales.value(), idx, 0),
                      take(biases.value(), idx, 0), q.group_size, q.bits);
  }
  Array out = take(weight.value(), idx, 0);
  if (padding_idx_) {
    // The padding row keeps its value but gets no gradient, as PyTorch.
    const Array is_pad = expand_dims(idx == *padding_idx_, -1);
    out = where(is_pad, stop_gradient(out), out);
  }
  return out;
}

Array Embedding::as_linear(const Array& x) const {
  if (x.ndim() < 1 || x.shape().back() != dim_)
    throw ShapeError::of("Embedding::as_linear", "input's last dimension must be embedding_dim",
                         "expected (..., {}), got {}", dim_, shape_str(x.shape()));
  if (!quantization_) {
    // A tied head is a product: under a mixed-precision policy it computes in the 16-bit dtype.
    const auto c = detail::compute_dtype(*this);
    return linear(detail::to_compute(x, c), detail::to_compute(weight.value(), c));
  }
  return quantized_matmul(x, weight.value(), scales.value(), biases.value(), true, quantization_->group_size,
                          quantization_->bits);
}

void Embedding::quantize(const QuantizeOptions& o) {
  if (quantization_) throw ValueError::of("Embedding::quantize", "the table is already quantized");
  const bool known =
      o.group_size == 32 || o.group_size == 64 || o.group_size == 128;  // else quantize says so
  if (known && dim_ % o.group_size != 0)
    throw ValueError::of("Embedding::quantize", "embedding_dim must be a multiple of the group size",
                         "Embedding({}, {}), group_size {}", num_, dim_, o.group_size);
  const QuantizedWeight q = kiln::quantize(weight.value(), o.group_size, o.bits);
  eval(q.weight, q.scales, q.biases);
  weight.reset(q.weight);
  scales.reset(q.scales);
  biases.reset(q.biases);
  quantization_ = o;
  freeze({"weight", "scales", "biases"}, false);
}

}  // namespace kiln::nn
