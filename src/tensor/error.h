// src/tensor/error.h — the one exception type and the check macro.
// Errors name the op, print the shapes and suggest a fix (style rule 8).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace titan {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  throw Error(os.str());
}

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

}  // namespace titan

// TITAN_CHECK(cond, "op: what went wrong ", shape_str(x.shape()), ...)
#define TITAN_CHECK(cond, ...)                 \
  do {                                         \
    if (!(cond)) ::titan::fail(__VA_ARGS__);   \
  } while (0)
