#include "kiln/io/datasets.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/shape.h"
#include "kiln/io/idx.h"

namespace kiln::io {
namespace {

// Row-major copies of whole rows: the batch of a dataset is a gather along axis 0, done with
// memcpy so the prefetch thread does not build graph nodes for it.
Array gather_rows(const Array& a, std::span<const int64_t> indices) {
  Shape shape = a.shape();
  const int64_t rows = shape[0];
  shape[0] = static_cast<int64_t>(indices.size());
  Array out = Array::empty_available(shape, a.dtype());
  shape[0] = 1;
  const auto row_bytes = static_cast<size_t>(shape_size(shape) * a.itemsize());
  if (row_bytes == 0 || rows == 0) return out;
  const auto* src = static_cast<const uint8_t*>(a.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (size_t i = 0; i < indices.size(); ++i)
    std::memcpy(dst + i * row_bytes, src + static_cast<size_t>(indices[i]) * row_bytes, row_bytes);
  return out;
}

void check_indices(const char* op, std::span<const int64_t> indices, int64_t size) {
  for (int64_t i : indices)
    if (i < 0 || i >= size)
      throw ValueError::of(op, "index out of range", "{} for a dataset of {} samples", i, size);
}

std::string find_mnist_file(const std::string& dir, const char* prefix, const char* kind, const char* idx) {
  namespace fs = std::filesystem;
  std::vector<std::string> tried;
  for (const char* sep : {"-", "."})
    for (const char* ext : {"", ".gz"}) {
      const fs::path p = fs::path(dir) / fmt::format("{}-{}{}{}-ubyte{}", prefix, kind, sep, idx, ext);
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) return p.string();
      tried.push_back(p.filename().string());
    }
  throw RuntimeError::of("load_mnist", "file not found", "none of {} in {}", fmt::join(tried, ", "), dir);
}

}  // namespace

ArrayDataset::ArrayDataset(std::vector<Array> arrays) {
  if (arrays.empty()) throw ValueError::of("ArrayDataset", "needs at least one array");
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (!arrays[i].valid()) throw ValueError::of("ArrayDataset", "invalid array", "field {} is empty", i);
    if (arrays[i].ndim() == 0)
      throw ShapeError::of("ArrayDataset", "arrays need a first axis to index samples", "field {} is 0-d", i);
    if (arrays[i].shape(0) != arrays[0].shape(0)) {
      std::vector<std::string> shapes;
      for (const Array& a : arrays) shapes.push_back(shape_str(a.shape()));
      throw ShapeError::of("ArrayDataset", "arrays need a common first axis", "{}", fmt::join(shapes, ", "));
    }
  }
  eval(arrays);
  for (Array& a : arrays) a = contiguous(a);
  eval(arrays);
  size_ = arrays[0].shape(0);
  arrays_ = std::move(arrays);
}

std::vector<Array> ArrayDataset::get_batch(std::span<const int64_t> indices) const {
  check_indices("ArrayDataset", indices, size_);
  std::vector<Array> out;
  out.reserve(arrays_.size());
  for (const Array& a : arrays_) out.push_back(gather_rows(a, indices));
  return out;
}

Mnist load_mnist(const std::string& dir, Split split, Dtype label_dtype) {
  if (!is_integral(label_dtype))
    throw DtypeError::of("load_mnist", "labels need an integer dtype", "got {}", dtype_name(label_dtype));
  const char* prefix = split == Split::train ? "train" : "t10k";
  const std::string images_path = find_mnist_file(dir, prefix, "images", "idx3");
  const std::string labels_path = find_mnist_file(dir, prefix, "labels", "idx1");
  Mnist m{.images = read_idx(images_path), .labels = read_idx(labels_path)};
  if (m.images.ndim() != 3 || m.images.dtype() != uint8)
    throw FormatError::of("load_mnist", "images must be 3-d ubyte", "{}: shape {}, {}", images_path,
                          shape_str(m.images.shape()), dtype_name(m.images.dtype()));
  if (m.labels.ndim() != 1 || m.labels.dtype() != uint8)
    throw FormatError::of("load_mnist", "labels must be 1-d ubyte", "{}: shape {}, {}", labels_path,
                          shape_str(m.labels.shape()), dtype_name(m.labels.dtype()));
  if (m.labels.shape(0) != m.images.shape(0))
    throw FormatError::of("load_mnist", "images and labels differ in number",
                          "{} images in {}, {} labels in {}", m.images.shape(0), images_path,
                          m.labels.shape(0), labels_path);
  if (label_dtype != uint8) {
    m.labels = astype(m.labels, label_dtype);
    m.labels.eval();
  }
  return m;
}

Mnist Mnist::head(int64_t n) const {
  if (n <= 0 || n >= size()) return *this;
  return Mnist{.images = slice(images, {Slice{0, n}}), .labels = slice(labels, {Slice{0, n}})};
}

std::string fashion_mnist_dir() {
  const char* env = std::getenv("KILN_FASHION_MNIST_DIR");
  const bool from_env = env != nullptr && *env != '\0';
  const std::string dir = from_env ? env : "/usr/share/datasets/fashion-mnist";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw RuntimeError::of("fashion_mnist_dir", "Fashion-MNIST not found",
                           "{} is not a folder{}; install the Debian package dataset-fashion-mnist "
                           "(apt-get install dataset-fashion-mnist) or set KILN_FASHION_MNIST_DIR to a "
                           "folder holding {{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte.gz",
                           dir, from_env ? " (from KILN_FASHION_MNIST_DIR)" : "");
  return dir;
}

TextDataset::TextDataset(std::string text, int64_t context_length, int64_t stride)
    : context_(context_length), stride_(stride) {
  if (context_length < 1)
    throw ValueError::of("TextDataset", "context_length must be >= 1", "got {}", context_length);
  if (stride < 1) throw ValueError::of("TextDataset", "stride must be >= 1", "got {}", stride);
  const auto n = static_cast<int64_t>(text.size());
  if (n < context_length + 1)
    throw ValueError::of("TextDataset", "text too short", "{} bytes, a window of context_length {} needs {}",
                         n, context_length, context_length + 1);
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<uint8_t>(c)] = true;
  token_of_.fill(-1);
  for (int b = 0; b < 256; ++b)
    if (seen[b]) {
      token_of_[b] = static_cast<int32_t>(vocab_.size());
      vocab_.push_back(static_cast<uint8_t>(b));
    }
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = token_of_[static_cast<uint8_t>(text[i])];
  tokens_ = Array(tokens, {n});
  size_ = (n - context_length - 1) / stride + 1;
}

TextDataset TextDataset::from_file(const std::string& path, int64_t context_length, int64_t stride) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError::of("TextDataset", "cannot open file", "{}: {}", path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw RuntimeError::of("TextDataset", "cannot read file", "{}", path);
  return TextDataset(std::move(text).str(), context_length, stride);
}

std::vector<int32_t> TextDataset::encode(std::string_view text) const {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    if (token_of_[b] < 0)
      throw KeyError::of("TextDataset::encode", "byte not in the vocabulary", "0x{:02x} at offset {}", b, i);
    out[i] = token_of_[b];
  }
  return out;
}

std::string TextDataset::decode(std::span<const int32_t> tokens) const {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size())
      throw ValueError::of("TextDataset::decode", "token out of range", "{} at {}, vocabulary of {}",
                           tokens[i], i, vocab_size());
    out[i] = static_cast<char>(vocab_[tokens[i]]);
  }
  return out;
}

std::string TextDataset::decode(const Array& tokens) const {
  if (!tokens.valid() || !is_integral(tokens.dtype()))
    throw DtypeError::of("TextDataset::decode", "tokens need an integer dtype", "got {}",
                         tokens.valid() ? dtype_name(tokens.dtype()) : "an empty array");
  const std::vector<int64_t> wide = tokens.to_vector<int64_t>();
  std::vector<int32_t> narrow(wide.size());
  for (size_t i = 0; i < wide.size(); ++i) {
    if (wide[i] < 0 || wide[i] >= vocab_size())
      throw ValueError::of("TextDataset::decode", "token out of range", "{} at {}, vocabulary of {}", wide[i],
                           i, vocab_size());
    narrow[i] = static_cast<int32_t>(wide[i]);
  }
  return decode(narrow);
}

std::array<Array, 2> TextDataset::get(int64_t i) const {
  check_indices("TextDataset", std::span<const int64_t>(&i, 1), size_);
  const int32_t* tok = tokens_.data<int32_t>() + i * stride_;
  return {Array(std::vector<int32_t>(tok, tok + context_), {context_}),
          Array(std::vector<int32_t>(tok + 1, tok + 1 + context_), {context_})};
}

std::vector<Array> TextDataset::get_batch(std::span<const int64_t> indices) const {
  check_indices("TextDataset", indices, size_);
  const auto b = static_cast<int64_t>(indices.size());
  Array inputs = Array::empty_available({b, context_}, int32);
  Array targets = Array::empty_available({b, context_}, int32);
  const int32_t* tok = tokens_.data<int32_t>();
  const auto row_bytes = static_cast<size_t>(context_) * sizeof(int32_t);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t start = indices[r] * stride_;
    std::memcpy(inputs.strided_data<int32_t>() + r * context_, tok + start, row_bytes);
    std::memcpy(targets.strided_data<int32_t>() + r * context_, tok + start + 1, row_bytes);
  }
  return {inputs, targets};
}

}  // namespace kiln::io
