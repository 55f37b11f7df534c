#include "parallel/pipeline.h"

#include <algorithm>
#include <map>
#include <optional>

#include "comms/functional.h"
#include "parallel/fsdp.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"
#include "src/tensor/cost_segment.h"
#include "src/tensor/memory.h"

namespace titan::parallel {

std::vector<int64_t> PipelineLayout::stages_of(int64_t pp_rank) const {
  std::vector<int64_t> out;
  for (int64_t s = pp_rank; s < (int64_t)stages.size(); s += pp) out.push_back(s);
  return out;
}

std::vector<ModelChunk> PipelineLayout::chunks_of(int64_t pp_rank) const {
  std::vector<ModelChunk> out;
  for (int64_t s : stages_of(pp_rank)) out.push_back(stages[s]);
  return out;
}

std::string PipelineLayout::describe() const {
  std::string d;
  for (size_t s = 0; s < stages.size(); ++s) {
    const ModelChunk& c = stages[s];
    const std::string blocks = c.end > c.begin ? "blocks " + std::to_string(c.begin) + "-" + std::to_string(c.end - 1)
                                               : std::string("no block");
    d += (s ? ", " : "") + std::string("stage ") + std::to_string(s) + " (pp rank " + std::to_string(rank_of(s)) +
         "): " + (c.first ? "embedding + " : "") + blocks + (c.last ? " + norm, head" : "");
  }
  return d;
}

PipelineLayout pipeline_layout(int64_t n_layers, int64_t pp, PipelineSchedule schedule, int64_t layers_per_stage,
                               int64_t first_less, int64_t last_less) {
  TITAN_CHECK(pp >= 1, "pipeline: pipeline_parallel_degree must be >= 1, got ", pp);
  TITAN_CHECK(first_less >= 0 && last_less >= 0, "config error: parallelism.pipeline_parallel_first_stage_less_layers (",
              first_less, ") and _last_stage_less_layers (", last_less, ") must be >= 0");
  const bool interleaved = schedule == PipelineSchedule::Interleaved1F1B;
  // the embedding and the head count as first_less / last_less blocks when the blocks are split (TorchTitan's
  // weights): the edge stages hold that many fewer
  const int64_t effective = n_layers + first_less + last_less;
  int64_t n_stages = interleaved ? 2 * pp : pp;
  const std::string how = layers_per_stage > 0
                              ? "ceil((model.n_layers " + std::to_string(n_layers) + " + " + std::to_string(first_less) +
                                    " + " + std::to_string(last_less) + ") / parallelism.pipeline_parallel_layers_per_stage " +
                                    std::to_string(layers_per_stage) + ")"
                              : std::string(interleaved ? "2 per rank" : "1 per rank");
  if (layers_per_stage > 0) n_stages = (effective + layers_per_stage - 1) / layers_per_stage;  // uneven by <= 1
  TITAN_CHECK(n_stages % pp == 0, "config error: ", n_stages, " pipeline stages (", how,
              ") must be a multiple of parallelism.pipeline_parallel_degree (", pp,
              "): pipeline_parallel_degree must divide the stage count; adjust pipeline_parallel_layers_per_stage");
  TITAN_CHECK(interleaved || n_stages == pp, "config error: parallelism.pipeline_parallel_schedule ",
              schedule == PipelineSchedule::GPipe ? "GPipe" : "1F1B", " runs one stage per rank, but ", n_stages,
              " stages over pipeline_parallel_degree ", pp,
              " give more; use Interleaved1F1B or pipeline_parallel_layers_per_stage = n_layers / pp");
  const int64_t per = effective / n_stages, extra = effective % n_stages;
  TITAN_CHECK(per >= 1 && n_layers >= n_stages - (first_less > 0) - (last_less > 0), "config error: model.n_layers (",
              n_layers, ") cannot fill ", n_stages, " pipeline stages: every stage needs a block (the edge stages may "
              "hold only the embedding / head when pipeline_parallel_first_/last_stage_less_layers say so)");
  TITAN_CHECK(first_less <= per && last_less <= per, "config error: parallelism.pipeline_parallel_first_stage_less_layers (",
              first_less, ") and _last_stage_less_layers (", last_less, ") must not exceed the ", per,
              " blocks a stage holds (", n_stages, " stages of ", effective, " blocks counting the embedding and head)");
  PipelineLayout l;
  l.pp = pp;
  int64_t at = 0;
  for (int64_t s = 0; s < n_stages; ++s) {
    int64_t n = per + (s < extra ? 1 : 0);
    if (s == 0) n -= first_less;
    if (s + 1 == n_stages) n -= last_less;
    n = std::min(n, n_layers - at);
    l.stages.push_back(ModelChunk{at, at + n, s == 0, s + 1 == n_stages});
    at += n;
  }
  TITAN_CHECK(at == n_layers, "pipeline: internal: the stages hold ", at, " of ", n_layers, " blocks");
  return l;
}

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int64_t pp, int64_t n_stages, int64_t m,
                                             int64_t rank) {
  TITAN_CHECK(m >= 1, "pipeline: no micro-batches");
  const int64_t v = n_stages / pp;
  std::vector<PipelineAction> a;
  auto F = [&](int64_t stage, int64_t mb) { a.push_back({PipelineAction::Forward, stage, mb}); };
  auto B = [&](int64_t stage, int64_t mb) { a.push_back({PipelineAction::Backward, stage, mb}); };
  switch (schedule) {
    case PipelineSchedule::GPipe:
      for (int64_t i = 0; i < m; ++i) F(rank, i);
      for (int64_t i = 0; i < m; ++i) B(rank, i);
      break;
    case PipelineSchedule::OneFOneB: {
      const int64_t warmup = std::min(pp - 1 - rank, m);
      int64_t f = 0, b = 0;
      while (f < warmup) F(rank, f++);
      while (f < m) {
        F(rank, f++);
        B(rank, b++);
      }
      while (b < m) B(rank, b++);
      break;
    }
    case PipelineSchedule::Interleaved1F1B: {
      TITAN_CHECK(m % pp == 0, "config error: Interleaved1F1B needs the micro-batches (training.local_batch_size / "
                  "parallelism.pipeline_parallel_microbatch_size = ", m, ") to be a multiple of "
                  "pipeline_parallel_degree (", pp, ")");
      // Megatron-LM's interleaved order: micro-batches in groups of pp, each group through every local
      // stage (forward: first to last, backward: last to first)
      const int64_t total = m * v;
      auto mb_of = [&](int64_t k) { return (k / (pp * v)) * pp + k % pp; };
      auto fwd_stage = [&](int64_t k) { return ((k / pp) % v) * pp + rank; };
      auto bwd_stage = [&](int64_t k) { return (v - 1 - (k / pp) % v) * pp + rank; };
      const int64_t warmup = std::min((pp - rank - 1) * 2 + (v - 1) * pp, total);
      int64_t f = 0, b = 0;
      while (f < warmup) F(fwd_stage(f), mb_of(f)), ++f;
      while (f < total) {
        F(fwd_stage(f), mb_of(f));
        ++f;
        B(bwd_stage(b), mb_of(b));
        ++b;
      }
      while (b < total) B(bwd_stage(b), mb_of(b)), ++b;
      break;
    }
  }
  return a;
}

Pipeline::Pipeline(decoder::Decoder& model, ParallelModel& pm, comms::DeviceMesh& mesh, PipelineLayout layout,
                   PipelineSchedule schedule, int64_t microbatch_size, Shape activation, int64_t seq_len)
    : model_(model),
      pm_(pm),
      mesh_(mesh),
      layout_(std::move(layout)),
      schedule_(schedule),
      mbs_(microbatch_size),
      activation_(std::move(activation)),
      seq_len_(seq_len) {
  TITAN_CHECK(layout_.pp == mesh.degrees.pp, "Pipeline: the layout's ", layout_.pp, " ranks differ from the mesh's pp ",
              mesh.degrees.pp);
  TITAN_CHECK(mbs_ >= 1, "Pipeline: micro-batch size must be >= 1");
}

int64_t Pipeline::microbatches(int64_t batch) const {
  TITAN_CHECK(batch % mbs_ == 0, "pipeline: the local batch (", batch,
              ") is not a multiple of parallelism.pipeline_parallel_microbatch_size (", mbs_, ")");
  return batch / mbs_;
}

Pipeline::Result Pipeline::train(const Batch& b, double loss_scale, bool reduce, double aux_scale) {
  return run(b, loss_scale, reduce, /*backward=*/true, aux_scale);
}

double Pipeline::eval(const Batch& b) {
  NoGradGuard ng;
  const double loss = run(b, 1.0, false, /*backward=*/false).loss;
  if (b.inputs.is_meta()) return 0;
  // the last stage's loss, on every stage's ranks
  return mesh_.pp->all_reduce(from_vector<double>({loss}, {1})).to_vector<double>()[0];
}

namespace {
// Identity on the stage's output whose backward also feeds `scale` into the stage's MoE auxiliary loss:
// one backward from the received gradient covers both.
Tensor attach_aux_loss(const Tensor& y, const Tensor& aux, double scale) {
  using V = std::vector<Tensor>;
  return autograd::custom_op(
      "PipelineAuxLoss", {y, aux}, [](const V& in) { return V{in[0]}; },
      [scale, shape = aux.shape()](const V& g) { return V{g[0], full(shape, scale, DType::F32, g[0].device())}; })[0];
}
}  // namespace

Pipeline::Result Pipeline::run(const Batch& b, double loss_scale, bool reduce, bool backward, double aux_scale) {
  const int64_t m = microbatches(b.inputs.size(0));
  const int64_t n_stages = (int64_t)layout_.stages.size();
  std::vector<PipelineAction> actions = pipeline_actions(schedule_, layout_.pp, n_stages, m, mesh_.pp_rank);
  if (!backward) {  // forward only: the schedule's forwards, in its order
    std::vector<PipelineAction> f;
    for (auto& a : actions)
      if (a.kind == PipelineAction::Forward) f.push_back(a);
    actions.swap(f);
  }
  std::map<int64_t, size_t> last_backward;  // stage -> index of its last backward
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].kind == PipelineAction::Backward) last_backward[actions[i].stage] = i;
  comms::ProcessGroup& p2p = *mesh_.pp_p2p;
  auto tag = [n_stages](int64_t stage, int64_t mb, int dir) { return (int)((mb * n_stages + stage) * 2 + dir); };
  auto mb_rows = [this](const Tensor& t, int64_t i) {
    return t.defined() ? slice(t, 0, i * mbs_, (i + 1) * mbs_) : Tensor();
  };
  struct Slot {
    // a repeated pass's: the bytes its record holds (planning); first, so it is released last (after the graph
    // of a traced forward whose backward was repeated has freed what the charge stood in for)
    std::shared_ptr<MemoryCharge> charge;
    Tensor input;   // the received activation (a leaf: its gradient goes back)
    Tensor output;  // the stage's output (last stage: the scaled loss)
  };
  std::map<std::pair<int64_t, int64_t>, Slot> slots;  // (stage, micro-batch) in flight
  std::vector<comms::Work> sends;
  Result r;
  const bool meta = b.inputs.is_meta();
  FSDP* fsdp = pm_.fsdp.get();
  // the hidden states and their gradients travel in the compute dtype: bf16 under bf16 autocast (rounded at the
  // boundary, as TorchTitan's bf16 stages send them; comms/functional.h)
  const DType wire = comms::wire_dtype(DType::F32);
  record_cost("pipeline_schedule", 0, 0, KernelClass::PipelineMark);  // the window the bubble is measured in
  // parallelism.fsdp_gather_stage_at_start: a stage keeping its weights gathered through the schedule gathers
  // them all now (FSDP::prefetch_all), so a later stage's arrive while the earlier stages fill the pipeline
  if (fsdp && fsdp->gathers_stage_at_start()) fsdp->prefetch_all();
  // Planning (meta tensors under a cost trace): once a stage's last two forward (backward) passes recorded alike,
  // its next ones repeat that record instead of being traced (src/tensor/cost_segment.h). A backward repeats when
  // its forward did (no graph was built) or when its record is steady; the stage's last backward (FSDP's
  // reduction) and so its forward are always traced; a forward repeats only once the backward is steady too.
  const bool repeat =
      meta && default_device() == Device::Meta && CostTrace::current() != nullptr && repeated_cost_segments();
  // A pass is repeated only from the FSDP state it was recorded in, and only one that left that state as it
  // found it (FSDP::pass_state: which units are gathered, which gradients held, ...).
  struct Passes {
    std::optional<CostSegment> forward, backward;      // the last recorded
    std::vector<int64_t> forward_state, backward_state;  // the FSDP state each started in
    bool forward_steady = false, backward_steady = false;  // the last two recorded alike, from one state, left so
    MemoryCategory output_category = MemoryCategory::Activations, grad_category = MemoryCategory::Activations;
    std::vector<std::vector<int64_t>> routed;  // the last recorded forward's
    // the model keeps the last forward's MoE auxiliary loss, whose graph holds that forward's activations until
    // a later forward replaces it: a backward of a traced forward cannot be repeated (its graph would not free
    // them where the charge said), so such a stage repeats nothing
    bool keeps_graph = false;
  };
  std::map<int64_t, Passes> passes;  // by stage
  auto state = [fsdp] { return fsdp ? fsdp->pass_state() : std::vector<int64_t>{}; };
  // A forward is repeated only where its backward can be too: every stage of this rank has steady records (the
  // first passes, which may change the state, are done) and no pass that is always traced (a stage's last
  // micro-batch, forward and backward) runs between the two. Where the state still moved before the backward,
  // the plan is refused (CostSegmentRefused) and made again tracing every pass.
  std::map<std::pair<int64_t, int64_t>, size_t> backward_at;  // (stage, micro-batch) -> its backward's action
  std::vector<size_t> traced_always;                           // the actions of the stages' last micro-batches
  for (size_t k = 0; k < actions.size(); ++k)
    if (actions[k].kind == PipelineAction::Backward) backward_at[{actions[k].stage, actions[k].microbatch}] = k;
  if (backward)
    for (size_t k = 0; k < actions.size(); ++k)
      if (actions[last_backward[actions[k].stage]].microbatch == actions[k].microbatch) traced_always.push_back(k);
  auto traced_between = [&](size_t from, size_t to) {
    auto it = std::upper_bound(traced_always.begin(), traced_always.end(), from);
    return it != traced_always.end() && *it < to;
  };
  const std::vector<int64_t> own_stages = layout_.stages_of(mesh_.pp_rank);
  auto all_steady = [&passes, &own_stages] {
    for (int64_t st : own_stages) {
      auto it = passes.find(st);
      if (it == passes.end() || !it->second.forward_steady || !it->second.backward_steady) return false;
    }
    return true;
  };
  auto record = [&state](std::optional<CostSegment>& last, std::vector<int64_t>& last_state, bool& steady,
                         CostSegment seg, std::vector<int64_t> start) {
    steady = seg.repeatable && start == state() && last && start == last_state && seg.same_as(*last);
    last = std::move(seg);
    last_state = std::move(start);
  };
  auto fresh = [](const Shape& shape, MemoryCategory c) {  // a repeated pass's output: its buffer, no values
    MemoryCategoryScope scope(c);
    return empty(shape, DType::F32, Device::Meta);
  };
  MemoryTracker& tracker = MemoryTracker::get(Device::Meta);
  // A repeated pass leaves held what its record ends with: a fresh buffer for its output (`shape` in category
  // `c`; none when empty) and the rest as a charge, settled first (its releases before its additions) so no
  // moment holds more than the record's end
  auto settle = [&tracker, &fresh](MemoryCharge& charge, const MemoryStats& start, const CostSegment& seg,
                                   const Shape& shape, MemoryCategory c) {
    const MemoryStats now = tracker.stats();
    std::array<int64_t, kNumMemoryCategories> d{};
    for (int k = 0; k < kNumMemoryCategories; ++k) d[k] = start.current[k] + seg.net[k] - now.current[k];
    if (!shape.empty()) d[(int)c] -= numel(shape) * (int64_t)dtype_size(DType::F32);
    charge.adjust_by(d);
    return shape.empty() ? Tensor() : fresh(shape, c);
  };
  auto add_routed = [&r](const std::vector<std::vector<int64_t>>& routed) {
    if (r.routed.empty()) r.routed = routed;
    else
      for (size_t l = 0; l < routed.size(); ++l)
        for (size_t e = 0; e < routed[l].size(); ++e) r.routed[l][e] += routed[l][e];
  };
  for (size_t ai = 0; ai < actions.size(); ++ai) {
    const PipelineAction& a = actions[ai];
    ModelChunk ch = layout_.stages[a.stage];
    ch.seq_len = seq_len_;
    const int64_t i = a.microbatch;
    Passes& ps = passes[a.stage];
    const bool last_pass = backward && actions[last_backward[a.stage]].microbatch == i;
    if (a.kind == PipelineAction::Forward) {
      Tensor x;
      if (ch.first) {
        x = mb_rows(b.inputs, i);
      } else {
        auto [t, w] = p2p.irecv(activation_, DType::F32, (int)layout_.rank_of(a.stage - 1), tag(a.stage, i, 0), wire);
        w.wait();
        x = t;
        if (backward) x.requires_grad_(true);
      }
      Slot s;
      Tensor y;  // what goes to the next stage
      if (repeat && ps.forward_steady && !last_pass && state() == ps.forward_state &&
          (!backward || (all_steady() && !traced_between(ai, backward_at.at({a.stage, i}))))) {
        const MemoryStats start = tracker.stats();
        replay_cost_segment(*ps.forward);
        add_routed(ps.routed);
        s.charge = std::make_shared<MemoryCharge>(tracker);
        y = settle(*s.charge, start, *ps.forward, ch.last ? Shape{} : activation_, ps.output_category);
        s.output = y;
      } else {
        std::optional<CostSegmentRecorder> rec;
        std::vector<int64_t> start;
        if (repeat) start = state(), rec.emplace();
        y = model_.forward_chunk(x, mb_rows(b.doc_ids, i), ch);
        auto routed = model_.routed_counts(ch);
        add_routed(routed);
        const double scale = loss_scale / (double)m, ascale = (aux_scale < 0 ? loss_scale : aux_scale) / (double)m;
        Tensor aux = backward ? model_.aux_loss(ch) : Tensor();
        if (ch.last) {
          Tensor l = model_.loss(y, mb_rows(b.targets, i));
          if (!meta && loss_scale != 0) r.loss += (double)l.item<float>() / (double)m;  // 0: no valid target (cp)
          if (backward)
            s.output = !aux.defined()   ? mul(l, scale)
                       : ascale == scale ? mul(add(l, aux), scale)
                                         : add(mul(l, scale), mul(aux, ascale));
          y = Tensor();
        } else {
          if (aux.defined()) y = attach_aux_loss(y, aux, ascale);
          TITAN_CHECK(y.shape() == activation_, "pipeline: stage ", a.stage, " produced ", shape_str(y.shape()),
                      ", the next stage expects ", shape_str(activation_));
          s.output = y;
          ps.output_category = y.impl()->storage->category();
        }
        if (aux.defined()) ps.keeps_graph = true;
        aux = Tensor();  // a temporary of the pass, not what it leaves held
        if (rec) {
          record(ps.forward, ps.forward_state, ps.forward_steady, rec->finish(), std::move(start));
          ps.forward_steady = ps.forward_steady && !ps.keeps_graph;
          ps.forward_steady = ps.forward_steady && routed == ps.routed;
          ps.routed = std::move(routed);
        }
      }
      if (!ch.last)
        sends.push_back(p2p.isend(y.detach(), (int)layout_.rank_of(a.stage + 1), tag(a.stage + 1, i, 0), wire));
      s.input = x;
      if (backward) slots[{a.stage, i}] = std::move(s);
    } else {
      auto it = slots.find({a.stage, i});
      TITAN_CHECK(it != slots.end(), "pipeline: internal: backward of stage ", a.stage, " micro-batch ", i,
                  " before its forward");
      Slot s = std::move(it->second);
      slots.erase(it);
      // FSDP: this stage's gradients are reduced by its last backward (when asked to), added up before
      if (fsdp) {  // and, as FSDP2 under a pipeline, keeps the stage's weights gathered until then
        fsdp->set_requires_gradient_sync(reduce && last_backward[a.stage] == ai);
        fsdp->set_reshard_after_backward(last_backward[a.stage] == ai);
      }
      Tensor g;
      if (!ch.last) {
        auto [t, w] = p2p.irecv(activation_, DType::F32, (int)layout_.rank_of(a.stage + 1), tag(a.stage, i, 1), wire);
        w.wait();
        g = t;
      }
      Tensor gx;
      if (repeat && (s.charge || (ps.backward_steady && !ps.keeps_graph && !last_pass && state() == ps.backward_state))) {
        if (!ps.backward || !ps.backward_steady || state() != ps.backward_state)
          refuse_repeated_pass("pipeline: stage " + std::to_string(a.stage) + " micro-batch " + std::to_string(i) +
                               "'s forward was repeated, its backward cannot be");
        const MemoryStats start = tracker.stats();
        replay_cost_segment(*ps.backward);
        if (!s.charge) s.charge = std::make_shared<MemoryCharge>(tracker);
        gx = settle(*s.charge, start, *ps.backward, ch.first ? Shape{} : activation_, ps.grad_category);
      } else {
        std::optional<CostSegmentRecorder> rec;
        std::vector<int64_t> start;
        if (repeat) start = state(), rec.emplace();
        if (ch.last) s.output.backward();
        else s.output.backward(g);
        if (!ch.first) {
          gx = s.input.grad();
          TITAN_CHECK(gx.defined(), "pipeline: stage ", a.stage, "'s input got no gradient");
          ps.grad_category = gx.impl()->storage->category();
        }
        if (rec) record(ps.backward, ps.backward_state, ps.backward_steady, rec->finish(), std::move(start));
      }
      if (!ch.first) sends.push_back(p2p.isend(gx, (int)layout_.rank_of(a.stage - 1), tag(a.stage - 1, i, 1), wire));
    }
  }
  for (auto& w : sends) w.wait();
  record_cost("pipeline_schedule", 0, 0, KernelClass::PipelineMark);
  if (fsdp && backward) {
    fsdp->set_requires_gradient_sync(reduce);
    fsdp->set_reshard_after_backward(true);
  }
  return r;
}

}  // namespace titan::parallel
