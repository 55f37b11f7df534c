#include "parallel/fsdp.h"

#include <cstring>
#include <functional>

#include "comms/functional.h"
#include "src/autograd/function.h"
#include "src/log/log.h"
#include "src/ops/autocast.h"
#include "src/ops/float8.h"
#include "src/ops/ops.h"
#include "src/tensor/bfloat16.h"
#include "src/tensor/cost.h"

namespace titan::parallel {

using comms::ReduceOp;
using V = std::vector<Tensor>;

namespace {
// dst[dst_at : dst_at + n] = src[src_at : src_at + n] in elements of contiguous tensors. No cost record of
// its own: FSDP2 runs a unit's copy-in / copy-out as one kernel (foreach copy, chunk_cat), so the callers
// record one per bucket.
void copy_elems(const Tensor& dst, int64_t dst_at, const Tensor& src, int64_t src_at, int64_t n) {
  if (n == 0 || dst.is_meta()) return;
  TITAN_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.dtype() == src.dtype(),
              "FSDP: internal: flat copies need contiguous tensors of one dtype");
  const size_t es = dtype_size(dst.dtype());
  std::memcpy(static_cast<char*>(dst.raw_data()) + dst_at * es, static_cast<const char*>(src.raw_data()) + src_at * es,
              (size_t)n * es);
}

}  // namespace

struct FSDP::Param {
  std::string name;
  Tensor* slot = nullptr;  // the module's member, rebound to the gathered tensor each forward
  Tensor shard;            // [rows[r], ...] this rank's rows: the optimizer's leaf
  Tensor full;             // [rows summed, ...] gathered (storage freed when resharded)
  Shape full_shape;
  std::vector<int64_t> rows;  // dim-0 rows per group rank (torch.chunk sizes)
  int64_t row_elems = 1;      // elements per dim-0 row
  int64_t offset = 0;         // where this parameter starts in a rank's segment of the bucket (elements)
  bool bf16_wire = false;     // all-gathered as bf16 (a bf16 GEMM operand of a bf16 step)
  const Float8Casts* fp8 = nullptr;  // all-gathered as FP8 codes (float8.enable_fsdp_float8_all_gather): its casts
  float fp8_amax = 0;         // precomputed: the whole weight's amax this step (every shard, every tp rank)
  float fp8_scale = 1;        // the scale its codes were cast with (the decode divides by it)
  int wire_bytes = 4;         // bytes an element on the bucket's wire: 1 FP8, 2 bf16, 4 float32
  int64_t wire_offset = 0;    // wire buckets: where it starts in a rank's segment of the all-gather (bytes)
  double grad_scale = 1.0;
  Bucket* bucket = nullptr;
};

// The parameters of one unit sharded over one group: one flat all-gather, one flat reduce-scatter.
struct FSDP::Bucket {
  comms::PG group;
  DType dtype = DType::F32;
  std::vector<Param*> params;
  int64_t seg = 0;            // elements per rank: each parameter padded to ceil(rows / n) rows
  bool bf16_wire = false;     // a bf16 step's float32 bucket: the all-gather moves 2-byte units (BF16, typed)
  bool fp8_wire = false;      // holds FP8-gathered weights: the all-gather moves bytes (U8, typed)
  int64_t wire_seg = 0;       // wire buckets: bytes per rank (1 an FP8, 2 a bf16, 4 a float32 element)
  bool wired() const { return bf16_wire || fp8_wire; }
  bool sharded = false;       // group of more than one rank
  bool replicated = false;    // HSDP: an all-reduce over dp_replicate follows
  Tensor gathered;            // [n * seg] the prefetched all-gather's output
  comms::Work gather_work;
  Tensor grad_flat;           // [n * seg] the gradients of this backward, rank after rank
  bool holds_earlier = false; // grad_flat already holds unsynced micro-batches' gradients: add to it
  int arrived = 0;            // parameters whose gradient arrived in this backward
  bool direct() const { return !sharded && !replicated; }  // nothing to communicate
};

struct FSDP::Unit {
  std::string name;
  bool root = false;
  bool reshard = false;  // frees its gathered weights after forward
  std::vector<std::unique_ptr<Param>> params;
  std::vector<std::unique_ptr<Bucket>> buckets;
  bool gathered = false;
  bool prefetched = false;
  size_t released = 0;  // parameters whose gradient arrived in this backward
};

struct FSDP::Reduction {
  Bucket* bucket = nullptr;
  bool all_reduce_stage = false;  // HSDP: the reduce-scatter is done, the replica all-reduce runs
  Tensor out;                     // [seg] this rank's reduced shard
  comms::Work work;
};

std::vector<int64_t> FSDP::pass_state() const {
  std::vector<int64_t> s = {(int64_t)in_flight_.size(), forward_done_, sync_, reshard_after_backward_,
                            fp8_scales_stale_};
  for (const auto& u : units_) {
    s.insert(s.end(), {u->gathered, u->prefetched, (int64_t)u->released});
    for (const auto& b : u->buckets)
      s.insert(s.end(), {b->gathered.defined(), b->grad_flat.defined(), b->holds_earlier, b->arrived});
    for (const auto& p : u->params) s.push_back(p->shard.defined() && p->shard.impl()->grad != nullptr);
  }
  return s;
}

FSDP::FSDP(std::vector<nn::Module*> modules, comms::DeviceMesh& mesh, bool reshard_after_forward,
           std::vector<ShardSpec>& specs, PlacementFn placement, DType param_dtype, bool fp8_precompute)
    : mesh_(mesh), reshard_(reshard_after_forward), fp8_precompute_(fp8_precompute) {
  TITAN_CHECK(param_dtype == DType::BF16 || param_dtype == DType::F32, "FSDP: param_dtype bfloat16 or float32, got ",
              dtype_name(param_dtype));
  if (!placement) placement = [&mesh](const ShardSpec&) { return Placement{mesh.dp_shard_cp, 1.0}; };
  for (size_t ui = 0; ui < modules.size(); ++ui) {
    auto unit = std::make_unique<Unit>();
    unit->root = ui == 0;
    unit->name = ui == 0 ? "root" : "layer " + std::to_string(ui - 1);
    // TorchTitan's policy: the last block is not resharded (its backward comes first), nor the root
    unit->reshard = reshard_after_forward && ui > 0 && ui + 1 < modules.size();
    units_.push_back(std::move(unit));
  }
  // assign every parameter to the innermost unit that owns it (a layer before the root)
  int64_t total = 0;
  for (const ShardSpec& s : specs) total += s.owned ? s.slot->numel() : 0;
  Progress progress("sharding parameters (FSDP)", std::max<int64_t>(total, 1), "parameters");
  const bool replicated = mesh.dp_replicate->size() > 1;
  for (ShardSpec& s : specs) {
    if (!s.owned) continue;  // another pipeline stage's
    progress.add(s.slot->numel());
    size_t owner = 0;
    for (size_t ui = 1; ui < modules.size(); ++ui)
      for (auto& [nm, p] : modules[ui]->named_parameters())
        if (p == s.slot) owner = ui;
    Unit& u = *units_[owner];
    const Placement pl = placement(s);
    const Tensor& local = *s.slot;  // after tensor / expert parallel: this rank's block
    TITAN_CHECK(local.dim() >= 1, "FSDP: parameter ", s.name, " is a scalar; shard parameters of rank >= 1");
    Bucket* b = nullptr;
    for (auto& x : u.buckets)
      if (x->group == pl.group && x->dtype == local.dtype()) b = x.get();
    if (!b) {
      u.buckets.push_back(std::make_unique<Bucket>());
      b = u.buckets.back().get();
      b->group = pl.group;
      b->dtype = local.dtype();
      b->sharded = pl.group->size() > 1;
      b->replicated = replicated;
      // a bf16 step's gathers move typed bytes, whatever the bucket holds (a root of only the embedding too):
      // the simulator prices them as they are
      b->bf16_wire = param_dtype == DType::BF16 && b->dtype == DType::F32;
    }
    auto p = std::make_unique<Param>();
    p->name = s.name;
    p->slot = s.slot;
    p->grad_scale = pl.grad_scale;
    p->full_shape = local.shape();
    const int64_t n = pl.group->size(), r = pl.group->rank();
    p->rows = comms::chunk_sizes(local.size(0), n);
    p->row_elems = local.size(0) > 0 ? local.numel() / local.size(0) : 0;
    p->offset = b->seg;
    b->seg += p->rows[0] * p->row_elems;  // rows[0] = ceil(rows / n): the padded extent on every rank
    p->fp8 = s.fp8_gather;
    TITAN_CHECK(!p->fp8 || (b->dtype == DType::F32 && p->fp8->weight.scaling == Fp8Scaling::tensorwise),
                "FSDP: ", s.name, " is gathered as FP8 (float8.enable_fsdp_float8_all_gather): a float32 weight with a "
                "tensorwise cast expected");
    b->fp8_wire = b->fp8_wire || p->fp8;
    p->bf16_wire = b->bf16_wire && s.bf16_operand && !p->fp8;
    p->wire_bytes = p->fp8 ? 1 : p->bf16_wire ? 2 : 4;
    p->wire_offset = b->wire_seg;
    b->wire_seg += p->rows[0] * p->row_elems * p->wire_bytes;
    int64_t start = 0;
    for (int64_t q = 0; q < r; ++q) start += p->rows[q];
    {
      MemoryCategoryScope cat(MemoryCategory::Parameters);
      p->shard = slice(local, 0, start, start + p->rows[r]).clone().detach();  // own storage: the full one is freed
    }
    p->shard.requires_grad_(true);
    p->shard.set_name(s.name);
    s.offset[0] += start;
    s.writer = s.writer && mesh.replicate_rank == 0;
    p->bucket = b;
    b->params.push_back(p.get());
    u.params.push_back(std::move(p));
  }
  progress.finish();
  if (fp8_precompute_) {  // the FP8-gathered weights' amaxes are reduced together: over one group
    comms::PG group;
    for (auto& u : units_)
      for (auto& b : u->buckets)
        for (Param* p : b->params)
          if (p->fp8 && b->sharded) {
            TITAN_CHECK(!group || group == b->group, "config error: float8.precompute_float8_dynamic_scale_for_fsdp: "
                        "the FP8-gathered weights are sharded over more than one group (", group->name(), ", ",
                        b->group->name(), "); their amaxes are reduced together over one; drop the key");
            group = b->group;
          }
  }
  // free the full tensors: modules point at nothing until a forward binds them
  for (auto& u : units_)
    for (auto& p : u->params) *p->slot = Tensor();
  // specs now point at the shards (stable: parameters are heap objects)
  for (auto& u : units_)
    for (auto& p : u->params)
      for (ShardSpec& s : specs)
        if (s.name == p->name) s.slot = &p->shard;

  // hooks
  Unit* root = units_[0].get();
  modules[0]->register_forward_pre_hook([this, root](nn::Module&, const Tensor& x) {
    forward_done_ = false;
    unshard(*root);
    bind(*root);
    if (units_.size() > 1) prefetch(*units_[1]);
    return x;
  });
  modules[0]->register_forward_post_hook([this](nn::Module&, const Tensor& y) {
    forward_done_ = true;
    return y;
  });
  for (size_t ui = 1; ui < units_.size(); ++ui) {
    Unit* u = units_[ui].get();
    Unit* next = ui + 1 < units_.size() ? units_[ui + 1].get() : nullptr;
    Unit* prev = ui > 1 ? units_[ui - 1].get() : nullptr;
    modules[ui]->register_forward_pre_hook([this, u, next](nn::Module&, const Tensor& x) {
      unshard(*u);  // a no-op when recomputed in backward (activation checkpointing): gathered already
      bind(*u);
      if (next && !forward_done_) prefetch(*next);
      return x;
    });
    modules[ui]->register_forward_post_hook([this, u, prev](nn::Module&, const Tensor& y) {
      if (forward_done_) return y;  // a recompute inside backward: the unit stays gathered for its backward
      if (u->reshard) release(*u);
      if (!autograd::grad_enabled()) return y;  // evaluation: no backward to prepare
      // entering this unit's backward: gather it again (when resharded) and prefetch the previous unit
      return autograd::custom_op(
          "FSDPPreBackward", {y}, [](const V& in) { return V{in[0]}; },
          [this, u, prev](const V& g) {
            unshard(*u);
            if (prev) prefetch(*prev);
            return V{g[0]};
          })[0];
    });
  }
}

FSDP::~FSDP() {
  for (auto& u : units_)
    for (auto& b : u->buckets) b->gather_work.wait();
  for (auto& r : in_flight_) r->work.wait();
}

void FSDP::prefetch(Unit& u) {
  if (u.gathered || u.prefetched) return;
  NoGradGuard ng;
  MemoryCategoryScope cat(MemoryCategory::Communication);
  for (auto& bp : u.buckets) {
    Bucket& b = *bp;
    if (!b.sharded) continue;
    Tensor flat = copy_in(b);  // [seg], or on a wire [wire_seg] bytes (as BF16 units or U8)
    // one kernel (FSDP2's foreach copy-in), priced in the run's parameter dtype as every copy is; an FP8 weight's
    // codes are written by its cast (priced there)
    int64_t copied = b.seg;
    for (Param* p : b.params)
      if (p->fp8) copied -= p->rows[0] * p->row_elems;
    record_cost("fsdp_copy_in", 0, 2.0 * (double)(copied * dtype_size(b.dtype)));
    std::tie(b.gathered, b.gather_work) = b.group->all_gather_async(flat, 0);  // [n * seg] or [n * wire units]
  }
  u.prefetched = true;
}

void FSDP::prefetch_all() {
  for (auto& u : units_) prefetch(*u);  // a no-op for a unit gathered or in flight
}

void FSDP::unshard(Unit& u) {
  if (u.gathered) return;
  prefetch(u);  // a no-op when already issued
  NoGradGuard ng;
  for (auto& bp : u.buckets) {
    Bucket& b = *bp;
    if (!b.sharded) {  // nothing to gather: the shard is the whole tensor (no copy, never freed)
      for (Param* p : b.params) p->full = p->shard.detach();
      continue;
    }
    b.gather_work.wait();
    for (Param* p : b.params) {
      if (!p->full.defined()) {
        MemoryCategoryScope cat(MemoryCategory::Communication);
        p->full = empty(p->full_shape, b.dtype);
      } else {
        p->full.refill_storage();  // resharded: saved activations alias this buffer, refill it
      }
    }
    copy_out(b);
    for (Param* p : b.params)  // its GEMMs read the gathered codes' values as the weight's cast (no second cast)
      if (p->fp8) mark_fp8_operand(p->full, p->fp8->weight, /*spans_cut=*/true);
    record_cost("fsdp_copy_out", 0, 2.0 * (double)(b.group->size() * b.seg * dtype_size(b.dtype)));
    b.gathered = Tensor();
  }
  u.prefetched = false;
  u.gathered = true;
  u.released = 0;
}

// Copy-in: this rank's shards, each padded to the bucket's per-parameter extent, as the all-gather sends them:
// [seg] in the bucket's dtype, or on a wire [wire_seg] bytes — a bf16 operand's values rounded to bf16 (2 bytes),
// an FP8 weight's codes (1 byte: cast from its float32 values with the whole weight's scale), a float32
// parameter's bytes as they are (4) — sent as BF16 units (a bf16 wire without FP8) or as bytes (U8).
Tensor FSDP::copy_in(Bucket& b) {
  const int64_t r = b.group->rank();
  if (!b.wired()) {
    Tensor flat = zeros({b.seg}, b.dtype);  // [seg]
    for (Param* p : b.params) copy_elems(flat, p->offset, p->shard, 0, p->rows[r] * p->row_elems);
    return flat;
  }
  Tensor flat = b.fp8_wire ? empty({b.wire_seg}, DType::U8) : empty({b.wire_seg / 2}, DType::BF16);
  // precomputed scales: the step's first FP8 gather computes them (a pipeline stage may gather all of its units
  // before its first forward: parallelism.fsdp_gather_stage_at_start)
  if (b.fp8_wire && fp8_precompute_ && fp8_scales_stale_) precompute_fp8_amax();
  std::vector<Tensor> codes(b.params.size());  // the FP8 weights' casts (on meta shards too: priced)
  for (size_t i = 0; i < b.params.size(); ++i) {
    Param* p = b.params[i];
    if (!p->fp8) continue;
    const Tensor shard = p->shard.detach().reshape({p->rows[r], p->row_elems});  // [rows_r, in]
    const std::function<void(std::vector<float>&)> amax = [&](std::vector<float>& a) {
      if (fp8_precompute_) {
        a.assign(1, p->fp8_amax);
        return;
      }
      fp8_weight_amax(b, *p, a);
    };
    const Fp8Codes c = fp8_encode(shard, p->fp8->weight, amax);
    p->fp8_scale = c.scale;
    codes[i] = c.codes;
  }
  if (flat.is_meta()) return flat;
  char* w = static_cast<char*>(flat.raw_data());
  std::memset(w, 0, (size_t)b.wire_seg);  // the padding rows: sent, never read
  std::vector<uint16_t> bits;
  for (size_t i = 0; i < b.params.size(); ++i) {
    Param* p = b.params[i];
    const int64_t n = p->rows[r] * p->row_elems;
    if (n == 0) continue;
    TITAN_CHECK(p->shard.is_contiguous(), "FSDP: internal: shard ", p->name, " is not contiguous");
    char* at = w + p->wire_offset;
    if (p->fp8) {
      std::memcpy(at, codes[i].raw_data(), (size_t)n);
    } else if (p->bf16_wire) {
      bits.resize((size_t)n);
      float_to_bf16_bits(p->shard.data<float>(), bits.data(), n);
      std::memcpy(at, bits.data(), (size_t)n * 2);
    } else {
      std::memcpy(at, p->shard.raw_data(), (size_t)n * 4);
    }
  }
  return flat;
}

// An FP8 weight's amax for its cast before the gather: its shard's, all-reduced (max) over the bucket's group
// and, for a weight tensor parallel cuts, over the tp group (the whole weight's: torchao's amax of the DTensor),
// one all-reduce each per weight and gather (a plan prices them).
void FSDP::fp8_weight_amax(Bucket& b, Param& p, std::vector<float>& a) {
  comms::all_reduce_amax(b.group, a);
  if (p.fp8->tp) p.fp8->tp->reduce_max(a);
}

// float8.precompute_float8_dynamic_scale_for_fsdp: every FP8 weight's amax in one all-reduce over their group
// (and one over tp when tensor parallel cuts them), once a step before the first gather (torchao's
// precompute_float8_dynamic_scale_for_fsdp after the optimizer step): the gathers that follow cast with them.
void FSDP::precompute_fp8_amax() {
  NoGradGuard ng;
  std::vector<Param*> ps;
  comms::PG group;
  const Fp8TensorParallel* cut = nullptr;
  for (auto& u : units_)
    for (auto& b : u->buckets)
      for (Param* p : b->params)
        if (p->fp8 && b->sharded) {
          group = b->group;  // one group (the constructor checked)
          if (p->fp8->tp) cut = p->fp8->tp.get();
          ps.push_back(p);
        }
  fp8_scales_stale_ = false;
  if (ps.empty()) return;
  const bool meta = ps[0]->shard.is_meta();
  // their shards' amaxes, one kernel over every weight (torch's foreach)
  double elems = 0;
  for (Param* p : ps) elems += (double)p->shard.numel();
  record_cost("fp8_precompute_amax", elems, 4.0 * elems);
  std::vector<float> a(ps.size(), 0.0f);
  if (!meta)
    for (size_t i = 0; i < ps.size(); ++i) a[i] = fp8_amax(ps[i]->shard);
  comms::all_reduce_amax(group, a);
  if (cut) cut->reduce_max(a);
  for (size_t i = 0; i < ps.size(); ++i) ps[i]->fp8_amax = a[i];
}

// Copy-out: rank q's rows of each parameter sit at q * seg + offset (q * wire_seg + wire_offset bytes on a wire)
// of the gathered flat buffer; they become rows of the parameter's full tensor (an FP8 weight's codes decoded:
// code / scale, the values its GEMMs multiply).
void FSDP::copy_out(const Bucket& b) {
  if (b.gathered.is_meta()) return;
  std::vector<uint16_t> bits;
  for (Param* p : b.params) {
    float value[256];
    if (p->fp8)
      for (int c = 0; c < 256; ++c) value[c] = fp8_decode((uint8_t)c, p->fp8->weight.format) / p->fp8_scale;
    int64_t start = 0;
    for (size_t q = 0; q < p->rows.size(); ++q) {
      const int64_t n = p->rows[q] * p->row_elems, at = start * p->row_elems;
      start += p->rows[q];
      if (!b.wired()) {
        copy_elems(p->full, at, b.gathered, (int64_t)q * b.seg + p->offset, n);
        continue;
      }
      const char* w = static_cast<const char*>(b.gathered.raw_data()) + (int64_t)q * b.wire_seg + p->wire_offset;
      float* dst = p->full.data<float>() + at;
      if (p->fp8) {
        const uint8_t* c = reinterpret_cast<const uint8_t*>(w);
        for (int64_t i = 0; i < n; ++i) dst[i] = value[c[i]];
      } else if (p->bf16_wire) {
        bits.resize((size_t)n);
        std::memcpy(bits.data(), w, (size_t)n * 2);
        bf16_bits_to_float(bits.data(), dst, n);
      } else {
        std::memcpy(dst, w, (size_t)n * 4);
      }
    }
  }
}

void FSDP::bind(Unit& u) {
  for (auto& pp : u.params) {
    Param* p = pp.get();
    Unit* up = &u;
    *p->slot = autograd::custom_op(
        "FSDPAllGather", {p->shard}, [p](const V&) { return V{p->full.detach()}; },
        [this, p, up](const V& g) { return V{gradient_arrived(*up, *p->bucket, *p, g[0])}; })[0];
    p->slot->set_name(p->name);
  }
}

void FSDP::release(Unit& u) {
  for (auto& b : u.buckets)
    if (b->sharded)  // an unsharded "gathered" tensor is the shard itself
      for (Param* p : b->params) p->full.release_storage();
  u.gathered = false;
}

// The backward of FSDPAllGather: the parameter's full gradient [rows, ...] goes into its bucket's flat
// buffer; the bucket's last gradient issues the reduction. Returns the gradient for the shard leaf when
// nothing is communicated, else none (wait_gradients adds the reduced shard).
Tensor FSDP::gradient_arrived(Unit& u, Bucket& b, Param& p, const Tensor& g) {
  NoGradGuard ng;
  Tensor direct;
  if (b.direct()) {
    direct = p.grad_scale != 1.0 ? mul(g, p.grad_scale) : g;
  } else {
    const int64_t n = b.group->size();
    if (!b.grad_flat.defined()) {
      MemoryCategoryScope cat(MemoryCategory::Communication);
      b.grad_flat = zeros({n * b.seg}, b.dtype);  // padding rows stay zero
    }
    int64_t start = 0;
    // planning (meta): no element moves, and the copy's one cost record is the bucket's (below)
    for (int64_t q = 0; q < (b.grad_flat.is_meta() ? 0 : n); ++q) {
      const int64_t rows = p.rows[q], at = q * b.seg + p.offset;
      if (rows > 0 && g.is_contiguous() && !b.holds_earlier) {
        copy_elems(b.grad_flat, at, g, start * p.row_elems, rows * p.row_elems);
      } else if (rows > 0) {  // a strided gradient (e.g. a transposed GEMM output), or accumulation
        CostRecordPause pause;  // the bucket's copy-in is recorded once, below
        Shape s = p.full_shape;
        s[0] = rows;
        Tensor dst = reshape(slice(b.grad_flat, 0, at, at + rows * p.row_elems), s);
        if (b.holds_earlier) add_(dst, slice(g, 0, start, start + rows));
        else copy_(dst, slice(g, 0, start, start + rows));
      }
      start += rows;
    }
    if (++b.arrived == (int)b.params.size()) {
      // FSDP2: one chunk_cat per bucket (accumulating: one add more)
      record_cost("fsdp_grad_copy_in", 0, (b.holds_earlier ? 3.0 : 2.0) * (double)b.grad_flat.nbytes());
      if (sync_) {
        issue_reduction(b);
      } else {  // kept for a later backward (pipeline micro-batches run several per step): added up unsharded
        b.grad_flat.set_storage_category(MemoryCategory::Gradients);
        b.holds_earlier = true;
        b.arrived = 0;
      }
    }
  }
  // reshard after backward: this parameter's gathered copy is no longer needed (kept for the next
  // micro-batch when set_reshard_after_backward(false))
  if (reshard_after_backward_) {
    if (b.sharded) p.full.release_storage();
    if (++u.released == u.params.size()) u.gathered = false;
  }
  return direct;
}

void FSDP::set_reduce_dtype(DType dt) {
  TITAN_CHECK(dt == DType::BF16 || dt == DType::F32, "FSDP::set_reduce_dtype: bfloat16 or float32, got ",
              dtype_name(dt));
  reduce_bf16_ = dt == DType::BF16;
}

void FSDP::issue_reduction(Bucket& b) {
  while ((int)in_flight_.size() >= kMaxReductionsInFlight) advance_oldest();
  GradientReductionScope grads;  // these collectives carry gradients (training.mixed_precision_reduce)
  MemoryCategoryScope cat(MemoryCategory::Communication);
  auto r = std::make_unique<Reduction>();
  r->bucket = &b;
  if (b.sharded) {
    std::tie(r->out, r->work) = b.group->reduce_scatter_async(b.grad_flat, 0, ReduceOp::Avg, {}, reduce_dtype());  // [seg]
  } else {  // replicas only (DDP): all-reduce the flat gradients
    r->all_reduce_stage = true;
    std::tie(r->out, r->work) = mesh_.dp_replicate->all_reduce_async(b.grad_flat, ReduceOp::Avg, reduce_dtype());
  }
  b.grad_flat = Tensor();  // the collective holds its input until it is done
  b.holds_earlier = false;
  b.arrived = 0;
  in_flight_.push_back(std::move(r));
}

// Waits for the oldest reduction: a waited reduce-scatter of an HSDP bucket goes on to its replica
// all-reduce (queued last); anything else is finished.
void FSDP::advance_oldest() {
  std::unique_ptr<Reduction> r = std::move(in_flight_.front());
  in_flight_.pop_front();
  r->work.wait();
  if (!r->all_reduce_stage && r->bucket->replicated) {
    GradientReductionScope grads;
    MemoryCategoryScope cat(MemoryCategory::Communication);
    r->all_reduce_stage = true;
    std::tie(r->out, r->work) = mesh_.dp_replicate->all_reduce_async(r->out, ReduceOp::Avg, reduce_dtype());
    in_flight_.push_back(std::move(r));
    return;
  }
  finish(*r);
}

// Each parameter's rows of the reduced shard become its .grad (views of the shard, no copy, as FSDP2's
// reduce-scatter output), or are added into the .grad of an earlier micro-batch.
void FSDP::finish(Reduction& r) {
  NoGradGuard ng;
  Bucket& b = *r.bucket;
  const int64_t rank = b.group->rank();
  bool uniform = true;  // one gradient factor for the bucket: scale the shard at once
  for (Param* p : b.params) uniform = uniform && p->grad_scale == b.params[0]->grad_scale;
  if (uniform && b.params[0]->grad_scale != 1.0) mul_(r.out, b.params[0]->grad_scale);
  bool viewed = false;
  for (Param* p : b.params) {
    const int64_t n = p->rows[rank] * p->row_elems;
    Tensor g = reshape(slice(r.out, 0, p->offset, p->offset + n), p->shard.shape());
    if (!uniform && p->grad_scale != 1.0) g = mul(g, p->grad_scale);
    Tensor cur = p->shard.grad();
    if (cur.defined()) {
      add_(cur, g);
    } else {
      p->shard.set_grad(g);
      viewed = true;
    }
  }
  if (viewed) r.out.set_storage_category(MemoryCategory::Gradients);
}

void FSDP::wait_gradients() {
  // buckets some of whose parameters took no part in this backward: reduce what arrived (the same
  // parameters on every rank: the model's structure decides), last unit first as backward runs
  for (auto it = units_.rbegin(); it != units_.rend(); ++it)
    for (auto& b : (*it)->buckets) {
      // nothing arrived: skip, unless gradients added up over earlier backwards still wait for their reduction
      if (b->arrived == 0 && !(sync_ && b->holds_earlier)) continue;
      if (b->arrived > 0 && b->arrived < (int)b->params.size())
        record_cost("fsdp_grad_copy_in", 0, (b->holds_earlier ? 3.0 : 2.0) * (double)b->grad_flat.nbytes());
      if (sync_) {
        issue_reduction(*b);
      } else {  // kept for the next backward: unsharded gradients, charged as such
        b->grad_flat.set_storage_category(MemoryCategory::Gradients);
        b->holds_earlier = true;
        b->arrived = 0;
      }
    }
  while (!in_flight_.empty()) advance_oldest();
  if (sync_) fp8_scales_stale_ = true;  // the optimizer step follows: precomputed FP8 scales are recomputed
  // reshard after backward, also a unit some of whose parameters got no gradient
  for (auto& u : units_)
    if (u->released > 0) {
      release(*u);
      u->released = 0;
    }
}

}  // namespace titan::parallel
