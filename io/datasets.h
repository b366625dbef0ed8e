#pragma once
// Datasets: the BatchSource interface a DataLoader reads, arrays sharing a first axis,
// (Fashion-)MNIST from IDX files, and character-level text.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/array.h"

namespace kiln::io {

/// A dataset a DataLoader can batch: size() samples, any of which get_batch gathers into one
/// array per field, each of shape (indices.size(), ...). get_batch is called from the loader's
/// prefetch thread (one call at a time) while other threads may use the const object, so it must
/// not mutate shared state. It may throw; the loader rethrows on the consumer's thread.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Number of samples.
  virtual int64_t size() const = 0;
  /// The samples at `indices` (each in [0, size())), one array per field, stacked on a new axis 0.
  virtual std::vector<Array> get_batch(std::span<const int64_t> indices) const = 0;
};

/// Arrays whose first axis indexes the samples, e.g. {images (N, 28, 28), labels (N)}
/// (torch.utils.data.TensorDataset). The arrays are evaluated and made row-contiguous once, here.
class ArrayDataset : public BatchSource {
 public:
  /// Throws ValueError for no arrays or an invalid one, ShapeError for a 0-d array or first axes
  /// that differ.
  explicit ArrayDataset(std::vector<Array> arrays);
  /// The arrays' common first dimension.
  int64_t size() const override { return size_; }
  /// One array per field: field[indices] along axis 0 (a copy). Throws ValueError for an index
  /// outside [0, size()).
  std::vector<Array> get_batch(std::span<const int64_t> indices) const override;
  /// The fields, evaluated and row-contiguous.
  const std::vector<Array>& arrays() const { return arrays_; }

 private:
  std::vector<Array> arrays_;
  int64_t size_ = 0;
};

/// Which part of a dataset to load.
enum class Split { train, test };

/// Images and labels of (Fashion-)MNIST.
struct Mnist {
  Array images;  ///< (N, 28, 28) uint8, 0 (background) to 255
  Array labels;  ///< (N) class indices 0-9, uint8 as stored (or the dtype asked of load_mnist)
  int64_t size() const { return images.valid() ? images.shape(0) : 0; }
  /// The first n samples (views of these arrays); all of them when n <= 0 or n >= size().
  Mnist head(int64_t n) const;
};

/// Loads the train (60000) or test (10000) split of MNIST or Fashion-MNIST from `dir`, which
/// holds the four IDX files under their usual names, gzipped or not:
/// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (also "images.idx3"/"labels.idx1").
/// `label_dtype` (an integer dtype) converts the labels, e.g. int32. Throws RuntimeError naming
/// the names tried when a file is missing, FormatError (from read_idx, or for images that are
/// not 3-d uint8 or labels that are not 1-d uint8 of the same length), DtypeError for a
/// non-integer label_dtype.
Mnist load_mnist(const std::string& dir, Split split, Dtype label_dtype = uint8);

/// Folder of Fashion-MNIST: $KILN_FASHION_MNIST_DIR when set, else /usr/share/datasets/fashion-mnist
/// (Debian package dataset-fashion-mnist). Throws RuntimeError, saying how to get the files, when
/// the folder does not exist.
std::string fashion_mnist_dir();

/// Class names of Fashion-MNIST, indexed by label.
inline constexpr std::array<std::string_view, 10> kFashionMnistClasses = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

/// Character-level language modelling over a text's bytes: the vocabulary is the text's distinct
/// bytes in increasing order, a token is an index into it (int32), and sample i is the window
/// (input = tokens[s, s + T), target = tokens[s + 1, s + T + 1)) with s = i * stride and
/// T = context_length: the target is the input shifted by one.
class TextDataset : public BatchSource {
 public:
  /// Throws ValueError for context_length < 1, stride < 1, or a text shorter than
  /// context_length + 1 bytes (no window fits).
  TextDataset(std::string text, int64_t context_length, int64_t stride = 1);
  /// The whole file's bytes as the text. Throws RuntimeError when it cannot be read, and as the
  /// constructor does.
  static TextDataset from_file(const std::string& path, int64_t context_length, int64_t stride = 1);

  /// Number of windows: (text bytes - context_length - 1) / stride + 1.
  int64_t size() const override { return size_; }
  /// T, the length of each input and target.
  int64_t context_length() const { return context_; }
  /// Bytes between the starts of consecutive windows.
  int64_t stride() const { return stride_; }
  /// The distinct bytes of the text, sorted; token t stands for vocabulary()[t].
  const std::vector<uint8_t>& vocabulary() const { return vocab_; }
  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }
  /// Tokens of `text`. Throws KeyError naming a byte that is not in the vocabulary.
  std::vector<int32_t> encode(std::string_view text) const;
  /// The bytes of `tokens`. Throws ValueError for a token outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> tokens) const;
  /// decode of an integer array's values (any shape, read in row-major order).
  std::string decode(const Array& tokens) const;
  /// The whole text encoded, (text bytes) int32.
  const Array& tokens() const { return tokens_; }
  /// {input (T), target (T)} int32 of window i. Throws ValueError for i outside [0, size()).
  std::array<Array, 2> get(int64_t i) const;
  /// {inputs (B, T), targets (B, T)} int32.
  std::vector<Array> get_batch(std::span<const int64_t> indices) const override;

 private:
  std::vector<uint8_t> vocab_;
  std::array<int32_t, 256> token_of_{};  // byte -> token, -1 when absent
  Array tokens_;
  int64_t context_, stride_, size_;
};

}  // namespace kiln::io
