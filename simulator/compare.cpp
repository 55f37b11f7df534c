#include "simulator/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "simulator/schedule.h"
#include "simulator/trace.h"
#include "src/log/log.h"
#include "src/tensor/error.h"

namespace titan {

namespace {
std::string bytes_text(double b) {
  char s[32];
  if (b >= 1e9) std::snprintf(s, sizeof s, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(s, sizeof s, "%.2f MB", b / 1e6);
  else std::snprintf(s, sizeof s, "%.1f kB", b / 1e3);
  return s;
}

std::string shape_of(const CostEvent& e) {
  if (e.kind == CostEvent::Kind::CommStart)
    return bytes_text(e.bytes) + (e.peer >= 0 ? " to/from rank " + std::to_string(e.peer)
                                              : " over " + e.group.name + " (" + std::to_string(e.group.size()) +
                                                    " ranks)");
  if (e.gemm.batch > 0) {
    std::string s = e.gemm.batch > 1 ? std::to_string(e.gemm.batch) + " x " : "";
    return s + std::to_string(e.gemm.m) + " x " + std::to_string(e.gemm.n) + " x " + std::to_string(e.gemm.k);
  }
  return bytes_text(e.bytes);
}
}  // namespace

StepComparison compare_step(const std::vector<CostEvent>& events, double end, const sim::ChipSpec& chip,
                            const sim::SystemSpec& sys, int world, int ranks_per_chip, int rank) {
  const bool timed = std::any_of(events.begin(), events.end(), [](const CostEvent& e) { return e.t > 0; });
  TITAN_CHECK(events.empty() || timed, "compare_step: the ", events.size(),
              " events carry no times (record them with a timed CostTrace)");
  StepComparison c;
  c.measured = measured_timeline(events, end, "this CPU", world);
  // titan's engine: each op one kernel, the time its record declares (no PyTorch eager decomposition)
  std::vector<CostEvent> as_run = events;
  for (CostEvent& e : as_run) {
    e.eager = EagerSplit{};
    if (e.cls == KernelClass::EagerOnly) e.flops = e.bytes = 0;  // traffic only PyTorch's eager mode pays
  }
  // a receive arrives when its wait ended in the measured step (the record after the wait)
  std::vector<double> arrival(events.size(), -1.0);
  std::map<int64_t, size_t> recv_of;  // comm id -> its receive's event
  for (size_t i = 0; i < events.size(); ++i) {
    const CostEvent& e = events[i];
    if (e.kind == CostEvent::Kind::CommStart && e.peer >= 0 && !e.send) recv_of[e.comm_id] = i;
    if (e.kind == CostEvent::Kind::CommWait) {
      auto it = recv_of.find(e.comm_id);
      if (it != recv_of.end()) arrival[it->second] = std::max(0.0, (i + 1 < events.size() ? events[i + 1].t : end) -
                                                                        events.front().t);
    }
  }
  c.simulated = schedule_events(as_run, chip, sys, std::max(1, ranks_per_chip), sim::ExecMode::Eager, rank, &arrival);
  c.simulated.world = std::max(1, world);
  // each event's time in each timeline (a slice per event; several when a kernel is cut, none when free)
  std::vector<double> meas(events.size(), -1), simu(events.size(), -1);
  for (const SimSpan& s : c.measured.spans)
    if (s.event >= 0 && s.category != "idle") meas[(size_t)s.event] = std::max(0.0, meas[(size_t)s.event]) + s.dur;
  for (const SimSpan& s : c.simulated.spans)
    if (s.event >= 0 && s.category != "idle") simu[(size_t)s.event] = std::max(0.0, simu[(size_t)s.event]) + s.dur;
  for (SimSpan& s : c.measured.spans.flat())
    if (s.event >= 0) s.other_s = std::max(0.0, simu[(size_t)s.event]);
  for (SimSpan& s : c.simulated.spans.flat())
    if (s.event >= 0) s.other_s = std::max(0.0, meas[(size_t)s.event]);
  std::map<std::pair<std::string, std::string>, OpComparison> rows;
  for (size_t i = 0; i < events.size(); ++i) {
    if (meas[i] < 0) continue;  // a wait, or a record the measured timeline does not draw
    const CostEvent& e = events[i];
    OpComparison& row = rows[{e.op, shape_of(e)}];
    row.op = e.op;
    row.shape = shape_of(e);
    ++row.calls;
    row.measured_s += meas[i];
    row.simulated_s += std::max(0.0, simu[i]);
  }
  for (auto& [k, row] : rows) c.rows.push_back(row);
  std::stable_sort(c.rows.begin(), c.rows.end(), [](const OpComparison& a, const OpComparison& b) {
    return std::abs(a.simulated_s - a.measured_s) > std::abs(b.simulated_s - b.measured_s);
  });
  return c;
}

std::vector<std::string> describe_comparison(const StepComparison& c, size_t top) {
  std::vector<std::string> out;
  const double m = c.measured.step_s, s = c.simulated.step_s;
  out.push_back("measured vs simulated (" + c.simulated.chip + " in " + c.simulated.system + ", the same " +
                std::to_string(c.rows.size()) + " op kinds and shapes): step " + fmt("%.2f", m * 1e3) +
                " ms measured, " + fmt("%.2f", s * 1e3) + " ms simulated (" +
                (m > 0 ? fmt("%+.1f", 100.0 * (s - m) / m) : std::string("n/a")) + "%)");
  out.push_back("  largest errors          op  shape                            calls  measured(ms)  simulated(ms)"
                "   error");
  for (size_t i = 0; i < std::min(top, c.rows.size()); ++i) {
    const OpComparison& r = c.rows[i];
    char line[320];
    std::snprintf(line, sizeof line, "  %26s  %-32s %6lld %13.3f %14.3f %7s", r.op.c_str(), r.shape.c_str(),
                  (long long)r.calls, r.measured_s * 1e3, r.simulated_s * 1e3,
                  r.measured_s > 0 ? (fmt("%+.0f", 100.0 * r.error()) + "%").c_str() : "n/a");
    out.push_back(line);
  }
  return out;
}

void write_comparison(const StepComparison& c, const std::string& path) {
  std::ofstream o(path);
  TITAN_CHECK(o.good(), "compare: cannot write '", path, "'");
  o << "op\tshape\tcalls\tmeasured_ms\tsimulated_ms\terror_pct\n";
  for (const OpComparison& r : c.rows) {
    o << r.op << '\t' << r.shape << '\t' << r.calls << '\t' << r.measured_s * 1e3 << '\t' << r.simulated_s * 1e3
      << '\t';
    if (r.measured_s > 0) o << 100.0 * r.error();
    else o << "n/a";
    o << '\n';
  }
  o.flush();
  TITAN_CHECK(o.good(), "compare: writing '", path, "' failed (disk full?)");
}

}  // namespace titan
