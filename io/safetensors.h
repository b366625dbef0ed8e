#pragma once
// Weights in safetensors, the format of the Hugging Face Hub: an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the bytes.
//
//   auto tree = kiln::io::load_safetensors("model.safetensors");        // or a sharded index:
//   auto big = kiln::io::load_safetensors("model.safetensors.index.json");
//   kiln::io::save_safetensors("out.safetensors", model.parameters(), {{"format", "pt"}});
//
// Loading maps the file read-only and each array uses its bytes in place (Array::from_buffer):
// a file of several GB loads in the time of its header parse, pages are read when first used, and
// memory stays the weights' size. An array whose bytes are not aligned to its dtype's size is
// copied instead. F8_E4M3 and F8_E5M2 tensors are converted to float16 on load (exactly: float16
// holds every value of both). The file must not be truncated in place while its arrays live
// (replacing it by a rename, as every kiln save does, is safe: the mapping keeps the old file).
#include <filesystem>
#include <map>
#include <string>

#include "kiln/nn/param_tree.h"

namespace kiln::io {

/// The tensors of a safetensors file and its `__metadata__`.
struct SafetensorsFile {
  nn::ParamTree tensors;  ///< in the order of their byte offsets
  std::map<std::string, std::string> metadata;
};

/// Reads a .safetensors file, or every shard a `model.safetensors.index.json` lists (its
/// `weight_map`, shard paths relative to the index; the result holds the index's keys). Keys are
/// the file's own ("model.layers.3.self_attn.q_proj.weight"). Every dtype of the format: F64 F32
/// F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL, and F8_E4M3 / F8_E5M2 as float16. Throws
/// RuntimeError naming the path when a file is missing or unreadable, FormatError naming the file
/// (and the tensor) for a truncated file, a header length past the end of the file or over
/// 100 MB, a header that is not a JSON object, a tensor without dtype, shape or data_offsets, a
/// shape whose size disagrees with its byte range, offsets out of range or overlapping, bytes no
/// tensor covers, a duplicate name, or an index naming a tensor its shard lacks; DtypeError for a
/// dtype kiln has no equivalent for. Nothing is returned from a bad file.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

/// read_safetensors(path).tensors.
nn::ParamTree load_safetensors(const std::filesystem::path& path);

/// Writes `tree` as one safetensors file (keys in tree order, bytes in that order, the header
/// padded with spaces to a multiple of 8 bytes, as the reference writer does), with `metadata` as
/// `__metadata__`; the file is replaced atomically. Arrays are evaluated first; views are written
/// densely. Throws ValueError for an empty key, a key named `__metadata__`, or a metadata entry
/// that is not valid UTF-8; RuntimeError naming the path when writing fails (the old file stays).
void save_safetensors(const std::filesystem::path& path, const nn::ParamTree& tree,
                      const std::map<std::string, std::string>& metadata = {});

/// Writes `tree` as shards of at most `max_shard_bytes` each (an array larger than that gets a
/// shard of its own) named `<stem>-00001-of-0000N.safetensors` beside `index_path`, and the index
/// (`metadata.total_size` and `weight_map`, as transformers writes them) at `index_path`, e.g.
/// "out/model.safetensors.index.json". Throws as save_safetensors, and ValueError for a
/// non-positive shard size.
void save_safetensors_sharded(const std::filesystem::path& index_path, const nn::ParamTree& tree,
                              int64_t max_shard_bytes,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln::io
