// src/ops/ops.h — the differentiable op library.
//
// Every op: shape/dtype first (so meta inputs give meta outputs and a cost
// record for free), then the CPU kernel, then `record` ties it to its
// backward. Each family lives in one file with forward and backward kernels
// side by side (src/ops/<family>.cpp). Shapes in comments: [B, S, H] etc.
#pragma once
#include <optional>
#include <utility>
#include <vector>

#include "src/tensor/tensor.h"

namespace titan {

// ---- elementwise, broadcasting (elementwise.cpp) ---------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
// comparisons -> bool, no gradient
Tensor eq(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
// out = cond ? a : b (all three broadcast); gradients flow to the chosen side
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// In place, no graph: dst += src (same shape). Used for grad accumulation.
void add_(const Tensor& dst, const Tensor& src);
void mul_(const Tensor& dst, double s);

// ---- unary (elementwise.cpp) ----------------------------------------------
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor pow(const Tensor& x, double p);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
// bf16_out: x is a bf16 tensor under bf16 autocast (a bf16 GEMM's output): the result is one too, as PyTorch's op
// on a bf16 tensor returns it (computed in float32, rounded; its gradient read rounded). Ignored outside autocast.
Tensor silu(const Tensor& x, bool bf16_out = false);
Tensor gelu(const Tensor& x, bool bf16_out = false);  // exact (erf) form, as HF's "gelu"
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor sin(const Tensor& x);
// Gradient 1 inside [lo, hi] (inclusive), 0 outside. Use +-inf for one side.
Tensor clamp(const Tensor& x, double lo, double hi);
// gpt-oss's expert activation on interleaved gate / up [.., 2I] (gate at even columns) -> [.., I] (glu.cpp):
// g = min(gate, limit), u = clamp(up, -limit, limit), y = (u + 1) * g * sigmoid(alpha * g); limit <= 0: no clamps
Tensor clamped_swiglu(const Tensor& gate_up, double alpha, double limit);

// ---- reductions (reduce.cpp) ----------------------------------------------
Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);
Tensor sum(const Tensor& x);  // all elements -> scalar []
Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false);
Tensor mean(const Tensor& x);
// Max over one dim; the gradient goes to the first maximal element.
std::pair<Tensor, Tensor> max_with_indices(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums `x` down to `shape` (the adjoint of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- shape (shape_ops.cpp) ------------------------------------------------
Tensor reshape(const Tensor& x, const Shape& s);  // -1 infers one dim
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
Tensor broadcast_to(const Tensor& x, const Shape& s);  // materialized
Tensor contiguous(const Tensor& x);
Tensor cast(const Tensor& x, DType t);

// ---- matmul (matmul.cpp) --------------------------------------------------
// a [..., M, K] @ b [..., K, N] -> [..., M, N]; b may be 2-D (shared).
// Transposed views go to BLAS as flags (no copy).
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] @ w[out, in]^T + bias[out] -> [..., out]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());

// MoE experts (grouped.cpp): rows of x [R, K] grouped by expert (counts[e]
// contiguous rows each); one GEMM per expert: y = x_e @ w[e] + b[e] -> [R, N].
// w [E, K, N], b [E, N] or undefined.
Tensor grouped_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& counts);

// ---- softmax and losses (softmax.cpp) -------------------------------------
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// logits [N, V], targets int64 [N] -> scalar mean over targets != ignore_index
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// ---- normalization (norm.cpp) ---------------------------------------------
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);  // x [..., H], weight [H]
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

// ---- positional (rope.cpp) ------------------------------------------------
// Rotate-half RoPE. x [B, S, nH, D]; cos, sin [S, D/2] (constants, no grad):
//   y[..., :D/2] = x1*cos - x2*sin ; y[..., D/2:] = x2*cos + x1*sin
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

// ---- attention (attention.cpp) --------------------------------------------
struct AttentionOptions {
  bool causal = true;
  int64_t window = 0;           // > 0: key j visible from query i iff i - window < j <= i
  double scale = 0;             // 0: head_dim^-0.5
};
// q [B, S, Hq, D], k/v [B, S, Hkv, D] (Hq % Hkv == 0), sinks [Hq] or undefined
// (a per-head logit joining each softmax denominator, then dropped).
// -> [B, S, Hq, D]. A client of flex_attention (src/ops/flex_attention.h):
// flash-tiled, O(S·D) memory, masked tiles skipped.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                                    const AttentionOptions& opt);

// ---- indexing (index.cpp) -------------------------------------------------
Tensor embedding(const Tensor& weight, const Tensor& ids);           // [V, H], int [...] -> [..., H]
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);    // out[..i..] = x[..index[..i..]..]
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);      // copy, then write; duplicates: last wins
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);  // copy, then add
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);                   // index 1-D
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);    // index 1-D
// Largest k along the last dim, sorted descending; ties keep the lower index.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k);
// Stable argsort along the last dim (any dtype; no gradient).
Tensor argsort(const Tensor& x, bool descending = false);

}  // namespace titan
