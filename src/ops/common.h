// src/ops/common.h — helpers shared by op implementations (not public API).
#pragma once
#include <algorithm>
#include <atomic>
#include <exception>
#include <initializer_list>
#include <omp.h>
#include <type_traits>
#include <vector>

#include "src/autograd/function.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"
#include "src/tensor/iter.h"

namespace titan::detail {

using autograd::record;
using autograd::saved;

// All defined tensors on one device; returns it. Mixing cpu and meta is an error.
inline Device same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    TITAN_CHECK(t->device() == first->device(), op, ": device mismatch: ", device_name(first->device()), " tensor ",
                shape_str(first->shape()), " vs ", device_name(t->device()), " tensor ", shape_str(t->shape()));
  }
  TITAN_CHECK(first != nullptr, op, ": no defined input tensor");
  return first->device();
}

inline void same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  TITAN_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", dtype_name(a.dtype()), " ", shape_str(a.shape()),
              " vs ", dtype_name(b.dtype()), " ", shape_str(b.shape()));
}

inline void need_float(const char* op, const Tensor& a) {
  TITAN_CHECK(a.dtype() == DType::F32 || a.dtype() == DType::F64, op, ": expected a float32/float64 tensor, got ",
              dtype_name(a.dtype()), " ", shape_str(a.shape()));
}

inline void need_index(const char* op, const Tensor& idx) {
  TITAN_CHECK(idx.dtype() == DType::I64 || idx.dtype() == DType::I32, op,
              ": index tensor must be int64 or int32, got ", dtype_name(idx.dtype()), " ", shape_str(idx.shape()));
}

// Reads an index tensor (int32 or int64) as int64 values.
inline std::vector<int64_t> index_values(const Tensor& idx) { return idx.to_vector<int64_t>(); }

inline double bytes_of(std::initializer_list<const Tensor*> ts) {
  double b = 0;
  for (const Tensor* t : ts)
    if (t->defined()) b += (double)t->nbytes();
  return b;
}

// Exceptions cannot cross an OpenMP region: the first one a task throws (a score_mod reading out of range) is
// kept, the remaining tasks are skipped, and it is rethrown after the region.
class TaskErrors {
 public:
  template <typename F>
  void run(F&& f) {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
#pragma omp critical(titan_task_error)
      if (!first_) first_ = std::current_exception();
      failed_ = true;
    }
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::exception_ptr first_;
};

// Row-major GEMM on float/double: C = alpha * op(A) op(B) + beta * C (src/ops/gemm.cpp: which kernel runs).
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc);
// The same on OpenBLAS whatever the CPU (OpenBLAS splits rows and columns over its threads, never a sum: the
// same bits on one thread or several, in a parallel region or not).
template <typename T>
void gemm_blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
               int64_t ldb, T beta, T* C, int64_t ldc);

// A float32 GEMM whose bits are a function of the shapes only (one work item of a parallel loop; a product that
// must come out the same on any thread count: the experts' blocks): where gemm<float> runs on oneDNN (AVX512)
// oneDNN's sgemm run by the calling thread alone (measured 2.1-2.6x OpenBLAS's sgemm on one Zen 4 core for the
// 128-row blocks of K, N = 128-256 the experts run), else OpenBLAS's sgemm on the calling thread alone (on its
// threads it gives other bits below AVX512). K = 0 or alpha = 0: C = beta C, as BLAS.
void gemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// A float32 GEMM whose every output sums its K products in ascending k (src/ops/gemm_ordered.cpp): the same bits
// whatever M, N, the thread count or the CPU's vector width (a shard's columns, a share of the rows and the whole
// product agree bit for bit; the libraries' kernels do not promise that). The float8 linear's float32-operand
// GEMMs run on it (the float8 grouped experts' do not: grouped_linear's blocks). K = 0 or alpha = 0: C = beta C,
// as BLAS.
void gemm_ordered(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The same GEMM on float32 operands read as bfloat16 (each rounded to nearest even) with float32 accumulation:
// a bf16 mixed-precision region's GEMM (oneDNN where this CPU has a bf16 kernel, else sgemm on the roundings).
void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// One operand of gemm_bf16 as stored (row-major, leading dimension ld): float32 values (rounded to bf16 as the
// GEMM reads them) or bf16 bits already rounded (an operand used by two GEMMs, packed once: pack_bf16).
struct Bf16Operand {
  const float* values = nullptr;
  const uint16_t* bits = nullptr;
  int64_t ld = 0;
};
void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, Bf16Operand A, Bf16Operand B,
               float beta, float* C, int64_t ldc);
// The same product as gemm_serial runs it: on the rounded operands (the same products and float32 sums as
// gemm_bf16, in another order: the same bits on any thread count; callable inside parallel regions).
void gemm_bf16_blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, Bf16Operand A, Bf16Operand B,
                    float beta, float* C, int64_t ldc);
// The same product on bf16 bits, run by the calling thread alone: the GEMM of one task inside a parallel region
// (flash attention's tiles; oneDNN's kernel made for one thread, threads never wait on each other), also correct
// outside one. Where oneDNN has no fast bf16 kernel: gemm_bf16_blas.
void gemm_bf16_tile(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                    const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);
// The r x c float32 matrix at p (leading dimension ld) as bf16 bits, row length c.
std::vector<uint16_t> pack_bf16(const float* p, int64_t r, int64_t c, int64_t ld);
// gemm<T>, or for float32 under bf16 autocast (bf16 = true) gemm_bf16.
template <typename T>
inline void gemm_as(bool bf16, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                    const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) return gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// gemm_as with gemm_blas for float32 / float64 (bf16: gemm_bf16, one at a time).
template <typename T>
inline void gemm_blas_as(bool bf16, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                         int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) return gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  gemm_blas<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// What gemm_bf16 runs on this CPU (oneDNN's implementation, or the sgemm fallback).
std::string gemm_bf16_kernel();
// Whether gemm<float> runs on oneDNN on this CPU (AVX512; outside parallel regions), else on OpenBLAS's sgemm.
bool gemm_f32_on_onednn();

// A bf16 bias's gradient: the bf16 gradient g [N, out] (float32 values, rounded here) summed over its rows,
// rounded to bf16, written into db [out] (which sum(g, {0}) made: its cost recorded, real and planned alike).
void bias_grad_bf16(const Tensor& g, Tensor& db);

// matmul's kernel (a [..., M, K] @ b [..., K, N]): no graph, no selective-checkpoint bookkeeping; for ops whose
// own forward or backward multiplies (the float8 linear). bf16: autocast's bf16 GEMM, output rounded to bf16.
// ordered (float32, not bf16): on gemm_ordered, every output's bits independent of the shapes around it.
Tensor matmul_forward(const Tensor& a, const Tensor& b, bool bf16 = false, bool ordered = false);

// linear's kernels (matmul.cpp), no graph, no selective-checkpoint bookkeeping: for ops that interleave a linear's
// GEMMs with communication (comms/collective_matmul.h). Forward: x2 [N, in] @ w [out, in]^T + bias [out] -> [N, out];
// x2 float32 values or, under bf16, its bf16 pack. Backward: g [N, out] -> {dx [N, in] (need_x), dw [out, in]
// (need_w), db [out] (has_bias)}. bf16: autocast's bf16 GEMMs (operands read as bf16, outputs rounded to bf16).
// out / dx_out: a contiguous tensor of the result's shape to write y / dx into (a row block of a larger one).
Tensor linear_forward(const Tensor& x2, const Tensor& w, const Tensor& bias, bool bf16, const Tensor& out = Tensor());
std::vector<Tensor> linear_backward(const Tensor& g, const Tensor& x2, const Tensor& w, bool has_bias, bool need_x,
                                    bool need_w, bool bf16, const Tensor& dx_out = Tensor());

// grouped_linear's kernels and checks (grouped.cpp), for ops whose own forward or backward multiplies by expert
// (the float8 grouped linear). Forward: x [R, K] (rows grouped by expert, counts[e] each) @ W [E, K, N] + b [E, N]
// -> [R, N]. Backward: dy [R, N] -> dx [R, K] = dy W^T, dW [E, K, N] = x^T dy_w (dy_w: dy when undefined),
// db [E, N] (when has_b). bf16: autocast's bf16 GEMMs (operands and bias read as bf16, outputs rounded to bf16).
// Both record their cost under the GemmPrecisionScope alive.
Tensor grouped_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& counts,
                              bool bf16);
std::vector<Tensor> grouped_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, bool has_b,
                                            const std::vector<int64_t>& counts, bool bf16, const Tensor& dy_w = Tensor());
void check_grouped_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b,
                          const std::vector<int64_t>& counts);

}  // namespace titan::detail
