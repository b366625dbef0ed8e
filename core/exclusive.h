#pragma once
// Exclusive<T>: mutable state that one thread at a time may use (a KV cache, an optimizer, a
// per-request buffer), next to shared immutable weights (MaterializedModule, MaterializedArray).
#include <mutex>
#include <utility>

namespace kiln {

/// Owns a T and hands it out under a mutex: `with(fn)` runs fn(T&) holding the lock; `lock()`
/// returns a guard that dereferences to the T and unlocks when it goes. There is no other access,
/// so the T cannot be reached without the lock. Not copyable or movable (it owns a mutex).
template <class T>
class Exclusive {
 public:
  template <class... A>
  explicit Exclusive(A&&... args) : value_(std::forward<A>(args)...) {}
  Exclusive(const Exclusive&) = delete;
  Exclusive& operator=(const Exclusive&) = delete;

  template <class F>
  decltype(auto) with(F&& fn) {
    std::lock_guard lock(mutex_);
    return std::forward<F>(fn)(value_);
  }

  class Guard {
   public:
    T& operator*() const { return *value_; }
    T* operator->() const { return value_; }

   private:
    friend class Exclusive;
    Guard(std::mutex& m, T& v) : lock_(m), value_(&v) {}
    std::unique_lock<std::mutex> lock_;
    T* value_;
  };
  /// Blocks until no other guard or with() holds the T.
  Guard lock() { return Guard(mutex_, value_); }

 private:
  std::mutex mutex_;
  T value_;
};

}  // namespace kiln
