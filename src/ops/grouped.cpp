// Grouped linear for MoE experts: rows of x are grouped by expert
// (contiguous, counts[e] rows for expert e); each group is one GEMM with its
// expert's weight. y[rows of e] = x[rows of e] @ W[e] + b[e].
#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan {
using namespace detail;

namespace {
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) off[e + 1] = off[e] + counts[e];
  return off;
}

// The experts' GEMMs as work items. An expert's products off oneDNN's threaded matmul (float32, float64, small
// bf16 experts) are cut into blocks of a fixed size: its rows in kBlock-row blocks for the output and grad_input
// GEMMs, its weight's columns in kBlock-column blocks for grad_weight (never its rows: they are that GEMM's sum),
// each block one GEMM run by its thread alone (gemm_serial; float64: OpenBLAS's dgemm), all blocks of all experts
// side by side, largest first. The cut depends on the shapes alone, so an expert's numbers are the same on any
// thread count and any expert-parallel layout. oneDNN's experts (large bf16 ones) run one at a time, whole, with
// oneDNN's threads.
constexpr int64_t kBlock = 128;
struct Block {
  int64_t e, lo, hi;  // expert e's rows (or columns) [lo, hi)
};
std::vector<Block> blocks_of(const std::vector<int64_t>& counts, int64_t columns, bool whole) {
  std::vector<Block> out;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    const int64_t n = columns > 0 ? columns : counts[e];
    for (int64_t lo = 0; lo < n; lo += whole ? n : kBlock) out.push_back({(int64_t)e, lo, whole ? n : std::min(n, lo + kBlock)});
  }
  return out;
}
template <typename F>
void for_each_block(std::vector<Block> blocks, bool one_at_a_time, const std::vector<int64_t>& counts, F&& f) {
  if (one_at_a_time || omp_get_max_threads() == 1 || blocks.size() < 2 || omp_in_parallel()) {
    for (const Block& b : blocks) f(b);
    return;
  }
  auto work = [&](const Block& b) { return (b.hi - b.lo) * counts[(size_t)b.e]; };
  std::stable_sort(blocks.begin(), blocks.end(), [&](const Block& a, const Block& b) { return work(a) > work(b); });
  TaskErrors errors;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < blocks.size(); ++i) errors.run([&] { f(blocks[i]); });
  errors.rethrow();
}

// Which GEMM an expert's products run on: float32 on gemm_serial (oneDNN's sgemm on AVX512, else OpenBLAS's),
// float64 on OpenBLAS; bf16 on oneDNN for experts whose weight holds over 2^18 elements (one at a time: oneDNN's
// AMX kernels outrun sgemm there), else gemm_serial on the rounded operands, side by side (a oneDNN call's fixed
// cost and its packing outweigh such a product: measured on the gpt-oss debug experts, 128 x 256, bf16 one at a
// time ran 0.8x float32 side by side, when side by side was OpenBLAS). The rule reads the weight's shape only: the
// same kernel on any thread count and any expert-parallel layout.
struct ExpertGemm {
  bool bf16 = false, onednn = false;
  ExpertGemm(bool bf16_, int64_t K, int64_t N) : bf16(bf16_), onednn(bf16_ && K * N > (1 << 18)) {}
  template <typename T>
  void operator()(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                  int64_t ldb, T beta, T* C, int64_t ldc) const {
    if constexpr (std::is_same_v<T, float>) {
      if (onednn) return gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      if (bf16) return gemm_bf16_blas(ta, tb, M, N, K, alpha, {A, nullptr, lda}, {B, nullptr, ldb}, beta, C, ldc);
      return gemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
    gemm_blas<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
};

}  // namespace

namespace detail {
Tensor grouped_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& counts,
                              bool bf16) {
  const int64_t R = x.size(0), K = x.size(1), N = w.size(2);
  Tensor y = empty({R, N}, x.dtype(), x.device());
  record_cost("grouped_linear", 2.0 * R * K * N + (b.defined() ? (double)R * N : 0.0), bytes_of({&x, &w, &b, &y}),
              GemmShape{w.size(0), R / std::max<int64_t>(1, w.size(0)), N, K});
  if (x.is_meta() || R == 0) return y;
  auto off = offsets_of(counts);
  const ExpertGemm gemm_e(bf16, K, N);
  dispatch_float(x.dtype(), "grouped_linear", [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T* py = y.data<T>();
    for_each_block(blocks_of(counts, 0, gemm_e.onednn), gemm_e.onednn, counts, [&](const Block& bl) {
      const int64_t e = bl.e, n = bl.hi - bl.lo, r0 = off[e] + bl.lo;  // rows [r0, r0 + n)
      T* ye = py + r0 * N;
      T beta = 0;
      if (pb) {
        for (int64_t i = 0; i < n; ++i) std::copy(pb + e * N, pb + (e + 1) * N, ye + i * N);
        beta = 1;
      }
      if constexpr (std::is_same_v<T, float>)
        if (bf16 && pb) round_to_bf16(ye, n * N);  // the bias as the bf16 GEMM reads it
      gemm_e(false, false, n, N, K, T(1), px + r0 * K, K, pw + e * K * N, N, beta, ye, N);
    });
  });
  if (bf16) round_to_bf16_(y);
  return y;
}

std::vector<Tensor> grouped_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, bool has_b,
                                            const std::vector<int64_t>& counts, bool bf16, const Tensor& dy_w) {
  const int64_t R = x.size(0), K = x.size(1), N = w.size(2), E = w.size(0);
  Tensor dx = empty({R, K}, x.dtype(), x.device());
  Tensor dw = zeros({E, K, N}, x.dtype(), x.device());
  Tensor db = has_b ? zeros({E, N}, x.dtype(), x.device()) : Tensor();
  record_cost("grouped_linear_backward", 4.0 * R * K * N,
              bytes_of({&dy, &x, &w, &dx, &dw}) + (dy_w.defined() ? (double)dy_w.nbytes() : 0.0),
              GemmShape{2 * E, R / std::max<int64_t>(1, E), N, K});
  if (x.is_meta()) return {dx, dw, db};
  auto off = offsets_of(counts);
  Tensor g = dy.contiguous(), gw = dy_w.defined() ? dy_w.contiguous() : g;
  const ExpertGemm gemm_e(bf16, K, N);
  dispatch_float(x.dtype(), "grouped_linear_backward", [&]<typename T>() {
    const T* pg = g.data<T>();
    const T* pgw = gw.data<T>();
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* pdx = dx.data<T>();
    T* pdw = dw.data<T>();
    // dx = dy W^T: blocks of rows
    for_each_block(blocks_of(counts, 0, gemm_e.onednn), gemm_e.onednn, counts, [&](const Block& bl) {
      const int64_t e = bl.e, n = bl.hi - bl.lo, r0 = off[e] + bl.lo;
      gemm_e(false, true, n, K, N, T(1), pg + r0 * N, N, pw + e * K * N, N, T(0), pdx + r0 * K, K);
    });
    // dW = x^T dy (and db = the sum of dy): blocks of the weight's columns, each summing all of its expert's rows
    for_each_block(blocks_of(counts, N, gemm_e.onednn), gemm_e.onednn, counts, [&](const Block& bl) {
      const int64_t e = bl.e, n = counts[e], c = bl.hi - bl.lo;
      gemm_e(true, false, K, c, n, T(1), px + off[e] * K, K, pgw + off[e] * N + bl.lo, N, T(0),
             pdw + e * K * N + bl.lo, N);
      if (has_b) {
        T* pdb = db.data<T>() + e * N;
        const T* ge = pg + off[e] * N;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = bl.lo; j < bl.hi; ++j) {
            T v = ge[i * N + j];
            if constexpr (std::is_same_v<T, float>)
              if (bf16) v = round_to_bf16(v);  // the bias gradient sums the bf16 gradient
            pdb[j] += v;
          }
      }
    });
  });
  if (bf16) {
    round_to_bf16_(dx);
    round_to_bf16_(dw);
    if (has_b) round_to_bf16_(db);
  }
  return {dx, dw, db};
}

void check_grouped_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                          const std::vector<int64_t>& counts) {
  same_device(op, {&x, &w, &b});
  need_float(op, x);
  same_dtype(op, x, w);
  TITAN_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(1), op, ": expected x [R, K] and W [E, K, N], got ",
              shape_str(x.shape()), " and ", shape_str(w.shape()));
  TITAN_CHECK((int64_t)counts.size() == w.size(0), op, ": ", counts.size(), " group counts for ", w.size(0),
              " experts");
  int64_t total = 0;
  for (auto c : counts) {
    TITAN_CHECK(c >= 0, op, ": negative group count");
    total += c;
  }
  TITAN_CHECK(total == x.size(0), op, ": group counts sum to ", total, " but x has ", x.size(0), " rows");
  if (b.defined())
    TITAN_CHECK(b.shape() == (Shape{w.size(0), w.size(2)}), op, ": bias ", shape_str(b.shape()), " must be [",
                w.size(0), ", ", w.size(2), "]");
}
}  // namespace detail

Tensor grouped_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& counts) {
  check_grouped_linear("grouped_linear", x, w, b, counts);
  Tensor xc = x.contiguous(), wc = w.contiguous(), bc = b.defined() ? b.contiguous() : Tensor();
  const bool bf16 = autocast_bf16(x);
  Tensor y = grouped_linear_forward(xc, wc, bc, counts, bf16);  // [R, N]
  std::vector<Tensor> in = {xc, wc};
  if (bc.defined()) in.push_back(bc);
  // a real bf16 run keeps, for the weights' gradient, the input's bf16 pack (autocast's cast of it, one per input
  // however many projections read it: half float32's memory); the bf16 GEMMs read it rounded either way, so the
  // gradient is the same to the bit. A meta plan stays float32 (the simulator prices the run's dtypes).
  const bool pack = bf16 && !xc.is_meta() && xc.numel() > 0 && autograd::grad_enabled() &&
                    autograd::any_requires_grad(in);
  return record("grouped_linear", in, y,
                [xs = pack ? bf16_pack(xc) : saved(xc), ws = saved(wc), has_b = bc.defined(), counts,
                 bf16](const std::vector<Tensor>& g) {
                  auto r = grouped_linear_backward(g[0], unpack_bf16(xs), ws, has_b, counts, bf16);
                  if (!has_b) r.pop_back();
                  return r;
                });
}

}  // namespace titan
