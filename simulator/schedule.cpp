#include "simulator/schedule.h"

#include <algorithm>
#include <array>
#include <deque>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include "simulator/critical_path.h"
#include "src/tensor/huge_pages.h"
#include "src/tensor/error.h"

namespace titan {

namespace {
using namespace titan::sim;

KernelKind kind_of(const CostEvent& e) {
  if (e.gemm.batch > 0) return KernelKind::Gemm;
  if (e.cls == KernelClass::Attention) return KernelKind::Attention;
  return KernelKind::Other;
}

// What compute_by_class sums, by index: the kernel classes (a slice's kernel_class), then the launch overhead
// and the collectives' interference.
enum ClassSum : size_t { kGemm, kAttention, kElementwise, kOptimizer, kLaunch, kInterference, kNumClassSums };
constexpr const char* kClassSums[kNumClassSums] = {"gemm",      "attention",       "elementwise",
                                                   "optimizer", "launch overhead", "comm interference"};

ClassSum class_of(const CostEvent& e) {
  switch (kind_of(e)) {
    case KernelKind::Gemm: return kGemm;
    case KernelKind::Attention: return kAttention;
    default: return e.cls == KernelClass::Optimizer ? kOptimizer : kElementwise;
  }
}
// One simulated rank's timeline: its compute stream, a stream per process group, the collectives in flight.
// Ranks of different pipeline stages run side by side (Schedule below): a receive waits for the matching
// send of the other stage, a collective whose group spans several simulated ranks starts when all of them
// have issued it.
struct Lane {
  int rank = 0, stage = 0;
  int index = 0;             // this lane's place among the scheduled ones (SpanRef::lane)
  int64_t last_compute = -1;  // the compute stream's last slice (its next one waits for it)
  std::map<std::string, int64_t> last_on_stream;  // each communication stream's last slice
  const EventStream* events = nullptr;
  EventStream::Cursor cursor;  // reads `events`
  const std::vector<double>* recv_arrival = nullptr;  // RankEvents::recv_arrival
  size_t next = 0;
  double tc = 0;  // compute stream clock
  double th = 0;  // host clock: when the host has issued everything up to `next` (an asynchronous stack)
  size_t host_charged = (size_t)-1;  // the event at `next` has been issued by the host (retries charge once)
  std::map<std::string, double> stream_free;
  std::map<uint64_t, std::string> stream_of_group;
  struct Pending {
    double end;
    std::string kind;
    int64_t span;
    bool recv;  // a pipeline receive: waiting for it is bubble, not exposed communication
    // a collective with members on other simulated stages: when the last of them issued it (-1: none). Waiting
    // until then is waiting for the other stages (bubble), only the rest exposed communication.
    double synced = -1;
    SpanRef last_arrival;  // synced: the last issuer's slice before it issued
    SpanRef from;          // a receive: its send's slice
    int64_t kernels = 0;   // the lane's kernels when issued (more by its wait: it was issued ahead, a prefetch)
  };
  std::map<int64_t, Pending> inflight;
  struct Fused {
    double flops = 0, bytes = 0;
    int n = 0;
    std::string name;
    int64_t event = -1;  // the first member's
  } fused;
  std::map<int, int64_t> collectives_seen;  // per member set (Group::member_set): collectives issued
  // What a process group is to this lane, worked out at its first transfer (by group id; a pipeline peer by
  // its rank): its member set's id, the other simulated members, where it spans the
  // system, its stream, the transfer times by operation and size. The same answer every time: a cache.
  struct Group {
    std::vector<int> others;
    int member_set = -1;
    GroupSpan span;
    std::string stream;
    std::map<std::pair<int, double>, CollectiveTime> times;  // (Collective, bytes) -> its time
    std::map<const char*, std::string> algo_key;             // op -> its entry in algo_of_
  };
  std::map<uint64_t, Group> groups;
  std::map<int, Group> peers;
  // point-to-point with peers the simulation does not play (a context-parallel ring's neighbours): this
  // rank's sends per (group, tag), their arrival times in order, and the receives matched to them so far
  std::map<std::pair<uint64_t, int>, std::vector<double>> sent;
  std::map<std::pair<uint64_t, int>, std::vector<SpanRef>> sent_span;  // the same sends' slices
  std::map<std::pair<uint64_t, int>, size_t> received;
  // per network level (by name): when this rank's transfers use its links (contention between groups); each
  // interval owned by a collective (its comm id, its stream) or a point-to-point transfer
  struct Use {
    double a, b;
    int64_t owner;  // the collective's comm id; -1 for a point-to-point transfer
    std::string stream;
  };
  // a level's uses: `live` may still meet a transfer placed from now on; `done` ended at or before the compute
  // clock, where every later transfer starts (the clock only moves forward), and is kept for the report only.
  // Retired when live doubles: the scan of each placement stays as short as what is in flight.
  struct Link {
    std::vector<Use> live;
    std::vector<std::pair<double, double>> done;
    size_t retire_at = 16;
  };
  std::map<std::string, Link> link_busy;
  bool registered = false;  // the collective at `next` has been announced to the other lanes
  double stream_free_before = 0;  // the stream's free time when the transfer being placed was issued
  SimResult r;              // this lane's timeline and sums
  // r.compute_by_class's sums while scheduling (a kernel adds to them without a map lookup), by ClassSum
  std::array<double, kNumClassSums> by_class{};
  std::array<bool, kNumClassSums> used_class{};  // a kernel of the class (any kernel: launch overhead) was emitted
  std::vector<double> marks;  // pipeline schedules: begin, end, begin, end, ... (compute clock)
  bool done() const { return next >= events->size(); }
};

class Schedule {
 public:
  Schedule(const ChipSpec& chip, const SystemSpec& sys, int rpc, ExecMode mode, double act_scale, double red_scale,
           bool fp32_compute)
      : chip_(chip), sys_(sys), rpc_(rpc), mode_(mode), act_scale_(act_scale), red_scale_(red_scale),
        fp32_compute_(fp32_compute),
        host_s_((mode == ExecMode::Eager      ? chip.eager_host_us
                 : mode == ExecMode::Compiled ? chip.compiled_host_us
                                              : 0.0) * 1e-6) {}

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
      for (size_t c = 0; c < l.by_class.size(); ++c)  // a class no kernel had stays out
        if (c == kInterference ? l.by_class[c] > 0 : l.used_class[c])
          l.r.compute_by_class[kClassSums[c]] += l.by_class[c];
      l.r.step_s = l.tc;
      for (auto& [s, t] : l.stream_free) l.r.step_s = std::max(l.r.step_s, t);
      for (auto& [level, link] : l.link_busy) {  // when each level's links carried this rank's transfers
        std::vector<std::pair<double, double>> iv = link.done;
        for (const auto& u : link.live) iv.push_back({u.a, u.b});
        std::sort(iv.begin(), iv.end());
        auto& merged = l.r.link_busy[level];
        for (const auto& [a, b] : iv) {
          if (!merged.empty() && a <= merged.back().second) merged.back().second = std::max(merged.back().second, b);
          else merged.push_back({a, b});
        }
      }
    }
  }

 private:
  // The host issues one kernel or collective (chip.*_host_us): its clock advances; the device cannot start
  // what the host has not issued yet.
  void host_issue(Lane& l) {
    if (host_s_ > 0) l.th += host_s_;
  }
  // Appends a slice of the compute stream: it waits for `dep` (kind), by default the stream's previous slice.
  void push_compute(Lane& l, SimSpan s, DepKind kind = DepKind::stream, SpanRef dep = {}) {
    s.dep = kind == DepKind::stream || !dep.valid() ? SpanRef{l.index, l.last_compute} : dep;
    s.dep_kind = s.dep.valid() ? kind : DepKind::none;
    l.last_compute = (int64_t)l.r.spans.size();
    l.r.spans.push_back(std::move(s));
  }
  // What a transfer issued by lane l at `issued` on `stream` (free from `free`) waited for: the previous transfer
  // of its stream when that ended last, else the last issuer (`other`, when another lane's), else the host, else
  // the kernel before it.
  void set_issue_dep(Lane& l, SimSpan& s, const std::string& stream, double issued, double free, double own,
                     SpanRef other) {
    auto prev = l.last_on_stream.find(stream);
    if (free > issued && prev != l.last_on_stream.end()) {
      s.dep = {l.index, prev->second};
      s.dep_kind = DepKind::stream;
    } else if (other.valid() && issued > own) {
      s.dep = other;
      s.dep_kind = DepKind::collective;
    } else if (l.th > l.tc && l.last_compute >= 0) {
      s.dep = {l.index, l.last_compute};
      s.dep_kind = DepKind::host;
    } else if (l.last_compute >= 0) {
      s.dep = {l.index, l.last_compute};
      s.dep_kind = DepKind::data;
    }
    l.last_on_stream[stream] = (int64_t)l.r.spans.size();
  }
  // The compute stream waits for the host (host-bound: the kernels are shorter than their issue). Returns
  // whether it did.
  bool wait_for_host(Lane& l) {
    if (l.th <= l.tc) return false;
    const double w = l.th - l.tc;
    push_compute(l, {"compute", "wait host", "host", l.tc, w, 0, 0, -1, l.stage}, DepKind::host,
                 SpanRef{l.index, l.last_compute});
    l.r.host_wait_s += w;
    l.tc = l.th;
    return true;
  }
  // again: one more launch of the op whose kernel is the compute stream's last slice (an eager op's next aten
  // kernel): it extends that slice when it starts where the slice ends (no wait for the host between them)
  void emit_kernel(Lane& l, const std::string& name, ClassSum cls, const Kernel& k, int64_t event,
                   bool again = false) {
    host_issue(l);
    const bool waited = wait_for_host(l);
    const KernelTime kt = kernel_time(chip_, rpc_, k, mode_);
    double extra = 0;  // the part of the kernel that overlaps a collective runs slower (chip.comm_interference)
    if (chip_.comm_interference > 0) {
      double busy_until = l.tc;
      for (auto& [s, t] : l.stream_free) busy_until = std::max(busy_until, t);
      const double overlap = std::min(kt.seconds - kt.overhead_s, busy_until - l.tc);
      if (overlap > 0) extra = overlap * chip_.comm_interference / (1 - chip_.comm_interference);
    }
    SimResult& r = l.r;
    if (again && !waited && l.last_compute >= 0) {  // the slice of its previous launch, ending now
      SimSpan& s = r.spans[(size_t)l.last_compute];
      s.dur += kt.seconds + extra;
      s.flops += k.flops;
      s.bytes += k.bytes;
      s.launch_s += (float)kt.overhead_s;
      for (size_t i = 0; i < kt.engine_busy.size(); ++i) s.engine_busy[i] += (float)kt.engine_busy[i];
      ++s.launches;
    } else {
      SimSpan span{"compute", name, "compute", l.tc, kt.seconds + extra, k.flops, k.bytes, -1, l.stage, event};
      span.kernel_class = kClassSums[cls];
      span.launch_s = (float)kt.overhead_s;
      for (size_t i = 0; i < kt.engine_busy.size(); ++i) span.engine_busy[i] = (float)kt.engine_busy[i];
      push_compute(l, std::move(span));
    }
    l.tc += kt.seconds + extra;
    r.compute_s += kt.seconds + extra;
    l.by_class[cls] += kt.seconds - kt.overhead_s;
    l.by_class[kLaunch] += kt.overhead_s;
    l.used_class[cls] = l.used_class[kLaunch] = true;
    l.by_class[kInterference] += extra;
    ++r.kernels;
  }
  void flush_fused(Lane& l) {
    auto& f = l.fused;
    if (f.n == 0) return;
    Kernel k;
    k.flops = f.flops;
    k.bytes = f.bytes;
    k.element_bytes = 4.0 * act_scale_;
    const std::string name = f.n == 1 ? f.name : "fused(" + f.name + " +" + std::to_string(f.n - 1) + ")";
    const int64_t event = f.n == 1 ? f.event : -1;
    f = Lane::Fused();
    emit_kernel(l, name, kElementwise, k, event);
  }
  // Places a transfer of `work` seconds (at the links' full rate) from t on a level whose links already
  // carry `busy`; adds its pieces to busy and returns its end. The level is never more than fully used:
  //  - a collective moves its bytes in the gaps (concurrent collectives of different groups take the level
  //    in turns, which ends both when sharing it would);
  //  - a point-to-point transfer (a pipeline stage's activations or gradients) runs in the gaps and, where
  //    a collective holds the level, beside it at half the rate each (NCCL's channels progress together:
  //    they share the bandwidth, not a queue): the collective, still in flight, ends as much later as the
  //    transfer moved beside it. Point-to-point transfers take the level in turns among themselves.
  double fill_gaps(Lane& l, double t, double work, Lane::Link& link, int64_t owner, const std::string& stream) {
    if (link.live.size() >= link.retire_at) {  // t >= l.tc: a use that ended by then is passed over below
      std::vector<Lane::Use> keep;
      for (auto& u : link.live)
        if (u.b <= l.tc) link.done.push_back({u.a, u.b});
        else keep.push_back(std::move(u));
      link.live = std::move(keep);
      link.retire_at = std::max<size_t>(16, 2 * link.live.size());
    }
    std::vector<Lane::Use>& busy = link.live;
    const bool p2p = owner < 0;
    std::vector<Lane::Use> pieces;
    std::map<int64_t, double> delayed;  // collective -> the seconds of its bytes moved later
    while (work > 1e-15) {
      const Lane::Use* turn = nullptr;  // a use that excludes this transfer at t
      const Lane::Use* share = nullptr;  // a collective this point-to-point transfer runs beside
      double next = 1e300;
      for (const auto& u : busy) {
        if (u.a <= t && t < u.b) {
          if (p2p && u.owner >= 0) share = &u;
          else turn = &u;
          next = std::min(next, u.b);
        } else if (u.a > t) {
          next = std::min(next, u.a);
        }
      }
      if (turn) {
        t = next;  // wait for it to end
        continue;
      }
      const double rate = share ? 0.5 : 1.0;
      const double span = std::min(work / rate, next - t);
      pieces.push_back({t, t + span, owner, stream});
      if (share) delayed[share->owner] += span * rate;
      work -= span * rate;
      t += span;
    }
    busy.insert(busy.end(), pieces.begin(), pieces.end());
    for (const auto& [id, s] : delayed) {
      auto it = l.inflight.find(id);
      if (it == l.inflight.end()) continue;  // waited for already (cannot be: it overlapped this transfer)
      Lane::Pending& p = it->second;
      Lane::Use* last = nullptr;  // the collective's last piece on this level moves its end by s
      for (auto& u : busy)
        if (u.owner == id && (!last || u.b > last->b)) last = &u;
      if (last) last->b += s;
      const std::string& its = last ? last->stream : stream;
      if (l.stream_free[its] == p.end) l.stream_free[its] += s;  // what queues behind it on its stream
      if (p.span >= 0) l.r.spans[p.span].dur += s;
      p.end += s;
      l.r.link_contention_s += s;
    }
    return t;
  }
  // Places a transfer's levels one after another from `start` on this rank's links; returns its end.
  // owner: the collective's comm id (-1: a point-to-point transfer).
  double place_on_links(Lane& l, const CollectiveTime& ct, double start, int64_t owner, const std::string& stream) {
    double t = start;
    for (const auto& lv : ct.levels)
      t = fill_gaps(l, t, lv.transfer_s, l.link_busy[lv.name], owner, stream) + lv.latency_s;
    l.r.link_contention_s += std::max(0.0, (t - start) - ct.seconds);
    return t;
  }
  // The lane's view of a collective's group (Lane::Group), worked out at its first collective.
  Lane::Group& group_of(Lane& l, const CostEvent& e) {
    auto [it, first] = l.groups.try_emplace(e.group.id);
    Lane::Group& g = it->second;
    if (!first) return g;
    const std::vector<int>& members = *e.group.world_ranks;
    std::vector<int> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    std::set_intersection(sorted.begin(), sorted.end(), simulated_.begin(), simulated_.end(),
                          std::back_inserter(g.others));
    g.others.erase(std::remove(g.others.begin(), g.others.end(), l.rank), g.others.end());
    g.member_set = member_sets_.try_emplace(std::move(sorted), (int)member_sets_.size()).first->second;
    g.span = group_span(sys_, rpc_, members);
    g.stream = stream_for(l, e, "comm:");
    return g;
  }
  const std::string& stream_for(Lane& l, const CostEvent& e, const std::string& prefix) {
    // one stream per group (by id; the name only labels its lane)
    auto [sit, fresh] = l.stream_of_group.emplace(e.group.id, prefix + e.group.name);
    if (fresh)
      for (const auto& [id, label] : l.stream_of_group)
        if (id != e.group.id && label == sit->second) sit->second += "#" + std::to_string(l.stream_of_group.size());
    return sit->second;
  }
  void compute(Lane& l, const CostEvent& e) {
    add_memory_sample(l.r.memory_samples, l.tc, e.memory);  // the memory over the step
    Kernel k;
    k.kind = kind_of(e);
    k.flops = e.flops;
    k.bytes = e.bytes * (e.cls == KernelClass::Optimizer ? 1.0 : act_scale_);  // fp32 state either way
    k.batch = e.gemm.batch;
    k.m = e.gemm.m;
    k.n = e.gemm.n;
    k.k = e.gemm.k;
    k.precision = fp32_compute_ && e.gemm.precision == GemmPrecision::high ? GemmPrecision::fp32 : e.gemm.precision;
    k.split_accumulation = e.gemm.split_accumulation;
    if ((k.precision == GemmPrecision::fp8 || k.precision == GemmPrecision::mxfp8) && k.m > 0 && k.n > 0 && k.k > 0) {
      // an FP8 GEMM reads its operands as one-byte codes (the meta step's float32 stand-ins are not what moves)
      // and writes its output in the activation dtype
      const double b = (double)std::max<int64_t>(1, e.gemm.batch);
      k.bytes = b * ((double)k.m * k.k + (double)k.k * k.n + (double)k.m * k.n * 4.0 * act_scale_);
    }
    k.element_bytes = e.cls == KernelClass::Optimizer ? 4.0 : 4.0 * act_scale_;
    k.attention = e.attention;
    if (e.cls == KernelClass::HostSync) {  // the host waits for the device to get here
      flush_fused(l);
      l.th = std::max(l.th, l.tc);
      return;
    }
    if (e.cls == KernelClass::PipelineMark) {  // a schedule's window opens / closes here
      flush_fused(l);
      l.marks.push_back(l.tc);
      return;
    }
    if (e.flops == 0 && e.bytes == 0) return;
    // a compiled step fuses it into the attention kernel (whose record holds its arithmetic)
    if (e.cls == KernelClass::EagerOnly && mode_ != ExecMode::Eager) return;
    if (mode_ != ExecMode::Eager && k.kind == KernelKind::Other && e.cls != KernelClass::Optimizer) {
      // a fused chain reads its inputs and writes its output once: its
      // traffic is that of its largest member, its arithmetic the sum
      l.fused.flops += k.flops;
      l.fused.bytes = std::max(l.fused.bytes, k.bytes);
      if (l.fused.n++ == 0) l.fused.name = e.op, l.fused.event = (int64_t)l.next;
      return;
    }
    flush_fused(l);
    if (k.kind == KernelKind::Attention && chip_.attention_materialized) {  // matmul - softmax - matmul, one slice
      const std::vector<Kernel> parts = materialized_attention(k, chip_.attention_dropout, mode_);
      for (size_t i = 0; i < parts.size(); ++i) emit_kernel(l, e.op, class_of(e), parts[i], (int64_t)l.next, i > 0);
      return;
    }
    // eager mode: the kernels PyTorch's eager aten decomposition launches for the op, as the op declared
    // them (EagerSplit: launches sharing its arithmetic, multiplied traffic); compiled mode: one
    const EagerSplit d = mode_ == ExecMode::Eager ? e.eager : EagerSplit{};
    if (d.kernels > 1 || d.traffic != 1.0) {
      Kernel part = k;
      part.flops = k.flops / d.kernels;
      part.bytes = k.bytes * d.traffic / d.kernels;
      part.attention.pairs = k.attention.pairs / d.kernels;  // each launch its share of the tiles
      for (int i = 0; i < d.kernels; ++i) emit_kernel(l, e.op, class_of(e), part, (int64_t)l.next, i > 0);
    } else {
      emit_kernel(l, e.op, class_of(e), k, (int64_t)l.next);
    }
  }
  // A send / receive between pipeline stages. Returns false when the receive's send is not scheduled yet.
  bool p2p(Lane& l, const CostEvent& e) {
    const double bytes = priced_comm_bytes(e, act_scale_, red_scale_);
    if (!e.send) {
      if (!std::binary_search(simulated_.begin(), simulated_.end(), e.peer)) {
        // a peer alike this rank (the ranks the simulation plays once, e.g. a context-parallel ring): its
        // k-th message of this tag arrives when this rank's own k-th one does; waiting for it is exposed
        // communication, not a bubble
        if (l.recv_arrival && l.next < l.recv_arrival->size() && (*l.recv_arrival)[l.next] >= 0) {
          l.inflight[e.comm_id] = {(*l.recv_arrival)[l.next], "recv", -1, true};  // when it arrived, measured
          return true;
        }
        const auto key = std::make_pair(e.group.id, e.tag);
        const size_t k = l.received[key];
        const auto& mine = l.sent[key];
        TITAN_CHECK(k < mine.size(), "simulation: rank ", l.rank, " receives message ", k + 1, " (tag ", e.tag,
                    ") over '", e.group.name, "' from rank ", e.peer, ", which the simulation does not play, before "
                    "sending its own: only a symmetric exchange (each rank sends before it receives) is priced");
        l.received[key] = k + 1;
        Lane::Pending p{mine[k], "recv", -1, false};
        p.from = l.sent_span[key][k];  // its own send's: the peer's is alike
        l.inflight[e.comm_id] = p;
        return true;
      }
      // the oldest message of this (sender, receiver, tag) not yet received, as MPI matches them: the tags repeat
      // in every schedule of a step (gradient accumulation), and a receive of schedule j + 1 must not take
      // schedule j's message (before 2026-12-05 it did: the last stage ran ahead through every schedule)
      auto it = arrivals_.find({e.peer, l.rank, e.tag});
      if (it == arrivals_.end() || it->second.empty()) return false;
      Lane::Pending p{it->second.front().first, "recv", -1, true};
      p.from = it->second.front().second;
      it->second.pop_front();
      l.inflight[e.comm_id] = p;
      return true;
    }
    flush_fused(l);
    host_issue(l);
    auto [pit, first] = l.peers.try_emplace(e.peer);
    Lane::Group& g = pit->second;
    if (first) g.span = group_span(sys_, rpc_, {l.rank, e.peer});
    auto [tit, fresh] = g.times.try_emplace({-1, bytes});
    if (fresh) tit->second = p2p_time(chip_, sys_, bytes, g.span);
    const CollectiveTime& ct = tit->second;
    const std::string& stream = stream_for(l, e, "p2p:");
    l.stream_free_before = l.stream_free[stream];
    const double start = std::max({l.tc, l.th, l.stream_free_before});
    const double end = ct.seconds > 0 ? place_on_links(l, ct, start, -1, stream) : start;
    l.stream_free[stream] = end;
    l.r.comm_busy_by_group[e.group.name] += end - start;
    algo_of_["send/recv over " + e.group.name] = ct.algorithm;
    int64_t idx = -1;
    if (ct.seconds > 0) {
      idx = (int64_t)l.r.spans.size();
      SimSpan sp{stream, "send", "comm", start, end - start, 0, bytes, -1, l.stage, (int64_t)l.next};
      set_issue_dep(l, sp, stream, std::max(l.tc, l.th), l.stream_free_before, std::max(l.tc, l.th), {});
      l.r.spans.push_back(std::move(sp));
    }
    // the slice a receive waits for: the send's, or (a free transfer) the kernel before it
    const SpanRef sent_at = idx >= 0 ? SpanRef{l.index, idx} : SpanRef{l.index, l.last_compute};
    arrivals_[{l.rank, e.peer, e.tag}].push_back({end, sent_at});
    l.sent[{e.group.id, e.tag}].push_back(end);
    l.sent_span[{e.group.id, e.tag}].push_back(sent_at);
    l.inflight[e.comm_id] = {end, "send", idx, false};
    return true;
  }
  // A collective. Returns false while other simulated members of its group have not issued it yet.
  bool collective(Lane& l, const CostEvent& e) {
    flush_fused(l);
    TITAN_CHECK(e.group.world_ranks && !e.group.world_ranks->empty(), "simulation: collective ", e.op,
                " over group '", e.group.name, "' carries no members");
    Lane::Group& g = group_of(l, e);
    const std::vector<int>& members = *e.group.world_ranks;
    const std::vector<int>& others = g.others;  // other simulated ranks in the group: it starts when all are there
    if (l.host_charged != l.next) {  // issued by the host once, however often a retry comes back here
      if (members.size() > 1) host_issue(l);  // a group of one launches nothing
      l.host_charged = l.next;
    }
    const double own = std::max(l.tc, l.th);  // after the compute stream's work before it, once the host issued it
    double issued = own, synced = -1;
    SpanRef last;  // the last member's slice when it issued (another lane's when it came last)
    if (!others.empty()) {
      const int64_t k = l.collectives_seen[g.member_set];
      auto& arrived = issue_times_[{g.member_set, k}];
      if (!l.registered) {
        arrived[l.rank] = {own, SpanRef{l.index, l.last_compute}};
        l.registered = true;
      }
      for (int o : others)
        if (!arrived.count(o)) return false;
      for (auto& [rk, t] : arrived)
        if (t.first > issued) issued = t.first, last = t.second;
      synced = issued;
      ++l.collectives_seen[g.member_set];
      l.registered = false;
    }
    const Collective kind = parse_collective(e.op);
    const double bytes = priced_comm_bytes(e, act_scale_, red_scale_);
    auto [tit, fresh] = g.times.try_emplace({(int)kind, bytes});
    if (fresh) tit->second = collective_time(chip_, sys_, rpc_, kind, bytes, g.span);
    const CollectiveTime& ct = tit->second;
    const std::string& stream = g.stream;
    // a free collective (group of one) neither queues nor occupies its stream
    const double free = l.stream_free[stream];
    const double start = ct.seconds > 0 ? std::max(issued, free) : issued;
    const double end = ct.seconds > 0 ? place_on_links(l, ct, start, e.comm_id, stream) : start;
    if (ct.seconds > 0) l.stream_free[stream] = end;
    l.r.comm_busy_by_group[e.group.name] += end - start;
    auto [kit, named] = g.algo_key.try_emplace(e.op);
    if (named) kit->second = std::string(e.op) + " over " + e.group.name + " (" + std::to_string(e.group.size()) + " ranks)";
    algo_of_[kit->second] = ct.algorithm;
    int64_t idx = -1;
    if (ct.seconds > 0) {
      idx = (int64_t)l.r.spans.size();
      SimSpan sp{stream, e.op, "comm", start, end - start, 0, bytes, -1, l.stage, (int64_t)l.next};
      set_issue_dep(l, sp, stream, issued, free, own, last);
      l.r.spans.push_back(std::move(sp));
    }
    Lane::Pending p{end, e.op, idx, false, synced};
    p.last_arrival = last;
    p.kernels = l.r.kernels;
    l.inflight[e.comm_id] = p;
    return true;
  }
  void wait(Lane& l, const CostEvent& e) {
    flush_fused(l);
    auto it = l.inflight.find(e.comm_id);
    if (it == l.inflight.end()) return;
    const Lane::Pending& p = it->second;
    if (!p.recv && p.synced > l.tc) {  // the other stages are not there yet (a stage-spanning collective after
                                       // the pipeline: the loss or gradient-norm all-reduce): their bubble
      const double w = std::min(p.synced, p.end) - l.tc;
      push_compute(l, {"compute", "wait stages", "bubble", l.tc, w, 0, 0, -1, l.stage}, DepKind::collective,
                   p.last_arrival);
      l.tc += w;
    }
    if (p.end > l.tc) {
      const double w = p.end - l.tc;
      if (p.span >= 0) l.r.spans[p.span].flow_to = (int64_t)l.r.spans.size();
      // what it waited for: the send (a receive), or the collective (issued ahead: a prefetch)
      const SpanRef dep = p.recv || p.span < 0 ? p.from : SpanRef{l.index, p.span};
      const DepKind kind = p.recv                  ? DepKind::pipeline
                           : p.from.valid()        ? DepKind::data  // a symmetric peer's message: like its own send
                           : l.r.kernels > p.kernels ? DepKind::prefetch
                                                     : DepKind::data;
      push_compute(l, {"compute", p.recv ? "wait recv" : "wait " + p.kind, p.recv ? "bubble" : "idle", l.tc, w, 0, 0,
                       -1, l.stage},
                   kind, dep);
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
      const CostEvent& e = l.cursor.at(l.next);
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
  bool fp32_compute_;
  double host_s_;  // the host's time to issue one kernel or collective (0: never holds the device back)
  std::vector<int> simulated_;  // world ranks played, sorted
  // (sender, receiver, tag) -> when the data is there, and the send's slice
  std::map<std::tuple<int, int, int64_t>, std::deque<std::pair<double, SpanRef>>> arrivals_;  // sent, not yet received
  // (members, k) -> each simulated member's issue time of its k-th collective over them, and its slice then
  std::map<std::pair<int, int64_t>, std::map<int, std::pair<double, SpanRef>>> issue_times_;
  std::map<std::vector<int>, int> member_sets_;  // a group's members (sorted) -> their set's id, across lanes
};
}  // namespace

std::vector<RankTimeline> schedule_ranks(const std::vector<RankEvents>& ranks, const ChipSpec& chip,
                                         const SystemSpec& sys, int rpc, ExecMode mode, double act_scale,
                                         double red_scale, bool fp32_compute, std::string* algorithms) {
  std::vector<Lane> lanes(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    lanes[i].rank = ranks[i].rank;
    lanes[i].stage = ranks[i].stage;
    lanes[i].events = ranks[i].events;
    lanes[i].cursor = EventStream::Cursor(ranks[i].events);
    lanes[i].recv_arrival = ranks[i].recv_arrival;
    lanes[i].index = (int)i;
    // the timeline's slices at most: an eager op's launches (a materialized attention's six kernels) and a host
    // wait before each; a transfer; two waits
    size_t most = 0;
    for (const CostEvent& e : *ranks[i].events)
      most += e.kind == CostEvent::Kind::Compute
                  ? 2 * (size_t)std::max(chip.attention_materialized && e.attention.scores > 0 ? 6 : 1, e.eager.kernels)
              : e.kind == CostEvent::Kind::CommStart ? 1
                                                     : 2;
    lanes[i].r.spans.reserve(most);  // capacity only (untouched pages cost nothing): no slice moves as it grows
    advise_huge_pages(lanes[i].r.spans.data(), most * sizeof(SimSpan));  // first touch: 2 MiB at a time
  }
  Schedule sched(chip, sys, rpc, mode, act_scale, red_scale, fp32_compute);
  sched.run(lanes);
  if (algorithms)
    for (auto& [k, v] : sched.algo_of_) *algorithms += (algorithms->empty() ? "" : "; ") + k + ": " + v;
  std::vector<RankTimeline> out(lanes.size());
  for (size_t i = 0; i < lanes.size(); ++i) {
    out[i].r = std::move(lanes[i].r);
    out[i].marks = std::move(lanes[i].marks);
  }
  return out;
}

SimResult schedule_events(const std::vector<CostEvent>& events, const ChipSpec& chip, const SystemSpec& sys,
                          int ranks_per_chip, ExecMode mode, int rank, const std::vector<double>* recv_arrival) {
  return schedule_events(EventStream(events), chip, sys, ranks_per_chip, mode, rank, recv_arrival);
}

SimResult schedule_events(const EventStream& events, const ChipSpec& chip, const SystemSpec& sys, int ranks_per_chip,
                          ExecMode mode, int rank, const std::vector<double>* recv_arrival) {
  auto t = schedule_ranks({RankEvents{rank, 0, &events, recv_arrival}}, chip, sys, ranks_per_chip, mode, 1.0, 1.0);
  SimResult r = std::move(t[0].r);
  r.critical = critical_path({&r.spans});
  r.chip = chip.name;
  r.system = sys.name;
  r.mode = config::enum_name(mode);
  return r;
}

}  // namespace titan
