#include "step/train_step.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "parallel/context_parallel.h"
#include "parallel/fsdp.h"
#include "parallel/pass_repeats.h"
#include "src/log/log.h"
#include "src/ops/autocast.h"
#include "src/ops/ops.h"
#include "src/tensor/cost_segment.h"

namespace titan {

namespace {
// training.mixed_precision_param: the steps' GEMMs under AutocastScope(this), FSDP's bf16 all-gathers
DType compute_dtype(const JobConfig& cfg) {
  return cfg.training.mixed_precision_param == JobConfig::Training::Precision::bfloat16 ? DType::BF16 : DType::F32;
}
}  // namespace

parallel::ParallelOptions parallel_options(const JobConfig& cfg) {
  const auto& p = cfg.parallelism;
  parallel::ParallelOptions o{p.reshard_after_forward(), p.enable_sequence_parallel, p.expert_parallel_degree,
                              !p.disable_loss_parallel};
  o.sequence_parallel_regather = p.sequence_parallel_regather;
  o.async_tensor_parallel = p.enable_async_tensor_parallel;
  o.context_parallel_rotate = p.context_parallel_rotate_method;
  o.expert_comm = p.expert_parallel_comm_backend;
  o.param_dtype = compute_dtype(cfg);
  o.fsdp_float8_all_gather = cfg.float8.enable_fsdp_float8_all_gather;
  o.fsdp_float8_precompute = cfg.float8.precompute_float8_dynamic_scale_for_fsdp;
  return o;
}

comms::MeshDegrees mesh_degrees(const JobConfig& cfg) {
  const auto& p = cfg.parallelism;
  comms::MeshDegrees d;
  d.dp_replicate = p.data_parallel_replicate_degree;
  d.dp_shard = p.data_parallel_shard_degree;
  d.tp = p.tensor_parallel_degree;
  d.pp = p.pipeline_parallel_degree;
  d.cp = p.context_parallel_degree;
  return d;
}

ShardedBatch shard_for_context_parallel(const decoder::Decoder& model, comms::DeviceMesh& mesh, const Batch& b) {
  const nn::SequenceShard& sh = model.sequence_shard;
  if (!sh.sharded()) return {b, 1.0, 1.0};
  ShardedBatch r{parallel::shard_batch(b, sh)};
  double local = (double)r.batch.targets.numel();
  if (!r.batch.targets.is_meta()) {
    Tensor t = model.loss_targets(r.batch.targets);
    local = 0;
    for (int64_t x : t.contiguous().to_vector<int64_t>()) local += x != -100;
  }
  double group = local;  // all-reduced (priced in a plan: the valid targets are data)
  if (default_device() == Device::Meta) mesh.cp->all_reduce(empty({1}, DType::F64));
  else group = mesh.cp->all_reduce(from_vector<double>({local}, {1})).to_vector<double>()[0];
  r.loss_weight = group > 0 ? local / group : 0.0;
  r.grad_weight = (double)sh.parts * r.loss_weight;
  return r;
}

int64_t gradient_accumulation_steps(const JobConfig& cfg, int64_t dp) {
  const int64_t B = cfg.training.local_batch_size;
  const int64_t global_batch = cfg.training.global_batch_size < 0 ? B * dp : cfg.training.global_batch_size;
  TITAN_CHECK(global_batch > 0 && global_batch % (B * dp) == 0, "config error: training.global_batch_size ",
              global_batch, " must be a multiple of local_batch_size x data-parallel ranks = ", B, " x ", dp, " = ",
              B * dp);
  const int64_t accum = global_batch / (B * dp);
  TITAN_CHECK(accum <= 65536, "config error: training.global_batch_size ", global_batch, " over local_batch_size x "
              "data-parallel ranks = ", B, " x ", dp, " is ", accum, " micro-batches a step; more than 65,536 is a "
              "mistyped value (a 16M-token batch of 8k sequences on 8 ranks is 256)");
  return accum;
}

parallel::PipelineLayout pipeline_layout(const JobConfig& cfg) {
  const auto& p = cfg.parallelism;
  return parallel::pipeline_layout(cfg.model.n_layers, p.pipeline_parallel_degree,
                                   p.pipeline_parallel_schedule,
                                   p.pipeline_parallel_layers_per_stage, p.pipeline_parallel_first_stage_less_layers,
                                   p.pipeline_parallel_last_stage_less_layers);
}

TrainJob build_job(const JobConfig& cfg, comms::DeviceMesh& mesh,
                   const std::function<void(decoder::Decoder&)>& before_parallelize, JobPurpose purpose) {
  TrainJob job;
  job.mesh = &mesh;
  job.accumulation = gradient_accumulation_steps(cfg, mesh.dp_size());  // refused before anything is built
  mesh.degrees.check_sequence_length(cfg.training.seq_len, cfg.parallelism.enable_sequence_parallel);
  job.max_norm = cfg.training.max_norm;
  using Precision = JobConfig::Training::Precision;
  job.compute = compute_dtype(cfg);
  job.reduce_every_microbatch = cfg.parallelism.fsdp_reduce_every_microbatch;
  if (default_device() != Device::Meta)  // each rank first builds the whole fp32 model: refused before any of it
    check_memory_budget(4.0 * (double)cfg.model.num_params(),
                        "build_job: the weights of model " + config::enum_name(cfg.model.name) + " (" +
                            std::to_string(cfg.model.num_params()) + " float32 parameters, vocab_size " +
                            std::to_string(cfg.model.vocab_size) + ", dim " + std::to_string(cfg.model.dim) + ")");
  job.model = std::make_unique<decoder::Decoder>(cfg.model);
  if (default_device() != Device::Meta && purpose == JobPurpose::train)
    job.model->init_weights((uint64_t)cfg.debug.seed);  // shards are cut from it
  job.model->set_activation_checkpoint(cfg.activation_checkpoint.every(), cfg.activation_checkpoint.op_level());
  if (cfg.converters.contains("float8"))  // before any plan: FSDP gathers a converted layer's whole weight for it
    job.float8 = models::convert_to_float8(*job.model, cfg.float8.recipe, cfg.float8.filter_fqns.items,
                                           cfg.float8.moe_fqns_prototype.items);
  if (before_parallelize) before_parallelize(*job.model);
  parallel::ParallelOptions popt = parallel_options(cfg);
  parallel::PipelineLayout layout;
  if (mesh.degrees.pp > 1) {
    layout = pipeline_layout(cfg);
    popt.pipeline_chunks = layout.chunks_of(mesh.pp_rank);
  }
  job.pm = parallel::parallelize(*job.model, mesh, popt);
  if (cfg.parallelism.fsdp_gather_stage_at_start) {  // the config checked pp > 1 and the reshard policy
    TITAN_CHECK(job.pm.fsdp && mesh.degrees.dp_shard * mesh.degrees.cp > 1,
                "config error: parallelism.fsdp_gather_stage_at_start gathers a stage's sharded weights, and this "
                "layout shards none (dp_shard ", mesh.degrees.dp_shard, " x cp ", mesh.degrees.cp, " = 1); drop the key");
    job.pm.fsdp->set_gather_stage_at_start(true);
  }
  if (cfg.training.mixed_precision_reduce == Precision::bfloat16) {
    if (job.pm.fsdp && mesh.dp_size() * mesh.degrees.cp > 1) job.pm.fsdp->set_reduce_dtype(DType::BF16);
    else if (mesh.rank == 0)  // as TorchTitan's: it acts on FSDP's / DDP's reductions only
      log_info("training.mixed_precision_reduce bfloat16: this layout reduces no gradients over data-parallel "
               "(or context-parallel) ranks: nothing is reduced in bf16");
  }
  if (mesh.degrees.pp > 1) {
    // the hidden state between stages: [mbs, S / cp, dim] (a context-parallel rank's chunks), sequence-sharded
    // under tp with sequence parallel
    const auto& p = cfg.parallelism;
    const int64_t tp = mesh.degrees.tp, S = cfg.training.seq_len / mesh.degrees.cp;
    const bool sp = tp > 1 && p.enable_sequence_parallel;
    job.pipeline = std::make_shared<parallel::Pipeline>(
        *job.model, job.pm, mesh, layout, p.pipeline_parallel_schedule,
        p.pipeline_parallel_microbatch_size, Shape{p.pipeline_parallel_microbatch_size, sp ? S / tp : S, job.model->hidden_size()}, S);
  }
  if (purpose == JobPurpose::train)
    job.opt = std::make_unique<AdamW>(job.pm.named_params(),
                                    AdamWOptions{cfg.optimizer.lr, cfg.optimizer.beta1, cfg.optimizer.beta2,
                                                 cfg.optimizer.eps, cfg.optimizer.weight_decay});
  return job;
}

Tensor micro_batch_backward(decoder::Decoder& model, const Tensor& inputs, const Tensor& doc_ids, const Tensor& targets,
                            int64_t accum, double loss_weight, double grad_weight) {
  Tensor loss = model.loss(model.forward(inputs, doc_ids), targets);  // the logits are freed with the graph
  Tensor aux = model.aux_loss();  // MoE load balancing (not part of the reported loss)
  // context parallel: a rank without a valid target (its mean 0/0) gets weight 0 and still runs the backward
  // (its collectives); cross-entropy's gradient over no target is 0
  Tensor weighted = grad_weight == 1.0 ? loss : mul(loss, grad_weight);
  Tensor total = aux.defined() ? add(weighted, aux) : weighted;
  (accum == 1 ? total : mul(total, 1.0 / (double)accum)).backward();
  if (loss_weight == 1.0) return loss;
  return loss_weight == 0.0 ? zeros(loss.shape(), loss.dtype(), loss.device()) : mul(loss, loss_weight);
}

namespace {
// Planning a step of many micro-batches outside a pipeline (meta tensors under an untimed cost trace): each micro-
// batch runs the same forward and backward, and a plan of 1,024 of them traced each (16.8 s; a pipeline's schedule
// repeats its passes: parallel/pass_repeats.h, whose rule, record_pass, this keeps too). Once two micro-batches in a
// row recorded alike (CostSegment::same_as), both from the FSDP state they left, holding nothing more at their end and
// routing alike, the next ones are repeated from the record (replay_cost_segment) instead of traced — but the step's
// last, which reduces the gradients, always traced. Simulation.RepeatedMicroBatchesPlanAsTracedOnes holds such plans
// to the fully traced ones, event by event.
class MicroBatchRepeats {
 public:
  using Routed = std::vector<std::vector<int64_t>>;
  explicit MicroBatchRepeats(const parallel::FSDP* fsdp)
      : fsdp_(fsdp),
        on_(default_device() == Device::Meta && CostTrace::current() != nullptr && !CostTrace::current()->timed() &&
            repeated_cost_segments()) {}
  bool repeat(bool last) const { return on_ && steady_ && !last && state() == state_; }
  // A repeated micro-batch: the record's events, costs and peak; it leaves nothing held (its record did not).
  const Routed& replay() const {
    replay_cost_segment(record_);
    return routed_;
  }
  void begin(bool last) {
    if (!on_ || last) return;
    start_ = state();
    recording_.emplace();
  }
  void end(const Routed& routed) {
    if (!recording_) return;
    CostSegment seg = recording_->finish();
    bool holds = false;
    for (int64_t b : seg.net) holds = holds || b != 0;
    steady_ = parallel::record_pass(*recording_, std::move(seg), std::move(start_), state(), record_, state_, !holds) &&
              routed == routed_;
    recording_.reset();
    routed_ = routed;
  }

 private:
  std::vector<int64_t> state() const { return fsdp_ ? fsdp_->pass_state() : std::vector<int64_t>{}; }
  const parallel::FSDP* fsdp_;
  bool on_;
  bool steady_ = false;
  std::shared_ptr<const CostSegment> record_;  // the last recorded micro-batch
  std::vector<int64_t> state_, start_;         // the FSDP state it started in; the traced one's
  Routed routed_;                              // its routing
  std::optional<CostSegmentRecorder> recording_;
};

// All-reduce of host values over `pg` (meta: priced, values unchanged).
std::vector<double> all_reduce_values(comms::ProcessGroup& pg, const std::vector<double>& v, comms::ReduceOp op) {
  if (pg.size() == 1) return v;
  if (default_device() == Device::Meta) {
    pg.all_reduce(empty({(int64_t)v.size()}, DType::F64), op);
    return v;
  }
  return pg.all_reduce(from_vector<double>(v, {(int64_t)v.size()}), op).to_vector<double>();
}

// Adds one micro-batch's tokens per expert (`flat`: its all-reduced counts, layer after layer; empty: a plan's
// repeated micro-batch, whose all-reduce priced the counts and left them as they were) to the step's.
void add_expert_load(StepResult& r, const std::vector<std::vector<int64_t>>& routed, const std::vector<double>& flat = {}) {
  r.expert_load.resize(std::max(r.expert_load.size(), routed.size()));
  size_t at = 0;
  for (size_t i = 0; i < routed.size(); ++i) {
    r.expert_load[i].resize(routed[i].size(), 0.0);
    for (size_t e = 0; e < routed[i].size(); ++e, ++at) r.expert_load[i][e] += flat.empty() ? (double)routed[i][e] : flat[at];
  }
}
}  // namespace

StepResult train_step(TrainJob& job, const std::function<Batch()>& next_batch, double lr,
                      const std::function<void()>& before_norm) {
  comms::DeviceMesh& mesh = *job.mesh;
  const bool meta = default_device() == Device::Meta;
  StepResult r;
  double loss = 0;
  const bool pp = job.pipeline != nullptr;
  {
    AutocastScope autocast(job.compute);  // forward and backward (and recomputation in them) alike
    MicroBatchRepeats repeats(pp ? nullptr : job.pm.fsdp.get());  // (a pipeline repeats its own passes)
    for (int64_t m = 0; m < job.accumulation; ++m) {
      const bool last = m + 1 == job.accumulation;
      std::vector<std::vector<int64_t>> routed;
      if (!pp && repeats.repeat(last)) {
        next_batch();  // the data's order as traced
        routed = repeats.replay();
        add_expert_load(r, routed);
        continue;
      }
      repeats.begin(last || pp);
      {  // (the micro-batch's tensors freed before its record ends)
      // context parallel: this rank's chunks of the sequences and its share of the group's valid targets
      const ShardedBatch sb = shard_for_context_parallel(*job.model, mesh, next_batch());
      const Batch& b = sb.batch;
      const bool reduce = job.reduce_every_microbatch || last;
      if (pp) {  // the schedule's micro-batches: each stage reduces with its last backward
        parallel::Pipeline::Result pr = job.pipeline->train(b, sb.grad_weight / (double)job.accumulation, reduce,
                                                            1.0 / (double)job.accumulation);
        if (sb.loss_weight > 0) loss += pr.loss * sb.loss_weight / (double)job.accumulation;
        routed = std::move(pr.routed);
      } else {
        job.pm.fsdp->set_requires_gradient_sync(reduce);
        Tensor l = micro_batch_backward(*job.model, b.inputs, b.doc_ids, b.targets, job.accumulation, sb.loss_weight,
                                        sb.grad_weight);
        if (!meta) loss += (double)l.item<float>() / (double)job.accumulation;
        routed = job.model->routed_counts();
      }
      // as FSDP2 at the end of each backward: wait for the reductions still in flight (the last unit's)
      job.pm.wait_gradients();
      // tokens per expert, summed over the data-parallel ranks (and the stages, each of which counted its
      // own layers): identical on every rank
      if (!routed.empty()) {
        std::vector<double> flat;
        for (auto& layer : routed) flat.insert(flat.end(), layer.begin(), layer.end());
        flat = all_reduce_values(*mesh.dp, flat, comms::ReduceOp::Sum);
        if (mesh.degrees.cp > 1) flat = all_reduce_values(*mesh.cp, flat, comms::ReduceOp::Sum);  // each its tokens
        if (pp) flat = all_reduce_values(*mesh.pp, flat, comms::ReduceOp::Sum);
        add_expert_load(r, routed, flat);
      }
      }
      repeats.end(routed);
    }
  }
  if (mesh.degrees.cp > 1) loss = all_reduce_values(*mesh.cp, {loss}, comms::ReduceOp::Sum)[0];  // the group's mean
  r.loss = all_reduce_values(*mesh.dp, {loss}, comms::ReduceOp::Avg)[0];  // every rank sees the global mean
  if (pp) r.loss = all_reduce_values(*mesh.pp, {r.loss}, comms::ReduceOp::Sum)[0];  // from the last stage
  if (before_norm) before_norm();
  r.grad_norm = parallel::global_grad_norm(job.pm, mesh);
  r.finite = std::isfinite(r.loss) && std::isfinite(r.grad_norm);  // the same decision on every rank: no hang
  std::vector<Tensor*> params = job.pm.params();
  if (r.finite) {
    if (job.max_norm > 0) clip_grads(params, job.max_norm, r.grad_norm);
    job.opt->step(lr);
    if (!r.expert_load.empty() && !meta) job.model->update_router_bias(r.expert_load);
  }
  for (auto* p : params) p->zero_grad();
  return r;
}

}  // namespace titan
