// step/train_step.h — the training job, built by one function and
// stepped by one function, for titan-train and the meta planner alike: the
// simulated step is by construction the step that runs (the same micro-batches,
// MoE auxiliary loss, FSDP reductions, loss and expert-load all-reduces,
// gradient-norm all-reduce, clipping and optimizer).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "comms/device_mesh.h"
#include "models/converters.h"
#include "models/decoder/model.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline.h"
#include "step/job_config.h"
#include "src/data/loader.h"
#include "src/optim/adamw.h"

namespace titan {

// What the parallelism.* keys ask of the plan.
parallel::ParallelOptions parallel_options(const JobConfig& cfg);

// The mesh degrees of the parallelism.* keys (dp_shard -1: resolved by the mesh against the world).
comms::MeshDegrees mesh_degrees(const JobConfig& cfg);

// The micro-batches of one optimizer step: training.global_batch_size over
// local_batch_size x data-parallel ranks (-1: one); a global batch that is not
// a multiple is refused — by the trainer and the planner alike.
int64_t gradient_accumulation_steps(const JobConfig& cfg, int64_t dp);

struct TrainJob {
  comms::DeviceMesh* mesh = nullptr;
  std::unique_ptr<decoder::Decoder> model;
  parallel::ParallelModel pm;
  std::unique_ptr<AdamW> opt;
  int64_t accumulation = 1;  // micro-batches per optimizer step
  double max_norm = 0;       // training.max_norm (<= 0: no clipping)
  bool reduce_every_microbatch = true;  // parallelism.fsdp_reduce_every_microbatch
  std::shared_ptr<parallel::Pipeline> pipeline;  // pipeline_parallel_degree > 1: runs each micro-batch's schedule
  models::Float8Conversion float8;  // model.converters float8: the linear layers converted and those filtered
  DType compute = DType::F32;  // training.mixed_precision_param: the steps' GEMMs run under AutocastScope(compute)
};

// The stages of parallelism.pipeline_parallel_* over model.n_layers.
parallel::PipelineLayout pipeline_layout(const JobConfig& cfg);

// What the job is built for: training (weights initialized from debug.seed, AdamW), or evaluating weights
// that are loaded next (titan-eval: neither).
enum class JobPurpose { train, evaluate };

// Builds the job on the DeviceScope's device, for titan-train, titan-eval and the planner alike: the model of
// cfg.model (real tensors: initialised from debug.seed, identical on every rank), activation checkpointing,
// then `before_parallelize` (e.g. loading weights), the parallel plan on `mesh`, the pipeline, AdamW on the
// shards, the accumulation steps. The sequence length is checked against the mesh first
// (MeshDegrees::check_sequence_length).
TrainJob build_job(const JobConfig& cfg, comms::DeviceMesh& mesh,
                   const std::function<void(decoder::Decoder&)>& before_parallelize = nullptr,
                   JobPurpose purpose = JobPurpose::train);

// Pipeline parallel: one micro-batch of the step (a local batch) through the schedule (pipeline.h);
// the loss on the last stage's ranks, 0 on the others.
// Otherwise: one micro-batch of the step: forward, the loss plus the MoE auxiliary loss,
// backward of that sum / accum. Returns the loss without the auxiliary term
// (what the step line reports).
// loss_weight: context parallel, this rank's share of its group's valid tokens (the mean is taken over the
// group's tokens: the reported loss carries loss_weight, the backward cp x loss_weight, since FSDP averages
// the gradients over dp_shard x cp); 1 otherwise.
Tensor micro_batch_backward(decoder::Decoder& model, const Tensor& inputs, const Tensor& doc_ids, const Tensor& targets,
                            int64_t accum, double loss_weight = 1.0, double grad_weight = 1.0);

// Context parallel: this rank's columns of a micro-batch and their weights in the loss (the share of the cp
// group's valid targets this rank holds; its sum over the group all-reduced, priced in a plan). Without cp:
// the batch, weight 1.
struct ShardedBatch {
  Batch batch;
  double loss_weight = 1.0;  // n_local / n_group
  double grad_weight = 1.0;  // cp x loss_weight
};
ShardedBatch shard_for_context_parallel(const decoder::Decoder& model, comms::DeviceMesh& mesh, const Batch& b);

struct StepResult {
  double loss = 0;       // mean over the micro-batches and data-parallel ranks (meta: 0)
  double grad_norm = 0;  // before clipping (meta: 0)
  bool finite = true;    // loss and norm finite; otherwise the optimizer step was skipped
  std::vector<std::vector<double>> expert_load;  // per MoE layer, per expert: tokens routed this step (all ranks)
};

// One optimizer step: job.accumulation micro-batches from next_batch (each
// backward issues its FSDP reduce-scatters asynchronously and, as FSDP2, waits
// for the last ones when it ends; with fsdp_reduce_every_microbatch false
// only the last micro-batch's backward reduces, the sum of all), the tokens-per-expert all-reduce per
// micro-batch, then the loss all-reduce, `before_norm` (e.g. a gradient dump), the gradient-norm
// all-reduce, clipping, AdamW at `lr`, the router-bias update, zeroed grads.
// A non-finite loss or norm skips the optimizer (finite = false).
StepResult train_step(TrainJob& job, const std::function<Batch()>& next_batch, double lr,
                      const std::function<void()>& before_norm = nullptr);

}  // namespace titan
