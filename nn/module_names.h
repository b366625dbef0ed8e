#pragma once
// Naming modules by key as PEFT's target_modules and MLX's class predicates do: a name matches a
// module whose key is the name or ends with "." and the name ("q_proj" names
// model.layers.0.self_attn.q_proj; "proj" does not name q_proj).
#include <string>
#include <vector>

namespace kiln::nn {

inline bool key_names_module(const std::string& key, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (key == n || (key.size() > n.size() && key.compare(key.size() - n.size(), n.size(), n) == 0 &&
                     key[key.size() - n.size() - 1] == '.'))
      return true;
  return false;
}

}  // namespace kiln::nn
