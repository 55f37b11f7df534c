// src/config/field.h — one configuration key bound to a value: how YAML, the
// command line and --help reach every knob of a job.
//
// A Field is typed (bool, integer, number, string, a named enum or a TextValue), parses a
// value as written and prints it back; parse errors name the key, where it
// was written (file:line or --flag) and what is allowed, with a "did you
// mean" for near misses.
#pragma once
#include <algorithm>
#include <concepts>
#include <optional>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "src/config/enum_names.h"
#include "src/config/name_list.h"

namespace titan::config {

struct Field {
  std::string key;   // section.name (or name inside a section's table)
  std::string type;  // "a bool (true/false)", "an integer", "a number", "a string", "one of the choices", T::kind
  std::string help;  // one line of meaning (--help prints it)
  std::vector<std::string> choices;  // enumerated values ({} when free)
  std::function<void(const std::string& text, const std::string& where)> set;
  std::function<std::string()> get;  // the value as YAML writes it
};

// A value with its own spelling (a knob that is "N or op", ...): parsed once where it is read, printed back.
//   static std::optional<T> parse(const std::string&);  std::string text() const;  static constexpr const char* kind
// (what it is, for --help and errors: "a positive integer N or 'op'").
template <class T>
concept TextValue = requires(const std::string& s, const T& v) {
  { T::parse(s) } -> std::same_as<std::optional<T>>;
  { v.text() } -> std::same_as<std::string>;
  T::kind;
};

// Parses `text` as T; `what` names it in the error ("config error at FILE:LINE: KEY = 'text' ...").
template <class T>
T parse_value(const std::string& text, const std::string& what, const std::vector<std::string>& allowed = {});
template <class T>
std::string print_value(const T& v);
template <class T>
const char* type_name();

// A field over *slot.
template <class T>
Field bind(std::string key, T* slot, std::string help = "", std::vector<std::string> allowed = {}) {
  if constexpr (NamedEnum<T>) allowed = enum_choices<T>();
  Field f{key, type_name<T>(), std::move(help), allowed, {}, {}};
  f.set = [slot, key, allowed](const std::string& text, const std::string& where) {
    *slot = parse_value<T>(text, "config error at " + where + ": " + key, allowed);
  };
  f.get = [slot] { return print_value(*slot); };
  return f;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ");
// " (did you mean 'x'?)" for the option closest to `bad` (edit distance < 3), else "".
std::string suggestion(const std::string& bad, const std::vector<std::string>& options);

// ---- implementation of the templates -------------------------------------------------------------
[[noreturn]] void bad_value(const std::string& what, const std::string& text, const std::string& why);
bool parse_bool(const std::string& text, bool* out);
bool parse_int(const std::string& text, int64_t* out);
bool parse_double(const std::string& text, double* out);
std::string print_double(double v);

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "a bool (true/false)";
  else if constexpr (std::is_same_v<T, int64_t>) return "an integer";
  else if constexpr (std::is_same_v<T, double>) return "a number";
  else if constexpr (NamedEnum<T>) return "one of the choices";
  else if constexpr (TextValue<T>) return T::kind;
  else return "a string";
}

template <class T>
T parse_value(const std::string& text, const std::string& what, const std::vector<std::string>& allowed) {
  if constexpr (std::is_same_v<T, bool>) {
    bool v;
    if (!parse_bool(text, &v)) bad_value(what, text, "is not a bool; expected true or false");
    return v;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    int64_t v;
    if (!parse_int(text, &v)) bad_value(what, text, "is not an integer");
    return v;
  } else if constexpr (std::is_same_v<T, double>) {
    double v;
    if (!parse_double(text, &v)) bad_value(what, text, "is not a number");
    return v;
  } else if constexpr (NamedEnum<T>) {
    if (auto e = parse_enum<T>(text)) return *e;
    const auto choices = enum_choices<T>();
    bad_value(what, text, "is not allowed; allowed values: " + join(choices) + suggestion(text, choices));
  } else if constexpr (TextValue<T>) {
    if (auto v = T::parse(text)) return *v;
    bad_value(what, text, std::string("is not ") + T::kind);
  } else {
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), text) == allowed.end())
      bad_value(what, text, "is not allowed; allowed values: " + join(allowed) + suggestion(text, allowed));
    return text;
  }
}

// A YAML double-quoted scalar that loads back to exactly `s` (quotes, backslashes and control characters escaped).
std::string yaml_quote(const std::string& s);

template <class T>
std::string print_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
  else if constexpr (std::is_same_v<T, double>) return print_double(v);
  else if constexpr (NamedEnum<T>) return "\"" + enum_name(v) + "\"";
  else if constexpr (TextValue<T>) return yaml_quote(v.text());
  else return yaml_quote(v);
}

// YAML from a file titan did not write is scanned before a parser recurses into it: flow collections ([ ], { })
// nested deeper than max_depth are refused naming `where` and the line (yaml-cpp recurses once per level, and a
// few thousand brackets overflow its stack).
void check_nesting(const std::string& text, const std::string& where, int max_depth = 64);

}  // namespace titan::config
