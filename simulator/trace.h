// simulator/trace.h — a step's timeline as a Chrome trace (Perfetto, chrome://tracing), simulated or measured on
// this CPU (the same format, so the two open side by side), and the job's per-rank files merged into one.
//
// The format, as trace-analysis tools read it: one process per chip (pid = chip + 1, sorted by it), one thread
// per track (tid >= 1: a compute track per drawn rank, then one per collective stream and lane, sorted by tid);
// every slice of a track nests (collectives that overlap on one stream take separate lanes); a slice
// "ProfilerStep#N" spans each compute track's step, as PyTorch's profiler marks steps; the top-level
// "distributedInfo" names the rank(s) and world size. A collective's arrow to the stall it ends is bound to both
// slices (bind_id with flow_out / flow_in), its id unique across the job's files (the pid in its high bits), so
// merged per-rank files connect the right slices. A viewer reads slices in time order and drops a flow_in met
// before its flow_out: a simulated stall that begins before its collective starts (the collective queued behind
// another on its stream, or the host behind) gets a flow event pair instead (ph s inside the collective, ph f
// bound to the stall's end).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "simulator/result.h"

namespace titan {

// Which chips of a timeline a trace file draws, and as which processes.
struct TraceLayout {
  int n_chips = 1;       // the first n chips (chip 0: every rank it holds; the others: their first rank, SPMD);
                         // 0: one chip per distinct timeline (pipeline stage), standing for the chips alike
  int first_chip = 0;    // chips are numbered from here: a measured trace of rank R passes R, so the per-rank
                         // files of one job merge without collisions
  int64_t step = 1;      // the step's number for its ProfilerStep# slice
  int pid_offset = 0;    // pids start at first_chip + pid_offset + 1 (a second timeline of the same ranks in one
                         // merged file: the simulated beside the measured)
  std::string process_name;  // "": "chip N (<chip>)", or "rank N (<label>)" when measured
  explicit TraceLayout(int n_chips_ = 1, int first_chip_ = 0, int64_t step_ = 1, int pid_offset_ = 0,
                       std::string process_name_ = "")
      : n_chips(n_chips_), first_chip(first_chip_), step(step_), pid_offset(pid_offset_),
        process_name(std::move(process_name_)) {}
};

// Writes `r` as a Chrome trace. A slice of an op compared side by side (SimSpan::other_s) carries its time in
// the other timeline and the error in its args.
void write_chrome_trace(const SimResult& r, const std::string& path, const TraceLayout& layout = TraceLayout());

// The same timeline from a timed CostTrace of a real step on this CPU: each op lasts until the next record, a
// stall until the op after the wait, a collective from its start to the end of the wait for it. `end`: the
// trace's elapsed time at the step's end. `world`: the job's ranks (distributedInfo).
SimResult measured_timeline(const std::vector<CostEvent>& events, double end, const std::string& label, int world = 1);

// One file for the job: the traceEvents of `inputs` (per-rank files of one job, from any hosts) in one trace,
// their distributedInfo joined; refused, naming the files, when two of them hold the same process (pid), or,
// with `expect_world` > 0, when a file's distributedInfo names another world size (a file of another job).
// Measured ranks are put on one clock (each file's otherData.start_unix_s: the system clock, so across hosts
// as close as their clocks agree) and the same collective on its members linked: each member's slice carries
// the first arrival, the straggler (the member that issued it last) and how long it waited for it, with an
// arrow (category "collective") from the straggler's arrival to each member it held. Returns the summary
// (empty when nothing was linked): how many were linked and which ranks arrived last, at how many, for how long.
std::vector<std::string> merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output,
                                             int expect_world = 0);

// What a viewer or trace-analysis tool would trip on, one line each (empty: none): pids / tids below 1, slices
// that overlap without nesting on a track, a bind_id without exactly one flow_out and one flow_in slice, flow
// events (ph s / f) whose ids repeat or do not sit on a slice, a flow_in slice that starts before its flow_out
// slice, no ProfilerStep# slice or distributedInfo. Malformed events are reported, not thrown.
std::vector<std::string> check_chrome_trace(const std::string& path);

}  // namespace titan
