// matmul and linear on the GEMM kernels (src/ops/gemm.cpp). Transposed views are passed to the GEMM as
// transpose flags with their leading dimension, never copied.
#include <omp.h>

#include "src/autograd/checkpoint.h"
#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan {
using namespace detail;


namespace {
// How BLAS reads the last two dims [r, c] of a tensor.
struct BlasMat {
  Tensor t;  // the tensor read (x itself or a contiguous copy)
  bool trans = false;
  int64_t ld = 0;
};
BlasMat blas_mat(const Tensor& x) {
  const int64_t nd = x.dim();
  const int64_t r = x.shape()[nd - 2], c = x.shape()[nd - 1];
  const int64_t sr = x.strides()[nd - 2], sc = x.strides()[nd - 1];
  if ((sc == 1 || c == 1) && sr >= std::max<int64_t>(c, 1)) return {x, false, sr};
  if ((sr == 1 || r == 1) && sc >= std::max<int64_t>(r, 1)) return {x, true, sc};
  Tensor xc = empty(x.shape(), x.dtype(), x.device());
  copy_(xc, x);
  return {xc, false, std::max<int64_t>(c, 1)};
}

// Element offsets of every batch entry (batch dims = all but the last two).
std::vector<int64_t> batch_offsets(const Tensor& x, const Shape& batch) {
  const int64_t nb = numel(batch), bd = (int64_t)batch.size();
  const int64_t xb = x.dim() - 2;  // x's batch rank (0 = shared matrix)
  std::vector<int64_t> offs(nb, 0);
  if (xb == 0) return offs;
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, off = 0;
    for (int64_t d = bd - 1; d >= 0; --d) {
      int64_t k = rem % batch[d];
      rem /= batch[d];
      off += k * x.strides()[d];
    }
    offs[i] = off;
  }
  return offs;
}

// A bf16 op's output: its values rounded to bfloat16 (`t` is the op's own fresh result).
Tensor bf16_out(Tensor t) {
  if (!t.defined()) return t;
  if (!t.is_contiguous()) t = t.contiguous();
  round_to_bf16_(t);
  return t;
}

}  // namespace

namespace detail {
void bias_grad_bf16(const Tensor& g, Tensor& db) {
  const Tensor gc = g.contiguous();
  const int64_t N = gc.size(0), C = gc.size(1);
  const float* pg = gc.data<float>();
  float* pd = db.data<float>();
#pragma omp parallel for schedule(static) if (N * C >= kParallelGrain)
  for (int64_t j = 0; j < C; ++j) {
    double acc = 0;  // (the float32 sum of sum(): the order differs, the rounding hides it)
    for (int64_t i = 0; i < N; ++i) acc += round_to_bf16(pg[i * C + j]);
    pd[j] = round_to_bf16((float)acc);
  }
}


Tensor matmul_forward(const Tensor& a, const Tensor& b, bool bf16, bool ordered) {
  Device dev = same_device("matmul", {&a, &b});
  same_dtype("matmul", a, b);
  need_float("matmul", a);
  TITAN_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: expected operands of rank >= 2, got ", shape_str(a.shape()),
              " and ", shape_str(b.shape()));
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  TITAN_CHECK(b.size(-2) == K, "matmul: inner dimensions differ: ", shape_str(a.shape()), " @ ", shape_str(b.shape()),
              " (", K, " vs ", b.size(-2), ")");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  TITAN_CHECK(ba == bb || ba.empty() || bb.empty(), "matmul: batch dims differ: ", shape_str(a.shape()), " @ ",
              shape_str(b.shape()), " (batch dims must match, or one operand must be 2-D)");
  TITAN_CHECK(!(bf16 && ordered), "matmul: the fixed-order GEMM reads float32 operands; bf16 autocast's GEMM is "
              "the library's (", shape_str(a.shape()), " @ ", shape_str(b.shape()), ")");
  Shape batch = ba.empty() ? bb : ba;
  Shape os = batch;
  os.push_back(M);
  os.push_back(N);
  Tensor out = empty(os, a.dtype(), dev);
  const int64_t nb = numel(batch);
  record_cost("matmul", 2.0 * (double)nb * M * N * K, bytes_of({&a, &b, &out}), GemmShape{nb, M, N, K});
  if (dev == Device::Meta || out.numel() == 0) return out;
  BlasMat A = blas_mat(a), B = blas_mat(b);
  auto oa = batch_offsets(A.t, batch), ob = batch_offsets(B.t, batch);
  dispatch_float(a.dtype(), "matmul", [&]<typename T>() {
    const T* pa = A.t.template data<T>();
    const T* pb = B.t.template data<T>();
    T* po = out.data<T>();
    // one product: gemm (oneDNN where it is faster); a batch: OpenBLAS whether its products run side by side
    // or one at a time (the choice depends on the thread count, the bits must not)
    auto one = [&](int64_t i) {
      if constexpr (std::is_same_v<T, float>)
        if (ordered)
          return gemm_ordered(A.trans, B.trans, M, N, K, 1.0f, pa + oa[i], A.ld, pb + ob[i], B.ld, 0.0f,
                              po + i * M * N, N);
      if (nb == 1)
        gemm_as<T>(bf16, A.trans, B.trans, M, N, K, T(1), pa + oa[i], A.ld, pb + ob[i], B.ld, T(0), po + i * M * N, N);
      else
        gemm_blas_as<T>(bf16, A.trans, B.trans, M, N, K, T(1), pa + oa[i], A.ld, pb + ob[i], B.ld, T(0),
                        po + i * M * N, N);
    };
    // many small GEMMs: one per thread; few big ones: BLAS threads each (bf16: oneDNN's threads each, its
    // primitives are not run concurrently from several threads)
    if (!bf16 && nb >= 2 * omp_get_max_threads() && M * N * K < (1 << 21)) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < nb; ++i) one(i);
    } else {
      for (int64_t i = 0; i < nb; ++i) one(i);
    }
  });
  if (bf16) round_to_bf16_(out);
  return out;
}
}  // namespace detail

Tensor matmul(const Tensor& a, const Tensor& b) {
  const bool bf16 = autocast_bf16(a);
  Tensor out = autograd::sac_forward(autograd::SacOp::Matmul, [&] { return matmul_forward(a, b, bf16); });
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record("matmul", {a, b}, out, [sa = saved(a), sb = saved(b), ga, gb, bf16](const std::vector<Tensor>& g) {
    // a broadcast operand's gradient: the product summed over the broadcast dims (under bf16, in float32, then
    // rounded like any bf16 result; the product itself is rounded already)
    auto summed = [bf16](const Tensor& full, const Shape& to) {
      Tensor r = sum_to(full, to);
      return bf16 && full.shape() != to ? bf16_out(r) : r;
    };
    Tensor da, db;
    if (ga) da = summed(matmul_forward(g[0], transpose(sb, -1, -2), bf16), sa.shape());
    if (gb) {
      if (sb.dim() == 2 && sa.dim() > 2) {  // shared b: fold a's batch into rows
        Tensor a2 = reshape(sa, {-1, sa.size(-1)}), g2 = reshape(g[0], {-1, g[0].size(-1)});
        db = matmul_forward(transpose(a2, 0, 1), g2, bf16);
      } else {
        db = summed(matmul_forward(transpose(sa, -1, -2), g[0], bf16), sb.shape());
      }
    }
    return std::vector<Tensor>{da, db};
  });
}

// ---- linear ----------------------------------------------------------------
namespace {
// A bf16 GEMM's operand x2 [N, in] as stored: float32 values (rounded as the GEMM reads them) or a pack's bits.
Bf16Operand bf16_operand(const Tensor& x2) {
  if (x2.dtype() == DType::BF16) return {nullptr, bf16_bits(x2), x2.size(1)};
  return {x2.data<float>(), nullptr, x2.size(1)};
}
}  // namespace

namespace detail {
// x2 [N, in], w [out, in], bias [out] -> y [N, out]
// bf16: autocast's bf16 GEMM (operands and bias read as bf16, the output rounded to bf16); x2 float32, or on a
// real run its bf16 pack (bf16_pack)
Tensor linear_forward(const Tensor& x2, const Tensor& w, const Tensor& bias, bool bf16, const Tensor& out) {
  const int64_t N = x2.size(0), in = x2.size(1), out_f = w.size(0);
  TITAN_CHECK(!out.defined() || (out.shape() == Shape{N, out_f} && out.is_contiguous() && out.dtype() == w.dtype()),
              "linear_forward: out must be a contiguous [", N, ", ", out_f, "] ", dtype_name(w.dtype()), " tensor, got ",
              out.defined() ? shape_str(out.shape()) : std::string("-"));
  Tensor y = out.defined() ? out : empty({N, out_f}, w.dtype(), x2.device());
  record_cost("linear", 2.0 * N * in * out_f + (bias.defined() ? (double)N * out_f : 0.0),
              bytes_of({&x2, &w, &bias, &y}), GemmShape{1, N, out_f, in});
  if (x2.is_meta() || y.numel() == 0) return y;
  BlasMat W = blas_mat(w);
  dispatch_float(w.dtype(), "linear", [&]<typename T>() {
    T* py = y.data<T>();
    T beta = T(0);
    if (bias.defined()) {
      Tensor bc = bias.contiguous();
      const T* pb = bc.data<T>();
#pragma omp parallel for schedule(static) if (N * out_f >= kParallelGrain)
      for (int64_t i = 0; i < N; ++i) std::copy(pb, pb + out_f, py + i * out_f);
      beta = T(1);
      if (bf16) round_to_bf16_(y);  // the bias as the bf16 addmm reads it
    }
    // y = x2 @ w^T: op(B) = w^T, so flip w's own transpose flag
    if constexpr (std::is_same_v<T, float>)
      if (bf16)
        return gemm_bf16(false, !W.trans, N, out_f, in, 1.0f, bf16_operand(x2), {W.t.data<float>(), nullptr, W.ld},
                         beta, py, out_f);
    gemm<T>(false, !W.trans, N, out_f, in, T(1), x2.data<T>(), in, W.t.template data<T>(), W.ld, beta, py, out_f);
  });
  if (bf16) round_to_bf16_(y);
  return y;
}

// g [N, out] -> dx [N, in], dw [out, in], db [out]
std::vector<Tensor> linear_backward(const Tensor& g, const Tensor& x2, const Tensor& w, bool has_bias, bool need_x,
                                    bool need_w, bool bf16, const Tensor& dx_out) {
  const int64_t N = x2.size(0), in = x2.size(1), out_f = w.size(0);
  TITAN_CHECK(!dx_out.defined() || (need_x && dx_out.shape() == Shape{N, in} && dx_out.is_contiguous() &&
                                    dx_out.dtype() == g.dtype()),
              "linear_backward: dx_out must be a contiguous [", N, ", ", in, "] tensor of the gradient's dtype, got ",
              dx_out.defined() ? shape_str(dx_out.shape()) : std::string("-"));
  Tensor dx, dw, db;
  if (need_x) dx = dx_out.defined() ? dx_out : empty({N, in}, g.dtype(), g.device());
  if (need_w) dw = empty({out_f, in}, g.dtype(), g.device());
  record_cost("linear_backward", (need_x ? 2.0 * N * in * out_f : 0) + (need_w ? 2.0 * N * in * out_f : 0),
              bytes_of({&g, &x2, &w, &dx, &dw}), GemmShape{(int64_t)need_x + (int64_t)need_w, N, in, out_f});
  // the bias gradient (its own recorded op) after the GEMMs: a timed profile charges the time after a record to
  // the op recorded last, so a nested op first would take this op's GEMMs
  auto bias_grad = [&] {
    if (!has_bias) return;
    db = sum(g, {0}, false);
    if (bf16 && !g.is_meta()) bias_grad_bf16(g, db);
  };
  if (g.is_meta()) {
    bias_grad();
    return {dx, dw, db};
  }
  Tensor gc = g.contiguous();
  BlasMat W = blas_mat(w);
  if (bf16 && N > 0 && out_f > 0) {  // g read as bf16 by both GEMMs: rounded and packed once
    const std::vector<uint16_t> gb = pack_bf16(gc.data<float>(), N, out_f, out_f);
    const Bf16Operand G{nullptr, gb.data(), out_f};
    if (need_x)  // dx = g @ w
      gemm_bf16(false, W.trans, N, in, out_f, 1.0f, G, {W.t.data<float>(), nullptr, W.ld}, 0.0f, dx.data<float>(), in);
    if (need_w)  // dw = g^T @ x2 (x2: the forward's pack, or float32 values)
      gemm_bf16(true, false, out_f, in, N, 1.0f, G, bf16_operand(x2), 0.0f, dw.data<float>(), in);
  } else if (x2.dtype() == DType::BF16) {  // nothing to multiply: no rows or no outputs
    if (need_x) fill_(dx, 0.0);
    if (need_w) fill_(dw, 0.0);
  } else dispatch_float(g.dtype(), "linear_backward", [&]<typename T>() {
    if (need_x)  // dx = g @ w
      gemm_as<T>(bf16, false, W.trans, N, in, out_f, T(1), gc.data<T>(), out_f, W.t.template data<T>(), W.ld, T(0),
                 dx.data<T>(), in);
    if (need_w)  // dw = g^T @ x2
      gemm_as<T>(bf16, true, false, out_f, in, N, T(1), gc.data<T>(), out_f, x2.data<T>(), in, T(0), dw.data<T>(),
                 in);
  });
  if (bf16) {
    if (need_x) round_to_bf16_(dx);
    if (need_w) round_to_bf16_(dw);
  }
  bias_grad();
  return {dx, dw, db};
}
}  // namespace detail

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  same_device("linear", {&x, &w, &bias});
  need_float("linear", x);
  same_dtype("linear", x, w);
  TITAN_CHECK(w.dim() == 2, "linear: weight must be [out, in], got ", shape_str(w.shape()));
  TITAN_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input ", shape_str(x.shape()),
              " last dim must equal weight in_features (weight ", shape_str(w.shape()), ")");
  if (bias.defined()) {
    same_dtype("linear", x, bias);
    TITAN_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "linear: bias ", shape_str(bias.shape()),
                " must be [", w.size(0), "] for weight ", shape_str(w.shape()));
  }
  Tensor x2;
  {
    NoGradGuard ng;  // the reshape is folded into this op's own backward
    x2 = reshape(x, {-1, x.size(-1)}).contiguous();
  }
  const bool bf16 = autocast_bf16(x);
  // a real bf16 run multiplies, and keeps for the weight's gradient, the input's bf16 pack (autocast's cast of
  // it; one per input however many projections read it): half float32's memory
  if (bf16 && !x2.is_meta() && x2.numel() > 0) x2 = bf16_pack(x2);
  Tensor y2 = autograd::sac_forward(autograd::SacOp::Matmul, [&] { return detail::linear_forward(x2, w, bias, bf16); });
  Shape os = x.shape();
  os.back() = w.size(0);
  Tensor y;
  {
    NoGradGuard ng;
    y = reshape(y2, os);
  }
  bool gx = x.requires_grad(), gw = w.requires_grad();
  std::vector<Tensor> inputs = {x, w};
  if (bias.defined()) inputs.push_back(bias);
  return record("linear", inputs, y,
                [xs = saved(x2), ws = saved(w), xshape = x.shape(), has_b = bias.defined(), gx, gw,
                 bf16](const std::vector<Tensor>& g) {
                  Tensor g2 = reshape(g[0], {-1, g[0].size(-1)});
                  auto r = detail::linear_backward(g2, xs, ws, has_b, gx, gw, bf16);
                  std::vector<Tensor> out = {gx ? reshape(r[0], xshape) : Tensor(), r[1]};
                  if (has_b) out.push_back(r[2]);
                  return out;
                });
}

}  // namespace titan
