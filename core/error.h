#pragma once
// kiln's exceptions. `kiln::Error` is a tag every kiln exception carries; it does not derive from
// std::exception, so each concrete error has exactly one std::exception base and
// `catch (const std::exception&)` still catches it (an ambiguous base would be skipped).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace kiln {

/// Tag base of every kiln exception: `catch (const kiln::Error&)` catches them all.
class Error {
 public:
  virtual ~Error() = default;
  virtual const char* what() const noexcept = 0;
};

namespace detail {
template <class Base>
class ErrorOf : public Base, public Error {
 public:
  using Base::Base;
  const char* what() const noexcept override { return Base::what(); }
};
}  // namespace detail

/// Bad arguments (values, axes, keys). Also a std::invalid_argument.
class ValueError : public detail::ErrorOf<std::invalid_argument> {
 public:
  using ErrorOf::ErrorOf;
  /// "[op] what: details", formatted only when the error is thrown.
  template <class... A>
  static ValueError of(const char* op, const char* what, fmt::format_string<A...> details = "", A&&... a);
};

#define KILN_DEFINE_ERROR(Name, Parent)                                                                 \
  class Name : public Parent {                                                                          \
   public:                                                                                              \
    using Parent::Parent;                                                                               \
    template <class... A>                                                                               \
    static Name of(const char* op, const char* what, fmt::format_string<A...> details = "", A&&... a) { \
      return Name(detail::error_message(op, what, fmt::format(details, std::forward<A>(a)...)));        \
    }                                                                                                   \
  };

namespace detail {
std::string error_message(const char* op, const char* what, const std::string& details);
}

template <class... A>
ValueError ValueError::of(const char* op, const char* what, fmt::format_string<A...> details, A&&... a) {
  return ValueError(detail::error_message(op, what, fmt::format(details, std::forward<A>(a)...)));
}

/// Shapes that do not fit the op (broadcasting, inner dimensions, axes out of range).
KILN_DEFINE_ERROR(ShapeError, ValueError)
/// A dtype the op does not accept.
KILN_DEFINE_ERROR(DtypeError, ValueError)
/// A key that is missing or unknown (module parameters, files).
KILN_DEFINE_ERROR(KeyError, ValueError)

/// Failures of files, devices and the runtime. Also a std::runtime_error.
class RuntimeError : public detail::ErrorOf<std::runtime_error> {
 public:
  using ErrorOf::ErrorOf;
  template <class... A>
  static RuntimeError of(const char* op, const char* what, fmt::format_string<A...> details = "", A&&... a) {
    return RuntimeError(detail::error_message(op, what, fmt::format(details, std::forward<A>(a)...)));
  }
};
/// A primitive lacks a rule (jvp, vmap, a device kernel) that was asked for.
KILN_DEFINE_ERROR(NotImplemented, RuntimeError)
/// A device failed or is missing (no GPU, out of memory, device lost).
KILN_DEFINE_ERROR(DeviceError, RuntimeError)
/// A file's contents are malformed, truncated or of the wrong version.
KILN_DEFINE_ERROR(FormatError, RuntimeError)

#undef KILN_DEFINE_ERROR

}  // namespace kiln

#ifndef NDEBUG
#define KILN_ASSERT(cond)                                                                           \
  do {                                                                                              \
    if (!(cond)) throw ::kiln::RuntimeError("[internal] assertion failed: " #cond " at " __FILE__); \
  } while (0)
#else
#define KILN_ASSERT(cond) \
  do {                    \
  } while (0)
#endif
