// simulator/plan.h — a training step run on meta tensors with a fake process
// group of the simulated world size, in one process: what each rank would
// hold (memory by category, peak) and compute (FLOPs and bytes per op),
// without allocating or computing anything. The simulated UltraServer
// (simulate.h) prices these records on a chip and topology.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "models/decoder/model.h"
#include "step/job_config.h"
#include "src/tensor/cost.h"
#include "src/tensor/event_stream.h"
#include "src/tensor/memory.h"
#include "step/train_step.h"

namespace titan {

struct StepPlan {
  int world = 1;
  std::string layout;
  MemoryStats memory;  // the rank played, bytes: current (after the step) and peak per category
  double flops = 0, bytes = 0;  // the rank played, one optimizer step
  std::map<std::string, OpCost> by_op;
  double model_flops_per_token = 0;
  int64_t tokens_per_rank = 0;        // per optimizer step: micro-batches x batch x seq / cp (the rank's chunks)
  int64_t accumulation = 1;            // micro-batches per optimizer step
  int64_t dp_degree = 1, tp_degree = 1, ep_degree = 1, pp_degree = 1, cp_degree = 1;
  int rank = 0;                        // the world rank played
  int64_t num_params = 0;              // the full model's
  EventStream events;                  // the rank's kernels and collectives in program order (with_events)
};

// The step is train_step (train_step.h) on a job from build_job: the
// micro-batches, FSDP's reductions, the loss / expert-load / grad-norm
// all-reduces, clipping and the optimizer, as titan-train runs them.
// device Meta (planning) or, for world 1, CPU: the same step really computed
// (tests hold the meta counts and memory to the real ones).
// `rank`: the world rank the plan plays (a pipeline's stages differ: the simulator plans one rank per stage).
// ranks_per_host: world rank w on host w / ranks_per_host (the simulated system's ranks; 0: one host), which
// what depends on hosts sees (the hierarchical expert dispatch).
StepPlan plan_step(const JobConfig& cfg, int world, bool with_events = false, Device device = Device::Meta,
                   int rank = 0, int ranks_per_host = 0);

}  // namespace titan
