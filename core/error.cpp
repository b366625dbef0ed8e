#include "kiln/core/error.h"

namespace kiln::detail {

std::string error_message(const char* op, const char* what, const std::string& details) {
  if (details.empty()) return fmt::format("[{}] {}", op, what);
  return fmt::format("[{}] {}: {}", op, what, details);
}

}  // namespace kiln::detail
