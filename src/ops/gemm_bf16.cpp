// gemm_bf16: C = alpha * op(A) op(B) + beta * C with A and B read as bfloat16 and products summed in float32 —
// the GEMM of a bf16 mixed-precision region (PyTorch's bf16 matmul: bf16 operands, fp32 accumulation).
//
// Kernel: oneDNN's matmul (Debian's libdnnl, OpenMP runtime like OpenBLAS). oneDNN picks the instructions at
// run time: AMX tiles or AVX512-BF16 dot products where the CPU has them, bf16 converted to float32 inside its
// AVX512 kernels where it has AVX512 only. Below AVX512 (or where oneDNN declines the problem) the rounded
// operands are multiplied by OpenBLAS's sgemm: the same products and float32 sums, in another order. Why oneDNN:
// Debian's OpenBLAS has no bf16 GEMM, and oneDNN is the library PyTorch's own CPU bf16 matmuls run on.
//
// The operands are float32 tensors rounded (to nearest even) into packed bf16 buffers here: autocast's casts.
// Callers run one bf16 GEMM at a time per process (oneDNN's threads do the parallel work): a primitive's
// scratchpad is oneDNN's own, so concurrent runs of one primitive from several threads are not done.
#include <dnnl.hpp>
#include <omp.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan {

void round_to_bf16_(Tensor& t) {
  if (t.is_meta() || t.numel() == 0) return;
  TITAN_CHECK(t.dtype() == DType::F32 && t.is_contiguous(), "round_to_bf16_: a contiguous float32 tensor expected, got ",
              dtype_name(t.dtype()), " ", shape_str(t.shape()));
  float* p = t.data<float>();
  const int64_t n = t.numel(), chunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; i += chunk) round_to_bf16(p + i, std::min(chunk, n - i));
}
}  // namespace titan

namespace titan::detail {
namespace {

struct Key {
  bool ta, tb;
  int64_t m, n, k, ldc;
  float alpha, beta;
  bool operator==(const Key& o) const {
    return ta == o.ta && tb == o.tb && m == o.m && n == o.n && k == o.k && ldc == o.ldc && alpha == o.alpha &&
           beta == o.beta;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<int64_t>()(k.m);
    for (int64_t v : {k.n, k.k, k.ldc, (int64_t)k.ta, (int64_t)k.tb})
      h = h * 0x9E3779B97F4A7C15ull ^ std::hash<int64_t>()(v);
    return h ^ std::hash<float>()(k.alpha) * 31 ^ std::hash<float>()(k.beta);
  }
};

// oneDNN's engine and stream, and the primitives made so far (one per problem: making one JITs its kernel).
class Dnnl {
 public:
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  std::string kernel;  // what runs on this CPU, for the log and the tests

  Dnnl() {
    std::string impl;
    usable_ = true;
    make({false, false, 64, 64, 64, 64, 1.0f, 0.0f}, &impl);
    usable_ = !impl.empty() && impl.rfind("ref", 0) != 0;  // oneDNN's reference loops: slower than sgemm
    kernel = usable_ ? "onednn " + impl : "openblas sgemm on bf16-rounded operands (oneDNN: " +
                                             (impl.empty() ? std::string("no bf16 matmul") : impl) + ")";
  }
  // The primitive for `key`, or null where oneDNN has no fast one (the sgemm path).
  std::shared_ptr<dnnl::matmul> get(const Key& key) {
    if (!usable_) return nullptr;
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

 private:
  bool usable_ = false;
  std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<dnnl::matmul>, KeyHash> prims_;

  std::shared_ptr<dnnl::matmul> make(const Key& key, std::string* impl) {
    try {
      dnnl::primitive_attr attr;
      if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
      if (key.beta != 0.0f) {
        dnnl::post_ops po;
        po.append_sum(key.beta);
        attr.set_post_ops(po);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(desc_a(key), desc_b(key), desc_c(key)), attr, eng);
      *impl = pd.impl_info_str();
      return std::make_shared<dnnl::matmul>(pd);
    } catch (const dnnl::error&) {
      return nullptr;  // oneDNN declines (no bf16 kernel on this CPU)
    }
  }

 public:
  // packed operands: A [M, K] (stored [K, M] when ta), B [K, N] (stored [N, K] when tb); C [M, N] with ldc
  static dnnl::memory::desc desc_a(const Key& k) {
    return {{k.m, k.k}, dnnl::memory::data_type::bf16, k.ta ? dnnl::memory::dims{1, k.m} : dnnl::memory::dims{k.k, 1}};
  }
  static dnnl::memory::desc desc_b(const Key& k) {
    return {{k.k, k.n}, dnnl::memory::data_type::bf16, k.tb ? dnnl::memory::dims{1, k.k} : dnnl::memory::dims{k.n, 1}};
  }
  static dnnl::memory::desc desc_c(const Key& k) {
    return {{k.m, k.n}, dnnl::memory::data_type::f32, dnnl::memory::dims{k.ldc, 1}};
  }
};

Dnnl& dnnl_state() {
  static Dnnl d;
  return d;
}

// The r x c matrix at p (leading dimension ld) packed into `out`, each value through `cast` (its bf16 bits for
// oneDNN, its bf16 rounding for sgemm).
template <typename Out, typename Cast>
void pack(const float* p, int64_t r, int64_t c, int64_t ld, Out* out, Cast cast) {
#pragma omp parallel for schedule(static) if (r * c >= (1 << 16))
  for (int64_t i = 0; i < r; ++i) {
    const float* row = p + i * ld;
    Out* o = out + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = cast(row[j]);
  }
}
uint16_t bits_of(float f) { return float_to_bf16_bits(f); }
float rounded(float f) { return round_to_bf16(f); }

}  // namespace

std::string gemm_bf16_kernel() { return dnnl_state().kernel; }

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  TITAN_CHECK(!omp_in_parallel(), "gemm_bf16: called inside a parallel region (", M, "x", N, "x", K,
              "); run bf16 GEMMs one at a time, oneDNN's threads split each");
  // stored shapes: A [M, K] or [K, M]; B [K, N] or [N, K]
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  Dnnl& d = dnnl_state();
  const Key key{ta, tb, M, N, K, ldc, alpha, beta};
  std::shared_ptr<dnnl::matmul> prim = K > 0 ? d.get(key) : nullptr;
  if (prim) {
    std::unique_ptr<uint16_t[]> a(new uint16_t[(size_t)(ar * ac)]), b(new uint16_t[(size_t)(br * bc)]);
    pack(A, ar, ac, lda, a.get(), bits_of);
    pack(B, br, bc, ldb, b.get(), bits_of);
    const dnnl::memory ma(Dnnl::desc_a(key), d.eng, a.get()), mb(Dnnl::desc_b(key), d.eng, b.get()),
        mc(Dnnl::desc_c(key), d.eng, C);
    prim->execute(d.stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    d.stream.wait();
    return;
  }
  std::unique_ptr<float[]> a(new float[(size_t)std::max<int64_t>(1, ar * ac)]),
      b(new float[(size_t)std::max<int64_t>(1, br * bc)]);
  pack(A, ar, ac, lda, a.get(), rounded);
  pack(B, br, bc, ldb, b.get(), rounded);
  gemm<float>(ta, tb, M, N, K, alpha, a.get(), std::max<int64_t>(1, ac), b.get(), std::max<int64_t>(1, bc), beta, C,
              ldc);
}

}  // namespace titan::detail
