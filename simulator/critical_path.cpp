#include "simulator/critical_path.h"

#include <algorithm>

#include "src/log/log.h"
#include "src/tensor/error.h"

namespace titan {

namespace {
std::string group_of(std::string_view stream) {  // "comm:dp_shard" -> "dp_shard"
  const size_t c = stream.find(':');
  return std::string(c == std::string_view::npos ? stream : stream.substr(c + 1));
}

// What a slice on the path is charged to (stalls never are: they are replaced by their cause).
std::string attribution(const SimSpan& s) {
  if (s.category == "host") return "host";
  if (s.category == "comm") return (s.stream.rfind("p2p:", 0) == 0 ? "pipeline " : "communication ") + group_of(s.stream);
  if (s.category == "compute") return std::string(s.kernel_class.empty() ? "compute" : s.kernel_class);
  return "waiting: " + dep_name(s.dep_kind);
}
}  // namespace

CriticalPath critical_path(const std::vector<const Timeline*>& lanes) {
  CriticalPath p;
  SpanRef cur;
  double t = 0;
  for (size_t l = 0; l < lanes.size(); ++l) {  // the slice that ends last ends the step
    int64_t i = 0;
    for (const SimSpan& s : *lanes[l]) {
      if (s.start + s.dur > t) t = s.start + s.dur, cur = {(int)l, i};
      ++i;
    }
  }
  p.length = t;
  auto at = [&](SpanRef r) { return (*lanes[(size_t)r.lane])[(size_t)r.span]; };
  size_t guard = 0, total = 0;
  for (const auto* l : lanes) total += l->size();
  constexpr double eps = 1e-12;
  DepKind why = DepKind::none;  // what the slice that waited for `cur` waited for it as (labels a gap after cur)
  while (cur.valid() && t > eps) {
    TITAN_CHECK(++guard <= total + 1, "critical_path: the slices' dependencies form a cycle");
    TITAN_CHECK(cur.lane < (int)lanes.size() && cur.span < (int64_t)lanes[(size_t)cur.lane]->size(),
                "critical_path: a dependency names slice ", cur.span, " of lane ", cur.lane, ", which does not exist");
    const SimSpan s = at(cur);
    const double end = std::min(t, s.start + s.dur);
    if (end + eps < t)  // nothing ran on the path between this slice's end and what waited for it
      p.segments.push_back({cur, end, t - end, "waiting: " + dep_name(why)});
    const bool stall = s.category == "idle" || s.category == "bubble";
    if (!stall || !s.dep.valid()) {  // a stall without its cause stays on the path as waiting
      if (end > s.start)
        p.segments.push_back({cur, s.start, end - s.start, stall ? "waiting: " + dep_name(s.dep_kind) : attribution(s)});
      t = std::min(t, s.start);
    } else {
      t = end;  // the stall is explained by what it waited for, which ended when it did
    }
    why = s.dep_kind;
    cur = s.dep;
  }
  if (t > eps) p.segments.push_back({SpanRef{}, 0, t, "waiting: none"});  // the step began with the path idle
  std::reverse(p.segments.begin(), p.segments.end());
  for (const PathSegment& g : p.segments) {
    p.by_lane[g.span.lane] += g.dur;
    const SimSpan s = g.span.valid() ? at(g.span) : SimSpan{};
    if (g.span.valid() && s.category == "compute" && s.launch_s > 0 && g.what.rfind("waiting", 0) != 0) {
      const double launch = std::min<double>(s.launch_s, g.dur);  // the kernel's launch, charged apart
      p.by_what["launch overhead"] += launch;
      p.by_what[g.what] += g.dur - launch;
    } else {
      p.by_what[g.what] += g.dur;
    }
  }
  return p;
}

std::string describe_critical_path(const CriticalPath& p) {
  std::vector<std::pair<std::string, double>> w(p.by_what.begin(), p.by_what.end());
  std::sort(w.begin(), w.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::string line = "sim critical path: " + fmt("%.3f", p.length) + " s over " + std::to_string(p.segments.size()) +
                     " slices:";
  const double L = p.length > 0 ? p.length : 1;
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i].second >= 5e-4 * L)  // what holds at least 0.05% of the step
      line += (i ? ", " : " ") + w[i].first + " " + fmt("%.3f", w[i].second) + " s (" + fmt("%.1f", 100 * w[i].second / L) + "%)";
  if (std::count_if(p.by_lane.begin(), p.by_lane.end(), [](auto& kv) { return kv.first >= 0; }) > 1) {
    line += "; per stage:";
    for (auto& [lane, v] : p.by_lane)
      if (lane >= 0) line += " [" + std::to_string(lane) + "] " + fmt("%.3f", v);
  }
  return line;
}

}  // namespace titan
