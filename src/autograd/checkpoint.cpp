#include "src/autograd/checkpoint.h"

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
}  // namespace

std::vector<Tensor> checkpoint(const BlockFn& fn, const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return fn(inputs);
  std::vector<Tensor> outs;
  {
    NoGradGuard ng;
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
  return record("checkpoint", node_inputs, std::move(outs),
                [fn, keep, needs](const std::vector<Tensor>& grads) {
                  std::vector<Tensor> xs;
                  for (size_t i = 0; i < keep.size(); ++i) {
                    Tensor x = keep[i].detach();
                    if (needs[i]) x.requires_grad_(true);
                    xs.push_back(x);
                  }
                  std::vector<Tensor> outs2;
                  {
                    EnableGradGuard eg;
                    outs2 = fn(xs);
                  }
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
