#include "src/train/simulate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <tuple>
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

namespace {
// One simulated rank's timeline: its compute stream, a stream per process group, the collectives in flight.
// Ranks of different pipeline stages run side by side (Schedule below): a receive waits for the matching
// send of the other stage, a collective whose group spans several simulated ranks starts when all of them
// have issued it.
struct Lane {
  int rank = 0, stage = 0;
  const std::vector<CostEvent>* events = nullptr;
  size_t next = 0;
  double tc = 0;  // compute stream clock
  std::map<std::string, double> stream_free;
  std::map<uint64_t, std::string> stream_of_group;
  struct Pending {
    double end;
    std::string kind;
    int64_t span;
    bool recv;  // a pipeline receive: waiting for it is bubble, not exposed communication
  };
  std::map<int64_t, Pending> inflight;
  struct Fused {
    double flops = 0, bytes = 0;
    int n = 0;
    std::string name;
  } fused;
  std::map<std::vector<int>, int64_t> collectives_seen;  // per member set: collectives issued (cross-rank matching)
  // per network level (by name): when this rank's transfers use its links (contention between groups)
  std::map<std::string, std::vector<std::pair<double, double>>> link_busy;
  bool registered = false;  // the collective at `next` has been announced to the other lanes
  SimResult r;              // this lane's timeline and sums
  double bubble_s = 0;      // pipeline: idle in the schedules' windows (set after the run)
  std::vector<double> marks;  // pipeline schedules: begin, end, begin, end, ... (compute clock)
  bool done() const { return next >= events->size(); }
};

class Schedule {
 public:
  Schedule(const ChipSpec& chip, const SystemSpec& sys, int rpc, ExecMode mode, double act_scale, double red_scale)
      : chip_(chip), sys_(sys), rpc_(rpc), mode_(mode), act_scale_(act_scale), red_scale_(red_scale) {}

  // Runs every lane to its end. Fails when the lanes wait on each other (a schedule that cannot finish).
  void run(std::vector<Lane>& lanes) {
    for (auto& l : lanes) simulated_.push_back(l.rank);
    std::sort(simulated_.begin(), simulated_.end());
    for (;;) {
      bool all = true, progress = false;
      for (auto& l : lanes) {
        const size_t before = l.next;
        advance(l);
        progress = progress || l.next != before;
        all = all && l.done();
      }
      if (all) break;
      TITAN_CHECK(progress, "simulation: the pipeline stages wait on each other forever (a receive without its send, "
                  "or a collective some stage never issues): the planned schedule cannot finish");
    }
    for (auto& l : lanes) {
      flush_fused(l);
      l.r.step_s = l.tc;
      for (auto& [s, t] : l.stream_free) l.r.step_s = std::max(l.r.step_s, t);
    }
  }

 private:
  void emit_kernel(Lane& l, const std::string& name, const std::string& cls, const Kernel& k) {
    const KernelTime kt = kernel_time(chip_, rpc_, k, mode_);
    double extra = 0;  // the part of the kernel that overlaps a collective runs slower (chip.comm_interference)
    if (chip_.comm_interference > 0) {
      double busy_until = l.tc;
      for (auto& [s, t] : l.stream_free) busy_until = std::max(busy_until, t);
      const double overlap = std::min(kt.seconds - kt.overhead_s, busy_until - l.tc);
      if (overlap > 0) extra = overlap * chip_.comm_interference / (1 - chip_.comm_interference);
    }
    SimResult& r = l.r;
    r.spans.push_back({"compute", name, "compute", l.tc, kt.seconds + extra, k.flops, k.bytes, -1, l.stage});
    l.tc += kt.seconds + extra;
    r.compute_s += kt.seconds + extra;
    r.compute_by_class[cls] += kt.seconds - kt.overhead_s;
    r.compute_by_class["launch overhead"] += kt.overhead_s;
    if (extra > 0) r.compute_by_class["comm interference"] += extra;
    ++r.kernels;
  }
  void flush_fused(Lane& l) {
    auto& f = l.fused;
    if (f.n == 0) return;
    Kernel k;
    k.flops = f.flops;
    k.bytes = f.bytes;
    const std::string name = f.n == 1 ? f.name : "fused(" + f.name + " +" + std::to_string(f.n - 1) + ")";
    f = Lane::Fused();
    emit_kernel(l, name, "elementwise", k);
  }
  // Places a transfer of `work` seconds (at the links' full rate) from t on a level whose links already
  // carry `busy` (intervals): it moves its bytes in the gaps, so bytes of concurrent transfers share the
  // level's bandwidth (the level is never more than fully used). Returns its end; adds its pieces to busy.
  static double fill_gaps(double t, double work, std::vector<std::pair<double, double>>& busy) {
    std::vector<std::pair<double, double>> pieces;
    while (work > 1e-15) {
      bool inside = false;
      double next = 1e300;
      for (const auto& [a, b] : busy) {
        if (a <= t && t < b) {
          inside = true;
          next = std::min(next, b);  // wait for this one to end
        } else if (a > t) {
          next = std::min(next, a);
        }
      }
      if (inside) {
        t = next;
        continue;
      }
      const double piece = std::min(work, next - t);
      pieces.emplace_back(t, t + piece);
      work -= piece;
      t += piece;
    }
    busy.insert(busy.end(), pieces.begin(), pieces.end());
    return t;
  }
  // Places a collective's levels one after another from `start` on this rank's links; returns its end.
  // Transfers of other groups on the same level's links at the same time share its bandwidth.
  double place_on_links(Lane& l, const CollectiveTime& ct, double start) {
    double t = start;
    for (const auto& lv : ct.levels) t = fill_gaps(t, lv.transfer_s, l.link_busy[lv.name]) + lv.latency_s;
    l.r.link_contention_s += std::max(0.0, (t - start) - ct.seconds);
    return t;
  }
  std::string stream_for(Lane& l, const CostEvent& e, const std::string& prefix) {
    // one stream per group (by id; the name only labels its lane)
    auto [sit, fresh] = l.stream_of_group.emplace(e.group.id, prefix + e.group.name);
    if (fresh)
      for (const auto& [id, label] : l.stream_of_group)
        if (id != e.group.id && label == sit->second) sit->second += "#" + std::to_string(l.stream_of_group.size());
    return sit->second;
  }
  void compute(Lane& l, const CostEvent& e) {
    Kernel k;
    k.kind = kind_of(e);
    k.flops = e.flops;
    k.bytes = e.bytes * (std::string(e.op) == "adamw" ? 1.0 : act_scale_);
    k.batch = e.gemm.batch;
    k.m = e.gemm.m;
    k.n = e.gemm.n;
    k.k = e.gemm.k;
    if (e.cls == KernelClass::PipelineMark) {  // a schedule's window opens / closes here
      flush_fused(l);
      l.marks.push_back(l.tc);
      return;
    }
    if (e.flops == 0 && e.bytes == 0) return;
    // a compiled step fuses it into the attention kernel (whose record holds its arithmetic)
    if (e.cls == KernelClass::EagerOnly && mode_ == ExecMode::Compiled) return;
    if (mode_ == ExecMode::Compiled && k.kind == KernelKind::Other && std::string(e.op) != "adamw") {
      // a fused chain reads its inputs and writes its output once: its
      // traffic is that of its largest member, its arithmetic the sum
      l.fused.flops += k.flops;
      l.fused.bytes = std::max(l.fused.bytes, k.bytes);
      if (l.fused.n++ == 0) l.fused.name = e.op;
      return;
    }
    flush_fused(l);
    const EagerDecomposition* d = mode_ == ExecMode::Eager ? eager_decomposition(e.op) : nullptr;
    if (d) {  // the eager kernels share the op's arithmetic and (multiplied) traffic
      Kernel part = k;
      part.flops = k.flops / d->kernels;
      part.bytes = k.bytes * d->traffic / d->kernels;
      for (int i = 0; i < d->kernels; ++i) emit_kernel(l, e.op, class_of(e), part);
    } else {
      emit_kernel(l, e.op, class_of(e), k);
    }
  }
  // A send / receive between pipeline stages. Returns false when the receive's send is not scheduled yet.
  bool p2p(Lane& l, const CostEvent& e) {
    const double bytes = e.bytes * act_scale_;
    const bool send = std::string(e.op) == "send";
    if (!send) {
      auto it = arrivals_.find({e.peer, l.rank, e.tag});
      if (it == arrivals_.end()) {
        TITAN_CHECK(std::binary_search(simulated_.begin(), simulated_.end(), e.peer), "simulation: rank ", l.rank,
                    " receives from rank ", e.peer, ", which the simulation does not play");
        return false;
      }
      l.inflight[e.comm_id] = {it->second, "recv", -1, true};
      return true;
    }
    flush_fused(l);
    const GroupSpan span = group_span(sys_, rpc_, {l.rank, e.peer});
    const CollectiveTime ct = p2p_time(chip_, sys_, bytes, span);
    const std::string stream = stream_for(l, e, "p2p:");
    const double start = std::max(l.tc, l.stream_free[stream]);
    const double end = ct.seconds > 0 ? place_on_links(l, ct, start) : start;
    l.stream_free[stream] = end;
    l.r.comm_busy_by_group[e.group.name] += end - start;
    algo_of_["send/recv over " + e.group.name] = ct.algorithm;
    int64_t idx = -1;
    if (ct.seconds > 0) {
      idx = (int64_t)l.r.spans.size();
      l.r.spans.push_back({stream, "send", "comm", start, end - start, 0, bytes, -1, l.stage});
    }
    arrivals_[{l.rank, e.peer, e.tag}] = end;
    l.inflight[e.comm_id] = {end, "send", idx, false};
    return true;
  }
  // A collective. Returns false while other simulated members of its group have not issued it yet.
  bool collective(Lane& l, const CostEvent& e) {
    flush_fused(l);
    TITAN_CHECK(e.group.world_ranks && !e.group.world_ranks->empty(), "simulation: collective ", e.op,
                " over group '", e.group.name, "' carries no members");
    const std::vector<int>& members = *e.group.world_ranks;
    std::vector<int> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> others;  // other simulated ranks in the group: the collective starts when all are there
    std::set_intersection(sorted.begin(), sorted.end(), simulated_.begin(), simulated_.end(),
                          std::back_inserter(others));
    others.erase(std::remove(others.begin(), others.end(), l.rank), others.end());
    double issued = l.tc;
    if (!others.empty()) {
      const int64_t k = l.collectives_seen[sorted];
      auto& arrived = issue_times_[{sorted, k}];
      if (!l.registered) {
        arrived[l.rank] = l.tc;
        l.registered = true;
      }
      for (int o : others)
        if (!arrived.count(o)) return false;
      for (auto& [rk, t] : arrived) issued = std::max(issued, t);
      ++l.collectives_seen[sorted];
      l.registered = false;
    }
    const Collective kind = parse_collective(e.op);
    const double scale = e.gradients ? red_scale_ : act_scale_;
    const GroupSpan span = group_span(sys_, rpc_, members);
    CollectiveTime ct = collective_time(chip_, sys_, rpc_, kind, e.bytes * scale, span);
    const std::string stream = stream_for(l, e, "comm:");
    // a free collective (group of one) neither queues nor occupies its stream
    const double start = ct.seconds > 0 ? std::max(issued, l.stream_free[stream]) : issued;
    const double end = ct.seconds > 0 ? place_on_links(l, ct, start) : start;
    if (ct.seconds > 0) l.stream_free[stream] = end;
    l.r.comm_busy_by_group[e.group.name] += end - start;
    algo_of_[std::string(e.op) + " over " + e.group.name + " (" + std::to_string(e.group.size()) + " ranks)"] =
        ct.algorithm;
    int64_t idx = -1;
    if (ct.seconds > 0) {
      idx = (int64_t)l.r.spans.size();
      l.r.spans.push_back({stream, e.op, "comm", start, end - start, 0, e.bytes * scale, -1, l.stage});
    }
    l.inflight[e.comm_id] = {end, e.op, idx, false};
    return true;
  }
  void wait(Lane& l, const CostEvent& e) {
    flush_fused(l);
    auto it = l.inflight.find(e.comm_id);
    if (it == l.inflight.end()) return;
    const Lane::Pending& p = it->second;
    if (p.end > l.tc) {
      const double w = p.end - l.tc;
      if (p.span >= 0) l.r.spans[p.span].flow_to = (int64_t)l.r.spans.size();
      l.r.spans.push_back({"compute", p.recv ? "bubble (wait recv)" : "wait " + p.kind, "idle", l.tc, w, 0, 0, -1,
                           l.stage});
      if (!p.recv) {
        l.r.exposed_comm_s += w;
        l.r.exposed_by_kind[p.kind] += w;
      }
      l.tc = p.end;
    }
    l.inflight.erase(it);
  }
  // Runs lane l until it ends or blocks on another lane.
  void advance(Lane& l) {
    while (!l.done()) {
      const CostEvent& e = (*l.events)[l.next];
      if (e.kind == CostEvent::Kind::Compute) {
        compute(l, e);
      } else if (e.kind == CostEvent::Kind::CommStart) {
        if (!(e.peer >= 0 ? p2p(l, e) : collective(l, e))) return;
      } else {
        wait(l, e);
      }
      ++l.next;
    }
  }

 public:
  std::map<std::string, std::string> algo_of_;

 private:
  const ChipSpec& chip_;
  const SystemSpec& sys_;
  int rpc_;
  ExecMode mode_;
  double act_scale_, red_scale_;
  std::vector<int> simulated_;  // world ranks played, sorted
  std::map<std::tuple<int, int, int64_t>, double> arrivals_;  // (sender, receiver, tag) -> when the data is there
  std::map<std::pair<std::vector<int>, int64_t>, std::map<int, double>> issue_times_;
};
}  // namespace

SimResult schedule_events(const std::vector<CostEvent>& events, const ChipSpec& chip, const SystemSpec& sys,
                          int ranks_per_chip, const std::string& mode) {
  std::vector<Lane> lanes(1);
  lanes[0].events = &events;
  Schedule sched(chip, sys, ranks_per_chip, parse_exec_mode(mode), 1.0, 1.0);
  sched.run(lanes);
  SimResult r = std::move(lanes[0].r);
  r.chip = chip.name;
  r.system = sys.name;
  r.mode = mode;
  return r;
}

SimResult simulate_step(const JobConfig& cfg, int world) {
  const auto& sc = cfg.simulation;
  SimResult r;
  SystemSpec sys;
  ChipSpec chip;
  load_target(cfg, world, sys, chip, r);  // refuse a world the hardware cannot hold before planning anything
  // one planned rank per pipeline stage (the first rank of each stage's slice of the world); SPMD within a stage
  const int64_t pp = cfg.parallelism.pipeline_parallel_degree;
  TITAN_CHECK(world % pp == 0, "simulation: world size ", world, " is not divisible by pipeline_parallel_degree ", pp);
  std::vector<StepPlan> plans;
  for (int64_t s = 0; s < pp; ++s) plans.push_back(plan_step(cfg, world, /*with_events=*/true, Device::Meta,
                                                              (int)(s * (world / pp))));
  const StepPlan& plan = plans[0];
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

  // ---- schedule: every stage's rank side by side ----
  std::vector<Lane> lanes(plans.size());
  for (size_t s = 0; s < plans.size(); ++s) {
    lanes[s].rank = plans[s].rank;
    lanes[s].stage = (int)s;
    lanes[s].events = &plans[s].events;
  }
  Schedule sched(chip, sys, rpc, mode, act_scale, red_scale);
  sched.run(lanes);
  // the step's figures are the first stage's (all of them without pp); its end is the last lane's
  const SimResult& first = lanes[0].r;
  r.spans = first.spans;
  r.compute_s = first.compute_s;
  r.exposed_comm_s = first.exposed_comm_s;
  r.exposed_by_kind = first.exposed_by_kind;
  r.comm_busy_by_group = first.comm_busy_by_group;
  r.link_contention_s = first.link_contention_s;
  r.compute_by_class = first.compute_by_class;
  r.kernels = first.kernels;
  for (auto& l : lanes) r.step_s = std::max(r.step_s, l.r.step_s);
  // the bubble: each schedule's window runs from the first stage's start to the last stage's end; a stage is
  // idle in it for whatever it does not compute (waiting on its neighbours, or done early)
  double window_total = 0;
  if (pp > 1) {
    const size_t n = lanes[0].marks.size();
    for (auto& l : lanes)
      TITAN_CHECK(l.marks.size() == n && n % 2 == 0, "simulation: the stages ran different numbers of schedules");
    std::vector<double> idle(lanes.size(), 0);
    for (size_t j = 0; j + 1 < n; j += 2) {
      double a = lanes[0].marks[j], b = lanes[0].marks[j + 1];
      for (auto& l : lanes) {
        a = std::min(a, l.marks[j]);
        b = std::max(b, l.marks[j + 1]);
      }
      window_total += b - a;
      for (size_t s = 0; s < lanes.size(); ++s) {
        double busy = 0;
        for (const SimSpan& sp : lanes[s].r.spans)
          if (sp.category == "compute" && sp.start >= a && sp.start < b) busy += std::min(sp.dur, b - sp.start);
        idle[s] += (b - a) - busy;
      }
    }
    for (size_t s = 0; s < lanes.size(); ++s) {
      lanes[s].bubble_s = idle[s];
      r.bubble_s = std::max(r.bubble_s, idle[s]);
    }
  }
  if (pp > 1)
    for (size_t s = 0; s < lanes.size(); ++s) {
      SimStage st;
      st.rank = lanes[s].rank;
      st.compute_s = lanes[s].r.compute_s;
      st.exposed_comm_s = lanes[s].r.exposed_comm_s;
      st.bubble_s = lanes[s].bubble_s;
      st.end_s = lanes[s].r.step_s;
      st.spans = std::move(lanes[s].r.spans);
      r.stages.push_back(std::move(st));
    }
  r.pipeline_s = window_total;
  r.bubble_fraction = window_total > 0 ? r.bubble_s / window_total : 0;
  for (auto& [k, v] : sched.algo_of_) r.algorithms += (r.algorithms.empty() ? "" : "; ") + k + ": " + v;

  // ---- throughput ----
  r.tokens_per_step = (double)plan.tokens_per_rank * (double)plan.dp_degree;
  r.tokens_per_s = r.step_s > 0 ? r.tokens_per_step / r.step_s : 0;
  r.tokens_per_s_per_chip = r.tokens_per_s / r.chips;
  r.tokens_per_s_per_rank = r.tokens_per_s / r.world;
  r.model_flops_per_token = plan.model_flops_per_token;
  r.tflops_per_chip = r.tokens_per_s * plan.model_flops_per_token / r.chips / 1e12;
  r.mfu = r.tflops_per_chip / chip.mfu_peak_tflops;
  double flops = 0;  // per rank, averaged over the stages
  for (const StepPlan& p : plans) flops += p.flops / (double)plans.size();
  r.hardware_flops_per_rank = flops;
  r.hfu = r.step_s > 0 ? flops * rpc / r.step_s / 1e12 / chip.mfu_peak_tflops : 0;

  // ---- memory per chip: each stage's peak; the step's is the fullest stage's ----
  for (size_t s = 0; s < plans.size(); ++s) {
    const auto& m = plans[s].memory;
    auto pk = [&](MemoryCategory c) { return (double)m.peak[(int)c] * rpc; };
    SimMemory mem;
    mem.params = pk(MemoryCategory::Parameters);
    mem.grads = pk(MemoryCategory::Gradients);
    mem.optimizer = pk(MemoryCategory::OptimizerState);
    mem.activations = pk(MemoryCategory::Activations) * act_scale;
    mem.communication = pk(MemoryCategory::Communication) * act_scale;
    mem.other = pk(MemoryCategory::Other);
    if (s < r.stages.size()) r.stages[s].memory = mem;
    if (s == 0 || mem.total() > r.memory.total()) r.memory = mem;
  }
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
  cm += " (of which " + f("%.3f", r.link_contention_s) + " s sharing links with other groups' transfers)";
  out.push_back(cm);
  out.push_back("sim collectives: " + r.algorithms);
  if (!r.stages.empty()) {
    std::string pl = "sim pipeline: bubble " + f("%.3f", r.bubble_s) + " s (" + f("%.1f", 100 * r.bubble_fraction) +
                     "% of the schedules' " + f("%.3f", r.pipeline_s) +
                     " s); per stage (compute / exposed communication / bubble / end / memory):";
    for (size_t s = 0; s < r.stages.size(); ++s) {
      const SimStage& st = r.stages[s];
      pl += " [" + std::to_string(s) + "] " + f("%.3f", st.compute_s) + " / " + f("%.3f", st.exposed_comm_s) + " / " +
            f("%.3f", st.bubble_s) + " / " + f("%.3f", st.end_s) + " s / " + gib(st.memory.total()) + " GiB";
    }
    out.push_back(pl);
  }
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
    // the chip's pipeline stage (its first rank's): a stage's chips share its timeline
    const std::vector<SimSpan>* spans = &r.spans;
    if (!r.stages.empty()) {
      const int per_stage = std::max(1, r.world / (int)r.stages.size());
      const size_t st = std::min(r.stages.size() - 1, (size_t)(c * r.ranks_per_chip / per_stage));
      spans = &r.stages[st].spans;
    }
    for (int k = 0; k < (cc == 0 ? r.ranks_per_chip : 1); ++k)  // chip 0: every rank; others: their first rank
      for (size_t i = 0; i < spans->size(); ++i) {
        const SimSpan& s = (*spans)[i];
        if (k > 0 && s.stream != "compute") continue;
        const int t = s.stream == "compute" ? k : tid[s.stream];
        sep();
        o << "{\"ph\":\"X\",\"pid\":" << c << ",\"tid\":" << t << ",\"name\":\"" << esc(s.name) << "\",\"cat\":\""
          << s.category << "\",\"ts\":" << f("%.3f", s.start * 1e6) << ",\"dur\":" << f("%.3f", s.dur * 1e6)
          << ",\"args\":{\"flops\":" << s.flops << ",\"bytes\":" << s.bytes << "}}";
        if (s.flow_to >= 0 && k == 0) {
          const SimSpan& w = (*spans)[s.flow_to];
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
