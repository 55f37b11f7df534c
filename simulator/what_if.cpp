#include "simulator/what_if.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

#include "simulator/critical_path.h"
#include "simulator/simulate.h"
#include "src/log/log.h"
#include "src/tensor/error.h"

namespace titan {

namespace {
std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}
}  // namespace

WhatIf parse_what_if(const std::string& text) {
  WhatIf w;
  w.as_written = text;
  size_t a = 0;
  while (a <= text.size()) {
    const size_t b = std::min(text.find(';', a), text.size());
    const std::string part = trim(text.substr(a, b - a));
    a = b + 1;
    if (part.empty()) continue;
    size_t op = part.find('=');  // else the last '*' (a level's wildcard, levels.*.key, holds one too)
    if (op == std::string::npos) op = part.rfind('*');
    TITAN_CHECK(op != std::string::npos && op > 0 && op + 1 < part.size(), "config error: simulation.what_if '", part,
                "': write <key>=<value> or <key>*<factor> (chip.hbm_tbps*2, system.levels.*.bandwidth_gbps*2, "
                "parallelism.tensor_parallel_degree=4)");
    const std::string key = trim(part.substr(0, op)), value = trim(part.substr(op + 1));
    const bool spec = key.rfind("chip.", 0) == 0 || key.rfind("system.", 0) == 0;
    if (!spec) {
      TITAN_CHECK(part[op] == '=', "config error: simulation.what_if '", part, "': a config key is set (=), not "
                  "scaled; scaling (*) applies to spec figures (chip.<key>, system.<key>)");
      w.overrides.push_back(key);
      w.overrides.push_back(value);
      continue;
    }
    sim::SpecEdit e;
    e.path = key.substr(key.find('.') + 1);
    e.scale = part[op] == '*';
    e.as_written = part;
    char* end = nullptr;
    e.value = std::strtod(value.c_str(), &end);
    TITAN_CHECK(end && *end == '\0' && std::isfinite(e.value) && e.value >= 0, "config error: simulation.what_if '",
                part, "': '", value, "' is not a number >= 0");
    (key[0] == 'c' ? w.chip : w.system).push_back(e);
  }
  TITAN_CHECK(!w.chip.empty() || !w.system.empty() || !w.overrides.empty(), "config error: simulation.what_if '",
              text, "' holds no change");
  return w;
}

SimResult simulate_what_if(const JobConfig& cfg, const WhatIf& w) {
  JobConfig changed = cfg;
  if (!w.overrides.empty()) {  // the job's effective config, as saved, loaded again with the changes on top
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("titan_what_if_" + std::to_string(::getpid()) + ".yaml")).string();
    struct Remove {
      std::string p;
      ~Remove() { std::filesystem::remove(p); }
    } remove{path};
    {
      std::ofstream o(path);
      o << dump_job_config(cfg);
      TITAN_CHECK(o.good(), "simulation.what_if: cannot write '", path, "'");
    }
    try {
      changed = load_job_config_file(path, w.overrides);
    } catch (const std::exception& e) {
      fail("simulation.what_if '", w.as_written, "': ", e.what());
    }
  }
  try {
    return simulate_step(changed, (int)changed.simulation.world_size, w.chip, w.system);
  } catch (const std::exception& e) {
    fail("simulation.what_if '", w.as_written, "': ", e.what());
  }
}

std::vector<std::string> describe_what_if(const SimResult& b, const SimResult& a, const std::string& change) {
  std::vector<std::string> out;
  auto pct = [](double x, double y) { return x > 0 ? fmt("%+.1f", 100.0 * (y - x) / x) + "%" : std::string("n/a"); };
  auto gib = [](double v) { return fmt("%.2f", v / (1 << 30)); };
  out.push_back("what if " + change + ": step " + fmt("%.3f", b.step_s) + " s -> " + fmt("%.3f", a.step_s) + " s (" +
                pct(b.step_s, a.step_s) + "); tps " + with_commas(b.tokens_per_s) + " -> " +
                with_commas(a.tokens_per_s) + "; mfu " + fmt("%.2f", 100 * b.mfu) + "% -> " + fmt("%.2f", 100 * a.mfu) +
                "%; memory per chip " + gib(b.memory.total()) + " -> " + gib(a.memory.total()) + " GiB" +
                (a.oom && !b.oom ? " (OUT OF MEMORY)" : "") +
                (a.world != b.world || a.chips != b.chips
                     ? "; " + std::to_string(b.chips) + " -> " + std::to_string(a.chips) + " chips"
                     : std::string()));
  out.push_back("  after: " + describe_critical_path(a.critical));
  std::map<std::string, double> moved;
  for (const auto& [k, v] : a.critical.by_what) moved[k] += v;
  for (const auto& [k, v] : b.critical.by_what) moved[k] -= v;
  std::vector<std::pair<std::string, double>> m(moved.begin(), moved.end());
  std::sort(m.begin(), m.end(), [](auto& x, auto& y) { return std::abs(x.second) > std::abs(y.second); });
  std::string line = "  what moved on the critical path:";
  int n = 0;
  for (const auto& [k, v] : m)
    if (std::abs(v) >= 5e-4 * std::max(b.step_s, a.step_s) && n++ < 6)
      line += (n > 1 ? ", " : " ") + k + " " + fmt("%+.3f", v) + " s";
  if (n == 0) line += " nothing by 0.05% of the step or more";
  out.push_back(line);
  out.push_back("  exposed communication " + fmt("%.3f", b.exposed_comm_s) + " -> " + fmt("%.3f", a.exposed_comm_s) +
                " s; pipeline bubble " + fmt("%.3f", b.bubble_s) + " -> " + fmt("%.3f", a.bubble_s) +
                " s; host-bound " + fmt("%.3f", b.host_wait_s) + " -> " + fmt("%.3f", a.host_wait_s) + " s");
  return out;
}

}  // namespace titan
