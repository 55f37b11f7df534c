#include "simulator/plan.h"

#include <cmath>
#include <memory>
#include <optional>

#include "comms/device_mesh.h"
#include "comms/moe_dispatch.h"
#include "models/decoder/model.h"
#include "parallel/parallelize.h"
#include "src/ops/ops.h"
#include "src/optim/adamw.h"
#include "src/tensor/cost_segment.h"

namespace titan {

namespace {
// The expert weights of the meta step's routing (empty: balanced; one list: every MoE layer; else one per MoE
// layer), from simulation.moe_routing_*.
std::vector<std::vector<double>> meta_routing_weights(const JobConfig& cfg) {
  const auto& sc = cfg.simulation;
  std::vector<std::vector<double>> w;
  if (sc.moe_routing_skew > 0) {
    w.emplace_back();
    for (int64_t e = 0; e < cfg.model.moe_num_experts; ++e)
      w[0].push_back(std::pow((double)(e + 1), -sc.moe_routing_skew));
  }
  if (!sc.moe_routing_histogram.empty()) {
    w = parse_routing_histogram(sc.moe_routing_histogram);
    TITAN_CHECK((int64_t)w[0].size() == cfg.model.moe_num_experts, "config error: simulation.moe_routing_histogram gives ",
                w[0].size(), " counts, model.moe_num_experts is ", cfg.model.moe_num_experts);
    const int64_t moe_layers = cfg.model.moe_layers_before(cfg.model.n_layers);
    TITAN_CHECK(w.size() == 1 || (int64_t)w.size() == moe_layers, "config error: simulation.moe_routing_histogram "
                "gives ", w.size(), " lists (one per MoE layer, separated by ';'), the model has ", moe_layers,
                " MoE layers; give one list for every layer alike, or one per MoE layer");
  }
  return w;
}
}  // namespace

namespace {
StepPlan plan_step_once(const JobConfig& cfg, int world, bool with_events, Device device, int rank,
                        int ranks_per_host) {
  TITAN_CHECK(device == Device::Meta || world == 1, "plan_step: a real (cpu) step plays one rank, not ", world);
  TITAN_CHECK(rank >= 0 && rank < world, "plan_step: rank ", rank, " outside the world of ", world);
  StepPlan plan;
  plan.world = world;
  plan.rank = rank;
  MemoryTracker own;  // a meta step counts its bytes on its own (stages are planned side by side on threads)
  std::optional<MetaTrackerScope> counting;
  if (device == Device::Meta) counting.emplace(own);
  auto& mt = MemoryTracker::get(device);
  const MemoryStats before = mt.stats();
  mt.reset_peak();
  {
    std::vector<int> host_of(world, 0);
    if (ranks_per_host > 0)
      for (int w = 0; w < world; ++w) host_of[w] = w / ranks_per_host;
    comms::DeviceMesh mesh(mesh_degrees(cfg), /*fake=*/true, rank, world, host_of);
    plan.layout = mesh.describe();
    plan.dp_degree = mesh.degrees.dp_replicate * mesh.degrees.dp_shard;
    plan.tp_degree = mesh.degrees.tp;
    plan.pp_degree = mesh.degrees.pp;
    plan.cp_degree = mesh.degrees.cp;
    plan.ep_degree = cfg.parallelism.expert_parallel_degree;
    DeviceScope on(device);
    TrainJob job = build_job(cfg, mesh);
    mt.reset_peak();  // building the full model before sharding is setup, not the step's footprint
    const int64_t B = cfg.training.local_batch_size, S = cfg.training.seq_len;
    plan.accumulation = job.accumulation;
    plan.tokens_per_rank = plan.accumulation * B * S / mesh.degrees.cp;
    plan.model_flops_per_token = job.model->flops_per_token(S);
    plan.num_params = job.model->expected_num_params();
    std::unique_ptr<CostTrace> trace;
    if (with_events) trace = std::make_unique<CostTrace>();
    CostScope cs;
    // meta document ids: block_causal is priced as causal (its upper bound; the boundaries are data)
    auto batch = [&] { return Batch{zeros({B, S}, DType::I64), zeros({B, S}, DType::I64), zeros({B, S}, DType::I64)}; };
    comms::MetaRoutingScope routing(meta_routing_weights(cfg));  // uneven MoE routing: the busiest rank's step
    train_step(job, batch, cfg.optimizer.lr);
    plan.flops = cs.flops();
    plan.bytes = cs.bytes();
    plan.by_op = cs.by_op();
    if (trace) plan.events = trace->take_stream();
    plan.events.subtract_memory(before.current);  // the step's own memory, as plan.memory below
    MemoryStats m = mt.stats();
    for (int i = 0; i < kNumMemoryCategories; ++i) {
      m.current[i] -= before.current[i];
      m.peak[i] -= before.current[i];
    }
    m.total_current -= before.total_current;
    m.total_peak -= before.total_current;
    plan.memory = m;
  }
  return plan;
}
}  // namespace

StepPlan plan_step(const JobConfig& cfg, int world, bool with_events, Device device, int rank, int ranks_per_host) {
  try {
    return plan_step_once(cfg, world, with_events, device, rank, ranks_per_host);
  } catch (const CostSegmentRefused&) {  // a pipeline pass repeated where it should have been traced: trace all
    CostSegmentRepeatsOff off;
    return plan_step_once(cfg, world, with_events, device, rank, ranks_per_host);
  }
}

}  // namespace titan
