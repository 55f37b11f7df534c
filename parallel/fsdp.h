// parallel/fsdp.h — FSDP2-style fully sharded data parallel over the dp_shard
// group (HSDP: plus an all-reduce over dp_replicate). Each parameter is
// sharded along dim 0 in torch.chunk sizes; its shard is the leaf the
// optimizer updates.
//
// Mixed precision (FSDP2's MixedPrecisionPolicy, param_dtype bf16): the parameters that are only bf16 GEMM
// operands (ShardSpec::bf16_operand) travel as bf16 in the all-gather, the rest (norms, embedding, biases, the
// router) as float32, in the one flat all-gather of the bucket (per rank: each parameter's padded rows, 2 or 4
// bytes an element; every bucket of a bf16 step travels so, as typed bytes for the simulator); the gathered copy
// holds float32 values (bf16-valued for the former, which the GEMM rounds to the same bits), the shards and the
// optimizer stay float32. FP8 linear layers' weights (ShardSpec::fp8_gather: float8.enable_fsdp_float8_all_gather,
// torchao's WeightWithDynamicFloat8CastTensor) travel as FP8 codes, one byte an element: each rank casts its float32
// shard with the whole weight's tensorwise scale (its amax all-reduced over the group, and over tp when tensor
// parallel cuts the weight), the gathered copy holds the codes' values (code / scale), marked as the weight's cast
// (mark_fp8_operand): its GEMMs cast it no further. Such a bucket's all-gather moves bytes (U8, typed).
//
// Units as in FSDP2 / TorchTitan: each transformer block is one unit, the root
// unit holds the rest (embedding, final norm, lm_head). A unit's parameters
// are grouped into buckets by the process group they are sharded over (expert
// weights under EP use their own group); per bucket and step:
//  - forward: ONE flat all-gather of the unit's shards (each shard padded to
//    ceil(rows / n) rows, so every rank sends the same count), issued one unit
//    ahead (prefetch) and copied out into the parameters when the unit runs;
//  - reshard after forward (parallelism.fsdp_reshard_after_forward, TorchTitan's
//    default policy): every block but the last frees its gathered weights after
//    its forward and gathers them again, one unit ahead, in backward; the root
//    and the last block stay gathered (their backward comes first);
//  - backward: each parameter's full gradient is copied into the bucket's flat
//    buffer as it arrives; when the last one has arrived, ONE flat
//    reduce-scatter (mean over dp_shard) is issued asynchronously. At most
//    kMaxReductionsInFlight reductions are outstanding: issuing one more first
//    waits for the oldest, so the reduce-scatter of block i runs during the
//    backward of block i-1. HSDP: a waited reduce-scatter's shard goes on to an
//    asynchronous all-reduce (mean over dp_replicate) in the same queue.
//  - wait_gradients() (called by the step at the end of each backward, as
//    FSDP2) waits for everything still in flight; each reduced shard becomes
//    (a view) or is added into its parameters' .grad (accumulating over
//    micro-batches), or, with set_requires_gradient_sync(false), the unsharded
//    gradients are kept and added up until a synced backward reduces them once.
#pragma once
#include <deque>
#include <memory>
#include <vector>

#include "comms/device_mesh.h"
#include "src/nn/module.h"
#include "parallel/shard_spec.h"

namespace titan::parallel {

class FSDP {
 public:
  // How a parameter is sharded: the group its dim 0 is split over and a
  // factor on its averaged gradient (expert parameters: their own data-parallel
  // group, 1/ep). Default: mesh.dp_shard_cp (dp_shard x cp: context-parallel ranks see different tokens), 1.
  struct Placement {
    comms::PG group;
    double grad_scale = 1.0;
  };
  using PlacementFn = std::function<Placement(const ShardSpec&)>;
  static constexpr int kMaxReductionsInFlight = 2;

  // units[0] is the root; its pre-hook must be the first to run in forward.
  // param_dtype BF16: bf16 operands are all-gathered in bf16 (above); F32: everything in float32.
  // fp8_precompute (float8.precompute_float8_dynamic_scale_for_fsdp): the FP8-gathered weights' (ShardSpec::
  // fp8_gather) amaxes all-reduced together once a step, before the first gather; else one all-reduce per weight
  // and gather.
  FSDP(std::vector<nn::Module*> units, comms::DeviceMesh& mesh, bool reshard_after_forward,
       std::vector<ShardSpec>& specs, PlacementFn placement = nullptr, DType param_dtype = DType::F32,
       bool fp8_precompute = false);
  ~FSDP();

  // Completes the gradient reductions of the backward(s) run so far: a bucket
  // some of whose parameters got no gradient is reduced now (zeros for those),
  // then every reduction in flight is waited for and its shard added into the
  // parameters' .grad. The step calls this once before it reads gradients.
  void wait_gradients();

  // Gradient accumulation: with sync off, each unit's gradients are added up unsharded over the
  // backwards that follow, and reduced (one flat reduce-scatter per unit) by the first backward run
  // with sync on again (FSDP2's set_requires_gradient_sync). Default on: every backward reduces.
  void set_requires_gradient_sync(bool sync) { sync_ = sync; }
  // Off: a unit keeps its gathered weights after its backward (FSDP2's set_reshard_after_backward), so the
  // next micro-batch of a pipeline schedule runs without gathering them again; the stage's last backward
  // turns it on and frees them. Default on.
  void set_reshard_after_backward(bool reshard) { reshard_after_backward_ = reshard; }
  // Issues the all-gathers of every unit not gathered or in flight yet, in unit order. With
  // parallelism.fsdp_gather_stage_at_start, a pipeline stage that keeps its weights gathered through a schedule
  // (no resharding after forward, the default under PP) calls it as the schedule starts: its weights then arrive
  // while the stages before it fill the pipeline, instead of one unit ahead of its first forward (FSDP2's way,
  // which, where a unit's gather outlasts its forward, makes every stage's first micro-batch wait for its
  // gathers one by one). The peak memory is the same: such a stage holds all of its gathered weights anyway.
  void prefetch_all();
  // parallelism.fsdp_gather_stage_at_start: the pipeline schedule calls prefetch_all() as it starts (off: each
  // unit is gathered one unit ahead of its forward, as FSDP2)
  void set_gather_stage_at_start(bool on) { gather_stage_at_start_ = on; }
  bool gathers_stage_at_start() const { return gather_stage_at_start_ && !reshard_; }
  // The dtype gradients are reduced in (training.mixed_precision_reduce): bf16 reduce-scatters / all-reduces
  // (each stage of HSDP's two) on a bf16 wire: each rank's flat gradient rounded to bf16 and sent as 2-byte bits,
  // averaged as NCCL's bf16 ncclAvg (each value times bf16(1 / ranks), rounded, then summed with each addition
  // rounded: ProcessGroup's wire).
  void set_reduce_dtype(DType dt);
  // What a forward or backward pass reads and may change (units gathered and prefetched, gradients arrived and
  // held, reductions in flight, the flags the schedule sets): a pipeline's plan repeats a recorded pass only
  // from the state the pass was recorded in and only a pass that left it as it found it (parallel/pass_repeats.h).
  std::vector<int64_t> pass_state() const;
  DType reduce_dtype() const { return reduce_bf16_ ? DType::BF16 : DType::F32; }

  struct Param;
  struct Bucket;
  struct Unit;
  struct Reduction;

 private:
  void prefetch(Unit& u);
  Tensor copy_in(Bucket& b);
  void fp8_weight_amax(Bucket& b, Param& p, std::vector<float>& amax);
  void precompute_fp8_amax();
  static void copy_out(const Bucket& b);
  void unshard(Unit& u);
  void bind(Unit& u);
  void release(Unit& u);
  Tensor gradient_arrived(Unit& u, Bucket& b, Param& p, const Tensor& g);
  void issue_reduction(Bucket& b);
  void advance_oldest();
  void finish(Reduction& r);
  std::vector<std::unique_ptr<Unit>> units_;
  std::deque<std::unique_ptr<Reduction>> in_flight_;
  comms::DeviceMesh& mesh_;
  bool reshard_;
  bool forward_done_ = false;  // the root's forward has returned: hooks now run in backward (recompute)
  bool sync_ = true;
  bool reshard_after_backward_ = true;
  bool reduce_bf16_ = false;
  bool gather_stage_at_start_ = false;
  bool fp8_precompute_ = false;
  bool fp8_scales_stale_ = true;  // precomputed FP8 scales: recomputed before the next forward (a new step)
};

}  // namespace titan::parallel
