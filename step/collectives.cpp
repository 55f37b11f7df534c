#include "step/collectives.h"

#include <cstdio>
#include <fstream>
#include <map>

#include "src/tensor/tensor.h"

namespace titan {

namespace {
std::string ranks_str(const CommGroupRef& g, const char* sep) {
  std::string s;
  if (!g.world_ranks) return s;
  for (size_t i = 0; i < g.world_ranks->size(); ++i) s += (i ? sep : "") + std::to_string((*g.world_ranks)[i]);
  return s;
}
}  // namespace

std::vector<std::string> describe_collectives(const std::vector<CostEvent>& events, int rank, const std::string& dtypes) {
  struct Row {
    int64_t count = 0;
    double bytes = 0;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;  // (kind, group) -> totals
  int64_t total = 0;
  for (const CostEvent& e : events) {
    if (e.kind != CostEvent::Kind::CommStart) continue;
    Row& r = rows[{e.op, e.group.name + " [" + ranks_str(e.group, " ") + "]"}];
    ++r.count;
    r.bytes += e.bytes;
    ++total;
  }
  std::vector<std::string> out;
  out.push_back("collectives per step on rank " + std::to_string(rank) + ": " + std::to_string(total) + " (MB in " +
                dtypes + ")");
  for (const auto& [key, r] : rows) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-16s x%-5lld %10.3f MB  on %s", key.first.c_str(), (long long)r.count,
                  r.bytes / 1e6, key.second.c_str());
    out.push_back(line);
  }
  return out;
}

void write_collectives(const std::vector<CostEvent>& events, const std::string& path) {
  std::ofstream o(path);
  TITAN_CHECK(o.good(), "write_collectives: cannot write '", path, "'");
  o << "kind\tgroup\tworld_ranks\tbytes\tgradients\n";
  for (const CostEvent& e : events)
    if (e.kind == CostEvent::Kind::CommStart)
      o << e.op << '\t' << e.group.name << '\t' << ranks_str(e.group, ",") << '\t' << (int64_t)e.bytes << '\t'
        << (e.gradients ? 1 : 0) << '\n';
  TITAN_CHECK(o.good(), "write_collectives: writing '", path, "' failed (disk full?)");
}

}  // namespace titan
