#include "src/autograd/checkpoint.h"

#include "src/autograd/autocast.h"
#include "src/autograd/engine.h"
#include "src/autograd/function.h"

namespace titan::autograd {

namespace {
// A scalar leaf that requires grad: makes the recorded node exist even when
// no real input requires grad (its gradient is never produced).
Tensor anchor() {
  Tensor a = zeros({}, DType::F32, Device::CPU);
  a.requires_grad_(true);
  return a;
}

// The save-list outputs of one TorchTitanOps block, in call order, and where a run of it is.
struct SacCache {
  std::vector<std::vector<Tensor>> kept;  // per save-list call: its outputs if the policy keeps them, else empty
  bool recompute = false;
  size_t at = 0;        // save-list calls seen in this run
  int64_t matmuls = 0;  // matmuls seen in this run
};
thread_local SacCache* t_sac = nullptr;
thread_local int t_recompute_depth = 0;

struct RecomputeScope {  // RAII: recomputing() is true inside (nests)
  RecomputeScope() { ++t_recompute_depth; }
  ~RecomputeScope() { --t_recompute_depth; }
};

struct SacRun {  // RAII: this thread's save-list calls go to `c` (nests: restores the outer block's)
  SacCache* prev;
  explicit SacRun(SacCache* c, bool recompute) : prev(t_sac) {
    t_sac = c;
    if (c) {
      c->recompute = recompute;
      c->at = 0;
      c->matmuls = 0;
    }
  }
  ~SacRun() { t_sac = prev; }
};
}  // namespace

bool recomputing() { return t_recompute_depth > 0; }

namespace {
// TorchTitan's policy for one save-list call of this run: keep every output except every second matmul's; a
// float8 GEMM is not on the list (never kept, not counted)
bool policy_keeps(SacCache& c, SacOp op) {
  return op == SacOp::Matmul ? ++c.matmuls % 2 == 1 : op != SacOp::ScaledMatmul;
}
}  // namespace

std::vector<Tensor> sac_forward(SacOp op, const std::function<std::vector<Tensor>()>& kernel) {
  SacCache* c = t_sac;
  if (!c) return kernel();
  const bool keep = policy_keeps(*c, op);
  const size_t i = c->at++;
  if (!c->recompute) {
    std::vector<Tensor> out = kernel();
    std::vector<Tensor> k;
    if (keep)
      for (const Tensor& t : out) k.push_back(t.detach());
    c->kept.push_back(std::move(k));
    return out;
  }
  TITAN_CHECK(i < c->kept.size(), "checkpoint (op-level selective): the recompute called more save-list ops than the "
              "first run (", c->kept.size(), "); the block must be deterministic");
  if (!keep) return kernel();
  std::vector<Tensor> out;
  for (const Tensor& t : c->kept[i]) out.push_back(t.detach());  // a fresh alias: the op records its node on it
  c->kept[i].clear();
  return out;
}

std::vector<Tensor> sac_forward_matmuls(size_t n, bool reduced,
                                        const std::function<std::vector<Tensor>(const std::vector<bool>&)>& kernel,
                                        const std::vector<bool>& scaled) {
  TITAN_CHECK(scaled.empty() || scaled.size() == n, "checkpoint (op-level selective): a fused op of ", n,
              " matmuls marked ", scaled.size(), " of them float8 or not");
  SacCache* c = t_sac;
  if (!c) return kernel(std::vector<bool>(n, true));
  std::vector<bool> keep(n);
  for (size_t i = 0; i < n; ++i)  // as n sac_forward(Matmul / ScaledMatmul) calls, all kept when reduced
    keep[i] = policy_keeps(*c, !scaled.empty() && scaled[i] ? SacOp::ScaledMatmul : SacOp::Matmul) || reduced;
  const size_t i0 = c->at;
  c->at += n;
  if (!c->recompute) {
    std::vector<Tensor> out = kernel(std::vector<bool>(n, true));
    TITAN_CHECK(out.size() == n, "checkpoint (op-level selective): a fused op of ", n, " matmuls returned ", out.size(),
                " outputs");
    for (size_t i = 0; i < n; ++i) c->kept.push_back(keep[i] ? std::vector<Tensor>{out[i].detach()} : std::vector<Tensor>{});
    return out;
  }
  TITAN_CHECK(i0 + n <= c->kept.size(), "checkpoint (op-level selective): the recompute called more save-list ops than "
              "the first run (", c->kept.size(), "); the block must be deterministic");
  std::vector<bool> need(n);
  for (size_t i = 0; i < n; ++i) need[i] = !keep[i];
  std::vector<Tensor> out = kernel(need);
  out.resize(n);
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) {
      out[i] = c->kept[i0 + i][0].detach();  // a fresh alias: the op records its node on it
      c->kept[i0 + i].clear();
    }
  return out;
}

std::vector<Tensor> checkpoint(const BlockFn& fn, const std::vector<Tensor>& inputs, SavePolicy policy) {
  if (!grad_enabled()) return fn(inputs);
  std::shared_ptr<SacCache> sac = policy == SavePolicy::TorchTitanOps ? std::make_shared<SacCache>() : nullptr;
  std::vector<Tensor> outs;
  {
    NoGradGuard ng;
    SacRun run(sac.get(), /*recompute=*/false);
    outs = fn(inputs);
  }
  std::vector<bool> needs;
  std::vector<Tensor> keep;
  for (const auto& t : inputs) {
    needs.push_back(t.requires_grad());
    keep.push_back(saved(t));
  }
  std::vector<Tensor> node_inputs = inputs;
  node_inputs.push_back(anchor());
  for (auto& o : outs)
    for (const auto& in : inputs)
      if (o.impl() == in.impl()) o = o.detach();
  const DType mode = AutocastScope::current();  // the recomputation runs in the forward's precision
  return record("checkpoint", node_inputs, std::move(outs),
                [fn, keep, needs, sac, mode](const std::vector<Tensor>& grads) {
                  std::vector<Tensor> xs;
                  for (size_t i = 0; i < keep.size(); ++i) {
                    Tensor x = keep[i].detach();
                    if (needs[i]) x.requires_grad_(true);
                    xs.push_back(x);
                  }
                  std::vector<Tensor> outs2;
                  {
                    EnableGradGuard eg;
                    AutocastScope autocast(mode);
                    RecomputeScope rs;
                    SacRun run(sac.get(), /*recompute=*/true);
                    outs2 = fn(xs);
                  }
                  if (sac) sac->kept.clear();  // the kept outputs now live in the recomputed graph only
                  TITAN_CHECK(outs2.size() == grads.size(), "checkpoint: recompute returned ", outs2.size(),
                              " outputs, the first run ", grads.size(), " (the block must be deterministic)");
                  std::vector<Tensor> roots, gs;
                  for (size_t i = 0; i < outs2.size(); ++i)
                    if (outs2[i].requires_grad()) {
                      roots.push_back(outs2[i]);
                      gs.push_back(grads[i]);
                    }
                  if (!roots.empty()) backward(roots, gs, false);
                  std::vector<Tensor> gin;
                  for (auto& x : xs) gin.push_back(x.requires_grad() ? x.grad() : Tensor());
                  gin.push_back(Tensor());  // anchor
                  return gin;
                });
}

std::vector<Tensor> on_backward_done(const std::vector<Tensor>& inputs, std::function<void()> done) {
  if (!grad_enabled()) return inputs;
  std::vector<Tensor> node_inputs = inputs;
  node_inputs.push_back(anchor());
  const size_t n = inputs.size();
  auto outs = custom_op(
      "backward_done_hook", node_inputs,
      [n](const std::vector<Tensor>& in) { return std::vector<Tensor>(in.begin(), in.begin() + n); },
      [done = std::move(done)](const std::vector<Tensor>& g) {
        done();
        std::vector<Tensor> r(g.begin(), g.end());
        r.push_back(Tensor());
        return r;
      });
  return outs;
}

}  // namespace titan::autograd
