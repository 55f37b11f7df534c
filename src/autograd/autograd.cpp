// Grad mode, recording and the backward engine.
#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>

#include "src/autograd/autocast.h"
#include "src/autograd/engine.h"
#include "src/autograd/function.h"
#include "src/ops/ops.h"

namespace titan::autograd {

namespace {
thread_local bool t_grad_enabled = true;
std::atomic<uint64_t> g_seq{0};
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = prev_; }

uint64_t next_sequence_number() { return ++g_seq; }

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::vector<Tensor> record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs,
                           BackwardFn fn) {
  if (!grad_enabled() || !any_requires_grad(inputs)) return outputs;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->seq = next_sequence_number();
  node->backward = std::move(fn);
  node->next.reserve(inputs.size());
  for (const auto& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) {
        e.fn = t.grad_fn();
        e.input_nr = t.impl()->output_nr;
      } else {
        e.leaf = t.impl();
      }
    }
    node->next.push_back(e);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto& o = outputs[i];
    node->outputs.push_back({o.shape(), o.dtype(), o.device()});
    if (!is_floating(o.dtype())) continue;  // integer outputs (indices) carry no gradient
    o.impl()->requires_grad = true;
    o.impl()->grad_fn = node;
    o.impl()->output_nr = (int)i;
  }
  return outputs;
}

Tensor record(const char* name, const std::vector<Tensor>& inputs, Tensor output, BackwardFn fn) {
  return record(name, inputs, std::vector<Tensor>{std::move(output)}, std::move(fn))[0];
}

std::vector<Tensor> custom_op(const std::string& name, const std::vector<Tensor>& inputs, const ForwardFn& forward,
                              BackwardFn backward) {
  std::vector<Tensor> outs;
  {
    NoGradGuard ng;
    outs = forward(inputs);
  }
  // Outputs that alias an input must not share its autograd state.
  for (auto& o : outs)
    for (const auto& in : inputs)
      if (o.impl() == in.impl()) o = o.detach();
  // Node names must outlive the node: keep them in a static intern table.
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<std::string>> names;
  const char* cname;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto& p = names[name];
    if (!p) p = std::make_unique<std::string>(name);
    cname = p->c_str();
  }
  return record(cname, inputs, std::move(outs), std::move(backward));
}

// ---- the engine ------------------------------------------------------------
namespace {

struct Graph {
  std::unordered_map<Node*, int> deps;            // incoming edges from nodes in this graph
  std::unordered_map<TensorImpl*, int> leaf_deps;  // contributions each leaf will receive
};

Graph discover(const std::vector<Node*>& roots) {
  Graph g;
  std::vector<Node*> stack;
  for (Node* r : roots)
    if (!g.deps.count(r)) {
      g.deps[r] = 0;
      stack.push_back(r);
    }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (e.fn) {
        auto [it, inserted] = g.deps.try_emplace(e.fn.get(), 0);
        it->second += 1;
        if (inserted) stack.push_back(e.fn.get());
      } else if (e.leaf) {
        g.leaf_deps[e.leaf.get()] += 1;
      }
    }
  }
  return g;
}

void accumulate_into_leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
  TITAN_CHECK(g.shape() == leaf->shape, "backward: gradient shape ", shape_str(g.shape()),
              " does not match leaf shape ", shape_str(leaf->shape), (leaf->name.empty() ? "" : " (" + leaf->name + ")"));
  if (!leaf->grad) {
    MemoryCategoryScope cat(MemoryCategory::Gradients);
    Tensor c = empty(leaf->shape, leaf->dtype, leaf->device);
    copy_(c, g);
    leaf->grad = c.impl();
  } else {
    add_(Tensor(leaf->grad), g);
  }
}

struct Later {
  bool operator()(Node* a, Node* b) const { return a->seq < b->seq; }  // max-heap on seq
};

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  TITAN_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " gradients");
  NoGradGuard ng;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<Node*> root_nodes;
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TITAN_CHECK(r.requires_grad(), "backward: tensor ", shape_str(r.shape()),
                " does not require grad (no input of its graph has requires_grad)");
    Tensor g = grads[i];
    if (!g.defined()) {
      TITAN_CHECK(r.numel() == 1, "backward: gradient can be implicit only for a scalar output, got shape ",
                  shape_str(r.shape()), " (pass a gradient tensor)");
      g = ones(r.shape(), r.dtype(), r.device());
    }
    TITAN_CHECK(g.shape() == r.shape(), "backward: gradient shape ", shape_str(g.shape()),
                " does not match output shape ", shape_str(r.shape()));
    if (r.is_leaf()) {
      accumulate_into_leaf(r.impl(), g);
      for (auto& h : r.impl()->grad_ready_hooks) h(Tensor(r.impl()->grad));
      continue;
    }
    Node* n = r.grad_fn().get();
    keep_alive.push_back(r.grad_fn());
    auto& buf = buffers[n];
    buf.resize(n->outputs.size());
    int k = r.impl()->output_nr;
    buf[k] = buf[k].defined() ? add(buf[k], g) : g;
    root_nodes.push_back(n);
  }
  if (root_nodes.empty()) return;
  Graph graph = discover(root_nodes);
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  for (Node* r : root_nodes)
    if (graph.deps[r] == 0) {
      ready.push(r);
      graph.deps[r] = -1;  // queued
    }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TITAN_CHECK(!n->released, "backward: node ", n->name,
                " was already freed by an earlier backward; pass retain_graph=true to the first backward");
    std::vector<Tensor> gout = std::move(buffers[n]);
    buffers.erase(n);
    gout.resize(n->outputs.size());
    for (size_t i = 0; i < gout.size(); ++i)
      if (!gout[i].defined()) gout[i] = zeros(n->outputs[i].shape, n->outputs[i].dtype, n->outputs[i].device);
    std::vector<Tensor> gin = n->backward(gout);
    TITAN_CHECK(gin.size() == n->next.size(), "backward: node ", n->name, " returned ", gin.size(),
                " gradients for ", n->next.size(), " inputs");
    if (!retain_graph) {
      n->backward = nullptr;
      n->released = true;
    }
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.valid()) continue;
      const Tensor& g = gin[i];
      if (e.fn) {
        Node* m = e.fn.get();
        if (g.defined()) {
          auto& buf = buffers[m];
          buf.resize(m->outputs.size());
          TITAN_CHECK(g.shape() == m->outputs[e.input_nr].shape, "backward: ", n->name, " produced a gradient ",
                      shape_str(g.shape()), " for an input of shape ", shape_str(m->outputs[e.input_nr].shape));
          buf[e.input_nr] = buf[e.input_nr].defined() ? add(buf[e.input_nr], g) : g;
        }
        if (--graph.deps[m] == 0) ready.push(m);
      } else {
        if (g.defined()) accumulate_into_leaf(e.leaf, g);
        if (--graph.leaf_deps[e.leaf.get()] == 0 && e.leaf->grad)
          for (auto& h : e.leaf->grad_ready_hooks) h(Tensor(e.leaf->grad));
      }
    }
  }
}

std::vector<std::string> backward_order(const Tensor& root) {
  std::vector<std::string> order;
  if (!root.grad_fn()) return order;
  Graph graph = discover({root.grad_fn().get()});
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  ready.push(root.grad_fn().get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    order.push_back(n->name);
    for (const Edge& e : n->next)
      if (e.fn && --graph.deps[e.fn.get()] == 0) ready.push(e.fn.get());
  }
  return order;
}

}  // namespace titan::autograd

namespace titan {
namespace {
thread_local DType t_autocast = DType::F32;
}
AutocastScope::AutocastScope(DType compute) : prev_(t_autocast) {
  TITAN_CHECK(compute == DType::BF16 || compute == DType::F32, "AutocastScope: compute dtype must be bfloat16 or ",
              "float32, got ", dtype_name(compute));
  t_autocast = compute;
}
AutocastScope::~AutocastScope() { t_autocast = prev_; }
DType AutocastScope::current() { return t_autocast; }
}  // namespace titan
