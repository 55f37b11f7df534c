// The GEMM kernels every op's matrix products run on: C = alpha * op(A) op(B) + beta * C, row-major.
//
//  - float32 (gemm<float>): oneDNN's matmul (Debian's libdnnl, OpenMP runtime like OpenBLAS) where the CPU has
//    AVX512 (oneDNN's brgemm kernels there: measured 1.3-1.75x OpenBLAS's sgemm on 2 threads for the K = 128-384
//    products of small models, titan-bench-linear prints the ratio), else OpenBLAS's sgemm; also OpenBLAS
//    inside a parallel region (a float32 run's attention tiles: one GEMM per thread) and for products too small
//    for a primitive call to pay. Both sum in float32; their orders differ. gemm_blas<T> is OpenBLAS always (callers
//    whose results must not depend on how work is spread over threads: batched matmuls); gemm_serial runs on the
//    calling thread alone, oneDNN's sgemm where gemm<float> is on oneDNN, else OpenBLAS's (the experts' blocks).
//  - float64 (gemm<double>): OpenBLAS's dgemm (gradient checks, references).
//  - bfloat16 (gemm_bf16): A and B read as bfloat16 and products summed in float32 — the GEMM of a bf16
//    mixed-precision region (PyTorch's bf16 matmul: bf16 operands, fp32 accumulation). oneDNN picks the
//    instructions at run time: AMX tiles or AVX512-BF16 dot products where the CPU has them, bf16 converted to
//    float32 inside its AVX512 kernels where it has AVX512 only. Below AVX512 (or where oneDNN declines the
//    problem) the rounded operands are multiplied by OpenBLAS's sgemm: the same products and float32 sums, in
//    another order. Why oneDNN: Debian's OpenBLAS has no bf16 GEMM, and oneDNN is the library PyTorch's own CPU
//    matmuls run on. The operands are float32 tensors rounded (to nearest even) into packed bf16 buffers here:
//    autocast's casts.
//
// gemm_bf16_tile: the bf16 GEMM of one thread inside a parallel region (flash attention's tiles, one task per
// thread): bf16 operands as bits, a float32 C. Each thread keeps its own oneDNN primitives, made for one thread
// (oneDNN sizes its work split by the threads it is made with; inside a parallel region it runs on the caller
// alone), its own stream and scratchpad, so threads never wait on each other; measured 2-3x OpenBLAS's sgemm on
// the float32 roundings for attention's 128 x 128 x 64 tiles on this Zen 4 (AVX512-BF16). Where oneDNN has no
// fast bf16 kernel: gemm_serial on the rounded values (gemm_bf16_blas).
//
// oneDNN's primitives are made once per problem (a primitive JITs or picks its kernel: ~0.1 ms) and kept in a
// bounded cache. gemm<float> and gemm_bf16 run oneDNN outside parallel regions only (oneDNN's threads do the
// parallel work: gemm_bf16 refuses a call inside one, float32 takes OpenBLAS there) and one at a time per
// process (a lock: calls from several host threads wait their turn); gemm_bf16_tile is the exception above:
// each thread its own one-thread primitives, no lock.
#include <cblas.h>
#include <dnnl.hpp>
#include <omp.h>

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan::detail {
namespace {

// A GEMM problem as oneDNN sees it: shapes, strides, scaling, operand type (f32 or bf16; C is float32).
// threads: a primitive keeps the thread count it was made with (oneDNN's own cache keys on it too)
struct Key {
  bool bf16, ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  int threads = omp_get_max_threads();
  bool operator==(const Key& o) const {
    return bf16 == o.bf16 && ta == o.ta && tb == o.tb && m == o.m && n == o.n && k == o.k && lda == o.lda &&
           ldb == o.ldb && ldc == o.ldc && alpha == o.alpha && beta == o.beta && threads == o.threads;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<int64_t>()(k.m);
    for (int64_t v : {k.n, k.k, k.lda, k.ldb, k.ldc, (int64_t)k.ta, (int64_t)k.tb, (int64_t)k.bf16, (int64_t)k.threads})
      h = h * 0x9E3779B97F4A7C15ull ^ std::hash<int64_t>()(v);
    return h ^ std::hash<float>()(k.alpha) * 31 ^ std::hash<float>()(k.beta);
  }
};

bool has_isa(dnnl::cpu_isa have, dnnl::cpu_isa want) {
  return ((unsigned)have & (unsigned)want) == (unsigned)want;  // oneDNN's ISAs are nested bit sets
}

// oneDNN's engine and stream, and the primitives made so far.
class Dnnl {
 public:
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  std::string bf16_kernel;  // what the bf16 GEMM runs on this CPU, for the log and the tests
  bool f32 = false;         // float32 GEMMs on oneDNN (AVX512: its brgemm kernels, faster than sgemm)

  Dnnl() {
    std::string impl;
    bf16_ = true;
    make({true, false, false, 64, 64, 64, 64, 64, 64, 1.0f, 0.0f}, &impl);
    bf16_ = !impl.empty() && impl.rfind("ref", 0) != 0;  // oneDNN's reference loops: slower than sgemm
    bf16_kernel = bf16_ ? "onednn " + impl : "openblas sgemm on bf16-rounded operands (oneDNN: " +
                                                 (impl.empty() ? std::string("no bf16 matmul") : impl) + ")";
    f32 = has_isa(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core);
  }
  bool bf16_fast() const { return bf16_; }
  // The primitive for `key`, or null where oneDNN has no fast one (the sgemm path).
  std::shared_ptr<dnnl::matmul> get(const Key& key) {
    if (key.bf16 ? !bf16_ : !f32) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = prims_.find(key);
    if (it != prims_.end()) return it->second;
    std::string impl;
    std::shared_ptr<dnnl::matmul> p = make(key, &impl);
    if (p && impl.rfind("ref", 0) == 0) p = nullptr;
    if (prims_.size() > 4096) prims_.clear();  // bounded: grouped GEMMs bring many row counts
    prims_.emplace(key, p);
    return p;
  }
  // C = op(A) op(B) (scaled as key says) with A, B, C at these addresses. One at a time: the primitives share
  // oneDNN's scratchpad and this stream (threads that are ranks of a test, or a host thread, call in too).
  void run(dnnl::matmul& prim, const Key& key, const void* A, const void* B, float* C) {
    std::lock_guard<std::mutex> lock(run_mu_);
    const dnnl::memory ma(desc_a(key), eng, const_cast<void*>(A)), mb(desc_b(key), eng, const_cast<void*>(B)),
        mc(desc_c(key), eng, C);
    prim.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    stream.wait();
  }

 private:
  bool bf16_ = false;
  std::mutex mu_, run_mu_;
  std::unordered_map<Key, std::shared_ptr<dnnl::matmul>, KeyHash> prims_;

  friend class ThreadDnnl;
  // The primitive's description for `key` (its scratchpad the caller's where user_scratchpad), or none where
  // oneDNN declines (no bf16 kernel on this CPU)
  std::optional<dnnl::matmul::primitive_desc> describe(const Key& key, bool user_scratchpad = false) {
    try {
      dnnl::primitive_attr attr;
      if (user_scratchpad) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
      if (key.beta != 0.0f) {
        dnnl::post_ops po;
        po.append_sum(key.beta);
        attr.set_post_ops(po);
      }
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(desc_a(key), desc_b(key), desc_c(key)), attr, eng);
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  }
  std::shared_ptr<dnnl::matmul> make(const Key& key, std::string* impl) {
    std::optional<dnnl::matmul::primitive_desc> pd = describe(key);
    if (!pd) return nullptr;
    *impl = pd->impl_info_str();
    return std::make_shared<dnnl::matmul>(*pd);
  }
  // A [M, K] (stored [K, M] when ta), B [K, N] (stored [N, K] when tb), with their leading dimensions; C [M, N]
  static dnnl::memory::data_type operand(const Key& k) {
    return k.bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  }
  static dnnl::memory::desc desc_a(const Key& k) {
    return {{k.m, k.k}, operand(k), k.ta ? dnnl::memory::dims{1, k.lda} : dnnl::memory::dims{k.lda, 1}};
  }
  static dnnl::memory::desc desc_b(const Key& k) {
    return {{k.k, k.n}, operand(k), k.tb ? dnnl::memory::dims{1, k.ldb} : dnnl::memory::dims{k.ldb, 1}};
  }
  static dnnl::memory::desc desc_c(const Key& k) {
    return {{k.m, k.n}, dnnl::memory::data_type::f32, dnnl::memory::dims{k.ldc, 1}};
  }
};

Dnnl& dnnl_state() {
  static Dnnl d;
  return d;
}

// This thread's count for the nested regions it opens set to one while in scope (oneDNN reads it when it makes a
// primitive and when it runs one), the previous count back on exit.
class OneThreadScope {
 public:
  OneThreadScope() : prev_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThreadScope() { omp_set_num_threads(prev_); }
  OneThreadScope(const OneThreadScope&) = delete;
  OneThreadScope& operator=(const OneThreadScope&) = delete;

 private:
  int prev_;
};

// One thread's oneDNN state for gemm_bf16_tile: its stream, its one-thread primitives (null: oneDNN declines),
// their scratchpad.
class ThreadDnnl {
 public:
  ThreadDnnl() : stream_(dnnl_state().eng) {}
  // C = alpha op(A) op(B) + beta C on this thread; false where oneDNN has no fast kernel for the problem
  bool run(const Key& key, const uint16_t* A, const uint16_t* B, float* C) {
    Dnnl& d = dnnl_state();
    if (!d.bf16_fast()) return false;
    OneThreadScope one;
    auto it = prims_.find(key);
    if (it == prims_.end()) {
      if (prims_.size() > 1024) prims_.clear();  // bounded: tiles come in few shapes
      Prim p;
      if (std::optional<dnnl::matmul::primitive_desc> pd = d.describe(key, true);
          pd && std::string(pd->impl_info_str()).rfind("ref", 0) != 0) {
        p.prim = std::make_shared<dnnl::matmul>(*pd);
        p.scratch = pd->scratchpad_desc();
      }
      it = prims_.emplace(key, std::move(p)).first;
    }
    if (!it->second.prim) return false;
    dnnl::matmul& prim = *it->second.prim;
    const dnnl::memory::desc& sd = it->second.scratch;
    if (scratch_.size() < sd.get_size()) scratch_.resize(sd.get_size());
    const dnnl::memory ma(Dnnl::desc_a(key), d.eng, const_cast<uint16_t*>(A)),
        mb(Dnnl::desc_b(key), d.eng, const_cast<uint16_t*>(B)), mc(Dnnl::desc_c(key), d.eng, C),
        ms(sd, d.eng, scratch_.data());
    prim.execute(stream_, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}});
    stream_.wait();
    return true;
  }

 private:
  struct Prim {
    std::shared_ptr<dnnl::matmul> prim;  // null: oneDNN has no fast kernel (sgemm instead)
    dnnl::memory::desc scratch;
  };
  dnnl::stream stream_;
  std::unordered_map<Key, Prim, KeyHash> prims_;
  std::vector<char> scratch_;
};

// A bf16 GEMM's M or K as oneDNN is asked for it: up to 4096, rounded up to a multiple of 2^(floor(log2 x) - 3)
// (at least 16: an AMX tile's rows), so at most 12.5% more from 128 up (below: to a multiple of 16) and about
// eight primitives per octave; larger sizes as they are (a new primitive, measured 0.3-1.3 ms, is small beside
// their GEMM). The zero rows and columns change no sum (but a -0 sum reads +0).
int64_t bf16_bucket(int64_t x) {
  if (x <= 0 || x > 4096) return x;
  int64_t g = 16;
  while (g * 16 <= x) g *= 2;  // g = max(16, 2^(floor(log2 x) - 3))
  return (x + g - 1) / g * g;
}

// Below this many multiply-adds a oneDNN call's fixed cost (memory objects, argument map) is not paid back.
constexpr int64_t kDnnlMinMacs = 1 << 15;

}  // namespace

template <>
void gemm_blas<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
              alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
template <>
void gemm_blas<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                       int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
              alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

void gemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {  // C = beta C, as BLAS defines it: the product is skipped (0 * Inf is not NaN)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  OneThreadScope one;  // oneDNN's sgemm and Debian's OpenMP OpenBLAS split over omp_get_max_threads()
  if (!dnnl_state().f32) {  // OpenBLAS on its threads gives other bits than on one (measured below AVX512)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  TITAN_CHECK(st == dnnl_success, "gemm_serial: oneDNN's sgemm failed (status ", (int)st, ") on ", M, "x", N, "x", K,
              " (lda ", lda, ", ldb ", ldb, ", ldc ", ldc, ")");
}

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  // oneDNN: outside any parallel region (a team of one thread included: the choice never depends on the thread
  // count), large enough, and alpha != 0 (BLAS skips the product then; 0 * Inf would be NaN)
  if (K > 0 && M * N * K >= kDnnlMinMacs && omp_get_level() == 0 && alpha != 0.0f) {
    Dnnl& d = dnnl_state();
    const Key key{false, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta};
    if (std::shared_ptr<dnnl::matmul> prim = d.get(key)) return d.run(*prim, key, A, B, C);
  }
  gemm_blas<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                  const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_blas<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::string gemm_bf16_kernel() { return dnnl_state().bf16_kernel; }
bool gemm_f32_on_onednn() { return dnnl_state().f32; }

std::vector<uint16_t> pack_bf16(const float* p, int64_t r, int64_t c, int64_t ld) {
  std::vector<uint16_t> out((size_t)(r * c));
#pragma omp parallel for schedule(static) if (r * c >= (1 << 16))
  for (int64_t i = 0; i < r; ++i) float_to_bf16_bits(p + i * ld, out.data() + i * c, c);  // whole rows: vectorized
  return out;
}

// The r x c operand as float32 values rounded to bf16, row length c (threaded outside parallel regions only).
std::vector<float> rounded(const Bf16Operand& o, int64_t r, int64_t c) {
  std::vector<float> out((size_t)std::max<int64_t>(1, r * c));
#pragma omp parallel for schedule(static) if (r * c >= (1 << 16) && omp_get_level() == 0)
  for (int64_t i = 0; i < r; ++i) {
    float* row = out.data() + i * c;
    if (o.bits) {
      for (int64_t j = 0; j < c; ++j) row[j] = bf16_bits_to_float(o.bits[i * o.ld + j]);
    } else {
      std::copy(o.values + i * o.ld, o.values + i * o.ld + c, row);
      round_to_bf16(row, c);
    }
  }
  return out;
}

// Each operand is values or bits, read with a leading dimension that spans its rows.
void check_operands(const char* fn, const Bf16Operand& A, int64_t ac, const Bf16Operand& B, int64_t bc) {
  TITAN_CHECK((A.values != nullptr) != (A.bits != nullptr) && (B.values != nullptr) != (B.bits != nullptr), fn,
              ": each operand is float32 values or bf16 bits, not both or neither");
  TITAN_CHECK(A.ld >= ac && B.ld >= bc, fn, ": leading dimensions ", A.ld, ", ", B.ld, " shorter than the rows (", ac,
              ", ", bc, ")");
}

namespace {
// The product of the rounded operands in float32: on gemm_serial (serial) or on gemm_blas's threads.
void gemm_rounded(bool serial, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, Bf16Operand A,
                  Bf16Operand B, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  if (K > 0) check_operands("gemm_bf16_blas", A, ac, B, bc);
  const std::vector<float> a = rounded(A, ar, ac), b = rounded(B, br, bc);
  const int64_t la = std::max<int64_t>(1, ac), lb = std::max<int64_t>(1, bc);
  if (serial) return gemm_serial(ta, tb, M, N, K, alpha, a.data(), la, b.data(), lb, beta, C, ldc);
  gemm_blas<float>(ta, tb, M, N, K, alpha, a.data(), la, b.data(), lb, beta, C, ldc);
}
}  // namespace

void gemm_bf16_blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, Bf16Operand A, Bf16Operand B,
                    float beta, float* C, int64_t ldc) {
  gemm_rounded(/*serial=*/true, ta, tb, M, N, K, alpha, A, B, beta, C, ldc);
}

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_bf16(ta, tb, M, N, K, alpha, Bf16Operand{A, nullptr, lda}, Bf16Operand{B, nullptr, ldb}, beta, C, ldc);
}

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, Bf16Operand A, Bf16Operand B,
               float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  TITAN_CHECK(omp_get_level() == 0, "gemm_bf16: called inside a parallel region (", M, "x", N, "x", K,
              "); run bf16 GEMMs one at a time, oneDNN's threads split each");
  // stored shapes: A [M, K] or [K, M]; B [K, N] or [N, K]
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  if (K > 0) check_operands("gemm_bf16", A, ac, B, bc);
  Dnnl& d = dnnl_state();
  // oneDNN's problem: M and K rounded up to a bucket (operands zero-padded, C through a scratch when M grows), so
  // that varying row counts (an expert's tokens) reuse a few primitives instead of making one each
  const int64_t Mp = bf16_bucket(M), Kp = bf16_bucket(K);
  const int64_t par = ta ? Kp : Mp, pac = ta ? Mp : Kp, pbr = tb ? N : Kp, pbc = tb ? Kp : N;
  const bool scratch_c = Mp != M;
  // an operand's bits as oneDNN reads them: as given where they are packed already to the padded shape, else a
  // padded copy in `buf`
  auto padded = [](const Bf16Operand& o, int64_t r, int64_t c, int64_t pr, int64_t pc,
                   std::unique_ptr<uint16_t[]>& buf) {
    if (o.bits && pr == r && pc == c && o.ld == c) return o.bits;
    buf.reset(new uint16_t[(size_t)(pr * pc)]);
    uint16_t* out = buf.get();
#pragma omp parallel for schedule(static) if (r * c >= (1 << 16))
    for (int64_t i = 0; i < r; ++i) {
      if (o.bits) std::copy(o.bits + i * o.ld, o.bits + i * o.ld + c, out + i * pc);
      else float_to_bf16_bits(o.values + i * o.ld, out + i * pc, c);
      std::fill(out + i * pc + c, out + (i + 1) * pc, uint16_t(0));
    }
    std::fill(out + r * pc, out + pr * pc, uint16_t(0));
    return (const uint16_t*)out;
  };
  const Key key{true, ta, tb, Mp, N, Kp, pac, pbc, scratch_c ? N : ldc, alpha, beta};  // packed: ld = row length
  std::shared_ptr<dnnl::matmul> prim = K > 0 ? d.get(key) : nullptr;
  if (prim) {
    std::unique_ptr<uint16_t[]> abuf, bbuf;
    const uint16_t* a = padded(A, ar, ac, par, pac, abuf);
    const uint16_t* b = padded(B, br, bc, pbr, pbc, bbuf);
    if (!scratch_c) return d.run(*prim, key, a, b, C);
    std::vector<float> c((size_t)(Mp * N));
    if (beta != 0.0f)
      for (int64_t i = 0; i < M; ++i) std::copy(C + i * ldc, C + i * ldc + N, c.data() + i * N);
    d.run(*prim, key, a, b, c.data());
    for (int64_t i = 0; i < M; ++i) std::copy(c.data() + i * N, c.data() + (i + 1) * N, C + i * ldc);
    return;
  }
  // sgemm on the rounded values, on OpenBLAS's threads (gemm<float> would hand a large product back to oneDNN:
  // where it is, bf16 is too)
  gemm_rounded(/*serial=*/false, ta, tb, M, N, K, alpha, A, B, beta, C, ldc);
}

void gemm_bf16_tile(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                    const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const Key key{true, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, 1};
  thread_local ThreadDnnl mine;
  if (K > 0 && alpha != 0.0f && mine.run(key, A, B, C)) return;
  gemm_bf16_blas(ta, tb, M, N, K, alpha, Bf16Operand{nullptr, A, lda}, Bf16Operand{nullptr, B, ldb}, beta, C, ldc);
}

}  // namespace titan::detail
