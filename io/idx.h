#pragma once
// The IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a big-endian magic
// 0x0000, an element-type byte and a rank byte, the dimensions as big-endian uint32, then the
// elements in row-major order, big-endian. Files may be gzip-compressed.
#include <string>

#include "kiln/core/array.h"

namespace kiln::io {

/// Reads an IDX file, plain or gzip-compressed (recognized by its 0x1f 0x8b magic, not its name),
/// into an evaluated array of the file's shape. Element types map to kiln dtypes: 0x08 ubyte ->
/// uint8, 0x09 byte -> int8, 0x0B short -> int32 (widened), 0x0C int -> int32, 0x0D float ->
/// float32, 0x0E double -> float64. Throws RuntimeError when the file cannot be opened or read,
/// FormatError (naming the path) for a bad magic, an unknown type, a rank over kMaxDims, dimensions
/// whose byte count overflows, data shorter than the dimensions say, trailing bytes after the data,
/// or a corrupt gzip stream. Sizes are checked before the array is allocated.
Array read_idx(const std::string& path);

}  // namespace kiln::io
