// gemm_ordered: a float32 GEMM whose every output is the same bits whatever the problem around it.
//
// C[i, j] = alpha * (sum over k = 0, 1, ..., K-1 of A[i, k] B[k, j], one rounding per multiply-add, in ascending k)
// + beta * C[i, j]. The order of each output's sum depends on nothing but K: not on M or N (a tensor-parallel
// shard of the columns, a data-parallel share of the rows, an async-TP chunk), not on the thread count, not on the
// CPU's vector width. The libraries do not promise that: OpenBLAS's sgemm (0.3.21, Haswell / Zen kernels) gives
// other bits for the first 64 columns of a 64 x 64 x 128 product than for the same 64 columns computed alone, and
// other bits again on two threads; oneDNN's AVX2 sgemm (2.6, gemm:jit) changes its K blocking with M and N. Why it
// matters: an FP8 GEMM's output is cast to FP8 by the next layer, and a last-bit difference that lands on a rounding
// boundary moves the value by a whole FP8 step (1/16 under e4m3), so a layout that computes a cast's operand with
// other bits than one rank does stops being that rank's step. The float8 linear's float32-operand GEMMs
// (float8.cpp's cast_gemm) run here; the float8 grouped experts' keep grouped_linear's blocks.
//
// The multiply-add is a fused one where the CPU has FMA (one rounding), else a multiply and an add (this file is
// built with -ffp-contract=off, so the compiler never fuses them on its own). Edge tiles are zero-padded and run
// the same tile code, so every output is computed alike. Work is split over output tiles (rows x columns), never
// over k. What this does not make equal: a layout that cuts K (row-parallel TP, a weight gradient over a share of
// the tokens) adds partial sums across ranks in another order than one rank's single sum.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "src/ops/common.h"

#if defined(__SANITIZE_ADDRESS__)  // gcc
#define TITAN_ASAN 1
#elif defined(__has_feature)  // clang (14 does not define __SANITIZE_ADDRESS__)
#if __has_feature(address_sanitizer)
#define TITAN_ASAN 1
#endif
#endif
#if defined(TITAN_ASAN)
#include <sanitizer/asan_interface.h>

#include <cstdio>
#include <cstdlib>
#define TITAN_TILE_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))
#else
#define TITAN_TILE_UNINSTRUMENTED
#endif

namespace titan::detail {
namespace {

constexpr int kMr = 6;         // rows of a tile (one A value broadcast per row and k)
constexpr int kNr = 16;        // columns of a tile (two 8-float vectors): 12 accumulators
constexpr int64_t kMc = 48;    // rows per task (a multiple of kMr)
constexpr int64_t kNc = 256;   // columns per task (a multiple of kNr)
constexpr int64_t kKc = 256;   // k per pass over a task's tiles (a panel's 16 KiB stays in L1)

inline float madd(float acc, float a, float b) {
#if defined(__FMA__)
  return std::fma(a, b, acc);
#else
  return acc + a * b;  // two roundings; not contracted (-ffp-contract=off)
#endif
}

// acc[r][c] += a[k][r] * b[k][c] for k = 0 .. K-1 in order (a: kMr values per k; b: kNr values per k). acc
// carries the sums of the previous k passes: a float32 stored and loaded again is the same float32, so the
// passes are one ascending sum. Under AddressSanitizer this loop is not instrumented (a shadow check per load made
// the FP8 tests that run on it 11x slower than their release run) and tile() checks the three ranges it touches
// whole instead, so an index slip in the packing still stops the run.
TITAN_TILE_UNINSTRUMENTED void tile_kernel(const float* a, const float* b, int64_t K, float* acc) {
#if defined(__AVX2__) && defined(__FMA__)
  __m256 c[kMr][2];
#pragma GCC unroll 6
  for (int r = 0; r < kMr; ++r) {
    c[r][0] = _mm256_loadu_ps(acc + r * kNr);
    c[r][1] = _mm256_loadu_ps(acc + r * kNr + 8);
  }
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kNr), b1 = _mm256_loadu_ps(b + k * kNr + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMr; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + k * kMr + r);
      c[r][0] = _mm256_fmadd_ps(av, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(av, b1, c[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kMr; ++r) {
    _mm256_storeu_ps(acc + r * kNr, c[r][0]);
    _mm256_storeu_ps(acc + r * kNr + 8, c[r][1]);
  }
#else
  for (int64_t k = 0; k < K; ++k)
    for (int r = 0; r < kMr; ++r) {
      const float av = a[k * kMr + r];
      for (int c = 0; c < kNr; ++c) acc[r * kNr + c] = madd(acc[r * kNr + c], av, b[k * kNr + c]);
    }
#endif
}

#if defined(TITAN_ASAN)
void check_range(const float* p, int64_t n, const char* what) {
  if (void* bad = __asan_region_is_poisoned(const_cast<float*>(p), (size_t)n * sizeof(float))) {
    std::fprintf(stderr, "gemm_ordered: the tile's %s range [%p, +%lld floats) is not addressable at %p\n",
                 what, (const void*)p, (long long)n, bad);
    __asan_describe_address(bad);
    std::abort();
  }
}
#endif

void tile(const float* a, const float* b, int64_t K, float* acc /* [kMr][kNr] */) {
#if defined(TITAN_ASAN)
  check_range(a, K * kMr, "A");
  check_range(b, K * kNr, "B");
  check_range(acc, kMr * kNr, "accumulator");
#endif
  tile_kernel(a, b, K, acc);
}

}  // namespace

void gemm_ordered(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {  // C = beta C, as BLAS: the product is skipped (0 * Inf is not NaN)
    if (beta == 1.0f) return;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  auto a_at = [&](int64_t i, int64_t k) { return ta ? A[k * lda + i] : A[i * lda + k]; };
  auto b_at = [&](int64_t k, int64_t j) { return tb ? B[j * ldb + k] : B[k * ldb + j]; };
  // B as K x kNr panels, the last one's missing columns zero (their sums are computed and dropped)
  const int64_t panels = (N + kNr - 1) / kNr;
  std::vector<float> bp((size_t)(panels * K * kNr));
  const bool threads = omp_get_level() == 0 && M * N * K >= (1 << 18);
#pragma omp parallel for schedule(static) if (threads)
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = bp.data() + p * K * kNr;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < kNr; ++c) {
        const int64_t j = p * kNr + c;
        dst[k * kNr + c] = j < N ? b_at(k, j) : 0.0f;
      }
  }
  const int64_t row_tasks = (M + kMc - 1) / kMc, col_tasks = (N + kNc - 1) / kNc;
#pragma omp parallel for collapse(2) schedule(static) if (threads)
  for (int64_t rt = 0; rt < row_tasks; ++rt)
    for (int64_t ct = 0; ct < col_tasks; ++ct) {
      const int64_t i0 = rt * kMc, i1 = std::min(M, i0 + kMc), blocks = (i1 - i0 + kMr - 1) / kMr;
      const int64_t p0 = ct * kNc / kNr, p1 = std::min(panels, (ct + 1) * kNc / kNr);
      std::vector<float> ap((size_t)(blocks * K * kMr));  // this task's rows as kMr x K blocks, k-major
      for (int64_t blk = 0; blk < blocks; ++blk)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t r = 0; r < kMr; ++r) {
            const int64_t i = i0 + blk * kMr + r;
            ap[(size_t)((blk * K + k) * kMr + r)] = i < i1 ? a_at(i, k) : 0.0f;
          }
      std::vector<float> acc((size_t)((p1 - p0) * blocks * kMr * kNr), 0.0f);  // the task's sums so far
      for (int64_t k0 = 0; k0 < K; k0 += kKc) {
        const int64_t kn = std::min(kKc, K - k0);
        for (int64_t p = p0; p < p1; ++p)
          for (int64_t blk = 0; blk < blocks; ++blk)
            tile(ap.data() + (blk * K + k0) * kMr, bp.data() + (p * K + k0) * kNr, kn,
                 acc.data() + ((p - p0) * blocks + blk) * kMr * kNr);
      }
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const float* t = acc.data() + ((p - p0) * blocks + blk) * kMr * kNr;
          for (int64_t r = 0; r < kMr; ++r) {
            const int64_t i = i0 + blk * kMr + r;
            if (i >= i1) break;
            for (int64_t c = 0; c < kNr; ++c) {
              const int64_t j = p * kNr + c;
              if (j >= N) break;
              float& out = C[i * ldc + j];
              // BLAS's convention: beta == 0 never reads C (it may hold NaN)
              const float prod = alpha * t[r * kNr + c];
              out = beta == 0.0f ? prod : prod + beta * out;
            }
          }
        }
    }
}

}  // namespace titan::detail
