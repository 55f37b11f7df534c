#include "simulator/trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "src/log/log.h"
#include "src/tensor/error.h"

namespace titan {

SimResult measured_timeline(const std::vector<CostEvent>& ev, double end, const std::string& label) {
  SimResult r;
  r.chip = label;
  r.system = "measured";
  r.mode = "measured";
  std::map<int64_t, size_t> comm_span;  // comm id -> its span
  for (size_t i = 0; i < ev.size(); ++i) {
    const CostEvent& e = ev[i];
    const double next = i + 1 < ev.size() ? ev[i + 1].t : end;
    const double dur = std::max(0.0, next - e.t);
    if (e.kind == CostEvent::Kind::Compute) {
      r.spans.push_back({"compute", e.op, "compute", e.t, dur, e.flops, e.bytes, -1});
      r.compute_s += dur;
    } else if (e.kind == CostEvent::Kind::CommStart) {
      comm_span[e.comm_id] = r.spans.size();
      r.spans.push_back({"comm:" + e.group.name, e.op, "comm", e.t, 0, 0, e.bytes, -1});
    } else {
      auto it = comm_span.find(e.comm_id);
      if (it == comm_span.end()) continue;
      SimSpan& c = r.spans[it->second];
      c.dur = std::max(0.0, next - c.start);
      c.flow_to = (int64_t)r.spans.size();
      r.spans.push_back({"compute", "wait " + c.name, "idle", e.t, dur, 0, 0, -1});
      r.exposed_comm_s += dur;
      comm_span.erase(it);
    }
  }
  r.step_s = end;
  return r;
}

void write_chrome_trace(const SimResult& r, const std::string& path, int n_chips, int first_chip) {
  std::ofstream o(path);
  TITAN_CHECK(o.good(), "simulation.trace_file: cannot write '", path, "'");
  n_chips = std::max(1, std::min(n_chips, r.chips));
  // stream -> tid
  std::map<std::string, int> tid;
  tid["compute"] = 0;
  for (const auto& s : r.spans)
    if (!tid.count(s.stream)) tid[s.stream] = (int)tid.size() * 100;
  for (const auto& st : r.stages)
    for (const auto& s : st.spans)
      if (!tid.count(s.stream)) tid[s.stream] = (int)tid.size() * 100;
  auto esc = [](const std::string& s) {
    std::string e;
    for (char c : s) {
      if (c == '"' || c == '\\') e += '\\';
      e += c;
    }
    return e;
  };
  o << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"chip\":\"" << esc(r.chip) << "\",\"system\":\"" << esc(r.system)
    << "\",\"mode\":\"" << r.mode << "\",\"step_s\":" << r.step_s << "},\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&]() {
    if (!first) o << ",\n";
    first = false;
  };
  int64_t flow = 0;
  for (int cc = 0; cc < n_chips; ++cc) {
    const int c = first_chip + cc;  // pid: distinct per chip, so per-rank files merge without collisions
    sep();
    std::string stage;
    if (!r.stages.empty())
      stage = ", pipeline stage " +
              std::to_string(std::min<int>((int)r.stages.size() - 1,
                                           c * r.ranks_per_chip / std::max(1, r.world / (int)r.stages.size())));
    o << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << c << ",\"args\":{\"name\":\""
      << (r.system == "measured" ? "rank " : "chip ") << c << " (" << esc(r.chip) << stage << ")\"}}";
    const int drawn = cc == 0 ? r.ranks_per_chip : 1;  // chip 0: every rank; others: their first (SPMD)
    for (int k = 0; k < drawn; ++k) {  // a track only for a rank that is drawn (no empty named tracks)
      sep();
      o << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << c << ",\"tid\":" << k << ",\"args\":{\"name\":\"rank "
        << c * r.ranks_per_chip + k << " compute"
        << (drawn == 1 && r.ranks_per_chip > 1
                ? " (ranks " + std::to_string(c * r.ranks_per_chip + 1) + "-" +
                      std::to_string(c * r.ranks_per_chip + r.ranks_per_chip - 1) + " run the same, not drawn)"
                : std::string())
        << "\"}}";
    }
    for (auto& [s, t] : tid)
      if (s != "compute") {
        sep();
        o << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << c << ",\"tid\":" << t << ",\"args\":{\"name\":\""
          << esc(s) << "\"}}";
      }
    // the chip's pipeline stage (its first rank's): a stage's chips share its timeline
    const std::vector<SimSpan>* spans = &r.spans;
    if (!r.stages.empty()) {
      const int per_stage = std::max(1, r.world / (int)r.stages.size());
      const size_t st = std::min(r.stages.size() - 1, (size_t)(c * r.ranks_per_chip / per_stage));
      spans = &r.stages[st].spans;
    }
    for (int k = 0; k < drawn; ++k)
      for (size_t i = 0; i < spans->size(); ++i) {
        const SimSpan& s = (*spans)[i];
        if (k > 0 && s.stream != "compute") continue;
        const int t = s.stream == "compute" ? k : tid[s.stream];
        sep();
        o << "{\"ph\":\"X\",\"pid\":" << c << ",\"tid\":" << t << ",\"name\":\"" << esc(s.name) << "\",\"cat\":\""
          << s.category << "\",\"ts\":" << fmt("%.3f", s.start * 1e6) << ",\"dur\":" << fmt("%.3f", s.dur * 1e6)
          << ",\"args\":{\"flops\":" << s.flops << ",\"bytes\":" << s.bytes << "}}";
        if (s.flow_to >= 0 && k == 0) {
          const SimSpan& w = (*spans)[s.flow_to];
          sep();
          o << "{\"ph\":\"s\",\"id\":" << flow << ",\"pid\":" << c << ",\"tid\":" << t << ",\"name\":\"waits\",\"cat\":\"dep\",\"ts\":"
            << fmt("%.3f", (s.start + s.dur) * 1e6 - 0.001) << "}";
          sep();
          o << "{\"ph\":\"f\",\"bp\":\"e\",\"id\":" << flow << ",\"pid\":" << c << ",\"tid\":0,\"name\":\"waits\",\"cat\":\"dep\",\"ts\":"
            << fmt("%.3f", (w.start + w.dur) * 1e6) << "}";
          ++flow;
        }
      }
  }
  o << "\n]}\n";
  o.flush();  // a full disk shows at the flush, not at the last <<
  TITAN_CHECK(o.good(), "trace: writing '", path, "' failed (disk full?)");
}

}  // namespace titan
