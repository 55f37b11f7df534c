// src/config/name_list.h — a config value that is a list of names (model.converters, float8.filter_fqns).
//
// Written as YAML's list (`[float8]`, or one item per `- ` line; only keys of this type take a YAML list) or on
// the command line as `a,b` / `[a, b]`; printed back as the quoted text "[a, b]", which reads back as written.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace titan::config {

struct NameList {
  std::vector<std::string> items;
  static constexpr const char* kind = "a list of names ([a, b] in YAML, a,b on the command line)";
  // nullopt: an item is empty or holds a bracket, quote or space (a malformed list)
  static std::optional<NameList> parse(const std::string& text);
  std::string text() const;
  bool contains(const std::string& s) const;
  bool empty() const { return items.empty(); }
  bool operator==(const NameList&) const = default;
};

}  // namespace titan::config
