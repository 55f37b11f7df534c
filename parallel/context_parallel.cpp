#include "parallel/context_parallel.h"

#include <cmath>
#include <limits>

#include "comms/functional.h"
#include "src/autograd/checkpoint.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/autocast.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"

namespace titan::parallel {

namespace {
// One block of the attention: this rank's query chunk `qa` (0 or 1) against chunk `kb` of a rank's keys (the
// ring step it belongs to says which rank).
struct Piece {
  int64_t qa, kb;
  FlexOptions opt;  // offsets, the block mask of the two chunks, sinks on the diagonal block only
};

// Whether the mask leaves the whole block [q0, q0 + c) x [k0, k0 + c) empty (one classification per batch row
// and head it depends on: O(1) for the built-in masks).
bool block_empty(const MaskMod& m, int64_t B, int64_t H, int64_t q0, int64_t k0, int64_t c) {
  for (int64_t b = 0; b < (m.per_batch() ? B : 1); ++b)
    for (int64_t h = 0; h < (m.per_head() ? H : 1); ++h)
      if (m.classify(b, h, q0, q0 + c, k0, k0 + c) != BlockKind::Empty) return false;
  return true;
}

// The pieces of the attention in the order they are computed (ring order: step t holds rank (r - t) mod cp's
// keys), both local query chunks against each key chunk; blocks the mask leaves empty are dropped (the
// diagonal block, which carries the sinks, is always kept). Built once per call, kept for the backward.
std::vector<std::vector<Piece>> plan_pieces(const FlexOptions& base, const nn::SequenceShard& me, int64_t B, int64_t Hq,
                                            int64_t c) {
  std::vector<std::vector<Piece>> by_step((size_t)me.parts);
  for (int64_t t = 0; t < me.parts; ++t) {
    const int64_t src = (me.index - t + me.parts) % me.parts;
    const nn::SequenceShard other{me.parts, src, nullptr};
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t kb = 0; kb < 2; ++kb) {
        const bool diagonal = src == me.index && kb == a;
        const int64_t qo = me.chunk(a) * c, ko = other.chunk(kb) * c;
        if (!diagonal && base.mask_mod.defined() && block_empty(base.mask_mod, B, Hq, qo, ko, c)) continue;
        Piece p{a, kb, base};
        p.opt.q_offset = qo;
        p.opt.kv_offset = ko;
        p.opt.block_mask = create_block_mask(base.mask_mod, B, Hq, c, c, 128, 128, qo, ko);
        if (!diagonal) p.opt.sinks = Tensor();
        by_step[(size_t)t].push_back(std::move(p));
      }
  }
  return by_step;
}

Tensor chunk_of(const Tensor& x, int64_t a, int64_t c) { return x.slice(1, a * c, (a + 1) * c).contiguous(); }

// acc = the softmax over both key sets of (acc, acc_lse) and (o, lse): acc [B, c, H, D], acc_lse [B, H, c].
template <typename T>
void merge_block(Tensor& acc, Tensor& acc_lse, const Tensor& o, const Tensor& lse) {
  const int64_t B = acc.size(0), S = acc.size(1), H = acc.size(2), D = acc.size(3);
  T* pa = acc.data<T>();
  T* pl = acc_lse.data<T>();
  const T* po = o.data<T>();
  const T* ql = lse.data<T>();
  const T ninf = -std::numeric_limits<T>::infinity();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t li = (b * H + h) * S + i;
        const T l2 = ql[li];
        if (l2 == ninf) continue;  // the block showed this row nothing
        T* ra = pa + ((b * S + i) * H + h) * D;
        const T* ro = po + ((b * S + i) * H + h) * D;
        const T l1 = pl[li];
        if (l1 == ninf) {
          std::copy(ro, ro + D, ra);
          pl[li] = l2;
          continue;
        }
        const T m = std::max(l1, l2), w1 = std::exp(l1 - m), w2 = std::exp(l2 - m), s = w1 + w2;
        for (int64_t d = 0; d < D; ++d) ra[d] = (ra[d] * w1 + ro[d] * w2) / s;
        pl[li] = m + std::log(s);
      }
}

void merge(Tensor& acc, Tensor& acc_lse, const flex::BlockOut& blk) {
  record_cost("cp_attention_merge", 6.0 * (double)acc.numel(), 3.0 * (double)acc.nbytes());
  if (acc.is_meta()) return;
  if (acc.dtype() == DType::F64) merge_block<double>(acc, acc_lse, blk.out, blk.lse);
  else merge_block<float>(acc, acc_lse, blk.out, blk.lse);
}

// dst[:, at:at+n] += src ([B, n, H, D] into [B, N, H, D]), in place.
template <typename T>
void add_rows(Tensor& dst, int64_t at, const Tensor& src) {
  const int64_t B = src.size(0), n = src.size(1), row = src.size(2) * src.size(3), N = dst.size(1);
  T* pd = dst.data<T>();
  const T* ps = src.data<T>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < n * row; ++e) pd[(b * N + at) * row + e] += ps[b * n * row + e];
}
void add_into(Tensor& dst, int64_t at, const Tensor& src) {
  if (dst.is_meta()) return;
  if (dst.dtype() == DType::F64) add_rows<double>(dst, at, src);
  else add_rows<float>(dst, at, src);
}

// Group rank of the ring's previous / next member.
int prev_of(const comms::PG& g) { return (g->rank() + g->size() - 1) % g->size(); }
int next_of(const comms::PG& g) { return (g->rank() + 1) % g->size(); }
enum Tag { kK = 0, kV = 1, kDK = 2, kDV = 3 };

// The blocks in ring order: step t holds rank (r - t) mod cp's keys (both methods, so their forwards agree bit
// for bit).
int64_t ring_src(int64_t r, int64_t t, int64_t cp) { return (r - t + cp) % cp; }
}  // namespace

Tensor context_parallel_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const FlexOptions& opt,
                                  const nn::SequenceShard& shard, const comms::PG& cp, const comms::PG& cp_p2p,
                                  RotateMethod method) {
  const char* op = "context_parallel_attention";
  // bf16 autocast as flex_attention's: q / k / v read as bf16, the tiles' GEMMs on bf16 operands, float32
  // softmax and accumulation, a bf16 output; packs kept
  const bool bf16 = autocast_bf16(q_in), pack = bf16 && !q_in.is_meta();
  // k / v (bf16 values under autocast) and the all-gather method's dK / dV reductions travel in the compute dtype
  // (comms/functional.h); the ring's dK / dV accumulators stay float32, as PyTorch's ring attention keeps them
  const DType wire = comms::wire_dtype(q_in.dtype());
  const Tensor q = autocast_operand(q_in), k = autocast_operand(k_in), v = autocast_operand(v_in);
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(0) == k.size(0) && q.size(1) == k.size(1) &&
                  q.size(3) == k.size(3) && v.size(0) == k.size(0) && v.size(1) == k.size(1) && v.size(2) == k.size(2),
              op, ": expected q [B, S_local, Hq, D], k [B, S_local, Hkv, D], v [B, S_local, Hkv, Dv], got ",
              shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  TITAN_CHECK(cp->size() == shard.parts && cp->rank() == shard.index, op, ": the sequence shard (rank ", shard.index,
              " of ", shard.parts, ") is not this rank of the cp group (", cp->rank(), " of ", cp->size(), ")");
  TITAN_CHECK(!opt.block_mask.defined() && opt.q_offset == 0 && opt.kv_offset == 0, op,
              ": context parallel builds the block masks of its chunks from the mask_mod; pass a mask_mod, no "
              "block mask or offsets");
  TITAN_CHECK(q.size(1) % 2 == 0, op, ": a rank holds two equal chunks, got ", q.size(1), " tokens");
  const int64_t B = q.size(0), c = q.size(1) / 2, Hq = q.size(2), n = shard.parts, r = shard.index;
  Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const Tensor q_chunks[2] = {chunk_of(qc, 0, c), chunk_of(qc, 1, c)};
  const Shape block = kc.shape(), vblock = vc.shape();  // [B, 2c, Hkv, D], [B, 2c, Hkv, Dv]
  Shape out_chunk = q_chunks[0].shape();
  out_chunk[3] = vc.size(3);  // [B, c, Hq, Dv]

  // ---- forward: the blocks in ring order, each merged into its query chunk's running result
  auto pieces = std::make_shared<std::vector<std::vector<Piece>>>(plan_pieces(opt, shard, B, Hq, c));
  auto fwd = autograd::sac_forward(autograd::SacOp::Attention, [&] {
    NoGradGuard ng;
    Tensor acc[2], acc_lse[2];
    for (int64_t a = 0; a < 2; ++a) {
      acc[a] = zeros(out_chunk, q.dtype(), q.device());
      acc_lse[a] = full({B, Hq, c}, -std::numeric_limits<double>::infinity(), q.dtype(), q.device());
    }
    auto attend_block = [&](int64_t src, const Tensor& kb, const Tensor& vb) {
      for (const Piece& p : (*pieces)[(size_t)((r - src + n) % n)])
        merge(acc[p.qa], acc_lse[p.qa],
              flex::attention_block_forward(q_chunks[p.qa], chunk_of(kb, p.kb, c), chunk_of(vb, p.kb, c), p.opt,
                                            bf16));
    };
    if (method == RotateMethod::AllGather) {
      auto [kg, wk] = cp->all_gather_async(kc, 1, {}, wire);  // [B, 2c cp, Hkv, D] in rank order
      auto [vg, wv] = cp->all_gather_async(vc, 1, {}, wire);
      attend_block(r, kc, vc);  // overlaps the gather
      wk.wait();
      wv.wait();
      for (int64_t t = 1; t < n; ++t) {
        const int64_t s = ring_src(r, t, n);
        attend_block(s, kg.slice(1, 2 * c * s, 2 * c * (s + 1)), vg.slice(1, 2 * c * s, 2 * c * (s + 1)));
      }
    } else {
      Tensor kb = kc, vb = vc;
      for (int64_t t = 0; t < n; ++t) {
        Tensor kn, vn;
        std::vector<comms::Work> w;
        if (t + 1 < n) {  // the next block travels while this one is attended (sends posted first: a plan
          comms::Work a, b;  // prices a neighbour it does not play as this rank)
          w = {cp_p2p->isend(kb, next_of(cp_p2p), kK, wire), cp_p2p->isend(vb, next_of(cp_p2p), kV, wire)};
          std::tie(kn, a) = cp_p2p->irecv(block, q.dtype(), prev_of(cp_p2p), kK, wire);
          std::tie(vn, b) = cp_p2p->irecv(vblock, q.dtype(), prev_of(cp_p2p), kV, wire);
          w.push_back(a);
          w.push_back(b);
        }
        attend_block(ring_src(r, t, n), kb, vb);
        for (auto& x : w) x.wait();
        kb = kn;
        vb = vn;
      }
    }
    return std::vector<Tensor>{concat({acc[0], acc[1]}, 1), concat({acc_lse[0], acc_lse[1]}, 2)};
  });
  Tensor out = fwd[0], lse = fwd[1];  // [B, 2c, Hq, Dv], [B, Hq, 2c]
  if (pack) round_to_bf16_(out);
  auto keep = [pack](const Tensor& t) { return pack ? bf16_pack(t) : autograd::saved(t); };

  std::vector<Tensor> inputs = {qc, kc, vc};
  const bool has_sinks = opt.sinks.defined();
  if (has_sinks) inputs.push_back(opt.sinks);
  for (const Tensor& cap : opt.score_mod.captures()) inputs.push_back(cap);
  auto base = std::make_shared<FlexOptions>(opt);  // the callables and captured data, for the backward
  return autograd::record(
      "context_parallel_attention", inputs, out,
      [qp = keep(qc), kp = keep(kc), vp = keep(vc), op = keep(out), ls = autograd::saved(lse), base, pieces, cp,
       cp_p2p, method, has_sinks, c, n, r, block, vblock, wire, bf16](const std::vector<Tensor>& g) {
        NoGradGuard ng;
        const Tensor qs = unpack_bf16(qp), ks = unpack_bf16(kp), vs = unpack_bf16(vp), os = unpack_bf16(op);
        Tensor go = g[0].contiguous();
        Tensor qch[2], och[2], goch[2], lch[2], dq[2];
        for (int64_t a = 0; a < 2; ++a) {
          qch[a] = chunk_of(qs, a, c);
          och[a] = chunk_of(os, a, c);
          goch[a] = chunk_of(go, a, c);
          lch[a] = ls.slice(2, a * c, (a + 1) * c).contiguous();
          dq[a] = zeros(qch[a].shape(), qs.dtype(), qs.device());
        }
        Tensor dsinks;
        std::vector<Tensor> dcaps;
        // block `src`'s share of dK / dV ([B, 2c, Hkv, D] each), dQ, dsinks and dcaps added
        auto block_grads = [&](int64_t src, const Tensor& kb, const Tensor& vb) {
          Tensor dk = zeros(block, qs.dtype(), qs.device()), dv = zeros(vblock, qs.dtype(), qs.device());
          for (const Piece& p : (*pieces)[(size_t)((r - src + n) % n)]) {
            flex::BlockGrads bg = flex::attention_block_backward(goch[p.qa], qch[p.qa], chunk_of(kb, p.kb, c),
                                                                 chunk_of(vb, p.kb, c), p.opt, och[p.qa], lch[p.qa],
                                                                 dq[p.qa], dsinks, dcaps, bf16);
            add_into(dk, p.kb * c, bg.dk);
            add_into(dv, p.kb * c, bg.dv);
          }
          return std::make_pair(dk, dv);
        };
        Tensor dk_mine, dv_mine;
        if (method == RotateMethod::AllGather) {
          auto [kg, wk] = cp->all_gather_async(ks, 1, {}, wire);  // again: the forward kept only this rank's block
          auto [vg, wv] = cp->all_gather_async(vs, 1, {}, wire);
          Shape all = block, vall = vblock;
          all[1] *= n;
          vall[1] *= n;
          Tensor dk_all = zeros(all, qs.dtype(), qs.device()), dv_all = zeros(vall, qs.dtype(), qs.device());
          auto put = [&](int64_t s, const std::pair<Tensor, Tensor>& d) {
            add_into(dk_all, 2 * c * s, d.first);
            add_into(dv_all, 2 * c * s, d.second);
          };
          put(r, block_grads(r, ks, vs));  // overlaps the gather
          wk.wait();
          wv.wait();
          for (int64_t t = 1; t < n; ++t) {
            const int64_t s = ring_src(r, t, n);
            put(s, block_grads(s, kg.slice(1, 2 * c * s, 2 * c * (s + 1)), vg.slice(1, 2 * c * s, 2 * c * (s + 1))));
          }
          dk_mine = cp->reduce_scatter(dk_all, 1, comms::ReduceOp::Sum, {}, wire);  // every rank's share, summed
          dv_mine = cp->reduce_scatter(dv_all, 1, comms::ReduceOp::Sum, {}, wire);
        } else {
          // K/V around the ring again, each block's dK/dV accumulator one step behind it; after n steps the
          // accumulator of every block (its owner's share first, then the ring's order) is home
          Tensor kb = ks, vb = vs;
          std::vector<comms::Work> pending;  // accumulator sends, and the tensors they read
          std::vector<Tensor> keep;
          for (int64_t t = 0; t < n; ++t) {
            Tensor kn, vn, dk_in, dv_in;
            std::vector<comms::Work> w;
            if (t + 1 < n) {
              comms::Work a, b;
              w = {cp_p2p->isend(kb, next_of(cp_p2p), kK, wire), cp_p2p->isend(vb, next_of(cp_p2p), kV, wire)};
              std::tie(kn, a) = cp_p2p->irecv(block, qs.dtype(), prev_of(cp_p2p), kK, wire);
              std::tie(vn, b) = cp_p2p->irecv(vblock, qs.dtype(), prev_of(cp_p2p), kV, wire);
              w.push_back(a);
              w.push_back(b);
            }
            comms::Work wdk, wdv;
            if (t > 0) {
              std::tie(dk_in, wdk) = cp_p2p->irecv(block, qs.dtype(), prev_of(cp_p2p), kDK);
              std::tie(dv_in, wdv) = cp_p2p->irecv(vblock, qs.dtype(), prev_of(cp_p2p), kDV);
            }
            auto [dk, dv] = block_grads(ring_src(r, t, n), kb, vb);
            if (t > 0) {
              wdk.wait();
              wdv.wait();
              dk = add(dk_in, dk);  // the earlier ranks' shares first
              dv = add(dv_in, dv);
            }
            pending.push_back(cp_p2p->isend(dk, next_of(cp_p2p), kDK));
            pending.push_back(cp_p2p->isend(dv, next_of(cp_p2p), kDV));
            keep.push_back(dk);
            keep.push_back(dv);
            for (auto& x : w) x.wait();
            kb = kn;
            vb = vn;
          }
          auto [dk_home, wa] = cp_p2p->irecv(block, qs.dtype(), prev_of(cp_p2p), kDK);
          auto [dv_home, wb] = cp_p2p->irecv(vblock, qs.dtype(), prev_of(cp_p2p), kDV);
          wa.wait();
          wb.wait();
          for (auto& x : pending) x.wait();
          dk_mine = dk_home;
          dv_mine = dv_home;
        }
        std::vector<Tensor> grads = {concat({dq[0], dq[1]}, 1), dk_mine, dv_mine};
        if (has_sinks) grads.push_back(dsinks.defined() ? dsinks : zeros(base->sinks.shape(), qs.dtype(), qs.device()));
        for (size_t i = 0; i < base->score_mod.captures().size(); ++i) {
          const Tensor& cap = base->score_mod.captures()[i];
          grads.push_back(i < dcaps.size() ? dcaps[i] : zeros(cap.shape(), cap.dtype(), cap.device()));
        }
        return grads;
      });
}

void apply_context_parallel(decoder::Decoder& model, comms::DeviceMesh& mesh, RotateMethod method) {
  TITAN_CHECK(mesh.cp->size() > 1, "apply_context_parallel: the mesh has no cp dimension");
  nn::SequenceShard s{mesh.cp->size(), mesh.cp->rank(), nullptr};
  s.attend = [s, cp = mesh.cp, p2p = mesh.cp_p2p, method](const Tensor& q, const Tensor& k, const Tensor& v,
                                                          const FlexOptions& opt) {
    return context_parallel_attention(q, k, v, opt, s, cp, p2p, method);
  };
  model.sequence_shard = s;
}

Batch shard_batch(const Batch& b, const nn::SequenceShard& shard) {
  if (!shard.sharded()) return b;
  const int64_t S = b.inputs.size(1), parts = 2 * shard.parts;
  TITAN_CHECK(S % parts == 0, "context parallel: the sequence (", S, " tokens) does not split into 2 x cp = ", parts,
              " equal chunks");
  const int64_t c = S / parts;
  auto cols = [&](const Tensor& t) {
    NoGradGuard ng;
    return concat({t.slice(1, shard.chunk(0) * c, (shard.chunk(0) + 1) * c),
                   t.slice(1, shard.chunk(1) * c, (shard.chunk(1) + 1) * c)},
                  1);
  };
  return Batch{cols(b.inputs), cols(b.targets), b.doc_ids};
}

}  // namespace titan::parallel
