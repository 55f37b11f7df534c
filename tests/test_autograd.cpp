// Autograd contracts: accumulation, no-grad, checkpoint equality, deterministic
// order, hooks, custom ops, graph freeing, meta backward.
#include <gtest/gtest.h>

#include "src/autograd/checkpoint.h"
#include "src/autograd/engine.h"
#include "src/autograd/function.h"
#include "tests/gradcheck.h"

using namespace titan;
using namespace titan::testing;

TEST(Autograd, AccumulatesAcrossTwoBackwards) {
  Tensor x = rand_t({3, 4}, 1).requires_grad_(true);
  Tensor w = rand_t({3, 4}, 2);
  sum(mul(x, w)).backward();
  auto g1 = x.grad().to_vector<double>();
  sum(mul(x, w)).backward();
  auto g2 = x.grad().to_vector<double>();
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_DOUBLE_EQ(g2[i], 2 * g1[i]);
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, SharedInputAccumulatesWithinOneBackward) {
  Tensor x = rand_t({5}, 3).requires_grad_(true);
  Tensor y = add(mul(x, x), x);  // dy/dx = 2x + 1
  sum(y).backward();
  auto xv = x.to_vector<double>(), g = x.grad().to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(g[i], 2 * xv[i] + 1, 1e-12);
}

TEST(Autograd, NoGradScopeRecordsNothing) {
  Tensor x = rand_t({3}, 4).requires_grad_(true);
  {
    NoGradGuard ng;
    Tensor y = mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  Tensor z = mul(x, x);
  EXPECT_TRUE(z.requires_grad());
}

TEST(Autograd, GraphIsFreedUnlessRetained) {
  Tensor x = rand_t({3}, 5).requires_grad_(true);
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: retained
  EXPECT_THROW(y.backward(), Error);  // freed now
  Tensor v = exp(x);
  EXPECT_THROW(v.backward(), Error);  // non-scalar without a gradient
}

TEST(Autograd, DeterministicOrderLatestFirst) {
  Tensor a = rand_t({4}, 6).requires_grad_(true);
  Tensor b = rand_t({4}, 7).requires_grad_(true);
  Tensor p = exp(a);     // created first
  Tensor q = sigmoid(b); // created second
  Tensor r = sum(add(p, q));
  auto order = autograd::backward_order(r);
  // sum over all dims = a "sum" node then a "reshape" dropping the reduced dims
  std::vector<std::string> want = {"reshape", "sum", "add", "sigmoid", "exp"};
  EXPECT_EQ(order, want);
  // the same graph built again gives the same order
  Tensor p2 = exp(a);
  Tensor q2 = sigmoid(b);
  EXPECT_EQ(autograd::backward_order(sum(add(p2, q2))), want);
  // built in the other order, the walk follows creation order
  Tensor q3 = sigmoid(b);
  Tensor p3 = exp(a);
  std::vector<std::string> want3 = {"reshape", "sum", "add", "exp", "sigmoid"};
  EXPECT_EQ(autograd::backward_order(sum(add(p3, q3))), want3);
}

TEST(Autograd, LeafGradReadyHookFiresOnceWithFinalGrad) {
  Tensor w = rand_t({4}, 8).requires_grad_(true);
  int calls = 0;
  std::vector<double> seen;
  w.register_grad_ready_hook([&](const Tensor& g) {
    ++calls;
    seen = g.to_vector<double>();
  });
  Tensor y = add(mul(w, w), exp(w));  // w feeds three nodes
  sum(y).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, w.grad().to_vector<double>());
}

TEST(Autograd, ModuleBackwardDoneHook) {
  Tensor w = rand_t({3, 3}, 9).requires_grad_(true);
  Tensor x = rand_t({2, 3}, 10);  // requires no grad: the hook still fires
  bool w_ready_when_done = false;
  int done = 0;
  auto ins = autograd::on_backward_done({x}, [&] {
    ++done;
    w_ready_when_done = w.grad().defined();
  });
  Tensor y = linear(ins[0], w);
  sum(y).backward();
  EXPECT_EQ(done, 1);
  EXPECT_TRUE(w_ready_when_done);
}

TEST(Autograd, CustomOpWithHandWrittenBackward) {
  // y = 3x forward, backward deliberately 3g: a custom op, as collectives are built
  Tensor x = rand_t({4}, 11).requires_grad_(true);
  auto y = autograd::custom_op(
      "Times3", {x}, [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[0], 3.0)}; },
      [](const std::vector<Tensor>& g) { return std::vector<Tensor>{mul(g[0], 3.0)}; });
  EXPECT_EQ(y[0].grad_fn()->name, "Times3");
  sum(y[0]).backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(g, 3.0);
}

namespace {
// a small transformer-like block: rmsnorm -> linear -> silu -> linear, residual
std::vector<Tensor> block(const std::vector<Tensor>& in, const Tensor& nw, const Tensor& w1, const Tensor& w2) {
  Tensor h = rms_norm(in[0], nw, 1e-6);
  h = linear(silu(linear(h, w1)), w2);
  return {add(in[0], h)};
}
}  // namespace

TEST(Autograd, CheckpointGivesIdenticalGradients) {
  auto run = [](bool ckpt) {
    Generator g(3);
    Tensor nw = ones({8}).requires_grad_(true);
    Tensor w1 = randn({16, 8}, g, DType::F32, 0.3).requires_grad_(true);
    Tensor w2 = randn({8, 16}, g, DType::F32, 0.3).requires_grad_(true);
    Tensor x0 = randn({2, 5, 8}, g).requires_grad_(true);
    Tensor x = mul(x0, 1.5);
    auto f = [&](const std::vector<Tensor>& in) { return block(in, nw, w1, w2); };
    Tensor y = ckpt ? autograd::checkpoint(f, {x})[0] : f({x})[0];
    y = ckpt ? autograd::checkpoint(f, {y})[0] : f({y})[0];
    sum(mul(y, y)).backward();
    return std::vector<std::vector<float>>{x0.grad().to_vector<float>(), nw.grad().to_vector<float>(),
                                           w1.grad().to_vector<float>(), w2.grad().to_vector<float>()};
  };
  auto plain = run(false), ck = run(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i], ck[i]) << "tensor " << i;  // bit-identical
}

TEST(Autograd, CheckpointKeepsNoInnerActivations) {
  DeviceScope meta(Device::Meta);  // meta: the tracker counts exactly what a real run would hold
  Tensor nw = empty({64}).requires_grad_(true);
  Tensor w1 = empty({256, 64}).requires_grad_(true);
  Tensor w2 = empty({64, 256}).requires_grad_(true);
  auto f = [&](const std::vector<Tensor>& in) { return block(in, nw, w1, w2); };
  auto act = [] { return MemoryTracker::get(Device::Meta).stats().current[(int)MemoryCategory::Activations]; };
  Tensor x = empty({4, 128, 64});
  int64_t base = act();
  Tensor y_plain = f({x})[0];
  const int64_t plain = act() - base;
  y_plain = Tensor();
  base = act();
  Tensor y_ck = autograd::checkpoint(f, {x})[0];
  const int64_t ck = act() - base;
  // checkpointed: only the output (+ a 4-byte anchor) stays alive
  EXPECT_EQ(ck, 4 * 128 * 64 * 4);  // only the block output stays alive
  EXPECT_GT(plain, 4 * ck);
  sum(y_ck).backward();
  EXPECT_TRUE(w1.grad().defined());
}

TEST(Autograd, MetaBackwardPlansGradients) {
  DeviceScope meta(Device::Meta);
  Tensor w = empty({32, 16}).requires_grad_(true);
  Tensor x = empty({4, 16});
  CostScope cs;
  Tensor y = sum(silu(linear(x, w)));
  y.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_meta());
  EXPECT_EQ(w.grad().shape(), (Shape{32, 16}));
  EXPECT_GT(cs.by_op().at("linear_backward").flops, 0);
}
