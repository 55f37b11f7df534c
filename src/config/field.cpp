#include "src/config/field.h"

#include <cmath>
#include <cstdio>

#include <algorithm>
#include <sstream>

namespace titan::config {

void bad_value(const std::string& what, const std::string& text, const std::string& why) {
  fail(what, " = '", text, "' ", why);
}

bool parse_bool(const std::string& text, bool* out) {
  if (text == "true" || text == "True" || text == "1") *out = true;
  else if (text == "false" || text == "False" || text == "0") *out = false;
  else return false;
  return true;
}

bool parse_int(const std::string& text, int64_t* out) {
  size_t pos = 0;
  try {
    *out = std::stoll(text, &pos);
  } catch (...) {
    return false;
  }
  return pos != 0 && pos == text.size();
}

bool parse_double(const std::string& text, double* out) {
  size_t pos = 0;
  try {
    *out = std::stod(text, &pos);
  } catch (...) {
    return false;
  }
  return pos != 0 && pos == text.size() && std::isfinite(*out);  // inf / nan: no key means them
}

std::string print_double(double v) {
  std::ostringstream o;
  o.precision(10);
  o << v;
  std::string s = o.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> d(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) d[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = d[0];
    d[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cur = d[j];
      d[j] = std::min({d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1)});
      prev = cur;
    }
  }
  return d[b.size()];
}
}  // namespace

std::string suggestion(const std::string& bad, const std::vector<std::string>& options) {
  std::string best;
  size_t bd = 3;
  for (const auto& o : options) {
    size_t d = edit_distance(bad, o);
    if (d < bd) {
      bd = d;
      best = o;
    }
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string yaml_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += (char)c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F) {
      char e[8];
      std::snprintf(e, sizeof e, "\\x%02X", c);
      out += e;
    } else {
      out += (char)c;
    }
  }
  return out + "\"";
}

void check_nesting(const std::string& text, const std::string& where, int max_depth) {
  // Brackets outside comments and quoted scalars are counted; where this reading is unsure (a multi-line or escaped
  // quote) it counts more, never fewer, so the bound holds for what yaml-cpp sees.
  int depth = 0, line = 1;
  char quote = 0, prev = '\n';
  bool comment = false;
  for (char c : text) {
    if (c == '\n') {
      ++line;
      comment = false;
      quote = 0;
      prev = c;
      continue;
    }
    if (comment) continue;
    if (quote) {
      if (c == quote) quote = 0;
      prev = c;
      continue;
    }
    const bool after_space = prev == '\n' || prev == ' ' || prev == '\t';
    const bool scalar_start = after_space || prev == '[' || prev == '{' || prev == ',' || prev == ':' || prev == '-';
    if ((c == '"' || c == '\'') && scalar_start) quote = c;  // a quote inside a plain scalar (it's) opens nothing
    else if (c == '#' && after_space) comment = true;       // YAML: a comment follows whitespace
    else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        fail(where, ":", line, ": nested more than ", max_depth, " levels deep; no titan file nests that deep "
             "(damaged, or not a titan YAML file)");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    prev = c;
  }
}

std::optional<NameList> NameList::parse(const std::string& text) {
  auto trim = [](std::string t) {
    const size_t a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t");
    return a == std::string::npos ? std::string() : t.substr(a, b - a + 1);
  };
  std::string body = trim(text);
  if (!body.empty() && body.front() == '[') {
    if (body.back() != ']') return std::nullopt;
    body = trim(body.substr(1, body.size() - 2));
  }
  NameList l;
  if (body.empty()) return l;
  size_t at = 0;
  while (true) {
    const size_t comma = body.find(',', at);
    const std::string item = trim(body.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (item.empty() || item.find_first_of("[]{}'\" \t") != std::string::npos) return std::nullopt;
    l.items.push_back(item);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return l;
}

std::string NameList::text() const { return "[" + join(items) + "]"; }

bool NameList::contains(const std::string& s) const {
  return std::find(items.begin(), items.end(), s) != items.end();
}

}  // namespace titan::config
