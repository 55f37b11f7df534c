// src/config/enum_names.h — option strings as enums, parsed once at the edge.
//
// An enum opts in by declaring, in its own namespace, a constexpr function
//   constexpr std::array<std::string_view, N> enum_names(Color) { return {"red", "green"}; }
// listing its spellings in value order (0, 1, ...). The one parse / print pair below serves YAML,
// the command line and config.json (nlohmann's serializer is specialized for every such enum), so a
// name appears once, and code compares enums, never strings.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/tensor/error.h"

namespace titan::config {

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) { enum_names(e); };

template <NamedEnum E>
std::string enum_name(E e) {
  const auto names = enum_names(E{});
  const auto i = static_cast<size_t>(e);
  return i < names.size() ? std::string(names[i]) : "<" + std::to_string(i) + ">";
}

template <NamedEnum E>
std::vector<std::string> enum_choices() {
  std::vector<std::string> v;
  for (auto n : enum_names(E{})) v.emplace_back(n);
  return v;
}

template <NamedEnum E>
std::optional<E> parse_enum(std::string_view text) {
  const auto names = enum_names(E{});
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  return std::nullopt;
}

// parse_enum, or an error naming `what` (a YAML key, a config.json field), the value as written and the choices.
template <NamedEnum E>
E parse_enum_or_fail(std::string_view text, const std::string& what) {
  if (auto e = parse_enum<E>(text)) return *e;
  std::string allowed;
  for (auto n : enum_names(E{})) allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  fail(what, " '", std::string(text), "' is not supported (", allowed, ")");
}

}  // namespace titan::config

// config.json reads and writes every named enum by its spelling.
namespace nlohmann {
template <titan::config::NamedEnum E>
struct adl_serializer<E> {
  static void to_json(json& j, E e) { j = titan::config::enum_name(e); }
  static void from_json(const json& j, E& e) {
    TITAN_CHECK(j.is_string(), "expected one of the names of an option, got ", j.dump());
    e = titan::config::parse_enum_or_fail<E>(j.get<std::string>(), "option");
  }
};
}  // namespace nlohmann
