// Flex attention: masks, block masks, and the flash-tiled forward and
// backward kernels (FlashAttention-2's loop order on the CPU: tile GEMMs, BLAS
// or under bf16 autocast oneDNN's bf16 kernel, online softmax, log-sum-exp
// saved, scores recomputed in backward).
#include "src/ops/flex_attention.h"

#include <Eigen/Core>
#include <cmath>
#include <limits>

#include "src/autograd/checkpoint.h"
#include "src/ops/autocast.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan {
using namespace detail;


// ---- masks ---------------------------------------------------------------------------
void MaskMod::fill(uint8_t* keep, int64_t ld, int64_t nq, int64_t nk, int64_t b, int64_t h, int64_t q0,
                   int64_t k0) const {
  if (!tile_) {
    for (int64_t i = 0; i < nq; ++i) std::fill(keep + i * ld, keep + i * ld + nk, (uint8_t)1);
    return;
  }
  tile_(keep, ld, nq, nk, b, h, q0, k0);
}

bool MaskMod::operator()(int64_t b, int64_t h, int64_t q, int64_t kv) const {
  uint8_t k = 1;
  fill(&k, 1, 1, 1, b, h, q, kv);
  return k != 0;
}

BlockKind MaskMod::classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
  if (!tile_) return BlockKind::Full;
  if (classify_) return classify_(b, h, q0, q1, k0, k1);
  std::vector<uint8_t> keep((size_t)((q1 - q0) * (k1 - k0)));
  fill(keep.data(), k1 - k0, q1 - q0, k1 - k0, b, h, q0, k0);
  size_t n = 0;
  for (uint8_t x : keep) n += x;
  return n == 0 ? BlockKind::Empty : n == keep.size() ? BlockKind::Full : BlockKind::Partial;
}

MaskMod causal_mask() {
  return MaskMod("causal", [](int64_t, int64_t, int64_t q, int64_t kv) { return kv <= q; }, false, false)
      .with_classifier([](int64_t, int64_t, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
        if (k0 > q1 - 1) return BlockKind::Empty;
        return k1 - 1 <= q0 ? BlockKind::Full : BlockKind::Partial;
      });
}

MaskMod sliding_window_mask(int64_t w) {
  TITAN_CHECK(w > 0, "sliding_window_mask: window must be > 0, got ", w);
  return MaskMod("sliding_window(" + std::to_string(w) + ")",
                 [w](int64_t, int64_t, int64_t q, int64_t kv) { return kv <= q && q - kv < w; }, false, false)
      .with_classifier([w](int64_t, int64_t, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
        // visible iff 0 <= q - kv < w; over the tile q - kv spans [q0 - (k1-1), (q1-1) - k0]
        const int64_t lo = q0 - (k1 - 1), hi = (q1 - 1) - k0;
        if (hi < 0 || lo >= w) return BlockKind::Empty;
        return lo >= 0 && hi < w ? BlockKind::Full : BlockKind::Partial;
      });
}

MaskMod chunked_causal_mask(int64_t chunk) {
  TITAN_CHECK(chunk > 0, "chunked_causal_mask: chunk size must be > 0, got ", chunk);
  return MaskMod("chunked(" + std::to_string(chunk) + ")",
                 [chunk](int64_t, int64_t, int64_t q, int64_t kv) { return kv <= q && kv / chunk == q / chunk; }, false,
                 false)
      .with_classifier([chunk](int64_t, int64_t, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
        if (k0 > q1 - 1) return BlockKind::Empty;  // every key after every query
        const int64_t c = q0 / chunk;
        if (k1 - 1 <= q0 && (q1 - 1) / chunk == c && k0 / chunk == c) return BlockKind::Full;  // one chunk, all causal
        // a query q sees [max(k0, its chunk's start), min(k1 - 1, q)]: the last query of each chunk sees the most
        // of it; the tile is empty when no chunk's last query in [q0, q1) sees a key
        for (int64_t cq = c; cq <= (q1 - 1) / chunk && cq * chunk <= k1 - 1; ++cq) {
          const int64_t q = std::min(q1 - 1, (cq + 1) * chunk - 1);
          if (std::max(k0, cq * chunk) <= std::min(k1 - 1, q)) return BlockKind::Partial;
        }
        return BlockKind::Empty;
      });
}

MaskMod prefix_lm_mask(int64_t prefix) {
  TITAN_CHECK(prefix >= 0, "prefix_lm_mask: prefix length must be >= 0, got ", prefix);
  return MaskMod("prefix_lm(" + std::to_string(prefix) + ")",
                 [prefix](int64_t, int64_t, int64_t q, int64_t kv) { return kv <= q || kv < prefix; }, false, false)
      .with_classifier([prefix](int64_t, int64_t, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
        if (k1 - 1 <= q0 || k1 <= prefix) return BlockKind::Full;  // all causal-visible, or all in the prefix
        if (k0 > q1 - 1 && k0 >= prefix) return BlockKind::Empty;
        return BlockKind::Partial;
      });
}

MaskMod document_causal_mask(const Tensor& doc_ids) {
  TITAN_CHECK(doc_ids.dim() == 2, "document_causal_mask: doc_ids must be [B, S], got ", shape_str(doc_ids.shape()));
  if (doc_ids.is_meta()) return causal_mask();  // no data to plan with: price the causal upper bound
  TITAN_CHECK(doc_ids.dtype() == DType::I64, "document_causal_mask: doc_ids must be int64, got ",
              dtype_name(doc_ids.dtype()));
  const int64_t S = doc_ids.size(1);
  auto ids = std::make_shared<std::vector<int64_t>>(doc_ids.to_vector<int64_t>());
  for (int64_t b = 0; b < doc_ids.size(0); ++b)
    for (int64_t i = 1; i < S; ++i)
      TITAN_CHECK((*ids)[b * S + i] >= (*ids)[b * S + i - 1], "document_causal_mask: doc_ids of batch row ", b,
                  " decrease at position ", i, " (", (*ids)[b * S + i - 1], " -> ", (*ids)[b * S + i],
                  "); expected the document index of each token, non-decreasing");
  const int64_t* d = ids->data();
  return MaskMod(
             "document_causal",
             [ids, d, S](int64_t b, int64_t, int64_t q, int64_t kv) { return kv <= q && d[b * S + q] == d[b * S + kv]; },
             true, false)
      .with_classifier([ids, d, S](int64_t b, int64_t, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
        if (k0 > q1 - 1) return BlockKind::Empty;
        const int64_t* r = d + b * S;  // non-decreasing: a tile's documents are [first, last]
        if (r[k1 - 1] < r[q0] || r[k0] > r[q1 - 1]) return BlockKind::Empty;
        const bool one_doc = r[q0] == r[q1 - 1] && r[k0] == r[k1 - 1] && r[q0] == r[k0];
        return one_doc && k1 - 1 <= q0 ? BlockKind::Full : BlockKind::Partial;
      });
}

MaskMod and_masks(const MaskMod& a, const MaskMod& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  MaskMod m;
  m.name_ = a.name_ + " & " + b.name_;
  m.per_batch_ = a.per_batch_ || b.per_batch_;
  m.per_head_ = a.per_head_ || b.per_head_;
  m.tile_ = [a, b](uint8_t* keep, int64_t ld, int64_t nq, int64_t nk, int64_t bb, int64_t h, int64_t q0, int64_t k0) {
    a.fill(keep, ld, nq, nk, bb, h, q0, k0);
    std::vector<uint8_t> other((size_t)(nq * ld));
    b.fill(other.data(), ld, nq, nk, bb, h, q0, k0);
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) keep[i * ld + j] &= other[i * ld + j];
  };
  if (a.classify_ && b.classify_) {
    m.classify_ = [a, b](int64_t bb, int64_t h, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
      const BlockKind x = a.classify(bb, h, q0, q1, k0, k1);
      if (x == BlockKind::Empty) return x;
      const BlockKind y = b.classify(bb, h, q0, q1, k0, k1);
      if (y == BlockKind::Empty) return y;
      return x == BlockKind::Full && y == BlockKind::Full ? BlockKind::Full : BlockKind::Partial;
    };
  }
  return m;
}

BlockMask create_block_mask(const MaskMod& mask, int64_t B, int64_t H, int64_t q_len, int64_t kv_len,
                            int64_t q_block, int64_t kv_block, int64_t q_offset, int64_t kv_offset) {
  TITAN_CHECK(B > 0 && H > 0 && q_len > 0 && kv_len > 0 && q_block > 0 && kv_block > 0,
              "create_block_mask: sizes must be positive, got B ", B, ", H ", H, ", q_len ", q_len, ", kv_len ", kv_len,
              ", blocks ", q_block, "x", kv_block);
  BlockMask m;
  m.B = mask.per_batch() ? B : 1;
  m.H = mask.per_head() ? H : 1;
  m.q_len = q_len;
  m.kv_len = kv_len;
  m.q_block = q_block;
  m.kv_block = kv_block;
  m.q_offset = q_offset;
  m.kv_offset = kv_offset;
  const int64_t nq = m.nq(), nk = m.nkv();
  m.kinds.assign((size_t)(m.B * m.H * nq * nk), BlockKind::Full);
  if (mask.has_classifier()) {
    // an exact classifier of a whole range: when it is all empty or all full, so is every tile of it
    bool uniform = true;
    std::vector<BlockKind> whole((size_t)(m.B * m.H));
    for (int64_t bh = 0; bh < m.B * m.H && uniform; ++bh) {
      whole[(size_t)bh] = mask.classify(bh / m.H, bh % m.H, q_offset, q_offset + q_len, kv_offset, kv_offset + kv_len);
      uniform = whole[(size_t)bh] != BlockKind::Partial;
    }
    if (uniform) {
      for (int64_t bh = 0; bh < m.B * m.H; ++bh)
        std::fill(m.kinds.begin() + bh * nq * nk, m.kinds.begin() + (bh + 1) * nq * nk, whole[(size_t)bh]);
      return m;
    }
  }
  TaskErrors errors;  // a user predicate may throw
  // small masks (a context-parallel block, a plan's many layers) classify on the calling thread: a parallel
  // region costs more than their few hundred O(1) classifications
  const bool parallel = m.B * m.H * nq * nk > 4096;
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t t = 0; t < m.B * m.H * nq; ++t) errors.run([&] {
    const int64_t bh = t / nq, qb = t % nq;
    for (int64_t kb = 0; kb < nk; ++kb)
      m.kinds[(size_t)(t * nk + kb)] =
          mask.classify(bh / m.H, bh % m.H, q_offset + qb * q_block, q_offset + std::min(q_len, (qb + 1) * q_block),
                        kv_offset + kb * kv_block, kv_offset + std::min(kv_len, (kb + 1) * kv_block));
  });
  errors.rethrow();
  return m;
}

double BlockMask::computed_pairs(int64_t b, int64_t h) const {
  // the (b, h) slice's tiles row by row: full tiles are q_block x kv_block, the last row / column's the rest
  const int64_t NQ = nq(), NK = nkv();
  const BlockKind* t = kinds.data() + (((B == 1 ? 0 : b) * H + (H == 1 ? 0 : h)) * NQ) * NK;
  const double last_k = (double)(kv_len - (NK - 1) * kv_block);
  double n = 0;
  for (int64_t qb = 0; qb < NQ; ++qb, t += NK) {
    int64_t full = 0;  // the row's non-empty tiles before the last column
    for (int64_t kb = 0; kb + 1 < NK; ++kb) full += t[kb] != BlockKind::Empty;
    const double cols = (double)full * (double)kv_block + (t[NK - 1] != BlockKind::Empty ? last_k : 0.0);
    n += cols * (double)(std::min(q_len, (qb + 1) * q_block) - qb * q_block);
  }
  return n;
}

double BlockMask::density() const {
  size_t n = 0;
  for (BlockKind k : kinds) n += k != BlockKind::Empty;
  return kinds.empty() ? 0.0 : (double)n / (double)kinds.size();
}

// ---- kernels -------------------------------------------------------------------------
namespace {
struct Dims {
  int64_t B, Sq, Skv, Hq, Hkv, D, group;
  int64_t Dv;  // v's and the output's head width (MLA: != D, q's and k's)
};

template <typename T>
using AlignedVec = std::vector<T, Eigen::aligned_allocator<T>>;  // Eigen's vectorized exp: alignment fixes rounding

// Row reductions in a fixed order that depends on n only (never on the address or the thread count), in
// kLanes independent partial results so the compiler vectorizes them: lane l takes elements l, l + kLanes, ...,
// and the lanes are combined pairwise.
constexpr int64_t kLanes = 16;
template <typename T, typename Op>
T lane_reduce(const T* row, int64_t n, T init, Op op) {
  T lane[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) lane[l] = init;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = op(lane[l], row[j + l]);
  for (int64_t l = 0; j + l < n; ++l) lane[l] = op(lane[l], row[j + l]);
  for (int64_t w = kLanes / 2; w >= 1; w /= 2)
    for (int64_t l = 0; l < w; ++l) lane[l] = op(lane[l], lane[l + w]);
  return lane[0];
}
template <typename T>
T row_max(const T* row, int64_t n, T init) {
  return lane_reduce(row, n, init, [](T a, T b) { return b > a ? b : a; });
}

// row[0..n) = exp(row - m) (masked -inf entries give 0); returns their sum (lane_reduce's order).
template <typename T>
T exp_rows(T* row, int64_t n, T m) {
  if constexpr (std::is_same_v<T, float>) {
    Eigen::Map<Eigen::ArrayXf> r(row, n);
    r = (r - m).exp();
  } else {
    for (int64_t j = 0; j < n; ++j) row[j] = std::exp(row[j] - m);
  }
  return lane_reduce(row, n, T(0), [](T a, T b) { return a + b; });
}

template <typename T>
std::vector<flex::CapturedTensor<T>> captured_views(const std::vector<Tensor>& caps) {
  std::vector<flex::CapturedTensor<T>> v;
  for (const Tensor& c : caps) v.push_back({c.data<T>(), c.shape()});
  return v;
}

struct Problem {
  const FlexOptions* opt;
  const BlockMask* bm;
  Dims d;
  double scale;
  std::vector<Tensor> caps;  // contiguous captured tensors
  bool bf16 = false;         // bf16 autocast: the tile GEMMs on bf16 operands (TileOperand)
};

// One operand of a tile GEMM: T's values, or under bf16 autocast its bits (PyTorch's CPU flash attention for bf16:
// q / k / v / dO and the probabilities P and dS read as bf16 by the GEMMs, float32 accumulation, softmax and its
// gradient in float32; oneDNN's bf16 kernel on the calling thread, gemm_bf16_tile).
template <typename T>
struct TileOperand {
  const T* values = nullptr;
  const uint16_t* bits = nullptr;
  // the operand `off` elements in
  TileOperand at(int64_t off) const { return bits ? TileOperand{nullptr, bits + off} : TileOperand{values + off}; }
};
// C = alpha op(A) op(B) + beta C, A / B with leading dimensions lda / ldb
template <typename T>
void tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, TileOperand<T> A, int64_t lda,
               TileOperand<T> B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    if (A.bits) return gemm_bf16_tile(ta, tb, M, N, K, alpha, A.bits, lda, B.bits, ldb, beta, C, ldc);
  gemm<T>(ta, tb, M, N, K, alpha, A.values, lda, B.values, ldb, beta, C, ldc);
}
// A whole tensor's data as tile operands: its values, or (bf16) its bits in `pack`.
template <typename T>
TileOperand<T> tile_operand(const Tensor& t, bool bf16, std::vector<uint16_t>& pack) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) {
      const int64_t row = t.dim() >= 2 ? t.size(t.dim() - 2) * t.size(t.dim() - 1) : t.numel();  // [.., H, D]
      pack = pack_bf16(t.data<float>(), t.numel() / std::max<int64_t>(1, row), row, row);
      return {nullptr, pack.data()};
    }
  return {t.data<T>(), nullptr};
}
// A tile's nq rows of nk float32 probabilities (row stride ld) as the next GEMM reads them: the values, or
// (bf16) their roundings in `bits` (same stride).
template <typename T>
TileOperand<T> tile_rows(const T* p, int64_t nq, int64_t nk, int64_t ld, bool bf16, std::vector<uint16_t>& bits) {
  if constexpr (std::is_same_v<T, float>)
    if (bf16) {
      for (int64_t i = 0; i < nq; ++i) float_to_bf16_bits(p + i * ld, bits.data() + i * ld, nk);
      return {nullptr, bits.data()};
    }
  return {p, nullptr};
}

// -> out [B, Sq, Hq, Dv], lse [B, Hq, Sq]
template <typename T>
void forward_kernel(const Problem& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                    Tensor& out, Tensor& lse) {
  const Dims& d = p.d;
  const BlockMask& bm = *p.bm;
  const ScoreMod& sm = p.opt->score_mod;
  const MaskMod& mm = p.opt->mask_mod;
  std::vector<uint16_t> qbits, kbits, vbits;
  const TileOperand<T> pq = tile_operand<T>(q, p.bf16, qbits), pk = tile_operand<T>(k, p.bf16, kbits),
                       pv = tile_operand<T>(v, p.bf16, vbits);
  const T* psink = sinks.defined() ? sinks.data<T>() : nullptr;
  T* po = out.data<T>();
  T* pl = lse.data<T>();
  const auto caps = captured_views<T>(p.caps);
  const int64_t QB = bm.q_block, KB = bm.kv_block, D = d.D, ldq = d.Hq * D, ldk = d.Hkv * D;
  const int64_t Dv = d.Dv, ldv = d.Hkv * Dv, ldo = d.Hq * Dv;
  const int64_t nqb = bm.nq(), nkb = bm.nkv(), qo = bm.q_offset, ko = bm.kv_offset;
  const T ninf = -std::numeric_limits<T>::infinity();
  TaskErrors errors;
#pragma omp parallel
  {
    AlignedVec<T> S((size_t)(QB * KB)), acc((size_t)(QB * Dv)), m(QB), l(QB);
    std::vector<uint8_t> keep((size_t)(QB * KB));
    std::vector<uint16_t> Pbits(p.bf16 ? (size_t)(QB * KB) : 0);
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < d.B * d.Hq * nqb; ++t) errors.run([&] {
      const int64_t b = t / (d.Hq * nqb), h = t / nqb % d.Hq, qb = t % nqb, g = h / d.group;
      const int64_t q0 = qb * QB, nq = std::min(QB, d.Sq - q0);
      const TileOperand<T> qh = pq.at((b * d.Sq + q0) * ldq + h * D);
      for (int64_t i = 0; i < nq; ++i) {
        m[i] = psink ? psink[h] : ninf;  // the sink starts every row: exp(sink - m) = 1
        l[i] = psink ? T(1) : T(0);
      }
      std::fill(acc.begin(), acc.begin() + nq * Dv, T(0));
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const BlockKind kind = bm.at(b, h, qb, kb);
        if (kind == BlockKind::Empty) continue;
        const int64_t k0 = kb * KB, nk = std::min(KB, d.Skv - k0);
        const TileOperand<T> kg = pk.at((b * d.Skv + k0) * ldk + g * D), vg = pv.at((b * d.Skv + k0) * ldv + g * Dv);
        tile_gemm<T>(false, true, nq, nk, D, T(p.scale), qh, ldq, kg, ldk, T(0), S.data(), KB);  // [nq, nk]
        const uint8_t* kp = nullptr;
        if (kind == BlockKind::Partial) {
          mm.fill(keep.data(), KB, nq, nk, b, h, qo + q0, ko + k0);
          kp = keep.data();
        }
        if (sm.defined()) sm.tile<T>().forward(S.data(), KB, nq, nk, b, h, qo + q0, ko + k0, kp, caps.data());
        for (int64_t i = 0; i < nq; ++i) {
          T* row = S.data() + i * KB;
          if (kp)
            for (int64_t j = 0; j < nk; ++j) row[j] = kp[i * KB + j] ? row[j] : ninf;
          const T mx = row_max(row, nk, m[i]);
          if (mx == ninf) {  // nothing visible in this row yet
            std::fill(row, row + nk, T(0));
            continue;
          }
          const T alpha = std::exp(m[i] - mx);
          const T sum = exp_rows(row, nk, mx);
          if (alpha != T(1)) {
            T* a = acc.data() + i * Dv;
            for (int64_t c = 0; c < Dv; ++c) a[c] *= alpha;
          }
          l[i] = l[i] * alpha + sum;
          m[i] = mx;
        }
        tile_gemm<T>(false, false, nq, Dv, nk, T(1), tile_rows(S.data(), nq, nk, KB, p.bf16, Pbits), KB, vg, ldv, T(1),
                     acc.data(), Dv);  // += P V
      }
      T* oh = po + (b * d.Sq + q0) * ldo + h * Dv;
      T* lh = pl + (b * d.Hq + h) * d.Sq + q0;
      for (int64_t i = 0; i < nq; ++i) {
        const T inv = l[i] > 0 ? T(1) / l[i] : T(0);
        for (int64_t c = 0; c < Dv; ++c) oh[i * ldo + c] = acc[i * Dv + c] * inv;
        lh[i] = l[i] > 0 ? m[i] + std::log(l[i]) : ninf;
      }
    });
  }
  errors.rethrow();
}

// Backward, two schedules with one tile computation:
//  - fused (FlashAttention-2): a task per (batch, KV head) owns dK/dV and the
//    dQ of that KV head's query heads; scores recomputed once;
//  - split, when there are fewer than kFusedTasks such tasks (MQA at batch 1)
//    and no score_mod: dK/dV by (batch, KV head, key tile), then dQ by
//    (batch, head, query tile), recomputing the scores twice to use every
//    thread (measured on 2 cores, MQA, S 8192: 10-17% faster; with a
//    score_mod the second evaluation of the mod ate the gain).
// The schedule depends on the problem only, never on the thread count, so
// results stay bit-identical on any number of threads.
constexpr int64_t kFusedTasks = 4;

// -> dq, dk, dv (written), dsinks [Hq], dcaps (one per captured tensor)
template <typename T>
void backward_kernel(const Problem& p, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& sinks, const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv,
                     Tensor& dsink, std::vector<Tensor>& dcaps) {
  const Dims& d = p.d;
  const BlockMask& bm = *p.bm;
  const ScoreMod& sm = p.opt->score_mod;
  const MaskMod& mm = p.opt->mask_mod;
  std::vector<uint16_t> qbits, kbits, vbits, dobits;
  const TileOperand<T> tq = tile_operand<T>(q, p.bf16, qbits), tk = tile_operand<T>(k, p.bf16, kbits),
                       tv = tile_operand<T>(v, p.bf16, vbits), tdo = tile_operand<T>(dout, p.bf16, dobits);
  const T* pO = out.data<T>();
  const T* pdO = dout.data<T>();
  const T* pl = lse.data<T>();
  const T* psink = sinks.defined() ? sinks.data<T>() : nullptr;
  T* pdq = dq.data<T>();
  T* pdk = dk.data<T>();
  T* pdv = dv.data<T>();
  const auto caps = captured_views<T>(p.caps);
  const int64_t QB = bm.q_block, KB = bm.kv_block, D = d.D, ldq = d.Hq * D, ldk = d.Hkv * D;
  const int64_t Dv = d.Dv, ldv = d.Hkv * Dv, ldo = d.Hq * Dv;
  const int64_t nqb = bm.nq(), nkb = bm.nkv(), qo = bm.q_offset, ko = bm.kv_offset;
  const bool fused = d.B * d.Hkv >= kFusedTasks || sm.defined();
  const int64_t tasks = fused ? d.B * d.Hkv : d.B * d.Hkv * nkb;  // the tasks that see every score once
  const T ninf = -std::numeric_limits<T>::infinity();
  // captured-tensor gradients: one buffer per task, summed in task order afterwards
  std::vector<int64_t> cap_off{0};
  for (const Tensor& c : p.caps) cap_off.push_back(cap_off.back() + c.numel());
  std::vector<double> cap_part(sm.defined() ? (size_t)(tasks * cap_off.back()) : 0, 0.0);
  std::vector<T> sink_part(psink ? (size_t)(d.B * d.Hq) : 0, T(0));
  AlignedVec<T> Di((size_t)(d.B * d.Hq * d.Sq));  // rowsum(dO * O) [B, Hq, Sq]
  TaskErrors errors;
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < d.B * d.Hq; ++bh) {
    const int64_t b = bh / d.Hq, h = bh % d.Hq;
    T* di = Di.data() + bh * d.Sq;
    for (int64_t i = 0; i < d.Sq; ++i) {
      const T* o = pO + (b * d.Sq + i) * ldo + h * Dv;
      const T* go = pdO + (b * d.Sq + i) * ldo + h * Dv;
      T acc = 0;
      if (tdo.bits) {  // dO as the GEMMs read it: its roundings
        const uint16_t* gb = tdo.bits + (b * d.Sq + i) * ldo + h * Dv;
        for (int64_t c = 0; c < Dv; ++c) acc += (T)bf16_bits_to_float(gb[c]) * o[c];
      } else {
        for (int64_t c = 0; c < Dv; ++c) acc += go[c] * o[c];
      }
      di[i] = acc;
    }
    if (psink) {
      T acc = 0;
      const T* lh = pl + bh * d.Sq;
      for (int64_t i = 0; i < d.Sq; ++i) acc -= std::exp(psink[h] - lh[i]) * di[i];
      sink_part[bh] = acc;
    }
  }
  struct Tile {
    AlignedVec<T> S, P, dP, dS;
    std::vector<uint8_t> keep;
    std::vector<uint16_t> Pbits, dSbits;  // bf16: P and dS as the GEMMs read them
    TileOperand<T> Pt, dSt;               // P and dS as the GEMMs read them
  };
  // P and dS (dL/d raw score) of one visible tile; captured-tensor gradients into cap_grad (null: skipped)
  auto tile_grads = [&](Tile& w, int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t k0, int64_t nk, BlockKind kind,
                        double* const* cap_grad) {
    const int64_t g = h / d.group;
    const TileOperand<T> qh = tq.at((b * d.Sq + q0) * ldq + h * D), doh = tdo.at((b * d.Sq + q0) * ldo + h * Dv);
    const TileOperand<T> kg = tk.at((b * d.Skv + k0) * ldk + g * D), vg = tv.at((b * d.Skv + k0) * ldv + g * Dv);
    const T* lh = pl + (b * d.Hq + h) * d.Sq + q0;
    const T* di = Di.data() + (b * d.Hq + h) * d.Sq + q0;
    tile_gemm<T>(false, true, nq, nk, D, T(p.scale), qh, ldq, kg, ldk, T(0), w.S.data(), KB);  // scores
    tile_gemm<T>(false, true, nq, nk, Dv, T(1), doh, ldo, vg, ldv, T(0), w.dP.data(), KB);     // dO V^T
    // P and dS as the GEMMs after this read them
    auto operands = [&] {
      w.Pt = tile_rows(w.P.data(), nq, nk, KB, p.bf16, w.Pbits);
      w.dSt = tile_rows(w.dS.data(), nq, nk, KB, p.bf16, w.dSbits);
    };
    const uint8_t* kp = nullptr;
    if (kind == BlockKind::Partial) {
      mm.fill(w.keep.data(), KB, nq, nk, b, h, qo + q0, ko + k0);
      kp = w.keep.data();
    }
    if (sm.defined()) {
      sm.tile<T>().backward(w.S.data(), w.P.data(), w.dS.data(), w.dP.data(), KB, nq, nk, b, h, qo + q0, ko + k0, kp,
                            lh, di, caps.data(), cap_grad);
      return operands();
    }
    for (int64_t i = 0; i < nq; ++i) {
      T* pr = w.P.data() + i * KB;
      T* ds = w.dS.data() + i * KB;
      const T* sr = w.S.data() + i * KB;
      const T* dr = w.dP.data() + i * KB;
      if (lh[i] == ninf) {  // a row that saw nothing
        std::fill(pr, pr + nk, T(0));
        std::fill(ds, ds + nk, T(0));
        continue;
      }
      std::copy(sr, sr + nk, pr);
      if (kp)
        for (int64_t j = 0; j < nk; ++j) pr[j] = kp[i * KB + j] ? pr[j] : ninf;
      exp_rows(pr, nk, lh[i]);
      for (int64_t j = 0; j < nk; ++j) ds[j] = pr[j] * (dr[j] - di[i]);
    }
    operands();
  };
  // dK/dV of key tile kb of KV head g over every query tile of its query heads (and their dQ when with_dq);
  // captured-tensor gradients into cg
  auto key_tile = [&](Tile& w, AlignedVec<T>& dKt, AlignedVec<T>& dVt, int64_t b, int64_t g, int64_t kb,
                      double* const* cg, bool with_dq) {
    const int64_t k0 = kb * KB, nk = std::min(KB, d.Skv - k0);
    const TileOperand<T> kg = tk.at((b * d.Skv + k0) * ldk + g * D);
    std::fill(dKt.begin(), dKt.begin() + nk * D, T(0));
    std::fill(dVt.begin(), dVt.begin() + nk * Dv, T(0));
    for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h)
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const BlockKind kind = bm.at(b, h, qb, kb);
        if (kind == BlockKind::Empty) continue;
        const int64_t q0 = qb * QB, nq = std::min(QB, d.Sq - q0);
        tile_grads(w, b, h, q0, nq, k0, nk, kind, cg);
        const TileOperand<T> qh = tq.at((b * d.Sq + q0) * ldq + h * D), doh = tdo.at((b * d.Sq + q0) * ldo + h * Dv);
        tile_gemm<T>(true, false, nk, Dv, nq, T(1), w.Pt, KB, doh, ldo, T(1), dVt.data(), Dv);  // dV += P^T dO
        if (with_dq)
          tile_gemm<T>(false, false, nq, D, nk, T(p.scale), w.dSt, KB, kg, ldk, T(1),
                       pdq + (b * d.Sq + q0) * ldq + h * D, ldq);                                  // dQ += dS K
        tile_gemm<T>(true, false, nk, D, nq, T(p.scale), w.dSt, KB, qh, ldq, T(1), dKt.data(), D);  // dK += dS^T Q
      }
    for (int64_t j = 0; j < nk; ++j) {
      std::copy(dKt.begin() + j * D, dKt.begin() + (j + 1) * D, pdk + (b * d.Skv + k0 + j) * ldk + g * D);
      std::copy(dVt.begin() + j * Dv, dVt.begin() + (j + 1) * Dv, pdv + (b * d.Skv + k0 + j) * ldv + g * Dv);
    }
  };
#pragma omp parallel
  {
    const size_t bits = p.bf16 ? (size_t)(QB * KB) : 0;
    Tile w{AlignedVec<T>((size_t)(QB * KB)), AlignedVec<T>((size_t)(QB * KB)), AlignedVec<T>((size_t)(QB * KB)),
           AlignedVec<T>((size_t)(QB * KB)), std::vector<uint8_t>((size_t)(QB * KB)), std::vector<uint16_t>(bits),
           std::vector<uint16_t>(bits), {}, {}};
    AlignedVec<T> dKt((size_t)(KB * D)), dVt((size_t)(KB * Dv));
    std::vector<double*> cap_grad(p.caps.size());
    auto task_caps = [&](int64_t t) {
      for (size_t c = 0; c < p.caps.size(); ++c) cap_grad[c] = cap_part.data() + t * cap_off.back() + cap_off[c];
      return cap_grad.data();
    };
    if (fused) {
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t) errors.run([&] {
        double* const* cg = task_caps(t);
        for (int64_t kb = 0; kb < nkb; ++kb) key_tile(w, dKt, dVt, t / d.Hkv, t % d.Hkv, kb, cg, true);
      });
    } else {
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; ++t) errors.run([&] {  // (b, g, kb): dK, dV and captured gradients
        key_tile(w, dKt, dVt, t / (d.Hkv * nkb), t / nkb % d.Hkv, t % nkb, task_caps(t), false);
      });
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < d.B * d.Hq * nqb; ++t) errors.run([&] {  // (b, h, qb): dQ, key tiles in order
        const int64_t b = t / (d.Hq * nqb), h = t / nqb % d.Hq, qb = t % nqb, g = h / d.group;
        const int64_t q0 = qb * QB, nq = std::min(QB, d.Sq - q0);
        for (int64_t kb = 0; kb < nkb; ++kb) {
          const BlockKind kind = bm.at(b, h, qb, kb);
          if (kind == BlockKind::Empty) continue;
          const int64_t k0 = kb * KB, nk = std::min(KB, d.Skv - k0);
          tile_grads(w, b, h, q0, nq, k0, nk, kind, nullptr);
          tile_gemm<T>(false, false, nq, D, nk, T(p.scale), w.dSt, KB, tk.at((b * d.Skv + k0) * ldk + g * D), ldk,
                       T(1), pdq + (b * d.Sq + q0) * ldq + h * D, ldq);  // dQ += dS K
        }
      });
    }
  }
  errors.rethrow();
  if (psink) {
    T* ps = dsink.data<T>();
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.Hq; ++h) ps[h] += sink_part[b * d.Hq + h];
  }
  for (size_t c = 0; c < p.caps.size(); ++c) {
    std::vector<double> sum((size_t)p.caps[c].numel(), 0.0);
    for (int64_t t = 0; t < tasks; ++t) {
      const double* part = cap_part.data() + t * cap_off.back() + cap_off[c];
      for (int64_t e = 0; e < p.caps[c].numel(); ++e) sum[e] += part[e];
    }
    T* g = dcaps[c].data<T>();
    for (int64_t e = 0; e < p.caps[c].numel(); ++e) g[e] = (T)sum[e];
  }
}

// The work the kernels do: pairs in the visible tiles, summed over (b, h).
double computed_pairs(const BlockMask& bm, const Dims& d) {
  double n = 0;
  for (int64_t b = 0; b < bm.B; ++b)
    for (int64_t h = 0; h < bm.H; ++h) n += bm.computed_pairs(b, h);
  return n * (double)(d.B / bm.B) * (double)(d.Hq / bm.H);
}

// Records (before the kernel runs, so a timed scope charges it to the attention
// record): the fused kernel's work, score_mod included; with a score_mod, also
// the score traffic an eager framework adds running it as separate kernels.
void record_costs(const Problem& p, const std::vector<const Tensor*>& io, bool backward) {
  const double pairs = computed_pairs(*p.bm, p.d);
  const double es = (double)dtype_size(io[0]->dtype());
  double bytes = 0;
  for (const Tensor* t : io) bytes += t->defined() ? (double)t->nbytes() : 0.0;
  const ScoreMod& sm = p.opt->score_mod;
  const double mod_flops = sm.defined() ? sm.flops_per_score() * (backward ? 3 : 1) : 0.0;  // bwd: value + derivatives
  if (sm.defined())
    record_cost(backward ? "flex_score_mod_backward" : "flex_score_mod", 0, pairs * es * (backward ? 3 : 2),
                KernelClass::EagerOnly);
  const double scores = (double)p.d.B * (double)p.d.Hq * (double)p.d.Sq * (double)p.d.Skv;  // [B, Hq, Sq, Skv]
  const AttentionShape shape{pairs, p.d.D, p.d.Dv, backward, scores, p.d.Sq, p.d.Skv};
  if (backward)
    // eager: the flash backward plus the dO*O row-sum preprocessing kernel
    record_attention_cost("flex_attention_backward", pairs * (6.0 * p.d.D + 4.0 * p.d.Dv + 6.0 + mod_flops), bytes,
                          shape, EagerSplit{2, 1.2});
  else
    record_attention_cost("flex_attention", pairs * (2.0 * p.d.D + 2.0 * p.d.Dv + 5.0 + mod_flops), bytes, shape);
}
}  // namespace

namespace {
// The checks every entry point makes, the problem's sizes and its block mask (opt's, or built into `built`).
Problem prepare(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& opt,
                BlockMask& built) {
  same_device(op, {&q, &k, &v, &opt.sinks});
  need_float(op, q);
  same_dtype(op, q, k);
  same_dtype(op, q, v);
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": expected q [B, Sq, Hq, D], k [B, Skv, Hkv, D], "
              "v [B, Skv, Hkv, Dv], got ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  Dims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), 0, v.size(3)};
  TITAN_CHECK(k.size(0) == d.B && k.size(3) == d.D && v.size(0) == d.B && v.size(1) == d.Skv && v.size(2) == d.Hkv &&
                  d.Dv > 0,
              op, ": k ", shape_str(k.shape()), " must be [", d.B, ", Skv, Hkv, ", d.D, "] for q ", shape_str(q.shape()),
              " and v ", shape_str(v.shape()), " [", d.B, ", Skv, Hkv, Dv] (Dv, v's head width, may differ from D: MLA)");
  TITAN_CHECK(d.Hkv > 0 && d.Hq % d.Hkv == 0, op, ": query heads ", d.Hq, " must be a multiple of key/value heads ",
              d.Hkv, " (q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ")");
  TITAN_CHECK(opt.q_offset >= 0 && opt.kv_offset >= 0, op, ": q_offset ", opt.q_offset, " and kv_offset ",
              opt.kv_offset, " must be >= 0 (global positions of the first rows)");
  d.group = d.Hq / d.Hkv;
  if (opt.sinks.defined()) {
    same_dtype(op, q, opt.sinks);
    TITAN_CHECK(opt.sinks.dim() == 1 && opt.sinks.size(0) == d.Hq, op, ": sinks must be [", d.Hq, "], got ",
                shape_str(opt.sinks.shape()));
  }
  for (size_t i = 0; i < opt.score_mod.captures().size(); ++i) {
    const Tensor& c = opt.score_mod.captures()[i];
    TITAN_CHECK(c.defined(), op, ": score_mod '", opt.score_mod.name(), "' capture ", i, " is undefined");
    same_device(op, {&q, &c});
    TITAN_CHECK(c.dtype() == q.dtype(), op, ": score_mod '", opt.score_mod.name(), "' capture ", i, " is ",
                dtype_name(c.dtype()), " ", shape_str(c.shape()), "; cast it to q's ", dtype_name(q.dtype()));
  }
  const BlockMask* bm = &opt.block_mask;
  if (!opt.block_mask.defined()) {
    built = create_block_mask(opt.mask_mod, d.B, d.Hq, d.Sq, d.Skv, 128, 128, opt.q_offset, opt.kv_offset);
    bm = &built;
  }
  TITAN_CHECK(bm->q_len == d.Sq && bm->kv_len == d.Skv && (bm->B == 1 || bm->B == d.B) && (bm->H == 1 || bm->H == d.Hq),
              op, ": block mask is for [B ", bm->B, ", H ", bm->H, ", ", bm->q_len, " x ", bm->kv_len,
              "], the inputs are [B ", d.B, ", H ", d.Hq, ", ", d.Sq, " x ", d.Skv,
              "]; build it with create_block_mask for these sizes");
  TITAN_CHECK(bm->q_offset == opt.q_offset && bm->kv_offset == opt.kv_offset, op, ": block mask is for offsets (",
              bm->q_offset, ", ", bm->kv_offset, "), the options say (", opt.q_offset, ", ", opt.kv_offset,
              "); build it with create_block_mask for these offsets");
  Problem p{&opt, bm, d, opt.scale > 0 ? opt.scale : 1.0 / std::sqrt((double)d.D), {}};
  for (const Tensor& c : opt.score_mod.captures()) p.caps.push_back(c.contiguous());
  return p;
}
}  // namespace

Tensor flex_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const FlexOptions& opt) {
  const char* op = "flex_attention";
  // bf16 autocast (PyTorch's CPU flash attention on bf16 tensors): q / k / v read as bf16, the tile GEMMs on bf16
  // operands (TileOperand), softmax and the sinks in float32, a bf16 output; a real run keeps q / k / v and the
  // output for the backward as bf16 packs (lossless: bf16 values)
  const bool bf16 = autocast_bf16(q_in);
  const bool pack = bf16 && !q_in.is_meta();
  const Tensor q = autocast_operand(q_in), k = autocast_operand(k_in), v = autocast_operand(v_in);
  BlockMask built;
  Problem p = prepare(op, q, k, v, opt, built);
  p.bf16 = bf16;
  const BlockMask* bm = p.bm;
  const Dims d = p.d;
  Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  Tensor sc = opt.sinks.defined() ? opt.sinks.contiguous() : Tensor();
  auto fwd = autograd::sac_forward(autograd::SacOp::Attention, [&] {
    Tensor out = empty({d.B, d.Sq, d.Hq, d.Dv}, q.dtype(), q.device());
    Tensor lse = empty({d.B, d.Hq, d.Sq}, q.dtype(), q.device());
    record_costs(p, {&qc, &kc, &vc, &out, &lse}, false);
    if (!q.is_meta()) {
      dispatch_float(q.dtype(), op, [&]<typename T>() { forward_kernel<T>(p, qc, kc, vc, sc, out, lse); });
    }
    return std::vector<Tensor>{out, lse};
  });
  Tensor out = fwd[0], lse = fwd[1];
  if (pack) round_to_bf16_(out);  // the op's own fresh result (or selective checkpointing's kept one: idempotent)
  auto keep = [pack](const Tensor& t) { return pack ? bf16_pack(t) : saved(t); };
  std::vector<Tensor> inputs = {qc, kc, vc};
  if (sc.defined()) inputs.push_back(sc);
  for (const Tensor& c : opt.score_mod.captures()) inputs.push_back(c);
  // the backward keeps the options (score_mod and mask callables, captured data) and the block mask
  auto keep_opt = std::make_shared<FlexOptions>(opt);
  keep_opt->block_mask = *bm;
  for (Tensor& c : p.caps) c = saved(c);
  return record("flex_attention", inputs, out,
                [qp = keep(qc), kp = keep(kc), vp = keep(vc), sks = saved(sc), op = keep(out), ls = saved(lse),
                 keep_opt, d, scale = p.scale, caps = p.caps, bf16](const std::vector<Tensor>& g) {
                  const Tensor qs = unpack_bf16(qp), ks = unpack_bf16(kp), vs = unpack_bf16(vp), os = unpack_bf16(op);
                  Problem bp{keep_opt.get(), &keep_opt->block_mask, d, scale, caps, bf16};
                  Tensor go = g[0].contiguous();
                  Tensor dq = zeros(qs.shape(), qs.dtype(), qs.device());
                  Tensor dk = empty(ks.shape(), ks.dtype(), ks.device());
                  Tensor dv = empty(vs.shape(), vs.dtype(), vs.device());
                  Tensor dsink = sks.defined() ? zeros(sks.shape(), sks.dtype(), sks.device()) : Tensor();
                  std::vector<Tensor> dcaps;
                  for (const Tensor& c : caps) dcaps.push_back(zeros(c.shape(), c.dtype(), c.device()));
                  record_costs(bp, {&go, &qs, &ks, &vs, &os, &ls, &dq, &dk, &dv}, true);
                  if (!qs.is_meta()) {
                    dispatch_float(qs.dtype(), "flex_attention_backward", [&]<typename T>() {
                      backward_kernel<T>(bp, go, qs, ks, vs, sks, os, ls, dq, dk, dv, dsink, dcaps);
                    });
                  }
                  std::vector<Tensor> r = {dq, dk, dv};
                  if (sks.defined()) r.push_back(dsink);
                  for (Tensor& c : dcaps) r.push_back(c);
                  return r;
                });
}

namespace flex {
BlockOut attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& opt,
                                 bool bf16) {
  const char* op = "attention_block_forward";
  BlockMask built;
  Problem p = prepare(op, q, k, v, opt, built);
  p.bf16 = bf16 && q.dtype() == DType::F32;
  const Dims& d = p.d;
  Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  Tensor sc = opt.sinks.defined() ? opt.sinks.contiguous() : Tensor();
  BlockOut r{empty({d.B, d.Sq, d.Hq, d.Dv}, q.dtype(), q.device()), empty({d.B, d.Hq, d.Sq}, q.dtype(), q.device())};
  record_costs(p, {&qc, &kc, &vc, &r.out, &r.lse}, false);
  if (!q.is_meta())
    dispatch_float(q.dtype(), op, [&]<typename T>() { forward_kernel<T>(p, qc, kc, vc, sc, r.out, r.lse); });
  return r;
}

BlockGrads attention_block_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const FlexOptions& opt, const Tensor& out, const Tensor& lse, Tensor& dq,
                                    Tensor& dsinks, std::vector<Tensor>& dcaps, bool bf16) {
  const char* op = "attention_block_backward";
  BlockMask built;
  Problem p = prepare(op, q, k, v, opt, built);
  p.bf16 = bf16 && q.dtype() == DType::F32;
  const Dims& d = p.d;
  const Shape out_shape{d.B, d.Sq, d.Hq, d.Dv};
  TITAN_CHECK(dout.shape() == out_shape && out.shape() == out_shape && lse.shape() == (Shape{d.B, d.Hq, d.Sq}), op,
              ": dout ", shape_str(dout.shape()), " and out ", shape_str(out.shape()), " must be ",
              shape_str(out_shape), ", lse ", shape_str(lse.shape()), " [", d.B, ", ", d.Hq, ", ", d.Sq, "]");
  Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), go = dout.contiguous();
  Tensor oc = out.contiguous(), lc = lse.contiguous();
  Tensor sc = opt.sinks.defined() ? opt.sinks.contiguous() : Tensor();
  if (!dq.defined()) dq = zeros(q.shape(), q.dtype(), q.device());
  TITAN_CHECK(dq.shape() == q.shape() && dq.is_contiguous(), op, ": dq must be a contiguous ", shape_str(q.shape()));
  if (sc.defined() && !dsinks.defined()) dsinks = zeros(sc.shape(), sc.dtype(), sc.device());
  if (dcaps.empty())
    for (const Tensor& c : p.caps) dcaps.push_back(zeros(c.shape(), c.dtype(), c.device()));
  TITAN_CHECK(dcaps.size() == p.caps.size(), op, ": ", dcaps.size(), " captured-gradient tensors for ", p.caps.size(),
              " captures");
  BlockGrads g{empty(k.shape(), k.dtype(), k.device()), empty(v.shape(), v.dtype(), v.device())};
  std::vector<Tensor> part;  // this block's captured gradients, then added
  for (const Tensor& c : p.caps) part.push_back(zeros(c.shape(), c.dtype(), c.device()));
  record_costs(p, {&go, &qc, &kc, &vc, &oc, &lc, &dq, &g.dk, &g.dv}, true);
  if (!q.is_meta()) {
    Tensor ds = sc.defined() ? dsinks : Tensor();
    dispatch_float(q.dtype(), op, [&]<typename T>() {
      backward_kernel<T>(p, go, qc, kc, vc, sc, oc, lc, dq, g.dk, g.dv, ds, part);
      for (size_t c = 0; c < part.size(); ++c) {
        T* acc = dcaps[c].data<T>();
        const T* x = part[c].data<T>();
        for (int64_t e = 0; e < part[c].numel(); ++e) acc[e] += x[e];
      }
    });
  }
  return g;
}
}  // namespace flex

}  // namespace titan
