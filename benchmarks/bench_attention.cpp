// titan-bench-attention: flex attention, measured in one run.
//
//   titan-bench-attention                 # the comparison (below)
//   titan-bench-attention --suite [--seqs 512,2048,8192] [--batches 1,4]
//
// Comparison: the flash-tiled op against titan's attention before flex (a
// kernel that materializes the [S, S] scores per head, kept here as the
// baseline), forward + backward time and peak memory at S = 2048 and 8192,
// and sliding window 256 against full causal at S = 8192. Time: best of
// --reps, interleaved; peak memory: the process's peak RSS above the inputs
// (VmHWM, reset per measurement through /proc/self/clear_refs; buffers over
// 1 MiB are mmapped, so what a run frees leaves the RSS).
//
// Suite (in the spirit of FlexAttention's benchmark cases): variants x batch
// x sequence x head dim {64, 128} x GQA on/off. Each case runs forward and
// backward in float32 and passes when (1) its output and its q/k/v/captured
// gradients match a float64 run of the op on the last batch row (max error
// relative to the reference's largest magnitude <= 2e-4; float64 itself is
// held to PyTorch by the golden tests), and (2) on sampled query rows the
// float64 output and dQ equal an independent dense evaluation (<= 1e-8).
#include <malloc.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "src/autograd/grad_mode.h"
#include "src/config/version.h"
#include "src/log/log.h"
#include "src/nn/attention_variants.h"
#include "src/ops/common.h"
#include "src/ops/flex_attention.h"

using namespace titan;

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- peak memory (VmHWM), resettable ------------------------------------------
double rss_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::string(key).size()));
  return 0;
}
void reset_peak() {
  empty_cache();   // titan's tensor pool and malloc hand freed memory back: the next peak counts what a run allocates
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
}

// ---- the baseline: titan's attention before flex (dense [S, S] per head) --------------
// Causal + window, GQA; forward saves the log-sum-exp, backward recomputes P.
struct DenseOut {
  std::vector<float> out, lse;
};
DenseOut dense_forward(const float* q, const float* k, const float* v, int64_t B, int64_t S, int64_t Hq, int64_t Hkv,
                       int64_t D, int64_t window) {
  DenseOut r{std::vector<float>((size_t)(B * S * Hq * D)), std::vector<float>((size_t)(B * Hq * S))};
  const int64_t ldq = Hq * D, ldk = Hkv * D, group = Hq / Hkv;
  const float scale = 1.0f / std::sqrt((float)D);
#pragma omp parallel
  {
    std::vector<float, Eigen::aligned_allocator<float>> P((size_t)(S * S));
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < B * Hq; ++bh) {
      const int64_t b = bh / Hq, h = bh % Hq, g = h / group;
      detail::gemm<float>(false, true, S, S, D, scale, q + b * S * ldq + h * D, ldq, k + b * S * ldk + g * D, ldk, 0.f,
                          P.data(), S);
      for (int64_t i = 0; i < S; ++i) {
        float* row = P.data() + i * S;
        const int64_t lo = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
        float m = -INFINITY;
        for (int64_t j = lo; j <= i; ++j) m = std::max(m, row[j]);
        float den = 0;
        for (int64_t j = 0; j < S; ++j) {
          row[j] = j >= lo && j <= i ? std::exp(row[j] - m) : 0.f;
          den += row[j];
        }
        for (int64_t j = lo; j <= i; ++j) row[j] /= den;
        r.lse[bh * S + i] = m + std::log(den);
      }
      detail::gemm<float>(false, false, S, D, S, 1.f, P.data(), S, v + b * S * ldk + g * D, ldk, 0.f,
                          r.out.data() + b * S * ldq + h * D, ldq);
    }
  }
  return r;
}

void dense_backward(const float* dO, const float* q, const float* k, const float* v, const DenseOut& f, int64_t B,
                    int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t window, float* dq, float* dk, float* dv) {
  const int64_t ldq = Hq * D, ldk = Hkv * D, group = Hq / Hkv;
  const float scale = 1.0f / std::sqrt((float)D);
  std::fill(dk, dk + B * S * ldk, 0.f);
  std::fill(dv, dv + B * S * ldk, 0.f);
#pragma omp parallel
  {
    std::vector<float, Eigen::aligned_allocator<float>> P((size_t)(S * S)), dP((size_t)(S * S));
#pragma omp for schedule(dynamic)
    for (int64_t bg = 0; bg < B * Hkv; ++bg) {
      const int64_t b = bg / Hkv, g = bg % Hkv;
      const float* kg = k + b * S * ldk + g * D;
      const float* vg = v + b * S * ldk + g * D;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* qh = q + b * S * ldq + h * D;
        const float* oh = f.out.data() + b * S * ldq + h * D;
        const float* doh = dO + b * S * ldq + h * D;
        const float* lh = f.lse.data() + (b * Hq + h) * S;
        detail::gemm<float>(false, true, S, S, D, scale, qh, ldq, kg, ldk, 0.f, P.data(), S);
        detail::gemm<float>(false, true, S, S, D, 1.f, doh, ldq, vg, ldk, 0.f, dP.data(), S);
        for (int64_t i = 0; i < S; ++i) {
          float di = 0;
          for (int64_t c = 0; c < D; ++c) di += doh[i * ldq + c] * oh[i * ldq + c];
          const int64_t lo = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
          for (int64_t j = 0; j < S; ++j) {
            const bool vis = j >= lo && j <= i;
            const float p = vis ? std::exp(P[i * S + j] - lh[i]) : 0.f;
            P[i * S + j] = p;
            dP[i * S + j] = vis ? p * (dP[i * S + j] - di) : 0.f;
          }
        }
        detail::gemm<float>(false, false, S, D, S, scale, dP.data(), S, kg, ldk, 0.f, dq + b * S * ldq + h * D, ldq);
        detail::gemm<float>(true, false, S, D, S, scale, dP.data(), S, qh, ldq, 1.f, dk + b * S * ldk + g * D, ldk);
        detail::gemm<float>(true, false, S, D, S, 1.f, P.data(), S, doh, ldq, 1.f, dv + b * S * ldk + g * D, ldk);
      }
    }
  }
}

struct Measure {
  double seconds = 1e30, peak_mib = 0;
};

// Best time over reps of fn(); peak RSS growth over `base` during one call.
template <typename F>
void measure(Measure& m, F fn) {
  const double base = rss_kib("VmRSS:");
  reset_peak();
  const double t0 = now();
  fn();
  m.seconds = std::min(m.seconds, now() - t0);
  m.peak_mib = std::max(m.peak_mib, (rss_kib("VmHWM:") - base) / 1024.0);
}

Tensor randn_t(const Shape& s, uint64_t seed, DType t = DType::F32) {
  Generator g(seed);
  return randn(s, g, t);
}

int compare(int reps) {
  // large buffers always mmapped (no dynamic threshold): freeing them returns them, peaks are per measurement
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const int64_t B = 1, Hq = 8, Hkv = 2, D = 128;
  std::printf("titan-bench-attention: flash-tiled flex attention vs the dense [S, S] kernel it replaced\n");
  std::printf("  B %ld, heads %ld/%ld, head_dim %ld, float32, %d threads, fwd+bwd, best of %d (interleaved)\n\n",
              (long)B, (long)Hq, (long)Hkv, (long)D, omp_get_max_threads(), reps);
  std::printf("%-34s %10s %10s %10s %12s %12s %9s\n", "case", "dense ms", "flash ms", "time x", "dense MiB",
              "flash MiB", "mem /");
  struct Case {
    int64_t S, window;
  };
  double flash_causal_8k = 0, flash_window_8k = 0;
  for (Case c : {Case{2048, 0}, Case{8192, 0}, Case{8192, 256}}) {
    Tensor q = randn_t({B, c.S, Hq, D}, 1), k = randn_t({B, c.S, Hkv, D}, 2), v = randn_t({B, c.S, Hkv, D}, 3);
    Tensor dO = randn_t({B, c.S, Hq, D}, 4);
    std::vector<float> dq(q.numel()), dk(k.numel()), dv(v.numel());
    Measure md, mf;
    double err = 0;
    for (int r = 0; r < reps; ++r) {
      measure(md, [&] {
        DenseOut f = dense_forward(q.data<float>(), k.data<float>(), v.data<float>(), B, c.S, Hq, Hkv, D, c.window);
        dense_backward(dO.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), f, B, c.S, Hq, Hkv, D,
                       c.window, dq.data(), dk.data(), dv.data());
      });
      Tensor qq = q.detach().requires_grad_(true), kk = k.detach().requires_grad_(true), vv = v.detach().requires_grad_(true);
      measure(mf, [&] {
        AttentionOptions o;
        o.window = c.window;
        Tensor y = scaled_dot_product_attention(qq, kk, vv, Tensor(), o);
        y.backward(dO);
      });
      auto g = qq.grad().to_vector<float>();
      for (size_t i = 0; i < g.size(); ++i) err = std::max(err, (double)std::abs(g[i] - dq[i]));
      qq.zero_grad();
    }
    char name[64];
    std::snprintf(name, sizeof name, "S %ld %s", (long)c.S, c.window ? "window 256" : "causal");
    std::printf("%-34s %10.1f %10.1f %9.2fx %12.0f %12.0f %8.1fx   (|dq flash - dense| <= %.1e)\n", name,
                md.seconds * 1e3, mf.seconds * 1e3, md.seconds / mf.seconds, md.peak_mib, mf.peak_mib,
                md.peak_mib / std::max(mf.peak_mib, 1.0), err);
    if (c.S == 8192) (c.window ? flash_window_8k : flash_causal_8k) = mf.seconds;
  }
  std::printf("\nS 8192: sliding window 256 costs %.3f of full causal (flash, fwd+bwd)\n", flash_window_8k / flash_causal_8k);
  return 0;
}

// ---- suite ------------------------------------------------------------------------------
struct SuiteVariant {
  std::string name;
  std::function<FlexOptions(int64_t B, int64_t S, int64_t Hq, const std::vector<Tensor>& caps, const Tensor& docs)> make;
  std::function<std::vector<Tensor>(int64_t Hq, DType)> caps;  // captured tensors (trained)
  // the score of the dense check: (s, b, h, q, kv, caps as double) -> s'; and visibility
  std::function<double(double, int64_t, int64_t, int64_t, int64_t, const std::vector<std::vector<double>>&)> ref;
};

std::vector<SuiteVariant> suite_variants() {
  auto none = [](int64_t, DType) { return std::vector<Tensor>(); };
  auto id = [](double s, int64_t, int64_t, int64_t, int64_t, const std::vector<std::vector<double>>&) { return s; };
  std::vector<SuiteVariant> v;
  v.push_back({"noop", [](int64_t, int64_t, int64_t, const auto&, const auto&) { return FlexOptions(); }, none, id});
  v.push_back({"causal", [](int64_t, int64_t, int64_t, const auto&, const auto&) {
                 FlexOptions o;
                 o.mask_mod = causal_mask();
                 return o;
               }, none, id});
  v.push_back({"sliding_window", [](int64_t, int64_t, int64_t, const auto&, const auto&) {
                 FlexOptions o;
                 o.mask_mod = sliding_window_mask(256);
                 return o;
               }, none, id});
  v.push_back({"prefix_lm", [](int64_t, int64_t S, int64_t, const auto&, const auto&) {
                 FlexOptions o;
                 o.mask_mod = prefix_lm_mask(S / 4);
                 return o;
               }, none, id});
  v.push_back({"document", [](int64_t, int64_t, int64_t, const auto&, const Tensor& docs) {
                 FlexOptions o;
                 o.mask_mod = document_causal_mask(docs);
                 return o;
               }, none, id});
  v.push_back({"alibi", [](int64_t, int64_t, int64_t, const auto& caps, const auto&) {
                 FlexOptions o;
                 o.mask_mod = causal_mask();
                 o.score_mod = nn::alibi_mod(caps[0]);
                 return o;
               }, [](int64_t Hq, DType t) { return std::vector<Tensor>{nn::alibi_slopes(Hq).to(t)}; },
               [](double s, int64_t, int64_t h, int64_t q, int64_t kv, const auto& c) { return s + c[0][h] * (kv - q); }});
  v.push_back({"softcap", [](int64_t, int64_t, int64_t, const auto&, const auto&) {
                 FlexOptions o;
                 o.mask_mod = causal_mask();
                 o.score_mod = nn::softcap_mod(2.0);
                 return o;
               }, none, [](double s, int64_t, int64_t, int64_t, int64_t, const auto&) { return 2.0 * std::tanh(s / 2.0); }});
  v.push_back({"relative", [](int64_t, int64_t, int64_t, const auto& caps, const auto&) {
                 FlexOptions o;
                 o.mask_mod = causal_mask();
                 o.score_mod = nn::relative_bias_mod(caps[0], 128);
                 return o;
               }, [](int64_t Hq, DType t) { return std::vector<Tensor>{randn_t({Hq, 255}, 9, t)}; },
               [](double s, int64_t, int64_t h, int64_t q, int64_t kv, const auto& c) {
                 return s + c[0][h * 255 + std::clamp<int64_t>(q - kv, -127, 127) + 127];
               }});
  return v;
}

Tensor suite_docs(int64_t B, int64_t S) {  // documents of pseudo-random lengths 1..S/2 per row
  std::vector<int64_t> d(B * S);
  uint64_t x = 88172645463325252ull;
  for (int64_t b = 0; b < B; ++b) {
    int64_t id = 0, left = 0;
    for (int64_t i = 0; i < S; ++i) {
      if (left == 0) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        left = 1 + (int64_t)(x % (uint64_t)std::max<int64_t>(1, S / 2));
        if (i > 0) ++id;
      }
      d[b * S + i] = id;
      --left;
    }
  }
  return from_vector<int64_t>(d, {B, S});
}

double rel_err(const Tensor& got, const Tensor& ref) {
  auto a = got.to_vector<double>(), b = ref.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / std::max(den, 1e-30);
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) v.push_back(std::stoll(x));
  return v;
}

int suite(const std::vector<int64_t>& batches, const std::vector<int64_t>& seqs, const std::vector<int64_t>& dims) {
  const auto variants = suite_variants();
  int total = 0, passed = 0;
  std::printf("titan-bench-attention --suite: %zu variants x batch x seq x head_dim x GQA, float32 fwd+bwd, %d threads\n",
              variants.size(), omp_get_max_threads());
  std::printf("%-15s %2s %5s %4s %-8s %10s %10s %10s %10s\n", "variant", "B", "S", "D", "heads", "fwd+bwd s",
              "out err", "grad err", "dense err");
  const int64_t n_cases = (int64_t)(variants.size() * batches.size() * seqs.size() * dims.size() * 2);
  Progress progress("attention suite", n_cases, "cases");
  for (int64_t S : seqs)
    for (int64_t B : batches)
      for (int64_t D : dims)
        for (bool gqa : {false, true})
          for (const SuiteVariant& var : variants) {
            const int64_t Hq = 4, Hkv = gqa ? 1 : 4;
            Tensor q = randn_t({B, S, Hq, D}, 11), k = randn_t({B, S, Hkv, D}, 12), v = randn_t({B, S, Hkv, D}, 13);
            Tensor w = randn_t({B, S, Hq, D}, 14);
            Tensor docs = suite_docs(B, S);
            // float32, the case under test
            std::vector<Tensor> caps = var.caps(Hq, DType::F32);
            std::vector<Tensor> leaves = {q.clone().requires_grad_(true), k.clone().requires_grad_(true),
                                          v.clone().requires_grad_(true)};
            for (Tensor& c : caps) c.requires_grad_(true);
            const double t0 = now();
            Tensor out = flex_attention(leaves[0], leaves[1], leaves[2], var.make(B, S, Hq, caps, docs));
            out.backward(w);
            const double secs = now() - t0;
            // float64 on the last batch row (rows are independent)
            auto row = [&](const Tensor& t) { return t.slice(0, B - 1, B).contiguous().to(DType::F64); };
            std::vector<Tensor> ref = {row(q).requires_grad_(true), row(k).requires_grad_(true),
                                       row(v).requires_grad_(true)};
            std::vector<Tensor> caps64 = var.caps(Hq, DType::F64);
            for (Tensor& c : caps64) c.requires_grad_(true);
            Tensor docs_row = docs.slice(0, B - 1, B).contiguous();
            FlexOptions o64 = var.make(1, S, Hq, caps64, docs_row);
            Tensor out64 = flex_attention(ref[0], ref[1], ref[2], o64);
            out64.backward(row(w));
            double oe = rel_err(row(out), out64), ge = 0;
            for (int i = 0; i < 3; ++i) ge = std::max(ge, rel_err(row(leaves[i].grad()), ref[i].grad()));
            // captured gradients sum over batch rows: compare the float64 run on all rows' share... the
            // float32 gradient of the captures covers every row, so check it only when B == 1
            if (B == 1)
              for (size_t c = 0; c < caps.size(); ++c) ge = std::max(ge, rel_err(caps[c].grad(), caps64[c].grad()));
            // independent dense check of float64 out and dQ on sampled rows
            double de = 0;
            {
              NoGradGuard ng;
              std::vector<std::vector<double>> cv;
              for (const Tensor& c : caps64) cv.push_back(c.to_vector<double>());
              auto Q = ref[0].to_vector<double>(), K = ref[1].to_vector<double>(), V = ref[2].to_vector<double>();
              auto O = out64.to_vector<double>(), W = row(w).to_vector<double>();
              auto DQ = ref[0].grad().to_vector<double>();
              const double scale = 1 / std::sqrt((double)D);
              for (int64_t h = 0; h < Hq; h += 3)
                for (int64_t i : {(int64_t)0, S / 3, S / 2 + 1, S - 1}) {
                  const int64_t g = h / (Hq / Hkv);
                  std::vector<double> s(S, -INFINITY), dp(S, 0);
                  double m = -INFINITY;
                  for (int64_t j = 0; j < S; ++j) {
                    if (o64.mask_mod.defined() && !o64.mask_mod(0, h, i, j)) continue;
                    double x = 0, y = 0;
                    for (int64_t c = 0; c < D; ++c) {
                      x += Q[(i * Hq + h) * D + c] * K[(j * Hkv + g) * D + c];
                      y += W[(i * Hq + h) * D + c] * V[(j * Hkv + g) * D + c];
                    }
                    s[j] = var.ref(x * scale, 0, h, i, j, cv);
                    dp[j] = y;
                    m = std::max(m, s[j]);
                  }
                  double z = 0;
                  for (int64_t j = 0; j < S; ++j) z += std::exp(s[j] - m);
                  std::vector<double> o(D, 0), dq(D, 0);
                  double di = 0;
                  for (int64_t j = 0; j < S; ++j) {
                    const double p = std::exp(s[j] - m) / z;
                    for (int64_t c = 0; c < D; ++c) o[c] += p * V[(j * Hkv + g) * D + c];
                    di += p * dp[j];
                  }
                  for (int64_t j = 0; j < S; ++j) {
                    if (s[j] == -INFINITY) continue;
                    const double p = std::exp(s[j] - m) / z;
                    // dQ through the score mod: d s'/d s by a central difference of the reference mod
                    const double e = 1e-6;
                    double x = 0;
                    for (int64_t c = 0; c < D; ++c) x += Q[(i * Hq + h) * D + c] * K[(j * Hkv + g) * D + c];
                    const double dmod = (var.ref(x * scale + e, 0, h, i, j, cv) - var.ref(x * scale - e, 0, h, i, j, cv)) / (2 * e);
                    const double ds = p * (dp[j] - di) * dmod * scale;
                    for (int64_t c = 0; c < D; ++c) dq[c] += ds * K[(j * Hkv + g) * D + c];
                  }
                  for (int64_t c = 0; c < D; ++c) {
                    de = std::max(de, std::abs(o[c] - O[(i * Hq + h) * D + c]));
                    de = std::max(de, std::abs(dq[c] - DQ[(i * Hq + h) * D + c]));
                  }
                }
            }
            const bool ok = oe <= 2e-4 && ge <= 2e-4 && de <= 1e-8;
            ++total;
            passed += ok;
            char heads[16];
            std::snprintf(heads, sizeof heads, "%ld/%ld", (long)Hq, (long)Hkv);
            std::printf("%-15s %2ld %5ld %4ld %-8s %10.3f %10.1e %10.1e %10.1e %s\n", var.name.c_str(), (long)B, (long)S,
                        (long)D, heads, secs, oe, ge, de, ok ? "ok" : "FAIL");
            std::fflush(stdout);
            progress.add();
          }
  progress.finish();
  std::printf("\nsuite: %d/%d cases passed\n", passed, total);
  return passed == total ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  bool run_suite = false;
  std::string seqs = "512,2048,8192", batches = "1,4", dims = "64,128";
  CLI::App app{"titan-bench-attention: flash-tiled flex attention vs the dense kernel it replaced (time, peak memory), "
               "sliding window vs causal; --suite: the variants x shapes numerics suite",
               "titan-bench-attention"};
  app.set_version_flag("--version", version_string("titan-bench-attention"));
  app.add_option("--reps", reps, "repetitions per comparison case (the best counts)")->check(CLI::PositiveNumber);
  app.add_flag("--suite", run_suite, "run the numerics suite instead of the comparison");
  app.add_option("--seqs", seqs, "suite: sequence lengths");
  app.add_option("--batches", batches, "suite: batch sizes");
  app.add_option("--dims", dims, "suite: head dims");
  CLI11_PARSE(app, argc, argv);
  try {
    return run_suite ? suite(parse_list(batches), parse_list(seqs), parse_list(dims)) : compare(reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan-bench-attention: %s\n", e.what());
    return 1;
  }
}
