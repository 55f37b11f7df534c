// tests/error_of.h — the message of the exception `f` throws ("" when it returns): tests that assert what a
// bad input's error says.
#pragma once
#include <exception>
#include <functional>
#include <string>

namespace titan::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace titan::testing
