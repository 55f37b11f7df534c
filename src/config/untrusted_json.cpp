#include "src/config/untrusted_json.h"

#include <set>
#include <vector>

#include "src/tensor/error.h"

namespace titan::config {

nlohmann::json parse_untrusted_json(const std::string& text, const std::string& what, int max_depth) {
  using E = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> keys;  // the keys seen in each open object, by depth
  try {
    return nlohmann::json::parse(text, [&](int depth, E ev, nlohmann::json& v) {
      if (ev == E::object_start || ev == E::array_start)
        TITAN_CHECK(depth < max_depth, what, " nests objects and lists more than ", max_depth,
                    " deep: damaged, or not the file it should be");
      if (ev == E::object_start) keys.resize((size_t)depth + 1), keys[(size_t)depth].clear();
      if (ev == E::key) {
        const std::string k = v.get<std::string>();
        TITAN_CHECK(keys[(size_t)depth - 1].insert(k).second, what, " names '", k.substr(0, 120), "' twice (at nesting ",
                    "depth ", depth, "): which one is meant is ambiguous; the file is damaged or was not written by ",
                    "its format's writer");
      }
      return true;
    });
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(what, " is not valid JSON: ", e.what());
  }
}

}  // namespace titan::config
