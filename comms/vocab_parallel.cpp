#include "comms/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "comms/functional.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

namespace titan::comms {

Tensor vocab_parallel_embedding(const Tensor& weight, const Tensor& ids, int64_t start, const PG& pg) {
  const int64_t Vl = weight.size(0);
  Tensor local = empty(ids.shape(), DType::I64, ids.device());  // ids this rank owns, shifted; 0 elsewhere
  Shape ms = ids.shape();
  ms.push_back(1);
  Tensor own = empty(ms, weight.dtype(), ids.device());          // [..., 1]: 1 where owned
  if (!ids.is_meta()) {
    Tensor c = ids.contiguous();
    const int64_t* p = c.data<int64_t>();
    int64_t* l = local.data<int64_t>();
    std::vector<float> o(c.numel());
    for (int64_t i = 0; i < c.numel(); ++i) {
      const bool mine = p[i] >= start && p[i] < start + Vl;
      l[i] = mine ? p[i] - start : 0;
      o[i] = mine ? 1.0f : 0.0f;
    }
    own = cast(from_vector<float>(o, ms), weight.dtype());
  }
  return reduce_from(mul(embedding(weight, local), own), pg);
}

// One fused op: the forward keeps only the logits shard and two numbers per
// row (the global max and sum-exp); the backward recomputes the softmax from
// them. The three all-reduces run in the forward; the backward is local.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t start, const PG& pg,
                                    int64_t ignore_index) {
  TITAN_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "vocab_parallel_cross_entropy: expected logits [N, V_local] and targets [N], got ",
              shape_str(logits.shape()), " and ", shape_str(targets.shape()));
  TITAN_CHECK(logits.dtype() == DType::F32, "vocab_parallel_cross_entropy: float32 logits expected, got ",
              dtype_name(logits.dtype()));
  const int64_t N = logits.size(0), Vl = logits.size(1);
  struct Saved {
    Tensor x, m, S;                  // logits [N, Vl], row max [N], sum-exp [N]
    std::vector<int64_t> col;        // the target's local column, -1 when another rank (or nobody) owns it
    std::vector<float> valid;        // 1 where the target counts
    double inv_n = 1.0;
  };
  auto sv = std::make_shared<Saved>();
  auto forward = [=](const std::vector<Tensor>& in) {
    sv->x = in[0].contiguous();
    record_cost("vocab_parallel_cross_entropy", 4.0 * (double)N * Vl, 4.0 * (double)N * Vl);
    Tensor m_local = empty({N}, DType::F32, sv->x.device());
    if (sv->x.is_meta()) {
      sv->m = pg->all_reduce(m_local, ReduceOp::Max);
      sv->S = pg->all_reduce(m_local, ReduceOp::Sum);
      (void)pg->all_reduce(m_local, ReduceOp::Sum);
      return std::vector<Tensor>{empty({}, DType::F32, sv->x.device())};
    }
    const float* x = sv->x.data<float>();
    float* ml = m_local.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      float mx = -INFINITY;
      for (int64_t j = 0; j < Vl; ++j) mx = std::max(mx, x[i * Vl + j]);
      ml[i] = mx;
    }
    sv->m = pg->all_reduce(m_local, ReduceOp::Max);
    const float* m = sv->m.data<float>();
    Tensor se = empty({N}, DType::F32), tz = empty({N}, DType::F32);
    float* pse = se.data<float>();
    float* ptz = tz.data<float>();
    Tensor t = targets.contiguous();
    const int64_t* pt = t.data<int64_t>();
    sv->col.assign(N, -1);
    sv->valid.assign(N, 0.0f);
    int64_t n_valid = 0;
    for (int64_t i = 0; i < N; ++i) {
      const bool counts = pt[i] != ignore_index;
      sv->valid[i] = counts ? 1.0f : 0.0f;
      n_valid += counts;
      if (counts && pt[i] >= start && pt[i] < start + Vl) sv->col[i] = pt[i] - start;
    }
    sv->inv_n = 1.0 / (double)std::max<int64_t>(n_valid, 1);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < Vl; ++j) acc += std::exp((double)(x[i * Vl + j] - m[i]));
      pse[i] = (float)acc;
      ptz[i] = sv->col[i] >= 0 ? x[i * Vl + sv->col[i]] - m[i] : 0.0f;
    }
    sv->S = pg->all_reduce(se, ReduceOp::Sum);
    Tensor target = pg->all_reduce(tz, ReduceOp::Sum);
    const float* S = sv->S.data<float>();
    const float* tg = target.data<float>();
    double loss = 0;
    for (int64_t i = 0; i < N; ++i) loss += sv->valid[i] * (std::log((double)S[i]) - (double)tg[i]);
    return std::vector<Tensor>{from_vector<float>({(float)(loss * sv->inv_n)}, {})};
  };
  // d loss / d x[i, j] = valid_i / n * (exp(x_ij - m_i) / S_i - [j is i's target])
  auto backward = [=](const std::vector<Tensor>& g) {
    Tensor dx = empty({N, Vl}, DType::F32, sv->x.device());
    record_cost("vocab_parallel_cross_entropy_backward", 3.0 * (double)N * Vl, 8.0 * (double)N * Vl);
    if (sv->x.is_meta()) return std::vector<Tensor>{dx};
    const double go = (double)g[0].contiguous().data<float>()[0];
    const float* x = sv->x.data<float>();
    const float* m = sv->m.data<float>();
    const float* S = sv->S.data<float>();
    float* d = dx.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float w = (float)(go * sv->valid[i] * sv->inv_n);
      const float inv_s = 1.0f / S[i];
      for (int64_t j = 0; j < Vl; ++j) d[i * Vl + j] = w * std::exp(x[i * Vl + j] - m[i]) * inv_s;
      if (sv->col[i] >= 0) d[i * Vl + sv->col[i]] -= w;
    }
    return std::vector<Tensor>{dx};
  };
  return autograd::custom_op("VocabParallelCrossEntropy", {logits}, forward, backward)[0];
}

}  // namespace titan::comms
