#include "src/train/simulate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "src/tensor/error.h"
#include "src/train/metrics.h"

namespace titan {

namespace {
using namespace titan::device;

std::string f(const char* fmt, double v) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

KernelKind kind_of(const CostEvent& e) {
  if (e.gemm.batch > 0) return KernelKind::Gemm;
  if (e.cls == KernelClass::Attention) return KernelKind::Attention;
  return KernelKind::Other;
}

// Eager mode prices each titan op as the kernels PyTorch's eager aten
// decomposition launches for it (TorchTitan's modules, bf16 activations with
// float32 upcasts in norms, RoPE and the loss): kernels launched and memory
// traffic relative to titan's single fused kernel. Ops not listed: 1 and 1.
struct EagerDecomposition {
  const char* op;
  int kernels;
  double traffic;
};
constexpr EagerDecomposition kEager[] = {
    {"rms_norm", 8, 8.0},             // float(), pow, mean, add eps, rsqrt, mul, type_as, mul weight
    {"rms_norm_backward", 10, 8.0},   // autograd of the above (float32 intermediates)
    {"layer_norm", 2, 2.0},           // native_layer_norm + cast
    {"layer_norm_backward", 3, 2.0},
    {"rope", 4, 5.0},                 // float(), view_as_complex * freqs, view_as_real, type_as
    {"rope_backward", 4, 5.0},
    {"cross_entropy", 3, 3.0},        // float(), log_softmax, nll_loss
    {"cross_entropy_backward", 3, 3.0},
    {"flex_attention_backward", 2, 1.2},  // flash backward + the dO*O row-sum preprocessing kernel
    {"embedding_backward", 2, 1.0},   // zeros + index_add
    {"softmax", 2, 2.0},
    {"softmax_backward", 2, 2.0},
};

const EagerDecomposition* eager_decomposition(const char* op) {
  for (const auto& d : kEager)
    if (std::string(d.op) == op) return &d;
  return nullptr;
}

std::string class_of(const CostEvent& e) {
  switch (kind_of(e)) {
    case KernelKind::Gemm: return "gemm";
    case KernelKind::Attention: return "attention";
    default: return std::string(e.op) == "adamw" ? "optimizer" : "elementwise";
  }
}
// Loads the target hardware and checks that `world` ranks fit on it (before any planning).
void load_target(const JobConfig& cfg, int world, SystemSpec& sys, ChipSpec& chip, SimResult& r) {
  const auto& sc = cfg.simulation;
  try {
    sys = load_system(sc.system);
    chip = load_chip(sc.chip.empty() ? sys.chip_name : sc.chip);
  } catch (const std::exception& e) {
    fail("simulation: ", e.what());
  }
  const int rpc = (int)sc.ranks_per_chip;
  TITAN_CHECK(world % rpc == 0, "simulation: world size ", world, " is not divisible by ranks_per_chip ", rpc,
              " (each chip holds ranks_per_chip ranks)");
  TITAN_CHECK(rpc <= chip.cores, "simulation: ranks_per_chip ", rpc, " exceeds the ", chip.cores, " cores of a ",
              chip.name, " (", chip.file, "); Trainium's LNC=2 gives cores / 2 ranks per chip");
  r.world = world;
  r.ranks_per_chip = rpc;
  r.chips = world / rpc;
  r.systems = (r.chips + sys.chips - 1) / sys.chips;
  const int64_t capacity = (int64_t)sys.chips * sc.num_systems;
  TITAN_CHECK(r.chips <= capacity, "simulation: ", world, " ranks at ", rpc, " ranks per chip need ", r.chips,
              " chips, but system '", sys.name, "' holds ", sys.chips, " chips x num_systems ", sc.num_systems, " = ",
              capacity, "; raise simulation.num_systems to ", r.systems,
              sys.has_scale_out ? "" : " (this system has no scale_out network: pick a larger system)",
              ", raise ranks_per_chip, or lower the world size");
  TITAN_CHECK(r.systems == 1 || sys.has_scale_out, "simulation: ", r.chips, " chips span ", r.systems,
              " systems of '", sys.name, "', which defines no scale_out network (", sys.file, ")");
}
}  // namespace

SimResult simulate_step(const JobConfig& cfg, int world) {
  const auto& sc = cfg.simulation;
  SimResult r;
  SystemSpec sys;
  ChipSpec chip;
  load_target(cfg, world, sys, chip, r);  // refuse a world the hardware cannot hold before planning anything
  const StepPlan plan = plan_step(cfg, world, /*with_events=*/true);
  for (const CostEvent& e : plan.events)
    if (e.kind == CostEvent::Kind::CommStart) r.collectives.push_back(e);
  const int rpc = (int)sc.ranks_per_chip;
  r.chip = chip.name;
  r.system = sys.name + (r.systems > 1 ? " x" + std::to_string(r.systems) : "");
  r.mode = sc.mode;
  r.layout = plan.layout;
  const ExecMode mode = parse_exec_mode(sc.mode);
  const double act_scale = sc.param_dtype == "bfloat16" ? 0.5 : 1.0;  // the meta run is float32
  const double red_scale = sc.reduce_dtype == "bfloat16" ? 0.5 : 1.0;

  // ---- schedule ----
  double tc = 0;  // compute stream clock
  std::map<std::string, double> stream_free;
  std::map<uint64_t, std::string> stream_of_group;
  struct Pending { double end; std::string kind; int64_t span; };
  std::map<int64_t, Pending> inflight;
  std::map<std::string, std::string> algo_of;
  struct Fused { double flops = 0, bytes = 0; int n = 0; std::string name; } fused;
  auto emit_kernel = [&](const std::string& name, const std::string& cls, const Kernel& k) {
    const KernelTime kt = kernel_time(chip, rpc, k, mode);
    double extra = 0;  // the part of the kernel that overlaps a collective runs slower (chip.comm_interference)
    if (chip.comm_interference > 0) {
      double busy_until = tc;
      for (auto& [s, t] : stream_free) busy_until = std::max(busy_until, t);
      const double overlap = std::min(kt.seconds - kt.overhead_s, busy_until - tc);
      if (overlap > 0) extra = overlap * chip.comm_interference / (1 - chip.comm_interference);
    }
    r.spans.push_back({"compute", name, "compute", tc, kt.seconds + extra, k.flops, k.bytes, -1});
    tc += kt.seconds + extra;
    r.compute_s += kt.seconds + extra;
    r.compute_by_class[cls] += kt.seconds - kt.overhead_s;
    r.compute_by_class["launch overhead"] += kt.overhead_s;
    if (extra > 0) r.compute_by_class["comm interference"] += extra;
    ++r.kernels;
  };
  auto flush_fused = [&]() {
    if (fused.n == 0) return;
    Kernel k;
    k.flops = fused.flops;
    k.bytes = fused.bytes;
    emit_kernel(fused.n == 1 ? fused.name : "fused(" + fused.name + " +" + std::to_string(fused.n - 1) + ")",
                "elementwise", k);
    fused = Fused();
  };
  for (const CostEvent& e : plan.events) {
    if (e.kind == CostEvent::Kind::Compute) {
      Kernel k;
      k.kind = kind_of(e);
      k.flops = e.flops;
      k.bytes = e.bytes * (std::string(e.op) == "adamw" ? 1.0 : act_scale);
      k.batch = e.gemm.batch;
      k.m = e.gemm.m;
      k.n = e.gemm.n;
      k.k = e.gemm.k;
      if (e.flops == 0 && e.bytes == 0) continue;
      // a compiled step fuses it into the attention kernel (whose record holds its arithmetic)
      if (e.cls == KernelClass::EagerOnly && mode == ExecMode::Compiled) continue;
      if (mode == ExecMode::Compiled && k.kind == KernelKind::Other && std::string(e.op) != "adamw") {
        // a fused chain reads its inputs and writes its output once: its
        // traffic is that of its largest member, its arithmetic the sum
        fused.flops += k.flops;
        fused.bytes = std::max(fused.bytes, k.bytes);
        if (fused.n++ == 0) fused.name = e.op;
        continue;
      }
      flush_fused();
      const EagerDecomposition* d = mode == ExecMode::Eager ? eager_decomposition(e.op) : nullptr;
      if (d) {  // the eager kernels share the op's arithmetic and (multiplied) traffic
        Kernel part = k;
        part.flops = k.flops / d->kernels;
        part.bytes = k.bytes * d->traffic / d->kernels;
        for (int i = 0; i < d->kernels; ++i) emit_kernel(e.op, class_of(e), part);
      } else {
        emit_kernel(e.op, class_of(e), k);
      }
    } else if (e.kind == CostEvent::Kind::CommStart) {
      flush_fused();
      const Collective kind = parse_collective(e.op);
      const double scale = e.gradients ? red_scale : act_scale;
      TITAN_CHECK(e.group.world_ranks && !e.group.world_ranks->empty(), "simulation: collective ", e.op,
                  " over group '", e.group.name, "' carries no members");
      const GroupSpan span = group_span(sys, rpc, *e.group.world_ranks);
      CollectiveTime ct = collective_time(chip, sys, rpc, kind, e.bytes * scale, span);
      // one stream per group (by id; the name only labels its lane)
      auto [sit, fresh] = stream_of_group.emplace(e.group.id, "comm:" + e.group.name);
      if (fresh)
        for (const auto& [id, label] : stream_of_group)
          if (id != e.group.id && label == sit->second) sit->second += "#" + std::to_string(stream_of_group.size());
      const std::string stream = sit->second;
      // a free collective (group of one) neither queues nor occupies its stream
      const double start = ct.seconds > 0 ? std::max(tc, stream_free[stream]) : tc;
      if (ct.seconds > 0) stream_free[stream] = start + ct.seconds;
      r.comm_busy_by_group[e.group.name] += ct.seconds;
      algo_of[std::string(e.op) + " over " + e.group.name + " (" + std::to_string(e.group.size()) + " ranks)"] =
          ct.algorithm;
      int64_t idx = -1;
      if (ct.seconds > 0) {
        idx = (int64_t)r.spans.size();
        r.spans.push_back({stream, e.op, "comm", start, ct.seconds, 0, e.bytes * scale, -1});
      }
      inflight[e.comm_id] = {start + ct.seconds, e.op, idx};
    } else {  // CommWait
      flush_fused();
      auto it = inflight.find(e.comm_id);
      if (it == inflight.end()) continue;
      if (it->second.end > tc) {
        const double wait = it->second.end - tc;
        if (it->second.span >= 0) r.spans[it->second.span].flow_to = (int64_t)r.spans.size();
        r.spans.push_back({"compute", "wait " + it->second.kind, "idle", tc, wait, 0, 0, -1});
        r.exposed_comm_s += wait;
        r.exposed_by_kind[it->second.kind] += wait;
        tc = it->second.end;
      }
      inflight.erase(it);
    }
  }
  flush_fused();
  r.step_s = tc;
  for (auto& [s, t] : stream_free) r.step_s = std::max(r.step_s, t);
  for (auto& [k, v] : algo_of) r.algorithms += (r.algorithms.empty() ? "" : "; ") + k + ": " + v;

  // ---- throughput ----
  r.tokens_per_step = (double)plan.tokens_per_rank * (double)plan.dp_degree;
  r.tokens_per_s = r.step_s > 0 ? r.tokens_per_step / r.step_s : 0;
  r.tokens_per_s_per_chip = r.tokens_per_s / r.chips;
  r.tokens_per_s_per_rank = r.tokens_per_s / r.world;
  r.model_flops_per_token = plan.model_flops_per_token;
  r.tflops_per_chip = r.tokens_per_s * plan.model_flops_per_token / r.chips / 1e12;
  r.mfu = r.tflops_per_chip / chip.mfu_peak_tflops;
  r.hardware_flops_per_rank = plan.flops;
  r.hfu = r.step_s > 0 ? plan.flops * rpc / r.step_s / 1e12 / chip.mfu_peak_tflops : 0;

  // ---- memory per chip ----
  const auto& m = plan.memory;
  auto pk = [&](MemoryCategory c) { return (double)m.peak[(int)c] * rpc; };
  r.memory.params = pk(MemoryCategory::Parameters);
  r.memory.grads = pk(MemoryCategory::Gradients);
  r.memory.optimizer = pk(MemoryCategory::OptimizerState);
  r.memory.activations = pk(MemoryCategory::Activations) * act_scale;
  r.memory.communication = pk(MemoryCategory::Communication) * act_scale;
  r.memory.other = pk(MemoryCategory::Other);
  r.hbm_bytes = chip.hbm_gib * (double)(1LL << 30);
  r.oom = r.memory.total() > r.hbm_bytes;
  if (r.oom) {
    std::ostringstream a;
    const double over = r.memory.total() - r.hbm_bytes;
    a << "over by " << f("%.1f", over / (1 << 30)) << " GiB; ";
    if (cfg.activation_checkpoint.mode != "full" && r.memory.activations > over)
      a << "activation_checkpoint.mode full would cut the " << f("%.1f", r.memory.activations / (1 << 30))
        << " GiB of activations; ";
    const double states = r.memory.params + r.memory.grads + r.memory.optimizer;
    if (plan.dp_degree > 0)
      a << "parameters + gradients + optimizer state (" << f("%.1f", states / (1 << 30))
        << " GiB) shrink with more data_parallel_shard ranks (more chips); ";
    a << "a smaller training.local_batch_size or seq_len shrinks activations; or a chip with more HBM";
    r.oom_advice = a.str();
  }
  return r;
}

std::vector<std::string> describe_simulation(const SimResult& r) {
  std::vector<std::string> out;
  auto gib = [](double b) { return f("%.2f", b / (1 << 30)); };
  out.push_back("simulated " + std::to_string(r.chips) + " x " + r.chip + " (" + r.system + "), " +
                std::to_string(r.world) + " ranks at " + std::to_string(r.ranks_per_chip) + " per chip, " + r.layout +
                ", " + r.mode + " mode");
  out.push_back("sim step: " + f("%.3f", r.step_s) + " s  tps: " + f("%.0f", r.tokens_per_s) + " (" +
                f("%.1f", r.tokens_per_s_per_chip) + " per chip)  tflops: " + f("%.1f", r.tflops_per_chip) +
                " per chip  mfu: " + f("%.2f", 100 * r.mfu) + "%  (hardware FLOPs incl. recompute: " +
                f("%.2f", 100 * r.hfu) + "%)");
  std::string cb = "sim time: compute " + f("%.3f", r.compute_s) + " s (";
  bool first = true;
  for (auto& [k, v] : r.compute_by_class) {
    cb += (first ? "" : ", ") + k + " " + f("%.3f", v);
    first = false;
  }
  cb += "), " + std::to_string(r.kernels) + " kernels; exposed communication " + f("%.3f", r.exposed_comm_s) + " s";
  if (!r.exposed_by_kind.empty()) {
    cb += " (";
    first = true;
    for (auto& [k, v] : r.exposed_by_kind) {
      cb += (first ? "" : ", ") + k + " " + f("%.3f", v);
      first = false;
    }
    cb += ")";
  }
  out.push_back(cb);
  std::string cm = "sim communication busy per stream:";
  for (auto& [g, v] : r.comm_busy_by_group) cm += " " + g + " " + f("%.3f", v) + " s";
  out.push_back(cm);
  out.push_back("sim collectives: " + r.algorithms);
  out.push_back("sim memory per chip: " + gib(r.memory.total()) + " / " + gib(r.hbm_bytes) + " GiB (parameters " +
                gib(r.memory.params) + ", gradients " + gib(r.memory.grads) + ", optimizer " +
                gib(r.memory.optimizer) + ", activations " + gib(r.memory.activations) + ", communication " +
                gib(r.memory.communication) + ", other " + gib(r.memory.other) + ")");
  if (r.oom) out.push_back("sim OUT OF MEMORY on " + r.chip + ": " + r.oom_advice);
  return out;
}

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
    o << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << c << ",\"args\":{\"name\":\""
      << (r.system == "measured" ? "rank " : "chip ") << c << " (" << esc(r.chip) << ")\"}}";
    for (int k = 0; k < r.ranks_per_chip; ++k) {
      sep();
      o << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << c << ",\"tid\":" << k << ",\"args\":{\"name\":\"rank "
        << c * r.ranks_per_chip + k << " compute\"}}";
    }
    for (auto& [s, t] : tid)
      if (s != "compute") {
        sep();
        o << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << c << ",\"tid\":" << t << ",\"args\":{\"name\":\""
          << esc(s) << "\"}}";
      }
    for (int k = 0; k < (cc == 0 ? r.ranks_per_chip : 1); ++k)  // chip 0: every rank; others: their first rank
      for (size_t i = 0; i < r.spans.size(); ++i) {
        const SimSpan& s = r.spans[i];
        if (k > 0 && s.stream != "compute") continue;
        const int t = s.stream == "compute" ? k : tid[s.stream];
        sep();
        o << "{\"ph\":\"X\",\"pid\":" << c << ",\"tid\":" << t << ",\"name\":\"" << esc(s.name) << "\",\"cat\":\""
          << s.category << "\",\"ts\":" << f("%.3f", s.start * 1e6) << ",\"dur\":" << f("%.3f", s.dur * 1e6)
          << ",\"args\":{\"flops\":" << s.flops << ",\"bytes\":" << s.bytes << "}}";
        if (s.flow_to >= 0 && k == 0) {
          const SimSpan& w = r.spans[s.flow_to];
          sep();
          o << "{\"ph\":\"s\",\"id\":" << flow << ",\"pid\":" << c << ",\"tid\":" << t << ",\"name\":\"waits\",\"cat\":\"dep\",\"ts\":"
            << f("%.3f", (s.start + s.dur) * 1e6 - 0.001) << "}";
          sep();
          o << "{\"ph\":\"f\",\"bp\":\"e\",\"id\":" << flow << ",\"pid\":" << c << ",\"tid\":0,\"name\":\"waits\",\"cat\":\"dep\",\"ts\":"
            << f("%.3f", (w.start + w.dur) * 1e6) << "}";
          ++flow;
        }
      }
  }
  o << "\n]}\n";
  o.flush();  // a full disk shows at the flush, not at the last <<
  TITAN_CHECK(o.good(), "trace: writing '", path, "' failed (disk full?)");
}

}  // namespace titan
