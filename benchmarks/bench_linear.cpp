// titan-bench-linear: this machine's fp32 GEMM ceiling (the faster of OpenBLAS's sgemm and titan's float32 GEMM
// kernel, src/ops/gemm.cpp: oneDNN on AVX512) vs titan's `linear` forward and backward, measured in one run, as
// ratios; then titan's kernel against sgemm on a small model's products (K = 128 / 384).
//
//   ./build/titan-bench-linear [--reps N]
//
// Shapes (issue 2): x [4096, 1024] @ W[1024, 1024]^T and x [2048, 4096] @ W[1024, 4096]^T.
// Forward = 2*N*in*out FLOPs; backward = dx and dW GEMMs = 4*N*in*out FLOPs.
// Each figure is the best of N repetitions, interleaved (sgemm, fwd, bwd, ...)
// so a slow spell of the machine hits all three alike.
// Then the float8 linear (src/ops/float8.h, FP8 emulated in float32: each operand cast and cast back, the GEMMs
// float32) per recipe against the float32 linear, forward + backward interleaved: the cost of emulating FP8.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "src/autograd/engine.h"
#include "src/config/version.h"
#include "src/log/log.h"
#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/ops/float8.h"
#include "src/ops/ops.h"

using namespace titan;

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  CLI::App app{"titan-bench-linear: this machine's fp32 GEMM ceiling (the faster of OpenBLAS sgemm and titan's GEMM "
               "kernel) vs titan's linear forward and backward, measured interleaved in one run; prints GFLOP/s and "
               "ratios (target >= 0.8)",
               "titan-bench-linear"};
  app.set_version_flag("--version", version_string("titan-bench-linear"));
  app.add_option("--reps", reps, "repetitions per shape (the best counts)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const double t_start = now();
  struct Case {
    int64_t N, in, out;
  };
  std::vector<Case> cases = {{4096, 1024, 1024}, {2048, 4096, 1024}};
  std::printf("float32 GEMM kernel: %s\n", detail::gemm_f32_on_onednn() ? "onednn" : "openblas sgemm");
  std::printf("%-28s %12s %12s %12s %12s %8s %8s\n", "shape [N,in]x[in,out]", "sgemm GF/s", "kernel GF/s",
              "fwd GF/s", "bwd GF/s", "fwd/peak", "bwd/peak");
  bool ok = true;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    Generator g(0);
    Tensor x = randn({c.N, c.in}, g).requires_grad_(true);
    Tensor w = randn({c.out, c.in}, g, DType::F32, 0.02).requires_grad_(true);
    Tensor b = zeros({c.out}).requires_grad_(true);
    Tensor dy = randn({c.N, c.out}, g);
    std::vector<float> C((size_t)c.N * c.out);
    const double gemm_flops = 2.0 * c.N * c.in * c.out;
    double best_gemm = 1e30, best_kernel = 1e30, best_fwd = 1e30, best_bwd = 1e30;
    for (int r = 0; r < reps + 1; ++r) {  // first round warms up (pool, BLAS threads)
      double t0 = now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c.N, (int)c.out, (int)c.in, 1.f, x.data<float>(),
                  (int)c.in, w.data<float>(), (int)c.in, 0.f, C.data(), (int)c.out);
      double tk = now();
      detail::gemm<float>(false, true, c.N, c.out, c.in, 1.f, x.data<float>(), c.in, w.data<float>(), c.in, 0.f,
                          C.data(), c.out);
      double t1 = now();
      Tensor y = linear(x, w, b);
      double t2 = now();
      y.backward(dy);
      double t3 = now();
      x.zero_grad();
      w.zero_grad();
      b.zero_grad();
      if (r == 0) continue;
      best_gemm = std::min(best_gemm, tk - t0);
      best_kernel = std::min(best_kernel, t1 - tk);
      best_fwd = std::min(best_fwd, t2 - t1);
      best_bwd = std::min(best_bwd, t3 - t2);
    }
    const double sgemm = gemm_flops / best_gemm / 1e9, kernel = gemm_flops / best_kernel / 1e9;
    const double peak = std::max(sgemm, kernel);
    const double fwd = gemm_flops / best_fwd / 1e9;
    const double bwd = 2 * gemm_flops / best_bwd / 1e9;
    char shape[64];
    std::snprintf(shape, sizeof shape, "[%ld,%ld]x[%ld,%ld]", (long)c.N, (long)c.in, (long)c.in, (long)c.out);
    const double spent = now() - t_start;  // progress: cases done, and the time left at this pace
    std::printf("%-28s %12.1f %12.1f %12.1f %12.1f %8.2f %8.2f   [%zu/%zu, %.1f s, ETA %.0f s]\n", shape, sgemm, kernel,
                fwd, bwd, fwd / peak, bwd / peak, ci + 1, cases.size(), spent, spent / (ci + 1) * (cases.size() - ci - 1));
    std::fflush(stdout);
    ok = ok && fwd / peak >= 0.8 && bwd / peak >= 0.8;
  }
  std::printf("target: every ratio >= 0.80 -> %s\n", ok ? "met" : "NOT met");

  // a small model's products (dim 128, ffn 384, 2,048 tokens): titan's kernel / sgemm, interleaved
  std::printf("\nsmall products (M x N x K, transposes as linear's forward / dx / dW): titan's kernel vs sgemm\n");
  {
    struct Small {
      bool ta, tb;
      int64_t M, N, K;
    };
    const std::vector<Small> smalls = {{false, true, 2048, 384, 128}, {false, true, 2048, 128, 128},
                                       {false, false, 2048, 128, 384}, {true, false, 384, 128, 2048}};
    Generator g(2);
    for (const Small& c : smalls) {
      Tensor a = randn({c.ta ? c.K : c.M, c.ta ? c.M : c.K}, g), bm = randn({c.tb ? c.N : c.K, c.tb ? c.K : c.N}, g);
      std::vector<float> C((size_t)(c.M * c.N));
      const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
      double bs = 1e30, bk = 1e30;
      for (int r = 0; r < 10 * reps + 1; ++r) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans, (int)c.M,
                    (int)c.N, (int)c.K, 1.f, a.data<float>(), (int)lda, bm.data<float>(), (int)ldb, 0.f, C.data(),
                    (int)c.N);
        double t1 = now();
        detail::gemm<float>(c.ta, c.tb, c.M, c.N, c.K, 1.f, a.data<float>(), lda, bm.data<float>(), ldb, 0.f,
                            C.data(), c.N);
        double t2 = now();
        if (r == 0) continue;
        bs = std::min(bs, t1 - t0);
        bk = std::min(bk, t2 - t1);
      }
      const double fl = 2.0 * c.M * c.N * c.K / 1e9;
      std::printf("  %ld x %ld x %ld %s%s   sgemm %6.1f GF/s   kernel %6.1f GF/s   x%.2f\n", (long)c.M, (long)c.N,
                  (long)c.K, c.ta ? "T" : "N", c.tb ? "T" : "N", fl / bs, fl / bk, bs / bk);
    }
  }

  // FP8 emulation: float8_linear fwd + bwd per recipe / linear fwd + bwd, best of reps each, interleaved
  std::printf("\nfloat8 linear (emulated) and bf16 linear (autocast) fwd+bwd time / float32 linear's, "
              "[2048,4096]x[4096,1024]; bf16 GEMM kernel: %s\n", detail::gemm_bf16_kernel().c_str());
  {
    Generator g(1);
    Tensor x = randn({2048, 4096}, g).requires_grad_(true);
    Tensor w = randn({1024, 4096}, g, DType::F32, 0.02).requires_grad_(true);
    Tensor dy = randn({2048, 1024}, g);
    const std::vector<Float8Recipe> recipes = {Float8Recipe::tensorwise, Float8Recipe::rowwise,
                                               Float8Recipe::rowwise_with_gw_hp, Float8Recipe::mxfp8};
    std::vector<double> best(recipes.size() + 2, 1e30);  // float32, the recipes, bf16
    for (int r = 0; r < reps + 1; ++r)
      for (size_t i = 0; i <= recipes.size() + 1; ++i) {
        const double t0 = now();
        AutocastScope mode(i == recipes.size() + 1 ? DType::BF16 : DType::F32);
        Tensor y = i == 0 || i == recipes.size() + 1 ? linear(x, w)
                                                     : float8_linear(x, w, Tensor(), float8_casts(recipes[i - 1]));
        y.backward(dy);
        const double t1 = now();
        x.zero_grad();
        w.zero_grad();
        if (r > 0) best[i] = std::min(best[i], t1 - t0);
      }
    std::printf("  float32 linear %.1f ms\n", 1e3 * best[0]);
    for (size_t i = 0; i < recipes.size(); ++i)
      std::printf("  %-20s %.1f ms  x%.2f\n", std::string(enum_names(Float8Recipe{})[(int)recipes[i]]).c_str(),
                  1e3 * best[i + 1], best[i + 1] / best[0]);
    const double b16 = best.back();
    std::printf("  %-20s %.1f ms  x%.2f  (float32 / bf16: %.2fx)\n", "bf16 autocast", 1e3 * b16, b16 / best[0],
                best[0] / b16);
  }
  return 0;
}
