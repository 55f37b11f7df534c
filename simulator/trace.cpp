#include "simulator/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "src/log/log.h"
#include "src/tensor/error.h"

namespace titan {

SimResult measured_timeline(const std::vector<CostEvent>& ev, double end, const std::string& label, int world) {
  SimResult r;
  r.chip = label;
  r.system = "measured";
  r.mode = "measured";
  r.world = std::max(1, world);
  std::map<int64_t, size_t> comm_span;  // comm id -> its span
  std::map<std::string, int64_t> seq;   // members -> collectives over them so far
  for (size_t i = 0; i < ev.size(); ++i) {
    const CostEvent& e = ev[i];
    const double next = i + 1 < ev.size() ? ev[i + 1].t : end;
    const double dur = std::max(0.0, next - e.t);
    if (e.kind == CostEvent::Kind::Compute) {
      r.spans.push_back({"compute", e.op, "compute", e.t, dur, e.flops, e.bytes, -1, 0, (int64_t)i});
      r.memory_samples.add(e.t, e.memory);
      r.compute_s += dur;
    } else if (e.kind == CostEvent::Kind::CommStart) {
      comm_span[e.comm_id] = r.spans.size();
      r.spans.push_back({span_label("comm:" + e.group.name), e.op, "comm", e.t, 0, 0, e.bytes, -1, 0, (int64_t)i});
      if (e.peer < 0 && e.group.world_ranks && e.group.world_ranks->size() > 1) {  // a collective: linked at merge
        std::string m;
        for (int x : *e.group.world_ranks) m += (m.empty() ? "" : ",") + std::to_string(x);
        SimSpan& last = r.spans.edit(r.spans.size() - 1);
        last.group_ranks = span_label(m);
        last.group_seq = seq[m]++;
      }
    } else {
      auto it = comm_span.find(e.comm_id);
      if (it == comm_span.end()) continue;
      SimSpan& c = r.spans.edit(it->second);
      c.dur = std::max(0.0, next - c.start);
      c.flow_to = (int64_t)r.spans.size();
      r.spans.push_back({"compute", span_label("wait " + std::string(c.name)), "idle", e.t, dur, 0, 0, -1});
      r.exposed_comm_s += dur;
      comm_span.erase(it);
    }
  }
  r.step_s = end;
  return r;
}

namespace {
// Times are written in whole nanoseconds (microseconds with 3 decimals): slices that tile a track stay exactly
// adjacent in the file.
long long to_ns(double s) { return std::max(0LL, (long long)std::llround(s * 1e9)); }
std::string us(long long ns) {
  char b[40];
  std::snprintf(b, sizeof b, "%lld.%03lld", ns / 1000, ns % 1000);
  return b;
}
std::string esc(std::string_view s) {
  std::string e;
  for (char c : s) {
    if (c == '"' || c == '\\') e += '\\';
    if ((unsigned char)c < 0x20) continue;
    e += c;
  }
  return e;
}
std::string hex_id(int pid, int64_t n) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", (unsigned long long)(((uint64_t)pid << 32) | (uint64_t)n));
  return b;
}
}  // namespace

void write_chrome_trace(const SimResult& r, const std::string& path, const TraceLayout& layout) {
  std::ofstream o(path);
  TITAN_CHECK(o.good(), "trace: cannot write '", path, "'");
  // the timelines, read at random below, as vectors: rank 0's and each stage's (placed passes written out once)
  const std::vector<SimSpan> rank0_spans(r.spans.begin(), r.spans.end());
  std::vector<std::vector<SimSpan>> stage_spans;
  for (const SimStage& st : r.stages) stage_spans.emplace_back(st.spans.begin(), st.spans.end());
  auto lane_spans = [&](int lane) -> const std::vector<SimSpan>& {
    return r.stages.empty() ? rank0_spans : stage_spans[(size_t)lane];
  };
  const int first_chip = layout.first_chip;
  // the chips drawn: the first n_chips; or (n_chips 0) one per distinct timeline (pipeline stage), each standing
  // for the chips that run alike (SPMD), named with their range
  const int per_stage = r.stages.empty() ? std::max(1, r.world) : std::max(1, r.world / (int)r.stages.size());
  const int stage_chips = std::max(1, per_stage / std::max(1, r.ranks_per_chip));  // chips per stage
  std::vector<int> chips;
  if (layout.n_chips > 0) {
    for (int cc = 0; cc < std::max(1, std::min(layout.n_chips, r.chips)); ++cc) chips.push_back(first_chip + cc);
  } else {
    for (int c = first_chip; c < std::max(first_chip + 1, r.chips); c += stage_chips) chips.push_back(c);
  }
  const bool collapsed = layout.n_chips <= 0 && r.chips > (int)chips.size();
  const int n_chips = (int)chips.size();
  const int64_t step = layout.step;
  const bool measured = r.system == "measured";
  o << "{\"displayTimeUnit\":\"ms\",\"distributedInfo\":{\"backend\":\"mpi\",\"rank\":" << first_chip * r.ranks_per_chip
    << ",\"world_size\":" << r.world << "},\"otherData\":{\"chip\":\"" << esc(r.chip) << "\",\"system\":\""
    << esc(r.system) << "\",\"mode\":\"" << esc(r.mode) << "\",\"step_s\":" << r.step_s;
  if (r.start_unix_s > 0) o << ",\"start_unix_s\":" << fmt("%.6f", r.start_unix_s);
  o << "},\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&]() {
    if (!first) o << ",\n";
    first = false;
  };
  auto meta = [&](const char* what, int pid, int tid, const std::string& key, const std::string& value) {
    sep();
    o << "{\"ph\":\"M\",\"name\":\"" << what << "\",\"pid\":" << pid;
    if (tid > 0) o << ",\"tid\":" << tid;
    o << ",\"args\":{\"" << key << "\":" << value << "}}";
  };
  // per drawn chip: its pid, its lane (pipeline stage; SpanRef::lane), and each span's track (tid)
  std::vector<int> chip_pid(n_chips), chip_lane(n_chips, 0);
  std::vector<std::vector<int>> chip_tid(n_chips);
  for (int cc = 0; cc < n_chips; ++cc) {
    const int c = chips[(size_t)cc], pid = c + layout.pid_offset + 1;  // >= 1, distinct per chip: files merge cleanly
    chip_pid[cc] = pid;
    // the chip's pipeline stage (its first rank's): a stage's chips share its timeline
    const std::vector<SimSpan>* spans = &rank0_spans;
    std::string stage;
    if (!r.stages.empty()) {
      const size_t st = std::min(r.stages.size() - 1, (size_t)(c * r.ranks_per_chip / per_stage));
      spans = &stage_spans[st];
      stage = ", pipeline stage " + std::to_string(st);
      chip_lane[cc] = (int)st;
    }
    const int alike = std::min(stage_chips, r.chips - c);  // the chips this one stands for when collapsed
    const std::string who = collapsed && alike > 1
                                ? "chips " + std::to_string(c) + "-" + std::to_string(c + alike - 1) + " (" + esc(r.chip) +
                                      stage + "; " + std::to_string(alike) +
                                      " alike, drawn once: simulation.trace_chips N draws the first N)"
                                : std::string(measured ? "rank " : "chip ") + std::to_string(c) + " (" + esc(r.chip) +
                                      stage + ")";
    meta("process_name", pid, 0, "name",
         "\"" + (!layout.process_name.empty() && cc == 0 ? esc(layout.process_name) : who) + "\"");
    meta("process_sort_index", pid, 0, "sort_index", std::to_string(pid));
    const int drawn = cc == 0 ? r.ranks_per_chip : 1;  // chip 0: every rank; others: their first (SPMD)
    for (int k = 0; k < drawn; ++k) {  // a track only for a rank that is drawn (no empty named tracks)
      std::string name = "rank " + std::to_string(c * r.ranks_per_chip + k) + " compute";
      if (drawn == 1 && r.ranks_per_chip > 1)
        name += " (ranks " + std::to_string(c * r.ranks_per_chip + 1) + "-" +
                std::to_string(c * r.ranks_per_chip + r.ranks_per_chip - 1) + " run the same, not drawn)";
      meta("thread_name", pid, k + 1, "name", "\"" + name + "\"");
      meta("thread_sort_index", pid, k + 1, "sort_index", std::to_string(k + 1));
    }
    // the other streams' tracks: collectives that overlap on one stream take the next free lane (slices nest)
    std::vector<int> tid(spans->size(), 0);
    std::map<std::string_view, std::vector<long long>> lane_end;  // stream -> each lane's end (ns)
    std::map<std::pair<std::string_view, size_t>, int> lane_tid;
    std::vector<size_t> order;
    for (size_t i = 0; i < spans->size(); ++i)
      if ((*spans)[i].stream != "compute") order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return (*spans)[a].start < (*spans)[b].start; });
    for (size_t i : order) {
      const SimSpan& s = (*spans)[i];
      const long long a = to_ns(s.start), b = std::max(a, to_ns(s.start + s.dur));
      auto& ends = lane_end[s.stream];
      size_t lane = 0;
      while (lane < ends.size() && ends[lane] > a) ++lane;
      if (lane == ends.size()) ends.push_back(b);
      else ends[lane] = b;
      auto it = lane_tid.find({s.stream, lane});
      if (it == lane_tid.end()) it = lane_tid.emplace(std::make_pair(s.stream, lane), 0).first;
      tid[i] = -1 - (int)lane;  // resolved below, once every lane of every stream is known
    }
    int next_tid = 1000;
    for (auto& [key, t] : lane_tid) {
      t = next_tid++;
      meta("thread_name", pid, t, "name",
           "\"" + esc(key.first) + (key.second ? " (lane " + std::to_string(key.second + 1) + ")" : "") + "\"");
      meta("thread_sort_index", pid, t, "sort_index", std::to_string(t));
    }
    for (size_t i : order) tid[i] = lane_tid.at({(*spans)[i].stream, (size_t)(-1 - tid[i])});
    for (size_t i = 0; i < spans->size(); ++i)
      if ((*spans)[i].stream == "compute") tid[i] = 1;  // the chip's first rank's track
    chip_tid[cc] = tid;
    // the step on every compute track: from its first slice to its last
    long long s0 = -1, s1 = 0;
    for (const SimSpan& s : *spans)
      if (s.stream == "compute") {
        s0 = s0 < 0 ? to_ns(s.start) : std::min(s0, to_ns(s.start));
        s1 = std::max(s1, to_ns(s.start + s.dur));
      }
    if (s0 < 0) s0 = 0;
    std::vector<bool> flow_in(spans->size(), false);
    std::vector<std::string> bind(spans->size());
    struct V1 {
      long long s_ts, f_ts;
      int s_tid;
      int64_t id;
    };
    std::vector<V1> v1;  // flows whose stall starts before the collective: an s / f pair (see trace.h)
    int64_t flow = 0;
    for (size_t i = 0; i < spans->size(); ++i) {
      const SimSpan& s = (*spans)[i];
      if (s.flow_to < 0 || s.flow_to >= (int64_t)spans->size()) continue;
      const SimSpan& w = (*spans)[(size_t)s.flow_to];
      const long long cs = to_ns(s.start), ce = std::max(cs, to_ns(s.start + s.dur));
      const long long ws = to_ns(w.start), we = std::max(ws, to_ns(w.start + w.dur));
      if (ws >= cs && bind[(size_t)s.flow_to].empty() && bind[i].empty()) {
        bind[i] = bind[(size_t)s.flow_to] = hex_id(pid, flow++);
        flow_in[(size_t)s.flow_to] = true;
      } else if (we > ws && ce >= cs) {
        v1.push_back({cs + (ce - cs) / 2, std::max(ws, we - 1), tid[i], (int64_t)(((uint64_t)pid << 32) | flow++)});
      }
    }
    for (int k = 0; k < drawn; ++k) {
      sep();
      o << "{\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << k + 1 << ",\"name\":\"ProfilerStep#" << step
        << "\",\"cat\":\"step\",\"ts\":" << us(s0) << ",\"dur\":" << us(s1 - s0) << "}";
      for (size_t i = 0; i < spans->size(); ++i) {
        const SimSpan& s = (*spans)[i];
        const bool compute = s.stream == "compute";
        if (k > 0 && !compute) continue;
        const long long a = to_ns(s.start), b = std::max(a, to_ns(s.start + s.dur));
        sep();
        o << "{\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << (compute ? k + 1 : tid[i]) << ",\"name\":\""
          << esc(s.name) << "\",\"cat\":\"" << s.category << "\",\"ts\":" << us(a) << ",\"dur\":" << us(b - a);
        if (k == 0 && !bind[i].empty())
          o << ",\"bind_id\":\"" << bind[i] << "\"," << (flow_in[i] ? "\"flow_in\":true" : "\"flow_out\":true");
        o << ",\"args\":{\"flops\":" << s.flops << ",\"bytes\":" << s.bytes;
        if (s.event >= 0) o << ",\"event\":" << s.event;
        if (s.launches > 1) o << ",\"launches\":" << s.launches;
        if (s.dep_kind != DepKind::none) o << ",\"waited_for\":\"" << dep_name(s.dep_kind) << "\"";
        if (s.group_seq >= 0)
          o << ",\"rank\":" << c * r.ranks_per_chip << ",\"group_ranks\":\"" << s.group_ranks << "\",\"group_seq\":" << s.group_seq;
        if (s.other_s >= 0) {  // side by side: the other timeline's time of this op, and the simulation's error
          const double meas = measured ? s.dur : s.other_s, simu = measured ? s.other_s : s.dur;
          o << (measured ? ",\"simulated_ms\":" : ",\"measured_ms\":") << s.other_s * 1e3;
          if (meas > 0) o << ",\"sim_error_pct\":" << 100.0 * (simu - meas) / meas;
        }
        o << "}}";
      }
    }
    for (const V1& f : v1) {
      sep();
      o << "{\"ph\":\"s\",\"id\":" << f.id << ",\"pid\":" << pid << ",\"tid\":" << f.s_tid
        << ",\"name\":\"waits\",\"cat\":\"dep\",\"ts\":" << us(f.s_ts) << "}";
      sep();
      o << "{\"ph\":\"f\",\"bp\":\"e\",\"id\":" << f.id << ",\"pid\":" << pid
        << ",\"tid\":1,\"name\":\"waits\",\"cat\":\"dep\",\"ts\":" << us(f.f_ts) << "}";
    }
  }
  // a Trainium core's engines (priced by engines, simulator/engines.h), under the first drawn chip: a row per
  // engine that ran something, each kernel a slice from its start for the time that engine was busy in it
  {
    const auto& spans = lane_spans(chip_lane[0]);
    static const char* names[5] = {"Tensor engine", "Vector engine", "Scalar engine", "GpSimd engine", "DMA queues"};
    for (int eng = 0; eng < 5; ++eng) {
      bool any = false;
      for (const SimSpan& s : spans) any = any || s.engine_busy[(size_t)eng] > 0;
      if (!any) continue;
      const int pid = chip_pid[0], tid = 800 + eng;
      meta("thread_name", pid, tid, "name", std::string("\"NeuronCore ") + names[eng] + " (rank " +
                                                 std::to_string(first_chip * r.ranks_per_chip) + ", per core)\"");
      meta("thread_sort_index", pid, tid, "sort_index", std::to_string(tid));
      for (const SimSpan& s : spans) {
        const double busy = s.engine_busy[(size_t)eng];
        if (busy <= 0 || s.dur <= 0) continue;
        const long long a = to_ns(s.start), b = std::max(a, std::min(to_ns(s.start + s.dur), to_ns(s.start + busy)));
        sep();
        o << "{\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << tid << ",\"name\":\"" << esc(s.name)
          << "\",\"cat\":\"engine\",\"ts\":" << us(a) << ",\"dur\":" << us(b - a) << ",\"args\":{\"busy_us\":"
          << busy * 1e6 << ",\"share_of_kernel\":" << busy / s.dur << "}}";
      }
    }
  }
  // utilization counters on the same axis, per drawn chip: memory by category (GiB), the compute stream's
  // achieved TFLOP/s, each communication stream's achieved GB/s, each network level's links busy (0 / 1)
  for (int cc = 0; cc < n_chips; ++cc) {
    const int pid = chip_pid[cc];
    const bool staged = !r.stages.empty();
    const auto& spans = lane_spans(chip_lane[cc]);
    const auto& samples = staged ? r.stages[(size_t)chip_lane[cc]].memory_samples : r.memory_samples;
    const auto& links = staged ? r.stages[(size_t)chip_lane[cc]].link_busy : r.link_busy;
    auto counter = [&](const std::string& name, long long ts, const std::string& args) {
      sep();
      o << "{\"ph\":\"C\",\"pid\":" << pid << ",\"name\":\"" << esc(name) << "\",\"ts\":" << us(ts)
        << ",\"args\":{" << args << "}}";
    };
    static const char* cats[kNumMemoryCategories] = {"parameters", "gradients", "optimizer", "activations",
                                                     "communication", "other"};
    for (const MemorySample& m : samples) {
      std::string a;
      for (int i = 0; i < kNumMemoryCategories; ++i)
        a += std::string(i ? "," : "") + "\"" + cats[i] + "\":" + fmt("%.4f", m.bytes[(size_t)i] / (1 << 30));
      counter("memory GiB", to_ns(m.t), a);
    }
    // rates as step functions: +rate at a slice's start, -rate at its end (overlapping slices add up)
    std::map<std::string, std::map<long long, double>> steps;
    for (const SimSpan& s : spans) {
      if (s.dur <= 0) continue;
      const bool compute = s.stream == "compute";
      const double rate = compute ? s.flops / s.dur / 1e12 : s.bytes / s.dur / 1e9;
      if (compute && s.category != "compute") continue;
      auto& st = steps[compute ? std::string("compute TFLOP/s") : std::string(s.stream) + " GB/s"];
      st[to_ns(s.start)] += rate;
      st[to_ns(s.start + s.dur)] -= rate;
    }
    for (const auto& [level, iv] : links) {
      auto& st = steps["link " + level + " busy"];
      for (const auto& [a, b] : iv) st[to_ns(a)] += 1, st[to_ns(b)] -= 1;
    }
    for (const auto& [name, st] : steps) {
      double v = 0;
      for (const auto& [ts, dv] : st) {
        v += dv;
        if (std::abs(v) < 1e-9) v = 0;
        counter(name, ts, "\"value\":" + fmt("%.4f", v));
      }
    }
  }
  // the scheduler's other dependencies (SimSpan::dep), one flow category per kind, from the slice waited for to
  // the slice that waited, where both are drawn: a collective after the kernel that issued it (data), queued
  // behind its stream's previous one (stream), held by the last of its ranks (collective); a pipeline receive
  // after its send (pipeline); a kernel the host held (host). Stalls on collectives have their arrows above.
  std::map<int, int> drawn_lane;  // lane -> the first drawn chip showing it
  for (int cc = n_chips - 1; cc >= 0; --cc) drawn_lane[chip_lane[cc]] = cc;
  auto span_of = [&](int cc) -> const std::vector<SimSpan>& { return lane_spans(chip_lane[cc]); };
  auto mid = [](const SimSpan& s) { return to_ns(s.start) + (std::max(0LL, to_ns(s.start + s.dur) - to_ns(s.start))) / 2; };
  int64_t typed = 0;
  for (int cc = 0; cc < n_chips; ++cc) {
    if (drawn_lane[chip_lane[cc]] != cc) continue;  // a lane's flows once, on its first drawn chip
    const auto& spans = span_of(cc);
    for (size_t i = 0; i < spans.size(); ++i) {
      const SimSpan& s = spans[i];
      if (!s.dep.valid() || s.dep_kind == DepKind::none) continue;
      const bool comm = s.stream != "compute";
      if (s.dep_kind == DepKind::stream && !comm) continue;  // kernels in order: adjacent on their track
      if (!comm && (s.dep_kind == DepKind::data || s.dep_kind == DepKind::prefetch) && s.dep.lane == chip_lane[cc])
        continue;  // a stall on a collective: its arrow is drawn above
      auto from = drawn_lane.find(s.dep.lane);
      if (from == drawn_lane.end()) continue;
      const auto& fspans = span_of(from->second);
      if (s.dep.span >= (int64_t)fspans.size()) continue;
      const SimSpan& d = fspans[(size_t)s.dep.span];
      const int64_t id = (int64_t)(((uint64_t)chip_pid[cc] << 32) | (uint64_t)(0x80000000LL + typed++));
      const std::string kind = dep_name(s.dep_kind);
      sep();
      o << "{\"ph\":\"s\",\"id\":" << id << ",\"pid\":" << chip_pid[from->second] << ",\"tid\":"
        << chip_tid[from->second][(size_t)s.dep.span] << ",\"name\":\"" << kind << "\",\"cat\":\"" << kind
        << "\",\"ts\":" << us(mid(d)) << "}";
      sep();
      o << "{\"ph\":\"f\",\"bp\":\"e\",\"id\":" << id << ",\"pid\":" << chip_pid[cc] << ",\"tid\":" << chip_tid[cc][i]
        << ",\"name\":\"" << kind << "\",\"cat\":\"" << kind << "\",\"ts\":" << us(mid(s)) << "}";
    }
  }
  // the critical path (critical_path.h) as a track of its own in the first chip's process: each segment named
  // after its slice (and stage), what it is charged to in its args
  if (!r.critical.segments.empty() && n_chips > 0) {
    const int pid = chip_pid[0], tid = 900;
    meta("thread_name", pid, tid, "name", "\"critical path (every stage, every stream)\"");
    meta("thread_sort_index", pid, tid, "sort_index", std::to_string(tid));
    for (const PathSegment& g : r.critical.segments) {
      const long long a = to_ns(g.start), b = std::max(a, to_ns(g.start + g.dur));
      if (b <= a) continue;
      std::string name = g.what;
      if (g.span.valid()) {
        const auto& spans = lane_spans(g.span.lane);
        if (g.span.span < (int64_t)spans.size() && g.what.rfind("waiting", 0) != 0)
          name = std::string(spans[(size_t)g.span.span].name);
        if (!r.stages.empty()) name += " [stage " + std::to_string(g.span.lane) + "]";
      }
      sep();
      o << "{\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << tid << ",\"name\":\"" << esc(name)
        << "\",\"cat\":\"critical_path\",\"ts\":" << us(a) << ",\"dur\":" << us(b - a) << ",\"args\":{\"charged_to\":\""
        << esc(g.what) << "\",\"lane\":" << g.span.lane << "}}";
    }
    // its hops between tracks (a kernel to the collective it issued, a collective to the stall it ended on
    // another stream, a send to the other stage) as flows of category critical_path, where both ends are drawn
    int64_t hop = 0;
    const PathSegment* prev = nullptr;
    for (const PathSegment& g : r.critical.segments) {
      if (!g.span.valid() || g.dur <= 0) continue;
      if (prev && (prev->span.lane != g.span.lane || prev->span.span != g.span.span)) {
        auto fa = drawn_lane.find(prev->span.lane), fb = drawn_lane.find(g.span.lane);
        if (fa != drawn_lane.end() && fb != drawn_lane.end()) {
          const int ca = fa->second, cb = fb->second;
          const int ta = chip_tid[(size_t)ca][(size_t)prev->span.span], tb = chip_tid[(size_t)cb][(size_t)g.span.span];
          if (chip_pid[(size_t)ca] != chip_pid[(size_t)cb] || ta != tb) {
            const long long sa = to_ns(prev->start), ea = std::max(sa, to_ns(prev->start + prev->dur));
            const long long sb = to_ns(g.start), eb = std::max(sb, to_ns(g.start + g.dur));
            const int64_t id = (int64_t)(((uint64_t)chip_pid[0] << 32) | (uint64_t)(0x60000000LL + hop++));
            sep();
            o << "{\"ph\":\"s\",\"id\":" << id << ",\"pid\":" << chip_pid[(size_t)ca] << ",\"tid\":" << ta
              << ",\"name\":\"critical path\",\"cat\":\"critical_path\",\"ts\":" << us(sa + (ea - sa) / 2) << "}";
            sep();
            o << "{\"ph\":\"f\",\"bp\":\"e\",\"id\":" << id << ",\"pid\":" << chip_pid[(size_t)cb]
              << ",\"tid\":" << tb << ",\"name\":\"critical path\",\"cat\":\"critical_path\",\"ts\":"
              << us(sb + (eb - sb) / 2) << "}";
          }
        }
      }
      prev = &g;
    }
  }
  o << "\n]}\n";
  o.flush();  // a full disk shows at the flush, not at the last <<
  TITAN_CHECK(o.good(), "trace: writing '", path, "' failed (disk full?)");
}

namespace {
nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  TITAN_CHECK(in.good(), "trace: cannot read '", path, "'");
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    TITAN_CHECK(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array(), "trace: '", path,
                "' is not a Chrome trace (an object with a traceEvents list)");
    return j;
  } catch (const nlohmann::json::exception& e) {
    fail("trace: '", path, "' is not valid JSON: ", e.what());
  }
}
}  // namespace

namespace {
// Merged measured ranks: each file's events moved onto the earliest file's clock (otherData.start_unix_s); the
// same collective on every member (args group_ranks and group_seq) linked: each member's slice annotated with
// the first and last arrival and the straggler (the member that issued it last), an arrow (category
// "collective") from the straggler's arrival to each member it held. Returns the summary lines.
std::vector<std::string> link_collectives(nlohmann::json& events, const std::vector<double>& file_start,
                                          const std::vector<size_t>& file_of) {
  double t0 = 0;
  bool any = false;
  for (double s : file_start)
    if (s > 0) t0 = any ? std::min(t0, s) : s, any = true;
  for (size_t i = 0; any && i < events.size(); ++i) {
    auto& e = events[i];
    const double s = file_start[file_of[i]];
    if (s > 0 && e.is_object() && e.contains("ts") && e["ts"].is_number())
      e["ts"] = std::round((e["ts"].get<double>() + (s - t0) * 1e6) * 1e3) / 1e3;  // whole nanoseconds
  }
  struct Member {
    size_t i;
    int rank;
    double ts;
  };
  std::map<std::pair<std::string, long long>, std::vector<Member>> same;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("args") || !e["args"].is_object()) continue;
    const auto& a = e["args"];
    if (!a.contains("group_seq") || !a["group_seq"].is_number_integer() || !a.contains("group_ranks") ||
        !a["group_ranks"].is_string() || !a.contains("rank") || !a["rank"].is_number_integer() ||
        !e.contains("ts") || !e["ts"].is_number() || !e.contains("pid") || !e.contains("tid"))
      continue;  // not a titan collective slice (a file from elsewhere): not linked
    same[{a["group_ranks"].get<std::string>(), a["group_seq"].get<long long>()}].push_back(
        {i, a["rank"].get<int>(), e["ts"].get<double>()});
  }
  std::map<int, std::pair<int, double>> last_of;  // rank -> (collectives it arrived last at, the spread summed)
  int linked = 0;
  int64_t flow = 0;
  nlohmann::json flows = nlohmann::json::array();
  for (auto& [key, m] : same) {
    if (m.size() < 2) continue;
    ++linked;
    const auto first = std::min_element(m.begin(), m.end(), [](auto& a, auto& b) { return a.ts < b.ts; });
    const auto last = std::max_element(m.begin(), m.end(), [](auto& a, auto& b) { return a.ts < b.ts; });
    const double spread_ms = (last->ts - first->ts) / 1e3;
    if (spread_ms > 0) {
      last_of[last->rank].first += 1;
      last_of[last->rank].second += spread_ms;
    }
    const nlohmann::json& straggler = events[last->i];
    for (const Member& x : m) {
      auto& a = events[x.i]["args"];
      a["first_arrival_rank"] = first->rank;
      a["straggler_rank"] = last->rank;
      a["arrival_spread_ms"] = spread_ms;
      a["waited_for_straggler_ms"] = (last->ts - x.ts) / 1e3;
      if (x.i == last->i) continue;
      const auto& e = events[x.i];
      const double a0 = e["ts"].get<double>(), a1 = a0 + e.value("dur", 0.0);
      const long long id = ((long long)straggler["pid"].get<long long>() << 32) | (0xC0000000LL + flow++);
      flows.push_back({{"ph", "s"}, {"id", id}, {"pid", straggler["pid"]}, {"tid", straggler["tid"]},
                       {"name", "last arrival"}, {"cat", "collective"}, {"ts", last->ts}});
      flows.push_back({{"ph", "f"}, {"bp", "e"}, {"id", id}, {"pid", e["pid"]}, {"tid", e["tid"]},
                       {"name", "last arrival"}, {"cat", "collective"}, {"ts", std::min(a1, std::max(a0, last->ts))}});
    }
  }
  for (auto& f : flows) events.push_back(std::move(f));
  std::vector<std::string> out;
  if (linked == 0) return out;
  std::vector<std::pair<int, std::pair<int, double>>> order(last_of.begin(), last_of.end());
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.second.second > b.second.second; });
  std::string line = "collectives linked across ranks: " + std::to_string(linked) + (any ? "" : " (no start times: each "
                     "rank's step drawn from 0)") + "; last to arrive:";
  for (size_t i = 0; i < order.size() && i < 4; ++i)
    line += (i ? ", rank " : " rank ") + std::to_string(order[i].first) + " at " + std::to_string(order[i].second.first) +
            " (held the first arrival " + fmt("%.2f", order[i].second.second) + " ms in all)";
  if (order.empty()) line += " none (every member issued each one at once)";
  else line += "; the straggler: rank " + std::to_string(order[0].first);
  out.push_back(line);
  return out;
}
}  // namespace

std::vector<std::string> merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output,
                                             int expect_world) {
  TITAN_CHECK(!inputs.empty(), "trace merge: no input files");
  nlohmann::json out = nlohmann::json::object();
  out["displayTimeUnit"] = "ms";
  nlohmann::json events = nlohmann::json::array(), ranks = nlohmann::json::array(), other = nlohmann::json::object();
  std::map<long long, std::string> owner;  // pid -> the file that holds it
  int world = 0;
  bool dist = false;
  std::vector<double> file_start;  // each file's otherData.start_unix_s (0: none)
  std::vector<size_t> file_of;     // each merged event's file
  for (const std::string& in : inputs) {
    nlohmann::json j = read_trace(in);
    const auto& od = j.contains("otherData") && j["otherData"].is_object() ? j["otherData"] : nlohmann::json();
    file_start.push_back(od.is_object() && od.contains("start_unix_s") && od["start_unix_s"].is_number()
                             ? od["start_unix_s"].get<double>()
                             : 0.0);
    std::set<long long> pids;
    for (auto& e : j["traceEvents"])
      if (e.is_object() && e.contains("pid") && e["pid"].is_number_integer()) pids.insert(e["pid"].get<long long>());
    for (long long p : pids) {
      auto [it, fresh] = owner.emplace(p, in);
      TITAN_CHECK(fresh, "trace merge: '", in, "' and '", it->second, "' both hold process ", p,
                  " (the same rank twice, or files of two jobs?)");
    }
    int file_world = 0;
    if (j.contains("distributedInfo") && j["distributedInfo"].is_object()) {
      const auto& d = j["distributedInfo"];
      dist = true;
      if (d.contains("rank") && d["rank"].is_number_integer()) ranks.push_back(d["rank"]);
      if (d.contains("ranks") && d["ranks"].is_array())
        for (const auto& r : d["ranks"]) ranks.push_back(r);
      if (d.contains("world_size") && d["world_size"].is_number_integer()) file_world = d["world_size"].get<int>();
    }
    TITAN_CHECK(expect_world <= 0 || file_world == expect_world, "trace merge: '", in, "' is a trace of a job of ",
                file_world, " ranks, not of this one (", expect_world, "): a file left from another run?");
    world = std::max(world, file_world);
    if (other.empty() && j.contains("otherData") && j["otherData"].is_object()) other = j["otherData"];
    for (auto& e : j["traceEvents"]) {
      events.push_back(std::move(e));
      file_of.push_back(file_start.size() - 1);
    }
  }
  std::vector<std::string> summary = link_collectives(events, file_start, file_of);
  other.erase("start_unix_s");  // the first file's; the merged events are on the earliest start's clock
  if (dist) out["distributedInfo"] = {{"backend", "mpi"}, {"ranks", ranks}, {"world_size", world}};
  other["merged_files"] = (int)inputs.size();
  out["otherData"] = other;
  out["traceEvents"] = std::move(events);
  std::ofstream o(output);
  TITAN_CHECK(o.good(), "trace merge: cannot write '", output, "'");
  o << out.dump() << "\n";
  o.flush();
  TITAN_CHECK(o.good(), "trace merge: writing '", output, "' failed (disk full?)");
  return summary;
}

std::vector<std::string> check_chrome_trace(const std::string& path) {
  const nlohmann::json j = read_trace(path);
  std::vector<std::string> bad;
  auto note = [&](const std::string& s) {
    if (bad.size() < 50) bad.push_back(s);
  };
  if (!j.contains("distributedInfo") || !j["distributedInfo"].is_object())
    note("no distributedInfo (rank, world_size) at the top level");
  // typed reads of an event's fields: a missing or mistyped field is `fallback`
  auto str = [](const nlohmann::json& e, const char* k) {
    return e.contains(k) && e[k].is_string() ? e[k].get<std::string>() : std::string();
  };
  auto num = [](const nlohmann::json& e, const char* k, double fallback) {
    return e.contains(k) && e[k].is_number() ? e[k].get<double>() : fallback;
  };
  auto integer = [](const nlohmann::json& e, const char* k) {
    return e.contains(k) && e[k].is_number_integer() ? e[k].get<long long>() : -1LL;
  };
  auto flag = [](const nlohmann::json& e, const char* k) { return e.contains(k) && e[k].is_boolean() && e[k].get<bool>(); };
  struct Slice {
    double ts, end;
    std::string name;
  };
  std::map<std::pair<long long, long long>, std::vector<Slice>> tracks;
  struct Bind {
    int out = 0, in = 0;
    double out_ts = 0, in_ts = 0;
  };
  std::map<std::string, Bind> binds;
  std::map<std::string, std::vector<std::tuple<char, long long, long long, double>>> flows;  // id -> (ph, pid, tid, ts)
  int steps = 0;
  size_t index = 0;
  for (const auto& e : j["traceEvents"]) {
    ++index;
    if (!e.is_object()) {
      note("event " + std::to_string(index) + " is not an object");
      continue;
    }
    const std::string ph = str(e, "ph"), name = str(e, "name");
    const long long pid = integer(e, "pid"), tid = integer(e, "tid");
    if (ph.empty()) note("event " + std::to_string(index) + " has no ph");
    if (pid < 1) note(ph + " event '" + name + "' has pid " + std::to_string(pid) + " (< 1)");
    const bool on_track = ph == "X" || ph == "B" || ph == "E" || ph == "s" || ph == "t" || ph == "f";
    if ((on_track || (ph == "M" && name == "thread_name")) && tid < 1)
      note(ph + " event '" + name + "' has tid " + std::to_string(tid) + " (< 1)");
    if (ph == "X") {
      const double ts = num(e, "ts", 0.0), dur = num(e, "dur", 0.0);
      tracks[{pid, tid}].push_back({ts, ts + dur, name});
      if (name.rfind("ProfilerStep#", 0) == 0) ++steps;
      if (e.contains("bind_id")) {
        const std::string id = e["bind_id"].is_string() ? e["bind_id"].get<std::string>() : e["bind_id"].dump();
        Bind& b = binds[id];
        if (flag(e, "flow_out")) ++b.out, b.out_ts = ts;
        if (flag(e, "flow_in")) ++b.in, b.in_ts = ts;
      }
    } else if (ph == "s" || ph == "f" || ph == "t") {
      const std::string id = e.contains("id") ? e["id"].dump() : "?";
      flows[id].push_back({ph[0], pid, tid, num(e, "ts", 0.0)});
      if (ph == "f" && str(e, "bp") != "e")
        note("flow " + id + ": its 'f' event has no \"bp\": \"e\" (it binds to the next slice, not the enclosing one)");
    }
  }
  if (steps == 0) note("no ProfilerStep# slice (trace-analysis tools find steps by it)");
  constexpr double eps = 1e-3;  // microseconds: the file's resolution
  for (auto& [key, v] : tracks) {
    std::sort(v.begin(), v.end(), [](const Slice& a, const Slice& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.end > b.end;
    });
    std::vector<const Slice*> open;
    for (const Slice& s : v) {
      while (!open.empty() && open.back()->end <= s.ts + eps) open.pop_back();
      if (!open.empty() && s.end > open.back()->end + eps)
        note("pid " + std::to_string(key.first) + " tid " + std::to_string(key.second) + ": '" + s.name + "' at " +
             fmt("%.3f", s.ts) + " us overlaps '" + open.back()->name + "' (until " + fmt("%.3f", open.back()->end) +
             " us) without nesting");
      open.push_back(&s);
    }
  }
  for (const auto& [id, b] : binds) {
    if (b.out != 1 || b.in != 1)
      note("bind_id " + id + ": " + std::to_string(b.out) + " flow_out and " + std::to_string(b.in) +
           " flow_in slices (one each expected)");
    else if (b.in_ts + eps < b.out_ts)
      note("bind_id " + id + ": its flow_in slice starts before its flow_out slice (viewers drop the arrow)");
  }
  auto on_slice = [&](long long pid, long long tid, double ts) {
    auto it = tracks.find({pid, tid});
    if (it == tracks.end()) return false;
    for (const Slice& s : it->second)
      if (s.ts - eps <= ts && ts <= s.end + eps) return true;
    return false;
  };
  for (const auto& [id, fs] : flows) {
    int starts = 0, ends = 0;
    for (const auto& [ph, pid, tid, ts] : fs) {
      starts += ph == 's';
      ends += ph == 'f';
      if (!on_slice(pid, tid, ts)) note("flow " + id + ": its '" + std::string(1, ph) + "' end is on no slice");
    }
    if (starts != 1 || ends != 1) note("flow id " + id + " has " + std::to_string(starts) + " starts and " +
                                       std::to_string(ends) + " ends (ids must be unique)");
  }
  return bad;
}

}  // namespace titan
