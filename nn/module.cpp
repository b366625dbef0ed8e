#include "kiln/nn/module.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "kiln/core/error.h"
#include "kiln/core/shape.h"

namespace kiln::nn {
namespace {

// Depth-first walk over (key, module) pairs, iterative so deep trees cannot overflow the stack.
template <class M, class F>
void walk(M& root, F&& visit_module) {
  std::vector<std::pair<std::string, M*>> stack{{"", &root}};
  while (!stack.empty()) {
    auto [prefix, m] = std::move(stack.back());
    stack.pop_back();
    visit_module(prefix, *m);
    const auto kids = m->children();
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      stack.emplace_back(prefix.empty() ? it->first : prefix + "." + it->first, it->second);
  }
}

std::string join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

}  // namespace

std::string UpdateReport::summary() const {
  std::string out;
  auto add = [&](const char* what, const std::vector<std::string>& keys) {
    for (const std::string& k : keys) out += fmt::format("{}{} {}", out.empty() ? "" : "; ", what, k);
  };
  add("missing", missing);
  add("unknown", unexpected);
  add("wrong shape", wrong_shape);
  add("wrong dtype", wrong_dtype);
  return out;
}

// ---------------------------------------------------------------- ParameterInfo

ParameterInfo::ParameterInfo(Module* owner, std::string_view key) : key_(key) {
  owner->register_parameter(key, this);
}

ParameterInfo::ParameterInfo(Module* owner, std::string_view key, Array value)
    : key_(key), value_(std::move(value)) {
  owner->register_parameter(key, this);
}

void ParameterInfo::set(Array value) {
  if (!value.valid()) throw ValueError::of("ParameterInfo::set", "empty array", "for '{}' (use reset)", key_);
  if (value_.valid()) {
    if (value.shape() != value_.shape())
      throw ShapeError::of("ParameterInfo::set", "shape differs from the parameter's",
                           "'{}': expected {}, got {} (use reset to change it)", key_,
                           shape_str(value_.shape()), shape_str(value.shape()));
    if (value.dtype() != value_.dtype())
      throw DtypeError::of("ParameterInfo::set", "dtype differs from the parameter's",
                           "'{}': expected {}, got {} (use reset to change it)", key_,
                           dtype_name(value_.dtype()), dtype_name(value.dtype()));
  }
  value_ = std::move(value);
}

// ---------------------------------------------------------------- Module

void Module::check_new_key(std::string_view key) const {
  if (key.empty() || key.find('.') != std::string_view::npos)
    throw ValueError::of("Module", "a slot key must be non-empty and contain no '.'", "got '{}'", key);
  for (const Slot& s : slots_)
    if (s.key == key) throw ValueError::of("Module", "two slots share a key", "'{}'", key);
}

void Module::register_parameter(std::string_view key, ParameterInfo* slot) {
  check_new_key(key);
  slots_.push_back({std::string(key), slot, nullptr});
}

void Module::register_child(std::string_view key, Module* child) {
  check_new_key(key);
  slots_.push_back({std::string(key), nullptr, child});
}

std::vector<std::pair<std::string, Module*>> Module::children() {
  std::vector<std::pair<std::string, Module*>> out;
  for (const Slot& s : slots_)
    if (s.child && s.child->present()) out.emplace_back(s.key, s.child);
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::children() const {
  std::vector<std::pair<std::string, const Module*>> out;
  for (const Slot& s : slots_)
    if (s.child && s.child->present()) out.emplace_back(s.key, s.child);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  walk(*this, [&](const std::string& key, Module& m) { out.emplace_back(key, &m); });
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  walk(*this, [&](const std::string& key, const Module& m) { out.emplace_back(key, &m); });
  return out;
}

void Module::apply(const std::function<void(const std::string&, Module&)>& fn) {
  auto all = named_modules();  // parents before children; apply in reverse
  for (auto it = all.rbegin(); it != all.rend(); ++it) fn(it->first, *it->second);
}

void Module::train(bool training) {
  for (auto& [key, m] : named_modules()) m->training_ = training;
}

void Module::set_mixed_precision(std::optional<MixedPrecision> policy) {
  if (policy) detail::check_policy("Module::set_mixed_precision", *policy);
  for (auto& [key, m] : named_modules()) m->mixed_precision_ = policy;
}

namespace detail {
void ModuleAccess::assign(Module& m, const std::vector<std::pair<std::string, ParameterInfo*>>& slots,
                          std::span<const Array> values) {
  if (values.size() != slots.size())
    throw ValueError::of("ModuleAccess::assign", "one value per slot needed", "{} values for {} slots",
                         values.size(), slots.size());
  for (size_t i = 0; i < slots.size(); ++i) slots[i].second->value_ = values[i];
  if (!slots.empty())
    for (auto& [key, child] : m.named_modules()) child->on_update();
}

std::vector<std::pair<std::string, ParameterInfo*>> ModuleAccess::slots(Module& root, bool trainable_only) {
  // Slots in declaration order, a child's parameters where the child is declared; an explicit
  // stack of (prefix, module, next slot) frames instead of recursion.
  struct Frame {
    std::string prefix;
    Module* module;
    size_t next = 0;
  };
  std::vector<std::pair<std::string, ParameterInfo*>> out;
  std::vector<Frame> stack{{"", &root}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next == f.module->slots_.size()) {
      stack.pop_back();
      continue;
    }
    const Module::Slot& s = f.module->slots_[f.next++];
    if (s.child) {
      std::string prefix = join(f.prefix, s.key);
      stack.push_back({std::move(prefix), s.child});  // invalidates f
    } else if (s.parameter->has_value() && !(trainable_only && s.parameter->frozen_)) {
      out.emplace_back(join(f.prefix, s.key), s.parameter);
    }
  }
  return out;
}
}  // namespace detail

ParamTree Module::parameters() const {
  ParamTree out;
  for (auto& [key, slot] : detail::ModuleAccess::slots(const_cast<Module&>(*this), false))
    out.set(key, slot->value());
  return out;
}

ParamTree Module::trainable_parameters() const {
  ParamTree out;
  for (auto& [key, slot] : detail::ModuleAccess::slots(const_cast<Module&>(*this), true))
    out.set(key, slot->value());
  return out;
}

namespace {

// The parameter slots a freeze/unfreeze request selects; throws KeyError for keys naming nothing.
std::vector<ParameterInfo*> select_for_freeze(Module& root, const std::vector<std::string>& keys,
                                              bool recurse, const char* op) {
  auto own_parameters = [](Module& m, bool deep) {
    std::vector<ParameterInfo*> out;
    for (auto& [key, slot] : detail::ModuleAccess::slots(m, false))
      if (deep || key.find('.') == std::string::npos) out.push_back(slot);
    return out;
  };
  if (keys.empty()) return own_parameters(root, recurse);
  std::vector<ParameterInfo*> out;
  std::vector<std::string> unknown;
  const auto params = detail::ModuleAccess::slots(root, false);
  const auto modules = root.named_modules();
  for (const std::string& k : keys) {
    bool found = false;
    for (auto& [key, slot] : params)
      if (key == k) {
        out.push_back(slot);
        found = true;
      }
    for (auto& [key, m] : modules)
      if (!key.empty() && key == k) {
        for (ParameterInfo* p : own_parameters(*m, recurse)) out.push_back(p);
        found = true;
      }
    if (!found) unknown.push_back(k);
  }
  if (!unknown.empty())
    throw KeyError::of(op, "no parameter or submodule has this key", "'{}'", fmt::join(unknown, "', '"));
  return out;
}

}  // namespace

void Module::freeze(const std::vector<std::string>& keys, bool recurse) {
  for (ParameterInfo* p : select_for_freeze(*this, keys, recurse, "Module::freeze")) p->frozen_ = true;
}

void Module::unfreeze(const std::vector<std::string>& keys, bool recurse) {
  for (ParameterInfo* p : select_for_freeze(*this, keys, recurse, "Module::unfreeze")) p->frozen_ = false;
}

UpdateReport Module::update(const ParamTree& params, Verify verify) {
  UpdateReport report;
  const auto slots = detail::ModuleAccess::slots(*this, false);
  std::set<std::string, std::less<>> known;
  struct Staged {
    const std::string* key;
    ParameterInfo* slot;
    Array value;
  };
  std::vector<Staged> staged;
  for (auto& [key, slot] : slots) {
    known.insert(key);
    if (!params.contains(key)) {
      report.missing.push_back(key);
      continue;
    }
    const Array& v = params.at(key);
    if (!v.valid()) throw ValueError::of("Module::update", "empty array", "for '{}'", key);
    bool ok = true;
    if (v.shape() != slot->value().shape()) {
      report.wrong_shape.push_back(fmt::format("{}: expected {}, got {}", key,
                                               shape_str(slot->value().shape()), shape_str(v.shape())));
      ok = !has(verify, Verify::shapes);
    }
    if (v.dtype() != slot->value().dtype()) {
      report.wrong_dtype.push_back(fmt::format("{}: expected {}, got {}", key,
                                               dtype_name(slot->value().dtype()), dtype_name(v.dtype())));
      ok = ok && !has(verify, Verify::dtypes);
    }
    if (ok) staged.push_back({&key, slot, v});
  }
  for (const auto& [key, v] : params)
    if (!known.contains(key)) report.unexpected.push_back(key);

  const bool key_problem = (has(verify, Verify::missing) && !report.missing.empty()) ||
                           (has(verify, Verify::unknown) && !report.unexpected.empty());
  const bool shape_problem = has(verify, Verify::shapes) && !report.wrong_shape.empty();
  const bool dtype_problem = has(verify, Verify::dtypes) && !report.wrong_dtype.empty();
  if (key_problem || shape_problem || dtype_problem) {
    UpdateReport refused;  // only the problems verify names
    if (has(verify, Verify::missing)) refused.missing = report.missing;
    if (has(verify, Verify::unknown)) refused.unexpected = report.unexpected;
    if (has(verify, Verify::shapes)) refused.wrong_shape = report.wrong_shape;
    if (has(verify, Verify::dtypes)) refused.wrong_dtype = report.wrong_dtype;
    const std::string what = "nothing was changed";
    if (key_problem) throw KeyError::of("Module::update", what.c_str(), "{}", refused.summary());
    if (shape_problem) throw ShapeError::of("Module::update", what.c_str(), "{}", refused.summary());
    throw DtypeError::of("Module::update", what.c_str(), "{}", refused.summary());
  }
  for (Staged& s : staged) {
    s.slot->value_ = std::move(s.value);
    report.applied.push_back(*s.key);
  }
  if (!staged.empty())
    for (auto& [key, m] : named_modules()) m->on_update();
  return report;
}

}  // namespace kiln::nn
