#pragma once
// compile's hold on the default key sequence (random::next_key). While compile traces a function
// on a thread, each next_key() there becomes an input of the traced graph; every call of the
// compiled function then fills those inputs with fresh keys of the sequence, as many and in the
// same order as the function itself would draw. Internal header (not installed).
#include <functional>

#include "kiln/core/array.h"

namespace kiln::detail {

/// While alive, random::next_key() on this thread returns draw() instead of the sequence's next
/// key, and the sequence does not advance. Scopes nest: the innermost one draws.
class KeyDrawScope {
 public:
  explicit KeyDrawScope(std::function<Array()> draw);
  ~KeyDrawScope();
  KeyDrawScope(const KeyDrawScope&) = delete;
  KeyDrawScope& operator=(const KeyDrawScope&) = delete;

  /// The innermost scope on this thread, or null.
  static KeyDrawScope* current();
  Array draw() const { return draw_(); }

 private:
  std::function<Array()> draw_;
  KeyDrawScope* previous_;
};

}  // namespace kiln::detail
