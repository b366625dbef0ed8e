#pragma once
// The message of an expected exception, for tests that check what an error says.
#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace kiln::test {

/// The message of the exception `f` throws as E; fails the test when it throws nothing or another type.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

}  // namespace kiln::test
