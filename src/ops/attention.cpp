// Scaled-dot-product attention: grouped-query heads, causal mask, sliding
// window, per-head learned sink logits. Per (batch, head) the score matrix
// is formed by BLAS straight from the [B, S, H, D] layout (leading dimension
// H*D, no transposes copied). Forward saves the row log-sum-exp; backward
// recomputes the probabilities from it.
#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "src/ops/common.h"

namespace titan {
using namespace detail;

namespace {
struct AttnDims {
  int64_t B, S, Hq, Hkv, D, group;
};

// Query-key pairs a kernel visits (causal: the lower triangle; a window cuts
// it further). FLOPs count these pairs, as a causal flash kernel does the work.
inline double visible_pairs(int64_t S, const AttentionOptions& o) {
  if (!o.causal && o.window <= 0) return (double)S * S;
  const double w = o.window > 0 ? (double)std::min<int64_t>(o.window, S) : (double)S;
  if (!o.causal) return (double)S * S;  // windowed non-causal: not used by the models
  return w * (w + 1) / 2 + (double)(S - (int64_t)w) * w;  // rows i < w see i+1 keys, later rows see w
}

// row[lo..hi] = exp(row[lo..hi] - m); returns their sum. float: Eigen's vectorized exp.
template <typename T>
inline T exp_shift(T* row, int64_t lo, int64_t hi, T m) {
  if (hi < lo) return T(0);
  if constexpr (std::is_same_v<T, float>) {
    Eigen::Map<Eigen::ArrayXf> r(row + lo, hi - lo + 1);
    r = (r - m).exp();
    T s = 0;  // a plain loop: Eigen's vectorized sum order depends on the address (not deterministic)
    for (int64_t j = lo; j <= hi; ++j) s += row[j];
    return s;
  } else {
    T s = 0;
    for (int64_t j = lo; j <= hi; ++j) s += (row[j] = std::exp(row[j] - m));
    return s;
  }
}

// Visible key range [lo, hi] of query i.
inline void visible(int64_t i, int64_t S, const AttentionOptions& o, int64_t& lo, int64_t& hi) {
  hi = o.causal ? i : S - 1;
  lo = o.window > 0 ? std::max<int64_t>(0, i - o.window + 1) : 0;
}

// -> out [B, S, Hq, D], lse [B, Hq, S]
std::pair<Tensor, Tensor> sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                                       const AttentionOptions& o, const AttnDims& d, double scale) {
  Tensor out = empty(q.shape(), q.dtype(), q.device());
  Tensor lse = empty({d.B, d.Hq, d.S}, q.dtype(), q.device());
  const double ss = visible_pairs(d.S, o);
  record_cost("sdpa", d.B * d.Hq * (4.0 * ss * d.D + 5.0 * ss), bytes_of({&q, &k, &v, &out, &lse}));
  if (q.is_meta()) return {out, lse};
  dispatch_float(q.dtype(), "sdpa", [&]<typename T>() {
    const T* pq = q.data<T>();
    const T* pk = k.data<T>();
    const T* pv = v.data<T>();
    const T* psink = sinks.defined() ? sinks.data<T>() : nullptr;
    T* po = out.data<T>();
    T* pl = lse.data<T>();
    const int64_t S = d.S, D = d.D, ldq = d.Hq * D, ldk = d.Hkv * D;
#pragma omp parallel
    {
      // Eigen-aligned: the vectorized exp's scalar head depends on alignment (determinism)
      std::vector<T, Eigen::aligned_allocator<T>> P((size_t)S * S);
#pragma omp for schedule(dynamic)
      for (int64_t bh = 0; bh < d.B * d.Hq; ++bh) {
        const int64_t b = bh / d.Hq, h = bh % d.Hq, g = h / d.group;
        const T* qh = pq + b * S * ldq + h * D;
        const T* kg = pk + b * S * ldk + g * D;
        const T* vg = pv + b * S * ldk + g * D;
        gemm<T>(false, true, S, S, D, T(scale), qh, ldq, kg, ldk, T(0), P.data(), S);
        for (int64_t i = 0; i < S; ++i) {
          T* row = P.data() + i * S;
          int64_t lo, hi;
          visible(i, S, o, lo, hi);
          T m = psink ? psink[h] : -std::numeric_limits<T>::infinity();
          for (int64_t j = lo; j <= hi; ++j) m = std::max(m, row[j]);
          T den = (psink ? std::exp(psink[h] - m) : T(0)) + exp_shift(row, lo, hi, m);
          for (int64_t j = 0; j < lo; ++j) row[j] = 0;
          for (int64_t j = hi + 1; j < S; ++j) row[j] = 0;
          const T inv = T(1) / den;
          for (int64_t j = lo; j <= hi; ++j) row[j] *= inv;
          pl[(b * d.Hq + h) * S + i] = m + std::log(den);
        }
        gemm<T>(false, false, S, D, S, T(1), P.data(), S, vg, ldk, T(0), po + b * S * ldq + h * D, ldq);
      }
    }
  });
  return {out, lse};
}

// -> dq, dk, dv, dsinks
std::vector<Tensor> sdpa_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& sinks, const Tensor& out, const Tensor& lse, const AttentionOptions& o,
                                  const AttnDims& d, double scale) {
  Tensor dq = empty(q.shape(), q.dtype(), q.device());
  Tensor dk = zeros(k.shape(), k.dtype(), k.device());
  Tensor dv = zeros(v.shape(), v.dtype(), v.device());
  Tensor dsink = sinks.defined() ? zeros(sinks.shape(), sinks.dtype(), sinks.device()) : Tensor();
  const double ss = visible_pairs(d.S, o);
  record_cost("sdpa_backward", d.B * d.Hq * (10.0 * ss * d.D + 6.0 * ss),
              bytes_of({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv}));
  if (q.is_meta()) return {dq, dk, dv, dsink};
  Tensor gc = dout.contiguous();
  dispatch_float(q.dtype(), "sdpa_backward", [&]<typename T>() {
    const T* pq = q.data<T>();
    const T* pk = k.data<T>();
    const T* pv = v.data<T>();
    const T* pO = out.data<T>();
    const T* pdO = gc.data<T>();
    const T* pl = lse.data<T>();
    const T* psink = sinks.defined() ? sinks.data<T>() : nullptr;
    T* pdq = dq.data<T>();
    T* pdk = dk.data<T>();
    T* pdv = dv.data<T>();
    const int64_t S = d.S, D = d.D, ldq = d.Hq * D, ldk = d.Hkv * D;
    std::vector<T> sink_part(psink ? (size_t)d.B * d.Hq : 0, T(0));
#pragma omp parallel
    {
      std::vector<T, Eigen::aligned_allocator<T>> P((size_t)S * S), dP((size_t)S * S), Di(S);
#pragma omp for schedule(dynamic)
      for (int64_t bg = 0; bg < d.B * d.Hkv; ++bg) {  // one KV head at a time: dk/dv have one writer
        const int64_t b = bg / d.Hkv, g = bg % d.Hkv;
        const T* kg = pk + b * S * ldk + g * D;
        const T* vg = pv + b * S * ldk + g * D;
        T* dkg = pdk + b * S * ldk + g * D;
        T* dvg = pdv + b * S * ldk + g * D;
        for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
          const T* qh = pq + b * S * ldq + h * D;
          const T* oh = pO + b * S * ldq + h * D;
          const T* doh = pdO + b * S * ldq + h * D;
          const T* lh = pl + (b * d.Hq + h) * S;
          gemm<T>(false, true, S, S, D, T(scale), qh, ldq, kg, ldk, T(0), P.data(), S);
          gemm<T>(false, true, S, S, D, T(1), doh, ldq, vg, ldk, T(0), dP.data(), S);
          T sink_acc = 0;
          for (int64_t i = 0; i < S; ++i) {
            T di = 0;
            for (int64_t c = 0; c < D; ++c) di += doh[i * ldq + c] * oh[i * ldq + c];
            Di[i] = di;
            if (psink) sink_acc -= std::exp(psink[h] - lh[i]) * di;
            int64_t lo, hi;
            visible(i, S, o, lo, hi);
            T* pr = P.data() + i * S;
            T* dr = dP.data() + i * S;
            exp_shift(pr, lo, hi, lh[i]);
            for (int64_t j = lo; j <= hi; ++j) dr[j] = pr[j] * (dr[j] - di);
            for (int64_t j = 0; j < lo; ++j) pr[j] = dr[j] = 0;
            for (int64_t j = hi + 1; j < S; ++j) pr[j] = dr[j] = 0;
          }
          if (psink) sink_part[b * d.Hq + h] = sink_acc;
          gemm<T>(false, false, S, D, S, T(scale), dP.data(), S, kg, ldk, T(0), pdq + b * S * ldq + h * D, ldq);
          gemm<T>(true, false, S, D, S, T(scale), dP.data(), S, qh, ldq, T(1), dkg, ldk);
          gemm<T>(true, false, S, D, S, T(1), P.data(), S, doh, ldq, T(1), dvg, ldk);
        }
      }
    }
    if (psink) {
      T* ps = dsink.data<T>();
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t h = 0; h < d.Hq; ++h) ps[h] += sink_part[b * d.Hq + h];
    }
  });
  return {dq, dk, dv, dsink};
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                                    const AttentionOptions& opt) {
  const char* op = "scaled_dot_product_attention";
  same_device(op, {&q, &k, &v, &sinks});
  need_float(op, q);
  same_dtype(op, q, k);
  same_dtype(op, q, v);
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": expected q [B, S, Hq, D], k/v [B, S, Hkv, D], got ",
              shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  AttnDims d{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), 0};
  TITAN_CHECK(k.shape() == v.shape() && k.size(0) == d.B && k.size(1) == d.S && k.size(3) == d.D, op,
              ": k ", shape_str(k.shape()), " and v ", shape_str(v.shape()), " must be [", d.B, ", ", d.S,
              ", Hkv, ", d.D, "] for q ", shape_str(q.shape()));
  TITAN_CHECK(d.Hkv > 0 && d.Hq % d.Hkv == 0, op, ": query heads ", d.Hq, " must be a multiple of key/value heads ",
              d.Hkv);
  d.group = d.Hq / d.Hkv;
  TITAN_CHECK(opt.window >= 0, op, ": window must be >= 0, got ", opt.window);
  TITAN_CHECK(opt.window == 0 || opt.causal, op, ": a sliding window requires causal attention");
  if (sinks.defined()) {
    same_dtype(op, q, sinks);
    TITAN_CHECK(sinks.dim() == 1 && sinks.size(0) == d.Hq, op, ": sinks must be [", d.Hq, "], got ",
                shape_str(sinks.shape()));
  }
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt((double)d.D);
  Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  Tensor sc = sinks.defined() ? sinks.contiguous() : Tensor();
  auto [out, lse] = sdpa_forward(qc, kc, vc, sc, opt, d, scale);
  std::vector<Tensor> inputs = {qc, kc, vc};
  if (sc.defined()) inputs.push_back(sc);
  return record("scaled_dot_product_attention", inputs, out,
                [qs = saved(qc), ks = saved(kc), vs = saved(vc), sks = saved(sc), os = saved(out), ls = saved(lse), opt,
                 d, scale](const std::vector<Tensor>& g) {
                  auto r = sdpa_backward(g[0], qs, ks, vs, sks, os, ls, opt, d, scale);
                  if (!sks.defined()) r.pop_back();
                  return r;
                });
}

}  // namespace titan
