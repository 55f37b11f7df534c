#include "simulator/schedule.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <deque>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "simulator/critical_path.h"
#include "src/tensor/cost_segment.h"
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
// ---- repeated passes placed whole ----
// A long pipeline's stage runs most of its passes as copies of a few records (EventStream's runs). Priced event
// by event, a copy that starts from a like state takes the same course as the last one did, shifted in time:
// the same kernels, waits and transfers at the same offsets. So the first copy of a record priced from a given
// state is recorded (Recording) relative to where it began, and the next copies that start from a like state
// are placed as that record (PassMemo) in one step: their slices and memory samples placed by reference to the
// record (timeline.h, memory_track.h), the link pieces and sums added shifted, the clocks advanced. A state is
// alike when
//   - no fused chain is open, the compute stream has (or has not) a slice before, and every process-group
//     stream busy past the compute clock (by more than kLikeSeconds: a rounding remainder is no transfer) is
//     busy to the same offset (within kLikeSeconds), with the same
//     point-to-point transfers on the same link levels at the same offsets (a collective still on the links:
//     never alike, a pass's transfer could delay it);
//   - the host is at least as far ahead of the device as the recorded copy allowed (host_slack: the least
//     margin by which the host issued each kernel and transfer before the device needed it; a copy that
//     waited for the host is not recorded).
// Only passes that stay on their lane are recorded: every transfer they start ends inside them, no collective
// with another scheduled stage, no send or receive between scheduled stages, no measured arrival, no host sync
// or schedule mark, a point-to-point exchange with unscheduled peers balanced at both ends. Placing a record
// whole gives the event-by-event course up to rounding (offsets added to the start instead of summed
// one by one: Simulation.RepeatedPassesPlaceAsPricedOnes holds the two within 1e-9 s); a choice made on two
// times equal within that rounding (which slice a transfer waits for, whether a wait of a rounding remainder is
// a slice of its own) may come out the other way.
constexpr double kLikeSeconds = 1e-12;
constexpr int kMemosPerRecord = 16;  // the like states kept per record
// a recorded slice's dependency: in the pass (span: its offset), the compute stream's slice before the pass,
// the slice before the pass of entry_streams[span] (placed copies' codes: timeline.h)
constexpr int kDepInPass = Timeline::kDepInPass, kDepBeforeCompute = Timeline::kDepBeforeCompute,
              kDepBeforeStream = Timeline::kDepBeforeStream;

struct PassEntry {  // the state a pass starts from, as far as its course depends on it
  // (stream, free - tc) for streams free after tc, and whether the stream has a slice (what a transfer queued on it
  // waits for)
  std::vector<std::tuple<std::string_view, double, bool>> busy_streams;
  std::vector<std::tuple<std::string, double, double>> busy_links;  // (level, from - tc, to - tc) transfers on it
  bool has_compute = false;  // a compute slice before the pass
  bool like(const PassEntry& o) const {
    if (has_compute != o.has_compute || busy_streams.size() != o.busy_streams.size() ||
        busy_links.size() != o.busy_links.size())
      return false;
    for (size_t i = 0; i < busy_streams.size(); ++i)
      if (std::get<0>(busy_streams[i]) != std::get<0>(o.busy_streams[i]) ||
          std::get<2>(busy_streams[i]) != std::get<2>(o.busy_streams[i]) ||
          std::abs(std::get<1>(busy_streams[i]) - std::get<1>(o.busy_streams[i])) > kLikeSeconds)
        return false;
    for (size_t i = 0; i < busy_links.size(); ++i)
      if (std::get<0>(busy_links[i]) != std::get<0>(o.busy_links[i]) ||
          std::abs(std::get<1>(busy_links[i]) - std::get<1>(o.busy_links[i])) > kLikeSeconds ||
          std::abs(std::get<2>(busy_links[i]) - std::get<2>(o.busy_links[i])) > kLikeSeconds)
        return false;
    return true;
  }
};

struct FusedChain {  // a compiled step's open chain of elementwise ops (one kernel when it closes)
  double flops = 0, bytes = 0;
  int n = 0;
  std::string_view name;  // the first member's op (a static string)
  int64_t event = -1;     // the first member's
};


struct PassMemo {  // what pricing a copy of a record did, relative to its start (time, slice and event offsets)
  PassEntry entry;
  double host_slack = 0;  // valid while th - tc <= host_slack at the start
  std::vector<std::string_view> entry_streams;  // streams whose slice before the pass a slice waits for
  double dur = 0, host = 0;  // the compute and host clocks' advance
  std::array<double, kNumClassSums> by_class{};
  std::array<bool, kNumClassSums> used_class{};
  double compute_s = 0, exposed_comm_s = 0, link_contention_s = 0;
  int64_t kernels = 0;
  std::vector<std::pair<std::string, double>> exposed_by_kind, comm_busy_by_group;  // added
  std::vector<std::pair<std::string_view, double>> stream_free;   // streams used: free at (offset)
  std::vector<std::pair<std::string_view, int64_t>> last_on_stream;  // their last slice (offset)
  int64_t last_compute = -1;  // the compute stream's last slice (offset; -1: none in the pass)
  std::vector<std::tuple<std::string, double, double>> link_uses;  // (level, from, to), ended inside
  Timeline::Record spans;  // start: offset; dep coded (kDep*); flow_to, event: offsets
  std::shared_ptr<const MemoryTrack::Record> memory;  // (offset, bytes less the run's kernel shift) per kernel
  FusedChain fused;  // open at the end (event: offset)
  std::vector<std::pair<uint64_t, int>> exchanges;  // (group, tag) exchanged with unscheduled peers: balanced at the start
  std::vector<std::pair<std::string, std::string>> algorithms;  // the report's algorithm names it set (the last each)
};

struct Recording {  // a copy of a record being priced event by event, to become a PassMemo
  const EventStream::Run* run = nullptr;
  size_t begin = 0, end = 0;  // its events in program order
  int64_t first_id = 0, end_id = 0;  // its collective ids
  PassEntry entry;
  double entry_host = 0;  // th - tc at the start
  double tc0 = 0, th0 = 0, compute0 = 0, exposed0 = 0, host_wait0 = 0, contention0 = 0;
  size_t spans0 = 0;
  int64_t kernels0 = 0, last_compute0 = -1, seq0 = 0;
  std::array<double, kNumClassSums> by_class0{};
  std::map<std::string, double> exposed_by_kind0, comm_busy0;
  std::map<std::string_view, double> stream_free0;
  std::map<std::string_view, int64_t> last_on_stream0;
  double slack = std::numeric_limits<double>::infinity();
  bool ok = true;
  std::set<std::pair<uint64_t, int>> exchanges;  // point-to-point (group, tag) with unscheduled peers
  std::vector<std::pair<double, MemoryBytes>> memory;
  std::vector<std::pair<std::string, std::string>> algorithms;  // the algorithms named, in order
};

// scheduling with repeated passes placed whole (PassReplaysOff: every event priced), and how many were
thread_local int g_replays_off = 0;
std::atomic<int64_t> g_replayed{0};

// One simulated rank's timeline: its compute stream, a stream per process group, the collectives in flight.
// Ranks of different pipeline stages run side by side (Schedule below): a receive waits for the matching
// send of the other stage, a collective whose group spans several simulated ranks starts when all of them
// have issued it.
struct Lane {
  int rank = 0, stage = 0;
  int index = 0;             // this lane's place among the scheduled ones (SpanRef::lane)
  int64_t last_compute = -1;  // the compute stream's last slice (its next one waits for it)
  // streams by name (span_label's views, as the slices name them)
  std::map<std::string_view, int64_t> last_on_stream;  // each communication stream's last slice
  const EventStream* events = nullptr;
  EventStream::Cursor cursor;  // reads `events`
  const std::vector<double>* recv_arrival = nullptr;  // RankEvents::recv_arrival
  size_t next = 0;
  double tc = 0;  // compute stream clock
  double th = 0;  // host clock: when the host has issued everything up to `next` (an asynchronous stack)
  size_t host_charged = (size_t)-1;  // the event at `next` has been issued by the host (retries charge once)
  std::map<std::string_view, double> stream_free;
  std::map<uint64_t, std::string_view> stream_of_group;
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
  FusedChain fused;
  std::map<int, int64_t> collectives_seen;  // per member set (Group::member_set): collectives issued
  // What a process group is to this lane, worked out at its first transfer (by group id; a pipeline peer by
  // its rank): its member set's id, the other simulated members, where it spans the
  // system, its stream, the transfer times by operation and size. The same answer every time: a cache.
  struct Group {
    std::vector<int> others;
    int member_set = -1;
    GroupSpan span;
    std::string_view stream;
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
    std::string_view stream;
    int64_t seq = 0;  // placed as the lane's seq-th piece
  };
  // a level's uses: `live` may still meet a transfer placed from now on; `done` ended at or before the compute
  // clock, where every later transfer starts (the clock only moves forward), and is kept for the report only.
  // Retired when live doubles: the scan of each placement stays as short as what is in flight.
  struct Link {
    std::vector<Use> live;
    // the pieces that ended, as the report merges them: sorted, an interval that starts where (or before)
    // the one before it ends joined to it (pieces retire about in time order: an insertion lands near the end)
    std::vector<std::pair<double, double>> done;
    size_t retire_at = 16;
    void retire(double a, double b) {
      auto it = done.empty() || a >= done.back().first  // at the end (most pieces)
                    ? done.end()
                    : std::upper_bound(done.begin(), done.end(), a, [](double v, const auto& x) { return v < x.first; });
      if (it != done.begin() && a <= std::prev(it)->second) {
        --it;
        it->second = std::max(it->second, b);
      } else {
        it = done.insert(it, {a, b});
      }
      auto last = std::next(it);
      while (last != done.end() && last->first <= it->second) it->second = std::max(it->second, (last++)->second);
      done.erase(std::next(it), last);
    }
  };
  std::map<std::string, Link> link_busy;
  bool registered = false;  // the collective at `next` has been announced to the other lanes
  double stream_free_before = 0;  // the stream's free time when the transfer being placed was issued
  SimResult r;              // this lane's timeline and sums
  // r.compute_by_class's sums while scheduling (a kernel adds to them without a map lookup), by ClassSum
  std::array<double, kNumClassSums> by_class{};
  std::array<bool, kNumClassSums> used_class{};  // a kernel of the class (any kernel: launch overhead) was emitted
  std::vector<double> marks;  // pipeline schedules: begin, end, begin, end, ... (compute clock)
  int64_t use_seq = 0;        // link pieces placed
  // repeated passes: the next run of `events` to reach; per record, what its copies did from like states; the
  // copy being recorded
  size_t run_k = 0;
  std::map<const CostSegment*, std::vector<std::shared_ptr<const PassMemo>>> memos;
  std::unique_ptr<Recording> rec;
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
        std::vector<std::pair<double, double>> iv = std::move(link.done);
        const size_t n = iv.size();
        for (const auto& u : link.live) iv.push_back({u.a, u.b});
        std::sort(iv.begin() + (std::ptrdiff_t)n, iv.end());
        std::inplace_merge(iv.begin(), iv.begin() + (std::ptrdiff_t)n, iv.end());
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
  // A pass being recorded: the host's margin ahead of the device where the device takes the host's next work
  // (a copy starting with the host further behind would take another course).
  static void note_host(Lane& l) {
    if (l.rec) l.rec->slack = std::min(l.rec->slack, (l.tc - l.rec->tc0) - (l.th - l.rec->th0));
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
  void set_issue_dep(Lane& l, SimSpan& s, std::string_view stream, double issued, double free, double own,
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
  void emit_kernel(Lane& l, std::string_view name, ClassSum cls, const Kernel& k, int64_t event,
                   bool again = false) {
    host_issue(l);
    note_host(l);
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
      SimSpan& s = r.spans.edit((size_t)l.last_compute);
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
    const std::string_view name =
        f.n == 1 ? f.name : span_label("fused(" + std::string(f.name) + " +" + std::to_string(f.n - 1) + ")");
    const int64_t event = f.n == 1 ? f.event : -1;
    f = FusedChain();
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
  double fill_gaps(Lane& l, double t, double work, Lane::Link& link, int64_t owner, std::string_view stream) {
    if (link.live.size() >= link.retire_at) {  // t >= l.tc: a use that ended by then is passed over below
      std::vector<Lane::Use> keep;
      for (auto& u : link.live)
        if (u.b <= l.tc && !(l.rec && u.seq >= l.rec->seq0)) link.retire(u.a, u.b);  // a recorded pass's
        else keep.push_back(std::move(u));                                           // pieces are read
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
      pieces.push_back({t, t + span, owner, stream, l.use_seq++});
      if (share) delayed[share->owner] += span * rate;
      work -= span * rate;
      t += span;
    }
    busy.insert(busy.end(), pieces.begin(), pieces.end());
    for (const auto& [id, s] : delayed) {
      if (l.rec && (id < l.rec->first_id || id >= l.rec->end_id)) l.rec->ok = false;  // it moves a transfer from before
      auto it = l.inflight.find(id);
      if (it == l.inflight.end()) continue;  // waited for already (cannot be: it overlapped this transfer)
      Lane::Pending& p = it->second;
      Lane::Use* last = nullptr;  // the collective's last piece on this level moves its end by s
      for (auto& u : busy)
        if (u.owner == id && (!last || u.b > last->b)) last = &u;
      if (last) last->b += s;
      const std::string_view its = last ? last->stream : stream;
      if (l.stream_free[its] == p.end) l.stream_free[its] += s;  // what queues behind it on its stream
      if (p.span >= 0) l.r.spans.edit((size_t)p.span).dur += s;
      p.end += s;
      l.r.link_contention_s += s;
    }
    return t;
  }
  // Places a transfer's levels one after another from `start` on this rank's links; returns its end.
  // owner: the collective's comm id (-1: a point-to-point transfer).
  double place_on_links(Lane& l, const CollectiveTime& ct, double start, int64_t owner, std::string_view stream) {
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
  std::string_view stream_for(Lane& l, const CostEvent& e, const char* prefix) {
    // one stream per group (by id; the name only labels its lane)
    auto [sit, fresh] = l.stream_of_group.try_emplace(e.group.id);
    if (fresh) {
      std::string name = prefix + e.group.name;
      for (const auto& [id, label] : l.stream_of_group)
        if (id != e.group.id && label == name) name += "#" + std::to_string(l.stream_of_group.size());
      sit->second = span_label(name);
    }
    return sit->second;
  }
  void compute(Lane& l, const CostEvent& e) {
    l.r.memory_samples.add(l.tc, e.memory);  // the memory over the step
    if (l.rec) {
      MemoryBytes m = e.memory;
      for (int c = 0; c < kNumMemoryCategories; ++c) m[c] -= l.rec->run->kernel_shift[c];
      l.rec->memory.push_back({l.tc - l.rec->tc0, m});
      if (e.cls == KernelClass::HostSync || e.cls == KernelClass::PipelineMark) l.rec->ok = false;
    }
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
  // Whether every message sent over (group, tag) to unscheduled peers has been received (a receive takes the
  // oldest unmatched send: a pass starting balanced takes its own).
  static bool exchange_balanced(const Lane& l, const std::pair<uint64_t, int>& key) {
    auto sit = l.sent.find(key);
    auto rit = l.received.find(key);
    return (sit == l.sent.end() ? 0 : sit->second.size()) == (rit == l.received.end() ? 0 : rit->second);
  }
  // What the report names as the algorithm of an operation over a group (the last transfer's; a recorded pass
  // keeps its own to name them again when placed whole).
  void name_algorithm(Lane& l, const std::string& key, const std::string& algorithm) {
    algo_of_[key] = algorithm;
    if (l.rec) l.rec->algorithms.push_back({key, algorithm});
  }
  // A send / receive between pipeline stages. Returns false when the receive's send is not scheduled yet.
  bool p2p(Lane& l, const CostEvent& e) {
    const double bytes = priced_comm_bytes(e, act_scale_, red_scale_);
    const bool unscheduled_peer = !std::binary_search(simulated_.begin(), simulated_.end(), e.peer);
    if (l.rec) {  // a pass being recorded stays on its lane, its exchanges balanced from its start
      if (!unscheduled_peer) l.rec->ok = false;
      const auto key = std::make_pair(e.group.id, e.tag);
      if (l.rec->exchanges.insert(key).second && !exchange_balanced(l, key)) l.rec->ok = false;
    }
    if (!e.send) {
      if (unscheduled_peer) {
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
    const std::string_view stream = stream_for(l, e, "p2p:");
    l.stream_free_before = l.stream_free[stream];
    note_host(l);
    const double start = std::max({l.tc, l.th, l.stream_free_before});
    const double end = ct.seconds > 0 ? place_on_links(l, ct, start, -1, stream) : start;
    l.stream_free[stream] = end;
    l.r.comm_busy_by_group[e.group.name] += end - start;
    name_algorithm(l, "send/recv over " + e.group.name, ct.algorithm);
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
    if (l.rec && !others.empty()) l.rec->ok = false;  // it waits for another stage
    note_host(l);
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
    const std::string_view stream = g.stream;
    // a free collective (group of one) neither queues nor occupies its stream
    const double free = l.stream_free[stream];
    const double start = ct.seconds > 0 ? std::max(issued, free) : issued;
    const double end = ct.seconds > 0 ? place_on_links(l, ct, start, e.comm_id, stream) : start;
    if (ct.seconds > 0) l.stream_free[stream] = end;
    l.r.comm_busy_by_group[e.group.name] += end - start;
    auto [kit, named] = g.algo_key.try_emplace(e.op);
    if (named) kit->second = std::string(e.op) + " over " + e.group.name + " (" + std::to_string(e.group.size()) + " ranks)";
    name_algorithm(l, kit->second, ct.algorithm);
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
    if (l.rec && (e.comm_id < l.rec->first_id || e.comm_id >= l.rec->end_id)) l.rec->ok = false;
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
      if (p.span >= 0) l.r.spans.edit((size_t)p.span).flow_to = (int64_t)l.r.spans.size();
      // what it waited for: the send (a receive), or the collective (issued ahead: a prefetch)
      const SpanRef dep = p.recv || p.span < 0 ? p.from : SpanRef{l.index, p.span};
      const DepKind kind = p.recv                  ? DepKind::pipeline
                           : p.from.valid()        ? DepKind::data  // a symmetric peer's message: like its own send
                           : l.r.kernels > p.kernels ? DepKind::prefetch
                                                     : DepKind::data;
      push_compute(l, {"compute", p.recv ? "wait recv" : span_label("wait " + p.kind), p.recv ? "bubble" : "idle", l.tc, w, 0, 0,
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
  // The state lane l is in, as a pass starting now sees it; false when no pass starting now is recorded or placed
  // whole (a fused chain open, measured arrivals, a collective's transfer still on the links).
  static bool entry_state(const Lane& l, PassEntry& k) {
    if (l.fused.n > 0 || l.recv_arrival) return false;
    // busy for less than kLikeSeconds more: a rounding remainder, free
    for (const auto& [stream, t] : l.stream_free)
      if (t > l.tc + kLikeSeconds) k.busy_streams.push_back({stream, t - l.tc, l.last_on_stream.count(stream) > 0});
    for (const auto& [level, link] : l.link_busy)
      for (const auto& u : link.live)
        if (u.b > l.tc + kLikeSeconds) {
          if (u.owner >= 0) return false;
          k.busy_links.push_back({level, std::max(u.a, l.tc) - l.tc, u.b - l.tc});
        }
    std::sort(k.busy_links.begin(), k.busy_links.end());
    k.has_compute = l.last_compute >= 0;
    return true;
  }
  void start_recording(Lane& l, const EventStream::Run& run, size_t begin, PassEntry entry) {
    auto rec = std::make_unique<Recording>();
    rec->run = &run;
    rec->begin = begin;
    rec->end = begin + run.seg->events.size();
    rec->first_id = run.first_id;
    rec->end_id = run.first_id + run.seg->distinct_ids;
    rec->entry = std::move(entry);
    rec->entry_host = l.th - l.tc;
    rec->tc0 = l.tc;
    rec->th0 = l.th;
    rec->compute0 = l.r.compute_s;
    rec->exposed0 = l.r.exposed_comm_s;
    rec->host_wait0 = l.r.host_wait_s;
    rec->contention0 = l.r.link_contention_s;
    rec->spans0 = l.r.spans.size();
    rec->kernels0 = l.r.kernels;
    rec->last_compute0 = l.last_compute;
    rec->seq0 = l.use_seq;
    rec->by_class0 = l.by_class;
    rec->exposed_by_kind0 = l.r.exposed_by_kind;
    rec->comm_busy0 = l.r.comm_busy_by_group;
    rec->stream_free0 = l.stream_free;
    rec->last_on_stream0 = l.last_on_stream;
    l.rec = std::move(rec);
  }
  // The recorded pass has ended: its record, when it stayed on its lane and ended everything it started.
  void finish_recording(Lane& l) {
    std::unique_ptr<Recording> rec = std::move(l.rec);
    if (!rec->ok || l.r.host_wait_s != rec->host_wait0 || rec->entry_host > rec->slack) return;
    for (const auto& [id, p] : l.inflight)
      if (id >= rec->first_id && id < rec->end_id) return;  // a transfer it started is still in flight
    for (const auto& key : rec->exchanges)
      if (!exchange_balanced(l, key)) return;
    auto m = std::make_shared<PassMemo>();
    m->entry = std::move(rec->entry);
    m->host_slack = rec->slack;
    const double tc0 = rec->tc0;
    const int64_t s0 = (int64_t)rec->spans0;
    auto code = [&](SpanRef d, SpanRef& out) {  // a dependency relative to the pass; false: on another lane
      out = d;
      if (!d.valid()) return true;
      if (d.lane != l.index) return false;
      if (d.span >= s0) {
        out = {kDepInPass, d.span - s0};
        return true;
      }
      if (d.span == rec->last_compute0) {
        out = {kDepBeforeCompute, 0};
        return true;
      }
      for (const auto& [stream, i] : rec->last_on_stream0)
        if (i == d.span) {
          auto it = std::find(m->entry_streams.begin(), m->entry_streams.end(), stream);
          if (it == m->entry_streams.end()) it = m->entry_streams.insert(it, stream);
          out = {kDepBeforeStream, (int64_t)(it - m->entry_streams.begin())};
          return true;
        }
      return false;
    };
    auto spans = std::make_shared<std::vector<SimSpan>>();
    spans->reserve(l.r.spans.size() - rec->spans0);
    for (size_t i = rec->spans0; i < l.r.spans.size(); ++i) {
      SimSpan sp = l.r.spans[i];
      if (!code(sp.dep, sp.dep) || (sp.flow_to >= 0 && sp.flow_to < s0) ||
          (sp.event >= 0 && (size_t)sp.event < rec->begin))
        return;
      sp.start -= tc0;
      if (sp.flow_to >= 0) sp.flow_to -= s0;
      if (sp.event >= 0) sp.event -= (int64_t)rec->begin;
      spans->push_back(std::move(sp));
    }
    m->spans = std::move(spans);
    for (const auto& [level, link] : l.link_busy)
      for (const auto& u : link.live)
        if (u.seq >= rec->seq0) {
          if (u.b > l.tc) return;  // on the links after the pass
          m->link_uses.push_back({level, u.a - tc0, u.b - tc0});
        }
    for (const auto& [stream, t] : l.stream_free) {
      auto it = rec->stream_free0.find(stream);
      if (it == rec->stream_free0.end() || it->second != t) m->stream_free.push_back({stream, t - tc0});
    }
    for (const auto& [stream, i] : l.last_on_stream) {
      auto it = rec->last_on_stream0.find(stream);
      if (it == rec->last_on_stream0.end() || it->second != i) m->last_on_stream.push_back({stream, i - s0});
    }
    m->last_compute = l.last_compute != rec->last_compute0 ? l.last_compute - s0 : -1;
    m->dur = l.tc - tc0;
    m->host = l.th - rec->th0;
    for (size_t c = 0; c < kNumClassSums; ++c) m->by_class[c] = l.by_class[c] - rec->by_class0[c];
    m->used_class = l.used_class;
    m->compute_s = l.r.compute_s - rec->compute0;
    m->exposed_comm_s = l.r.exposed_comm_s - rec->exposed0;
    m->link_contention_s = l.r.link_contention_s - rec->contention0;
    m->kernels = l.r.kernels - rec->kernels0;
    auto added = [](const std::map<std::string, double>& now, const std::map<std::string, double>& before,
                    std::vector<std::pair<std::string, double>>& out) {
      for (const auto& [k, v] : now) {
        auto it = before.find(k);
        if (it == before.end() || it->second != v) out.push_back({k, v - (it == before.end() ? 0.0 : it->second)});
      }
    };
    added(l.r.exposed_by_kind, rec->exposed_by_kind0, m->exposed_by_kind);
    added(l.r.comm_busy_by_group, rec->comm_busy0, m->comm_busy_by_group);
    m->memory = std::make_shared<const MemoryTrack::Record>(std::move(rec->memory));
    m->exchanges.assign(rec->exchanges.begin(), rec->exchanges.end());
    for (auto& a : rec->algorithms) {  // the last name of each
      auto it = std::find_if(m->algorithms.begin(), m->algorithms.end(), [&](const auto& x) { return x.first == a.first; });
      if (it == m->algorithms.end()) m->algorithms.push_back(std::move(a));
      else it->second = std::move(a.second);
    }
    m->fused = l.fused;
    if (m->fused.event >= 0) m->fused.event -= (int64_t)rec->begin;
    auto& kept = l.memos[rec->run->seg.get()];
    if ((int)kept.size() < kMemosPerRecord) kept.push_back(std::move(m));
  }
  // Places the pass of `run` starting at event `begin` whole when a record of it started from a like state.
  bool replay(Lane& l, const EventStream::Run& run, size_t begin, const PassEntry& entry) {
    auto it = l.memos.find(run.seg.get());
    if (it == l.memos.end()) return false;
    const PassMemo* m = nullptr;
    for (const auto& c : it->second)
      if (l.th - l.tc <= c->host_slack && c->entry.like(entry)) {
        bool fits = true;  // the slices before the pass its slices wait for are there
        for (const auto& s : c->entry_streams) fits = fits && l.last_on_stream.count(s);
        for (const auto& key : c->exchanges)  // its receives take its own sends, as when it was recorded
          fits = fits && exchange_balanced(l, key);
        if (fits) {
          m = c.get();
          break;
        }
      }
    if (!m) return false;
    const double tc0 = l.tc;
    const int64_t s0 = (int64_t)l.r.spans.size();
    std::vector<int64_t> before_stream;
    for (const auto& s : m->entry_streams) before_stream.push_back(l.last_on_stream.at(s));
    l.r.spans.place(m->spans, tc0, l.index, (int64_t)begin, l.last_compute, std::move(before_stream));
    {
      MemoryBytes shift{};
      for (int c = 0; c < kNumMemoryCategories; ++c) shift[c] = run.kernel_shift[c];
      l.r.memory_samples.place(m->memory, tc0, shift);
    }
    for (const auto& [level, a, b] : m->link_uses) l.link_busy[level].retire(tc0 + a, tc0 + b);
    for (const auto& [stream, t] : m->stream_free) l.stream_free[stream] = tc0 + t;
    for (const auto& [stream, i] : m->last_on_stream) l.last_on_stream[stream] = s0 + i;
    if (m->last_compute >= 0) l.last_compute = s0 + m->last_compute;
    for (size_t c = 0; c < kNumClassSums; ++c) {
      l.by_class[c] += m->by_class[c];
      l.used_class[c] = l.used_class[c] || m->used_class[c];
    }
    l.r.compute_s += m->compute_s;
    l.r.exposed_comm_s += m->exposed_comm_s;
    l.r.link_contention_s += m->link_contention_s;
    l.r.kernels += m->kernels;
    for (const auto& [k, v] : m->exposed_by_kind) l.r.exposed_by_kind[k] += v;
    for (const auto& [k, v] : m->comm_busy_by_group) l.r.comm_busy_by_group[k] += v;
    l.fused = m->fused;
    if (l.fused.event >= 0) l.fused.event += (int64_t)begin;
    for (const auto& [k, v] : m->algorithms) algo_of_[k] = v;
    l.tc = tc0 + m->dur;
    l.th += m->host;
    l.next = begin + run.seg->events.size();
    ++g_replayed;
    return true;
  }
  // At the start of a repeated pass: placed whole from a record, or recorded (when its state allows either).
  void at_run(Lane& l) {
    const EventStream& es = *l.events;
    while (l.run_k < es.run_count() && es.run_begin(l.run_k) < l.next) ++l.run_k;
    while (l.run_k < es.run_count() && es.run_begin(l.run_k) == l.next && !l.rec && !l.done()) {
      const EventStream::Run& run = es.run(l.run_k++);
      if (run.seg->events.empty()) continue;
      PassEntry entry;
      if (!entry_state(l, entry)) return;
      if (replay(l, run, l.next, entry)) continue;
      auto it = l.memos.find(run.seg.get());
      if (it == l.memos.end() || (int)it->second.size() < kMemosPerRecord)  // else: priced, not recorded
        start_recording(l, run, l.next, std::move(entry));
    }
  }
  // Runs lane l until it ends or blocks on another lane.
  void advance(Lane& l) {
    while (!l.done()) {
      if (l.rec && l.next == l.rec->end) finish_recording(l);
      if (replays_ && !l.rec && l.run_k < l.events->run_count()) {
        at_run(l);
        if (l.done()) break;
      }
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
    if (l.rec && l.next == l.rec->end) finish_recording(l);
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
  bool replays_ = g_replays_off == 0;  // repeated passes placed whole
  // (sender, receiver, tag) -> when the data is there, and the send's slice
  std::map<std::tuple<int, int, int64_t>, std::deque<std::pair<double, SpanRef>>> arrivals_;  // sent, not yet received
  // (members, k) -> each simulated member's issue time of its k-th collective over them, and its slice then
  std::map<std::pair<int, int64_t>, std::map<int, std::pair<double, SpanRef>>> issue_times_;
  std::map<std::vector<int>, int> member_sets_;  // a group's members (sorted) -> their set's id, across lanes
};
}  // namespace

PassReplaysOff::PassReplaysOff() { ++g_replays_off; }
PassReplaysOff::~PassReplaysOff() { --g_replays_off; }
int64_t replayed_passes() { return g_replayed.load(); }

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
