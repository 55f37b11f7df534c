#include "comms/collective_matmul.h"

#include <functional>
#include <optional>
#include <tuple>

#include "comms/functional.h"
#include "src/autograd/checkpoint.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/ops/ops.h"

namespace titan::comms {

namespace {
using V = std::vector<Tensor>;
enum Tag { kGather = 0, kScatter = 1, kGradGather = 2, kGradScatter = 3 };

int next_of(const PG& g) { return (g->rank() + 1) % g->size(); }
int prev_of(const PG& g) { return (g->rank() + g->size() - 1) % g->size(); }

// One ring step: this rank's `out` sent to the next rank and the previous rank's tensor of the same shape
// received, on the communication thread (it moves while this thread computes).
struct Exchange {
  Tensor in;
  Work w;
  void wait() { w.wait(); }
};
Exchange shift(const Tensor& out, const PG& g, int tag, DType wire, const Tensor& into = Tensor()) {
  Exchange e;
  std::tie(e.in, e.w) = g->exchange_async(out, next_of(g), prev_of(g), tag, wire, into);
  return e;
}

// chunk j of a [B, S, C] tensor: its sequence rows [j s, (j + 1) s) of every batch row, as contiguous [B s, C]
// (a view when B = 1, else a recorded copy)
Tensor chunk_rows(const Tensor& t, int64_t j, int64_t s) {
  const int64_t B = t.size(0), C = t.size(2);
  return t.slice(1, j * s, (j + 1) * s).contiguous().reshape({B * s, C});
}

// dst's chunk j (of [B, S, C]) = src [B s, C]: a view's write when B = 1, a strided copy else (recorded as one)
void put_chunk(const Tensor& dst, int64_t j, int64_t s, const Tensor& src) {
  const int64_t B = dst.size(0), C = dst.size(2);
  Tensor part = dst.slice(1, j * s, (j + 1) * s);
  record_cost("collective_matmul_copy", 0, 2.0 * (double)src.nbytes());
  if (!dst.is_meta()) copy_(part, src.reshape({B, s, C}));
}

// chunk j of a [1, S, C] tensor as a contiguous [s, C] view (to receive or write into); undefined for B > 1 (its
// chunk's rows are strided over the batch)
Tensor chunk_view(const Tensor& t, int64_t j, int64_t s) {
  if (t.size(0) != 1) return Tensor();
  return t.slice(1, j * s, (j + 1) * s).reshape({s, t.size(2)});
}

// [p B s, C] chunk-major (chunk j: rows [j B s, (j + 1) B s)) -> [B, S, C] in sequence order (a view when B = 1)
Tensor from_chunks(const Tensor& t, int64_t B, int64_t p) {
  const int64_t C = t.size(1), s = t.size(0) / (p * B);
  if (B == 1) return t.reshape({1, p * s, C});
  return t.reshape({p, B, s, C}).permute({1, 0, 2, 3}).contiguous().reshape({B, p * s, C});
}

Tensor rows(const Tensor& t, int64_t j, int64_t n) { return t.slice(0, j * n, (j + 1) * n); }

// The ring all-gather both fused ops run (the forward's input, the reduce-scatter's output gradient): this rank's
// rows `local` [B s, C] passed round the ring into `full` [B, S, C] (sequence order); step t holds rank (r - t) mod
// p's rows and calls at(j, rows) on them while the next rank's travel (landing in place in `full` when B = 1).
void ring_all_gather(const Tensor& local, const Tensor& full, int64_t s, const PG& p2p, int tag, DType wire,
                     const std::function<void(int64_t j, const Tensor& rows)>& at) {
  const int64_t p = p2p->size(), r = p2p->rank();
  Tensor c = local;
  bool in_full = false;  // c is already full's chunk (received into it)
  for (int64_t t = 0; t < p; ++t) {
    const int64_t j = (r - t + p) % p;
    Exchange e;
    Tensor into;
    if (t + 1 < p) {
      into = chunk_view(full, (j - 1 + p) % p, s);
      e = shift(c, p2p, tag, wire, into);
    }
    at(j, c);
    if (!in_full) put_chunk(full, j, s, c);
    if (t + 1 < p) {
      e.wait();
      c = e.in;
      in_full = into.defined();
    }
  }
}

// The ring all-gather on an FP8 wire (TorchTitan's async tensor parallel under the float8 tensorwise recipe: its
// input cast before the gather, PyTorch's fused all-gather + scaled-matmul): this rank's rows `local` [B s, C] cast
// once with one scale for the whole gathered tensor (this rank's amax all-reduced with reduce_max), passed round the
// ring as 1-byte codes into `codes` [B, S, C] (U8), at(j, values) given each chunk's decoded values (what the FP8
// GEMM multiplies, [B s, C]); returns the gathered values [B, S, C], marked as cast c (comms/functional.h).
Tensor ring_all_gather_fp8(const Tensor& local, const Shape& full, int64_t s, const PG& p2p, int tag, const Fp8Cast& c,
                           const std::function<void(std::vector<float>&)>& reduce_max,
                           const std::function<void(int64_t j, const Tensor& values)>& at) {
  const Fp8Codes mine = fp8_encode(local, c, reduce_max);
  const Tensor codes = empty(full, DType::U8, local.device());
  ring_all_gather(mine.codes, codes, s, p2p, tag, DType::F32,
                  [&](int64_t j, const Tensor& cc) { at(j, fp8_decode(cc, c, mine.scale)); });
  const Tensor values = fp8_decode(codes.reshape({full[0] * full[1], full[2]}), c, mine.scale).reshape(full);
  mark_fp8_operand(values, c);
  return values;
}

// This rank's rows as the unfused gather delivers them to every rank, its own included: through the wire (bf16
// values under autocast), so an FP8 cast of them is the unfused one's
Tensor through_wire(const Tensor& local, DType wire) {
  if (wire != DType::BF16 || local.is_meta()) return local;
  Tensor t = local.clone();
  round_to_bf16_(t);
  return t;
}

// An FP8 operand whose rows arrive a shard at a time (round the ring), cast with the scales of the whole tensor as
// the unfused op casts the gathered one (along its columns, axis 1): a scale spanning the rows (tensorwise) takes
// the group's amax once, with this rank's shard (first, before the ring: every rank in one order), and each later
// shard's cast is given it; scales within a row (axiswise, MX blocks) need neither.
struct RowShardCast {
  Fp8Cast c;
  std::function<void(std::vector<float>&)> reduce_max;  // the tensor-parallel group's
  std::vector<float> amax;                              // the whole tensor's (tensorwise)
  Tensor first(const Tensor& local) {
    const std::function<void(std::vector<float>&)> f = [this](std::vector<float>& a) {
      reduce_max(a);
      amax = a;
    };
    return fp8_round_trip(local, c, 1, /*rows_cut=*/true, false, &f);
  }
  Tensor next(const Tensor& rows) const {
    const std::function<void(std::vector<float>&)> f = [this](std::vector<float>& a) { a = amax; };
    return fp8_round_trip(rows, c, 1, /*rows_cut=*/true, false, &f);
  }
};

// a projection's FP8 casts: float32 operands, the plan's cut set (its scales' group), MX rows in whole blocks
void check_float8(const char* op, const Float8Casts& k, const Tensor& x, const Tensor& w, int64_t rows, bool out_cut) {
  TITAN_CHECK(x.dtype() == DType::F32 && w.dtype() == DType::F32, op, ": FP8 projections need float32 tensors, got ",
              dtype_name(x.dtype()), " input and ", dtype_name(w.dtype()), " weight ", shape_str(w.shape()));
  TITAN_CHECK(k.tp && k.tp->out_sharded == out_cut && k.tp->in_sharded == !out_cut, op, ": the FP8 casts of weight ",
              shape_str(w.shape()), " must carry the tensor-parallel cut (", out_cut ? "colwise" : "rowwise",
              ") the plan sets (Fp8TensorParallel)");
  TITAN_CHECK(!k.mx || rows % kMxBlock == 0, op, ": MX recipes need the tokens of a micro-batch (", rows,
              ") to be a multiple of ", kMxBlock, " (grad_weight's blocks run along them); choose local_batch_size x "
              "seq_len accordingly");
}

void check_input(const char* op, const Tensor& x, const PG& p2p) {
  TITAN_CHECK(p2p->size() >= 2, op, ": a ring needs at least 2 ranks, group '", p2p->name(), "' has ", p2p->size());
  TITAN_CHECK(x.dim() == 3, op, ": expected a [B, S, C] input, got ", shape_str(x.shape()));
}

// the forward's and backward's saved operands are made only when a backward will read them
bool saving(const std::vector<Tensor>& inputs) {
  if (!autograd::grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
}  // namespace

std::vector<Tensor> all_gather_linear(const Tensor& x, const std::vector<Tensor>& ws, const std::vector<Tensor>& bs,
                                      const PG& p2p, const std::vector<const Float8Casts*>& f8) {
  const char* op = "all_gather_linear";
  check_input(op, x, p2p);  // every rank's shard the same size: the caller's layout (check_sequence_length)
  const size_t n = ws.size();
  TITAN_CHECK(n >= 1 && bs.size() == n, op, ": ", n, " weights and ", bs.size(), " biases (one per weight, undefined "
              "for none)");
  for (size_t i = 0; i < n; ++i) {
    TITAN_CHECK(ws[i].dim() == 2 && ws[i].size(1) == x.size(2) && ws[i].dtype() == x.dtype(), op, ": weight ", i, " ",
                shape_str(ws[i].shape()), " must be [N, ", x.size(2), "] of the input's dtype");
    TITAN_CHECK(!bs[i].defined() || (bs[i].dim() == 1 && bs[i].size(0) == ws[i].size(0) && bs[i].dtype() == x.dtype()),
                op, ": bias ", i, " ", shape_str(bs[i].shape()), " must be [", ws[i].size(0), "] of the input's dtype");
  }
  const int64_t p = p2p->size(), r = p2p->rank(), B = x.size(0), s = x.size(1), H = x.size(2), R = B * s;
  const bool bf16 = autocast_bf16(x);
  const DType wire = wire_dtype(x.dtype());  // the unfused gather's: bf16 values under autocast
  TITAN_CHECK(f8.empty() || f8.size() == n, op, ": ", f8.size(), " FP8 casts for ", n, " weights (one per weight, "
              "null for high precision)");
  std::vector<std::optional<Float8Casts>> k(n);  // the FP8 projections' casts
  bool any_f8 = false;
  for (size_t i = 0; i < f8.size(); ++i)
    if (f8[i]) {
      check_float8(op, *f8[i], x, ws[i], B * s * p, /*out_cut=*/true);
      k[i] = *f8[i];
      any_f8 = true;
    }
  // every projection FP8 with one tensorwise cast of the input: the input travels as FP8 codes
  std::vector<std::pair<const Fp8Cast*, const Fp8Cast*>> in_uses;
  for (size_t i = 0; i < n; ++i)
    in_uses.push_back(k[i] ? std::pair{&k[i]->input, &k[i]->input_for_grad_weight} : std::pair{nullptr, nullptr});
  const std::optional<Fp8Cast> ring8 = one_tensorwise(in_uses);

  // ---- forward: step t holds rank (r - t) mod p's shard; its GEMMs run while the next shard travels
  // under op-level selective checkpointing the projections are kept or recomputed as their unfused GEMMs would be;
  // the gather runs in every run (the backward reads it), the GEMMs a recompute needs on its steps
  Tensor X;  // [B, S, H] the gathered input, sequence order
  std::vector<bool> scaled(n);  // the FP8 projections: float8 GEMMs, which the save list does not keep
  for (size_t i = 0; i < n; ++i) scaled[i] = k[i].has_value();
  V outs = autograd::sac_forward_matmuls(n, false, [&](const std::vector<bool>& need) {
    NoGradGuard ng;
    V Y(n);  // [p R, N_i] chunk-major outputs (those needed)
    X = empty({B, s * p, H}, x.dtype(), x.device());
    for (size_t i = 0; i < n; ++i)
      if (need[i]) Y[i] = empty({p * R, ws[i].size(0)}, ws[i].dtype(), x.device());
    const Tensor local = through_wire(x.contiguous().reshape({R, H}), wire);
    // FP8: the weights cast once; the input shard by shard, one cast per distinct recipe (q / k / v share theirs)
    V wq(n), xq_local;
    std::vector<RowShardCast> xcast;
    std::vector<size_t> cast_of(n);
    for (size_t i = 0; i < n; ++i) {
      if (!need[i] || !k[i]) continue;
      wq[i] = fp8_round_trip(float8_weight_operand(ws[i], k[i]->weight, bf16), k[i]->weight, 1, /*rows_cut=*/true, false,
                             &k[i]->tp->reduce_max);
      if (ring8) continue;
      size_t d = 0;
      while (d < xcast.size() && !(xcast[d].c == k[i]->input)) ++d;
      if (d == xcast.size()) {
        xcast.push_back(RowShardCast{k[i]->input, k[i]->tp->reduce_max, {}});
        xq_local.push_back(xcast.back().first(local));
      }
      cast_of[i] = d;
    }
    if (ring8) {
      X = ring_all_gather_fp8(local, X.shape(), s, p2p, kGather, *ring8, k[0]->tp->reduce_max,
                              [&](int64_t j, const Tensor& xq) {  // [R, H] the chunk's FP8 values
                                for (size_t i = 0; i < n; ++i) {
                                  if (!need[i]) continue;
                                  const Tensor y = detail::float8_output_gemm(xq, wq[i], bs[i], *k[i], bf16);
                                  if (!y.is_meta()) copy_(rows(Y[i], j, R), y);
                                }
                              });
    } else {
      ring_all_gather(local, X, s, p2p, kGather, wire, [&](int64_t j, const Tensor& c) {
        V xq = xq_local;  // [R, H] each recipe's cast of the shard at hand
        if (j != r)
          for (size_t d = 0; d < xcast.size(); ++d) xq[d] = xcast[d].next(c);
        for (size_t i = 0; i < n; ++i) {
          if (!need[i]) continue;
          if (!k[i]) {
            detail::linear_forward(c, ws[i], bs[i], bf16, rows(Y[i], j, R));
            continue;
          }
          const Tensor y = detail::float8_output_gemm(xq[cast_of[i]], wq[i], bs[i], *k[i], bf16);  // [R, N_i]
          if (!y.is_meta()) copy_(rows(Y[i], j, R), y);
        }
      });
    }
    V y(n);
    for (size_t i = 0; i < n; ++i)
      if (need[i]) y[i] = from_chunks(Y[i], B, p);  // [B, S, N_i]
    return y;
  }, scaled);
  V inputs = {x};
  for (const Tensor& w : ws) inputs.push_back(w);
  std::vector<bool> has_b(n);
  for (size_t i = 0; i < n; ++i)
    if ((has_b[i] = bs[i].defined())) inputs.push_back(bs[i]);
  // the weight gradients read the gathered input as the GEMMs did: its bf16 pack under autocast (half the memory),
  // float32 for FP8 casts (float8_linear's)
  Tensor x2 = X.reshape({B * s * p, H});
  if (bf16 && !any_f8 && !x2.is_meta() && saving(inputs)) x2 = bf16_pack(x2);
  V saved_w;
  for (const Tensor& w : ws) saved_w.push_back(autograd::saved(w));
  const bool need_x = x.requires_grad();
  std::vector<bool> need_w(n);
  for (size_t i = 0; i < n; ++i) need_w[i] = ws[i].requires_grad();
  outs = autograd::record(
      "all_gather_linear", inputs, outs,
      [xs = autograd::saved(x2), saved_w, has_b, need_x, need_w, p2p, wire, bf16, p, r, B, s, H, R, n,
       k](const V& g) {
        NoGradGuard ng;
        // ---- backward: the input gradient reduce-scattered round the ring, chunk j's partial (the sum over the
        // projections of g_i[j] W_i, in the order the unfused graph accumulates them: the last projection's first)
        // computed while the previous step's sum travels; the weight gradients one GEMM each over the whole input
        const int64_t M = B * s * p;
        V gc(n);
        for (size_t i = 0; i < n; ++i) gc[i] = g[i].contiguous();
        // FP8: every operand cast before the ring, as float8_linear casts the unfused op's (the output gradient's
        // columns are cut: its scales take the group's amax, every rank in one order)
        V dyq(n), wq(n), dyq_w(n), xq_w(n);  // xq_w: one cast per distinct recipe (q / k / v share theirs)
        for (size_t i = 0; i < n; ++i) {
          if (!k[i]) continue;
          const auto* reduce = &k[i]->tp->reduce_max;
          const Tensor g2 = gc[i].reshape({M, gc[i].size(2)});  // [M, N_i]
          if (need_x) {
            dyq[i] = fp8_round_trip(g2, k[i]->grad_output, 1, false, /*cols_cut=*/true, reduce).reshape(gc[i].shape());
            wq[i] = fp8_round_trip(float8_weight_operand(saved_w[i], k[i]->weight_for_grad_input, bf16), k[i]->weight_for_grad_input, 0,
                                   /*rows_cut=*/true, false, reduce);
          }
          if (need_w[i]) {
            dyq_w[i] = fp8_round_trip(g2, k[i]->grad_output_for_grad_weight, 0, false, /*cols_cut=*/true, reduce);
            for (size_t j = 0; j < i && !xq_w[i].defined(); ++j)
              if (k[j] && need_w[j] && k[j]->input_for_grad_weight == k[i]->input_for_grad_weight) xq_w[i] = xq_w[j];
            if (!xq_w[i].defined()) xq_w[i] = fp8_round_trip(xs, k[i]->input_for_grad_weight, 0, false, false, reduce);
          }
        }
        auto partial = [&](int64_t j) {
          Tensor acc;
          for (size_t q = n; q-- > 0;) {
            // [R, H] (the input is read for its shape only)
            Tensor d = k[q] ? detail::float8_grad_input_gemm(chunk_rows(dyq[q], j, s), wq[q], *k[q], bf16)
                            : detail::linear_backward(chunk_rows(gc[q], j, s), rows(xs, 0, R), saved_w[q], false, true,
                                                      false, bf16)[0];
            acc = acc.defined() ? add(acc, d) : d;
          }
          if (wire == DType::BF16 && !acc.is_meta()) round_to_bf16_(acc);  // as the unfused wire rounds each rank's
          return acc;
        };
        V wgrad(n), bgrad(n);
        auto weight_grads = [&](size_t i) {
          if (!need_w[i] && !has_b[i]) return;
          if (k[i]) {
            if (need_w[i]) wgrad[i] = detail::float8_grad_weight_gemm(dyq_w[i], xq_w[i], *k[i], bf16);
            if (has_b[i]) bgrad[i] = detail::float8_bias_grad(gc[i].reshape({M, gc[i].size(2)}), bf16);
            return;
          }
          auto rr = detail::linear_backward(gc[i].reshape({M, gc[i].size(2)}), xs, saved_w[i], has_b[i], false,
                                            need_w[i], bf16);
          wgrad[i] = rr[1];
          bgrad[i] = rr[2];
        };
        Tensor dx;
        if (need_x) {
          // step t computes chunk (r - t - 1) mod p's partial, adds the sum received from the previous rank and
          // sends it on; at the last step the chunk is this rank's own, the sum complete
          Exchange e;
          size_t next_w = 0;
          for (int64_t t = 0; t < p; ++t) {
            Tensor acc = partial((r - t - 1 + 2 * p) % p);
            if (t > 0) {
              // a weight gradient while the sum travels (spread over the steps; the rest after the ring)
              if (next_w < n) weight_grads(next_w++);
              e.wait();
              acc = add(e.in, acc);
              if (wire == DType::BF16 && !acc.is_meta()) round_to_bf16_(acc);  // each hop's sum, as NCCL's bf16
            }
            if (t + 1 < p) e = shift(acc, p2p, kGradScatter, wire);
            else dx = acc.reshape({B, s, H});
          }
          while (next_w < n) weight_grads(next_w++);
        } else {
          for (size_t i = 0; i < n; ++i) weight_grads(i);
        }
        V out = {dx};
        for (size_t i = 0; i < n; ++i) out.push_back(wgrad[i]);
        for (size_t i = 0; i < n; ++i)
          if (has_b[i]) out.push_back(bgrad[i]);
        return out;
      });
  V result = {X};  // no graph: the gathered input, for readers of its shape
  for (const Tensor& y : outs) result.push_back(y);
  return result;
}

Tensor linear_reduce_scatter(const Tensor& x, const Tensor& w, const PG& p2p, const Float8Casts* f8) {
  const char* op = "linear_reduce_scatter";
  check_input(op, x, p2p);
  TITAN_CHECK(x.size(1) % p2p->size() == 0, op, ": the sequence (", x.size(1), ") must split evenly over the ",
              p2p->size(), " ranks of group '", p2p->name(), "'");
  TITAN_CHECK(w.dim() == 2 && w.size(1) == x.size(2) && w.dtype() == x.dtype(), op, ": weight ", shape_str(w.shape()),
              " must be [N, ", x.size(2), "] of the input's dtype");
  const int64_t p = p2p->size(), r = p2p->rank(), B = x.size(0), S = x.size(1), K = x.size(2), s = S / p, R = B * s,
                N = w.size(0);
  const bool bf16 = autocast_bf16(x);
  // the output's wire, as the unfused reduce-scatter of the projection's output and its backward's gather
  const DType wire = wire_dtype(x.dtype());
  std::optional<Float8Casts> k;  // an FP8 projection's casts
  if (f8) {
    check_float8(op, *f8, x, w, B * S, /*out_cut=*/false);
    k = *f8;
  }

  // ---- forward: step t computes chunk (r - t - 1) mod p's partial product while the sum of the steps before
  // travels, adds the sum received and sends it on; the last step's chunk is this rank's own
  // under op-level selective checkpointing kept, as the unfused reduce-scatter is (the save list keeps it): a
  // recompute runs nothing of it; its GEMM counts as the unfused one's matmul (a float8 one counts as none)
  Tensor x2;  // [B S, K] the input as the weight gradient reads it (sequence order; its bf16 pack under autocast)
  {
    NoGradGuard ng;
    x2 = x.contiguous().reshape({B * S, K});
    if (bf16 && !k && !x2.is_meta() && saving({x, w})) x2 = bf16_pack(x2);  // FP8: float32, as float8_linear's
  }
  Tensor y = autograd::sac_forward_matmuls(1, true, [&](const std::vector<bool>& need) {
    if (!need[0]) return V(1);
    NoGradGuard ng;
    const Tensor xc = x.contiguous();
    Tensor xq, wq;  // FP8: the input and weight cast once (their scales span the cut K: the group's amax)
    if (k) {
      const auto* reduce = &k->tp->reduce_max;
      xq = fp8_round_trip(xc.reshape({B * S, K}), k->input, 1, false, /*cols_cut=*/true, reduce).reshape({B, S, K});
      wq = fp8_round_trip(float8_weight_operand(w, k->weight, bf16), k->weight, 1, false, /*cols_cut=*/true, reduce);
    }
    Tensor out;
    Exchange e;
    for (int64_t t = 0; t < p; ++t) {
      const int64_t j = (r - t - 1 + 2 * p) % p;
      Tensor acc = k ? detail::float8_output_gemm(chunk_rows(xq, j, s), wq, Tensor(), *k, bf16)  // [R, N]
                     : detail::linear_forward(chunk_rows(xc, j, s), w, Tensor(), bf16);
      if (t > 0) {
        e.wait();
        acc = add(e.in, acc);
        if (wire == DType::BF16 && !acc.is_meta()) round_to_bf16_(acc);  // each hop's sum, as NCCL's bf16
      }
      if (t + 1 < p) e = shift(acc, p2p, kScatter, wire);
      else out = acc.reshape({B, s, N});
    }
    return V{out};
  }, std::vector<bool>{k.has_value()})[0];
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  return autograd::record(
      "linear_reduce_scatter", {x, w}, y,
      [xs = autograd::saved(x2), ws = autograd::saved(w), need_x, need_w, p2p, wire, bf16, p, r, B, s, K, R, N,
       k](const V& g) {
        NoGradGuard ng;
        // ---- backward: the output gradient all-gathered round the ring; step t's data-gradient GEMM on rank
        // (r - t) mod p's rows runs while the next rows travel; the weight gradient one GEMM over all rows
        Tensor G = empty({B, s * p, N}, g[0].dtype(), g[0].device());  // [B, S, N] gathered, sequence order
        Tensor dX = need_x ? empty({B, s * p, K}, g[0].dtype(), g[0].device()) : Tensor();
        const Tensor local = through_wire(g[0].contiguous().reshape({R, N}), wire);
        // FP8: the weight cast once (its K is cut: the group's amax), the gradient's rows as they arrive with the
        // whole gathered gradient's scales (this rank's shard cast before the ring)
        std::optional<RowShardCast> dycast;
        Tensor wq, dyq_local;
        if (k && need_x)
          wq = fp8_round_trip(float8_weight_operand(ws, k->weight_for_grad_input, bf16), k->weight_for_grad_input, 0, false, /*cols_cut=*/true,
                              &k->tp->reduce_max);
        // one tensorwise cast for both its GEMMs: the gradient travels as FP8 codes
        const std::optional<Fp8Cast> ring8 =
            k ? one_tensorwise({{&k->grad_output, &k->grad_output_for_grad_weight}}) : std::nullopt;
        if (ring8) {
          G = ring_all_gather_fp8(local, G.shape(), s, p2p, kGradGather, *ring8, k->tp->reduce_max,
                                  [&](int64_t j, const Tensor& dyq) {  // [R, N] the chunk's FP8 values
                                    if (need_x) put_chunk(dX, j, s, detail::float8_grad_input_gemm(dyq, wq, *k, bf16));
                                  });
        } else {
          if (k && need_x) {
            dycast = RowShardCast{k->grad_output, k->tp->reduce_max, {}};
            dyq_local = dycast->first(local);
          }
          ring_all_gather(local, G, s, p2p, kGradGather, wire, [&](int64_t j, const Tensor& c) {
            if (!need_x) return;  // dX's chunk j = c w ([R, K]; the input read for its shape only)
            const Tensor at = chunk_view(dX, j, s);
            if (k) {
              const Tensor d = detail::float8_grad_input_gemm(j == r ? dyq_local : dycast->next(c), wq, *k, bf16);
              put_chunk(dX, j, s, d);
              return;
            }
            Tensor d = detail::linear_backward(c, rows(xs, 0, R), ws, false, true, false, bf16, at)[0];
            if (!at.defined()) put_chunk(dX, j, s, d);
          });
        }
        Tensor dw;
        if (need_w && k) {  // q(dy, along M) of the gathered gradient (whole on every rank), q(x, along M) of the cut x
          const Tensor dyq = fp8_round_trip(G.reshape({B * s * p, N}), k->grad_output_for_grad_weight, 0, false, false,
                                            nullptr);
          const Tensor xq = fp8_round_trip(xs, k->input_for_grad_weight, 0, false, /*cols_cut=*/true,
                                           &k->tp->reduce_max);
          dw = detail::float8_grad_weight_gemm(dyq, xq, *k, bf16);
        } else if (need_w) {
          dw = detail::linear_backward(G.reshape({B * s * p, N}), xs, ws, false, false, true, bf16)[1];
        }
        return V{dX, dw};
      });
}

}  // namespace titan::comms
