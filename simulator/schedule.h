// simulator/schedule.h — the scheduler: kernels and collectives of planned
// ranks (their CostEvents in program order) placed on streams in time.
//
//   compute stream   every kernel in program order (eager: the kernels each
//                    op declared it launches in PyTorch eager; compiled: runs
//                    of elementwise ops fused into one kernel)
//   comm:<group>     one stream per process group; a collective starts when
//                    the program issues it and its group's stream is free;
//                    collectives of different groups in flight at once share
//                    the links of the network levels they both use: a level's
//                    bytes move only while its links are not carrying another
//                    transfer (never more than the level's bandwidth in use)
//   p2p:<group>      pipeline sends; a receive waits for its send's arrival
//   waits            the compute stream stalls until the collective it waits
//                    for has finished: exposed communication (a receive's
//                    wait: pipeline bubble)
//
// Several ranks (one per pipeline stage) are scheduled side by side: a
// collective whose group holds several of them starts when all have issued it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "simulator/cost_model.h"
#include "simulator/result.h"
#include "src/tensor/event_stream.h"

namespace titan {

// A stage's repeated passes (EventStream runs) are placed whole once a copy of the same record has been priced
// event by event from a like state (schedule.cpp says when states are alike): the same timeline up to rounding,
// in a fraction of the time. While a PassReplaysOff is alive on this thread, every event is priced (what the
// tests compare the two with); replayed_passes() counts the passes placed whole, process-wide.
class PassReplaysOff {
 public:
  PassReplaysOff();
  ~PassReplaysOff();
  PassReplaysOff(const PassReplaysOff&) = delete;
  PassReplaysOff& operator=(const PassReplaysOff&) = delete;
};
int64_t replayed_passes();

// One planned rank's input to the scheduler.
struct RankEvents {
  int rank = 0;   // world rank played
  int stage = 0;  // pipeline stage
  const EventStream* events = nullptr;
  // per event: when a receive from a rank the simulation does not play arrives (seconds; < 0 or null: as a
  // symmetric exchange, below). A measured step's receives arrive when they did (compare.h).
  const std::vector<double>* recv_arrival = nullptr;
};

// Each rank's timeline (spans, compute / exposed sums, kernels, link contention; step_s = its end) and
// its pipeline schedules' windows (marks: begin, end, begin, end, ... on its compute clock).
struct RankTimeline {
  SimResult r;
  std::vector<double> marks;
};

// The bytes a communication event moves as priced: a typed buffer's as they are (CostEvent::typed), the
// float32 stand-in's in the reduce dtype (a gradient reduction: red_scale) or the parameter dtype (act_scale).
inline double priced_comm_bytes(const CostEvent& e, double act_scale, double red_scale) {
  return e.typed ? e.bytes : e.bytes * (e.gradients ? red_scale : act_scale);
}

// act_scale / red_scale: byte factors of activations' and gradient reductions' dtypes (the plan is fp32);
// fp32_compute: a float32 run, its GEMMs and attention priced at the chip's FP32 rate (fp32_tflops).
// Fails naming the deadlock when the ranks wait on each other forever.
std::vector<RankTimeline> schedule_ranks(const std::vector<RankEvents>& ranks, const sim::ChipSpec& chip,
                                         const sim::SystemSpec& sys, int ranks_per_chip, sim::ExecMode mode,
                                         double act_scale, double red_scale, bool fp32_compute = false,
                                         std::string* algorithms = nullptr);

// The scheduler alone: one rank's events on `chip` in `sys`, at their own byte counts (no dtype scaling), as
// world rank `rank`; `recv_arrival` as in RankEvents.
SimResult schedule_events(const std::vector<CostEvent>& events, const sim::ChipSpec& chip,
                          const sim::SystemSpec& sys, int ranks_per_chip, sim::ExecMode mode, int rank = 0,
                          const std::vector<double>* recv_arrival = nullptr);
SimResult schedule_events(const EventStream& events, const sim::ChipSpec& chip, const sim::SystemSpec& sys,
                          int ranks_per_chip, sim::ExecMode mode, int rank = 0,
                          const std::vector<double>* recv_arrival = nullptr);

}  // namespace titan
