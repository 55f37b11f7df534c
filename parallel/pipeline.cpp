#include "parallel/pipeline.h"

#include <map>

#include "comms/functional.h"
#include "parallel/fsdp.h"
#include "parallel/pass_repeats.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"

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
  // planning: the passes repeated from their record instead of traced (pass_repeats.h)
  PassRepeats repeats(actions, backward, fsdp, meta);
  auto add_routed = [&r](const PassRepeats::Routed& routed) {
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
      if (repeats.forward(ai)) {
        y = repeats.repeat_forward(a.stage, ch.last ? Shape{} : activation_, s.charge);
        add_routed(repeats.routed(a.stage));
        s.output = y;
      } else {
        repeats.begin();
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
        }
        const bool keeps_graph = aux.defined();  // the model holds it, and its graph
        aux = Tensor();  // a temporary of the pass, not what it leaves held
        repeats.end_forward(a.stage, y, std::move(routed), keeps_graph);
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
      if (repeats.backward(ai, s.charge != nullptr)) {
        gx = repeats.repeat_backward(a.stage, ch.first ? Shape{} : activation_, s.charge);
      } else {
        repeats.begin();
        if (ch.last) s.output.backward();
        else s.output.backward(g);
        if (!ch.first) {
          gx = s.input.grad();
          TITAN_CHECK(gx.defined(), "pipeline: stage ", a.stage, "'s input got no gradient");
        }
        repeats.end_backward(a.stage, gx);
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
