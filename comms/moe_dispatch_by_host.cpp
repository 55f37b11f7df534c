// comms/moe_dispatch_by_host.cpp — the hierarchical dispatch and its combine (comms/moe_dispatch.h): a token
// crosses to each host holding any of its experts once, is forwarded within that host once per rank holding any,
// and becomes (token, expert) rows only there; combine sums back along the same path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <tuple>

#include "comms/moe_dispatch.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

namespace titan::comms {

using detail::index_tensor;

namespace {

// x's rows over g (differentiable); a group of one keeps them
Tensor exchange(const Tensor& x, const std::vector<int64_t>& send, const std::vector<int64_t>& recv, const PG& g,
                bool float32_wire = false) {
  return g->size() == 1 ? x : all_to_all_v_op(x, send, recv, g, float32_wire);
}

// Rows and the (token, expert) pairs each carries, CSR: row i's pairs are pairs [start[i], start[i + 1]), pair q
// of expert expert[q]; pair q's weight is row q of the weights that travel with the rows.
struct Routed {
  std::vector<int64_t> start{0}, expert;
  int64_t rows() const { return (int64_t)start.size() - 1; }
};

// What one exchange sends: to each peer d, in row order, every row with a pair whose dest(expert) is d, with
// just those pairs. `ints` is the routing each peer needs: per row its pair count, then its pairs' experts.
struct Sends {
  std::vector<int64_t> rows, pairs, ints;   // per peer
  std::vector<int64_t> row_ids, pair_ids;   // the rows and pairs sent, in send order
  std::vector<int64_t> stream;              // the ints, in send order
};
template <class Dest>
Sends plan_sends(const Routed& r, int64_t peers, Dest dest) {
  Sends s;
  s.rows.assign(peers, 0), s.pairs.assign(peers, 0), s.ints.assign(peers, 0);
  for (int64_t d = 0; d < peers; ++d)
    for (int64_t i = 0; i < r.rows(); ++i) {
      int64_t n = 0;
      for (int64_t q = r.start[i]; q < r.start[i + 1]; ++q) n += dest(r.expert[q]) == d;
      if (n == 0) continue;
      s.row_ids.push_back(i);
      s.stream.push_back(n);
      for (int64_t q = r.start[i]; q < r.start[i + 1]; ++q)
        if (dest(r.expert[q]) == d) s.pair_ids.push_back(q), s.stream.push_back(r.expert[q]);
      ++s.rows[d], s.pairs[d] += n, s.ints[d] += 1 + n;
    }
  return s;
}

// The routing received: `stream` from each source (ints[s] ints each) -> rows and pairs per source.
Routed parse(const std::vector<int64_t>& stream, const std::vector<int64_t>& ints, std::vector<int64_t>& rows,
             std::vector<int64_t>& pairs, const char* stage) {
  Routed r;
  rows.assign(ints.size(), 0), pairs.assign(ints.size(), 0);
  size_t at = 0;
  for (size_t s = 0; s < ints.size(); ++s) {
    const size_t end = at + (size_t)ints[s];
    TITAN_CHECK(end <= stream.size(), "dispatch_by_host: ", stage, " routing from peer ", s, " overruns");
    while (at < end) {
      const int64_t n = stream[at++];
      TITAN_CHECK(n >= 1 && at + (size_t)n <= end, "dispatch_by_host: ", stage, " routing from peer ", s,
                  " is malformed (a row of ", n, " pairs)");
      for (int64_t j = 0; j < n; ++j) r.expert.push_back(stream[at++]);
      r.start.push_back((int64_t)r.expert.size());
      ++rows[s], pairs[s] += n;
    }
  }
  return r;
}

// The routing ints over g: what each peer receives of `s.stream` (ints counts learned from the peers).
Routed exchange_routing(const Sends& s, const PG& g, std::vector<int64_t>& rows, std::vector<int64_t>& pairs,
                        const char* stage) {
  std::vector<int64_t> got;
  std::vector<int64_t> stream = s.stream;
  if (g->size() > 1) {
    Tensor in = from_vector<int64_t>(s.stream, {(int64_t)s.stream.size()});
    stream = g->all_to_all_v(in, s.ints, &got).to_vector<int64_t>();
  } else {
    got = s.ints;
  }
  return parse(stream, got, rows, pairs, stage);
}

// ---- planned (meta) routing -------------------------------------------------------------------------------

// Tokens routed at random by `w` (a fixed seed): per host, the tokens with any expert there; per rank of host
// `host`, the tokens with any expert there (among all). Cached per thread: a plan dispatches each layer
// many times with the same routing.
struct TokenSpread {
  std::vector<int64_t> per_host, per_local;  // [N], [L] (of `host`)
  int64_t tokens = 0;
};
TokenSpread spread(const std::vector<double>& w, int64_t T, int64_t k, int64_t El, int64_t L, int64_t N,
                   int64_t host, int64_t n_group, int64_t topk_group) {
  using Key = std::tuple<std::vector<double>, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
  thread_local std::map<Key, TokenSpread> cache;
  Key key{w, T, k, El, L, N, host, n_group, topk_group};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const int64_t E = (int64_t)w.size(), G = n_group, per_group = E / G;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto uniform = [&state] {  // splitmix64 -> [0, 1)
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  // one pick by weight among the candidates not yet taken (-1: all weigh 0)
  auto pick = [&](const std::vector<double>& weight, std::vector<char>& taken) -> int64_t {
    double total = 0;
    int64_t last = -1;
    for (size_t i = 0; i < weight.size(); ++i)
      if (!taken[i] && weight[i] > 0) total += weight[i], last = (int64_t)i;
    if (last < 0) return -1;
    double u = uniform() * total;
    for (size_t i = 0; i < weight.size(); ++i)
      if (!taken[i] && weight[i] > 0 && (u -= weight[i]) < 0) return (int64_t)i;
    return last;
  };
  std::vector<double> group_w(G, 0);
  for (int64_t e = 0; e < E; ++e) group_w[e / per_group] += w[e];
  TokenSpread r;
  r.tokens = std::min<int64_t>(T, 4096);
  r.per_host.assign(N, 0), r.per_local.assign(L, 0);
  std::vector<char> host_hit(N), local_hit(L), group_taken(G), taken(E);
  std::vector<double> allowed(E);
  for (int64_t t = 0; t < r.tokens; ++t) {
    std::fill(group_taken.begin(), group_taken.end(), 0);
    for (int64_t g = 0; g < (G > 1 ? topk_group : 0); ++g) {
      const int64_t c = pick(group_w, group_taken);
      if (c >= 0) group_taken[c] = 1;
    }
    for (int64_t e = 0; e < E; ++e) allowed[e] = G == 1 || group_taken[e / per_group] ? w[e] : 0.0;
    std::fill(taken.begin(), taken.end(), 0);
    std::fill(host_hit.begin(), host_hit.end(), 0);
    std::fill(local_hit.begin(), local_hit.end(), 0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = pick(allowed, taken);
      if (e < 0) break;
      taken[e] = 1;
      const int64_t rank = e / El;
      host_hit[rank / L] = 1;
      if (rank / L == host) local_hit[rank % L] = 1;
    }
    for (int64_t n = 0; n < N; ++n) r.per_host[n] += host_hit[n];
    for (int64_t l = 0; l < L; ++l) r.per_local[l] += local_hit[l];
  }
  cache.emplace(std::move(key), r);
  return r;
}

// x tokens' share of `of` (counted on spread.tokens), at least `lo`, never more than `hi` (what there is to send;
// a routing histogram heavier than k distinct experts a token allows can put lo above it)
int64_t scaled(int64_t of, int64_t sampled, int64_t x, int64_t lo, int64_t hi) {
  const int64_t v = sampled > 0 ? (int64_t)std::llround((double)of * (double)x / (double)sampled) : 0;
  return std::clamp(v, std::min(lo, hi), hi);
}

}  // namespace

Dispatched dispatch_by_host(const Tensor& hidden, const Tensor& topk_idx, const Tensor& topk_weight, int64_t E,
                            const ExpertComm& ep, bool weights_on_inputs, int64_t moe_layer, int64_t n_group,
                            int64_t topk_group) {
  detail::check_dispatch_inputs("dispatch_by_host", hidden, topk_idx, topk_weight);
  TITAN_CHECK(ep.hierarchical(), "dispatch_by_host: needs the expert-parallel group and its across-hosts and "
              "within-host groups (comms::ExpertComm)");
  const PG &G = ep.group, &across = ep.across_hosts, &within = ep.within_host;
  const int64_t T = hidden.size(0), k = topk_idx.size(1);
  const int64_t P = G->size(), N = across->size(), L = within->size();
  TITAN_CHECK(N * L == P && G->rank() == across->rank() * L + within->rank(), "dispatch_by_host: the group's ", P,
              " ranks are not ", N, " hosts x ", L, " ranks in host order (group rank ", G->rank(), ", host ",
              across->rank(), ", local ", within->rank(), ")");
  TITAN_CHECK(E % P == 0, "dispatch_by_host: ", E, " experts are not divisible by the ", P,
              " ranks of the expert-parallel group");
  TITAN_CHECK(n_group >= 1 && E % n_group == 0 && topk_group >= 1 && topk_group <= n_group,
              "dispatch_by_host: ", E, " experts in ", n_group, " groups, ", topk_group, " chosen");
  const int64_t El = E / P;
  auto host_of = [El, L](int64_t e) { return e / El / L; };
  auto local_of = [El, L](int64_t e) { return e / El % L; };
  auto h = std::make_shared<DispatchHandle>();
  h->group = G, h->across = across, h->within = within;
  h->num_tokens = T, h->num_experts = E, h->local_experts = El;
  h->weights_on_inputs = weights_on_inputs;
  const bool meta = hidden.is_meta() || topk_idx.is_meta();
  TITAN_CHECK(meta || !G->is_fake(), "dispatch_by_host: a planned (fake) expert-parallel group dispatches meta "
              "tensors, got ", hidden.device() == Device::Meta ? "meta" : "real", " hidden ", shape_str(hidden.shape()));
  Dispatched d;
  d.handle = h;
  d.tokens_per_local_expert.assign(El, 0);
  // (1) across hosts, (2) within the host: rows and pairs sent to and received from each peer
  Sends s1, s2;
  std::vector<int64_t> pairs_recv1, pairs_recv2, order;  // order: the received (2) pairs by local expert
  std::vector<int64_t> row_of_pair;                       // [R]: the received (2) row of each expert row
  if (!meta) {
    Routed mine;  // this rank's tokens, pair t*k + j of expert topk_idx[t, j]
    mine.expert = topk_idx.to_vector<int64_t>();
    for (int64_t e : mine.expert) TITAN_CHECK(e >= 0 && e < E, "dispatch_by_host: expert index ", e, " outside [0, ", E, ")");
    for (int64_t t = 1; t <= T; ++t) mine.start.push_back(t * k);
    s1 = plan_sends(mine, N, host_of);
    Routed got1 = exchange_routing(s1, across, h->recv1, pairs_recv1, "across-hosts");
    s2 = plan_sends(got1, L, local_of);
    Routed got2 = exchange_routing(s2, within, h->recv2, pairs_recv2, "within-host");
    const int64_t first = G->rank() * El;
    for (int64_t i = 0; i < got2.rows(); ++i)
      for (int64_t q = got2.start[i]; q < got2.start[i + 1]; ++q) {
        const int64_t j = got2.expert[q] - first;
        TITAN_CHECK(j >= 0 && j < El, "dispatch_by_host: rank ", G->rank(), " received a row for expert ",
                    got2.expert[q], ", not one of its [", first, ", ", first + El, ")");
        ++d.tokens_per_local_expert[j];
      }
    std::vector<int64_t> at(El + 1, 0);
    for (int64_t j = 0; j < El; ++j) at[j + 1] = at[j] + d.tokens_per_local_expert[j];
    order.assign(got2.expert.size(), 0), row_of_pair.assign(got2.expert.size(), 0);
    for (int64_t i = 0; i < got2.rows(); ++i)
      for (int64_t q = got2.start[i]; q < got2.start[i + 1]; ++q) {
        const int64_t pos = at[got2.expert[q] - first]++;
        order[pos] = q, row_of_pair[pos] = i;
      }
  } else {
    // planned: the pairs as `dispatch` plans them, at the busiest rank b (host b / L, local b % L); distinct
    // tokens from the random routing's spread. Every source routes alike (SPMD), so this rank receives from
    // each peer what it sends to its own host (rank).
    std::vector<double> w;
    const std::vector<int64_t> c = meta_routed_counts(T * k, E, P, moe_layer, /*rotate=*/false, &w);
    std::vector<int64_t> load(P, 0);
    for (int64_t e = 0; e < E; ++e) load[e / El] += c[e];
    const int64_t b = std::max_element(load.begin(), load.end()) - load.begin(), hb = b / L, lb = b % L;
    const TokenSpread sp = spread(w, T, k, El, L, N, hb, n_group, topk_group);
    std::vector<int64_t> pairs_host(N, 0), pairs_local(L, 0);
    for (int64_t e = 0; e < E; ++e) {
      pairs_host[host_of(e)] += c[e];
      if (host_of(e) == hb) pairs_local[local_of(e)] += c[e];
    }
    s1.rows.assign(N, 0), s1.pairs = pairs_host, s1.ints.assign(N, 0);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t rows = scaled(T, sp.tokens, sp.per_host[n], (pairs_host[n] + k - 1) / k, std::min(T, pairs_host[n]));
      s1.rows[n] = rows, s1.ints[n] = rows + pairs_host[n];
    }
    const int64_t in1 = N * s1.rows[hb];  // rows received across hosts
    h->recv1.assign(N, s1.rows[hb]), pairs_recv1.assign(N, pairs_host[hb]);
    s2.rows.assign(L, 0), s2.pairs.assign(L, 0), s2.ints.assign(L, 0);
    for (int64_t l = 0; l < L; ++l) {
      const int64_t p = N * pairs_local[l];
      const int64_t rows = scaled(N * T, sp.tokens, sp.per_local[l], (p + El - 1) / std::max<int64_t>(El, 1),
                                  std::min(in1, p));
      s2.rows[l] = rows, s2.pairs[l] = p, s2.ints[l] = rows + p;
    }
    h->recv2.assign(L, s2.rows[lb]), pairs_recv2.assign(L, s2.pairs[lb]);
    for (int64_t j = 0; j < El; ++j) d.tokens_per_local_expert[j] = P * c[b * El + j];
    s1.row_ids.assign(std::accumulate(s1.rows.begin(), s1.rows.end(), int64_t{0}), 0);
    s1.pair_ids.assign(T * k, 0);
    s2.row_ids.assign(std::accumulate(s2.rows.begin(), s2.rows.end(), int64_t{0}), 0);
    s2.pair_ids.assign(std::accumulate(s2.pairs.begin(), s2.pairs.end(), int64_t{0}), 0);
    const int64_t R = L * s2.pairs[lb];
    order.assign(R, 0), row_of_pair.assign(R, 0);
    // the routing ints, as the real exchange moves them (learned counts, then the ints)
    auto routing = [&](const Sends& s, const std::vector<int64_t>& rows_in, const std::vector<int64_t>& pairs_in,
                       const PG& g) {
      if (g->size() == 1) return;
      std::vector<int64_t> planned(rows_in.size()), got;
      for (size_t i = 0; i < planned.size(); ++i) planned[i] = rows_in[i] + pairs_in[i];
      const int64_t n = std::accumulate(s.ints.begin(), s.ints.end(), int64_t{0});
      g->all_to_all_v(empty({n}, DType::I64, Device::Meta), s.ints, &got, planned);
    };
    routing(s1, h->recv1, pairs_recv1, across);
    routing(s2, h->recv2, pairs_recv2, within);
  }
  h->send1 = s1.rows, h->send2 = s2.rows;
  // the payload: (1) the tokens to each host and their pairs' weights, (2) those rows to each rank of the host
  h->token_of_sent1 = index_tensor(s1.row_ids, meta);
  Tensor x1 = exchange(index_select(hidden, 0, h->token_of_sent1), s1.rows, h->recv1, across);  // [in1, H]
  Tensor w_flat = topk_weight.reshape({T * k});
  Tensor w1 = index_select(w_flat, 0, index_tensor(s1.pair_ids, meta)).reshape({(int64_t)s1.pair_ids.size(), 1});
  w1 = exchange(w1, s1.pairs, pairs_recv1, across, /*float32_wire=*/true);
  h->row1_of_sent2 = index_tensor(s2.row_ids, meta);
  Tensor x2 = exchange(index_select(x1, 0, h->row1_of_sent2), s2.rows, h->recv2, within);  // [in2, H]
  Tensor w2 = exchange(index_select(w1, 0, index_tensor(s2.pair_ids, meta)), s2.pairs, pairs_recv2, within, true);
  // the expert rows: each received (2) pair, grouped by local expert (in arrival order within one)
  h->row2_of_expert_row = index_tensor(row_of_pair, meta);
  h->weight_of_row = index_select(w2, 0, index_tensor(order, meta));  // [R, 1]
  d.expert_input = index_select(x2, 0, h->row2_of_expert_row);       // [R, H]
  if (weights_on_inputs) d.expert_input = mul(d.expert_input, h->weight_of_row);
  return d;
}

Tensor detail::combine_by_host(const Tensor& y, const DispatchHandle& h) {
  const int64_t H = y.size(1);
  TITAN_CHECK(y.size(0) == h.row2_of_expert_row.size(0), "combine: got ", y.size(0), " rows for ",
              h.row2_of_expert_row.size(0), " dispatched (token, expert) pairs");
  Tensor rows = h.weights_on_inputs ? y : mul(y, h.weight_of_row);  // [R, H]
  auto total = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); };
  // each received (2) row: the sum over this rank's experts, back to the forwarder
  Tensor p2 = index_add(zeros({total(h.recv2), H}, y.dtype(), y.device()), 0, h.row2_of_expert_row, rows);
  Tensor b2 = exchange(p2, h.recv2, h.send2, h.within);  // [sum send2, H]
  // each received (1) row: the sum over its host's ranks, back to the token's rank
  Tensor p1 = index_add(zeros({total(h.recv1), H}, y.dtype(), y.device()), 0, h.row1_of_sent2, b2);
  Tensor b1 = exchange(p1, h.recv1, h.send1, h.across);  // [sum send1, H]
  // each token: the sum over hosts (host order)
  return index_add(zeros({h.num_tokens, H}, y.dtype(), y.device()), 0, h.token_of_sent1, b1);
}

}  // namespace titan::comms
