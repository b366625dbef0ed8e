#pragma once
// Shared by the transforms: tracer inputs and the topologically ordered tape of a traced function.
#include <memory>
#include <unordered_set>
#include <vector>

#include "kiln/core/primitive.h"

namespace kiln::detail {

/// A fresh node viewing `p` (an identity primitive), marked as a tracer, so a transform can find
/// exactly where its inputs enter the traced graph. `transform` names the caller in errors.
Array make_tracer(const Array& p, const char* transform);

/// One traced node, with its inputs and primitive read once (they sit behind the node's lock).
struct TapeEntry {
  Array array;
  std::vector<Array> inputs;
  std::shared_ptr<const Primitive> primitive;
};

/// Post-order DFS (iterative) from `outputs`: inputs come before their consumers. Stops at nodes in
/// `stop` (their inputs are not read) and at leaves (no primitive).
std::vector<TapeEntry> build_tape(const std::vector<Array>& outputs,
                                  const std::unordered_set<const ArrayNode*>& stop);

/// True when tape[k] is the earliest of a multi-output primitive's `outputs` in the tape, so a
/// transform handles that primitive once.
bool is_first_of_group(const std::vector<TapeEntry>& tape, size_t k, const std::vector<Array>& outputs);

}  // namespace kiln::detail
