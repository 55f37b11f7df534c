#include "simulator/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "simulator/engines.h"
#include "src/tensor/error.h"

namespace titan::sim {

Collective parse_collective(const std::string& s) {
  if (s == "all_gather") return Collective::AllGather;
  if (s == "reduce_scatter") return Collective::ReduceScatter;
  if (s == "all_reduce") return Collective::AllReduce;
  if (s == "all_to_all") return Collective::AllToAll;
  throw std::runtime_error("cost model: unknown collective '" + s + "'");
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllToAll: return "all_to_all";
  }
  return "?";
}

namespace {
double pad(long long x, int t) { return (double)((x + t - 1) / t * t); }
bool pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }
}  // namespace

double gemm_peak_tflops(const ChipSpec& c, GemmPrecision p) {
  if (p == GemmPrecision::high) return c.peak_tflops;
  if (p == GemmPrecision::fp32) {
    TITAN_CHECK(c.fp32_tflops > 0, "simulator: chip ", c.name, " (", c.file, ") has no float32 GEMM rate (fp32_tflops "
                "in its spec): a float32 run (training.mixed_precision_param: float32, titan's default) cannot be "
                "priced on it; set training.mixed_precision_param: bfloat16 (as production trains), or add the "
                "chip's dense FP32 figure to its spec");
    return c.peak_tflops * c.fp32_tflops / c.headline_tflops;
  }
  const bool mx = p == GemmPrecision::mxfp8;
  const double v = mx ? c.mxfp8_tflops : c.fp8_tflops;
  TITAN_CHECK(v > 0, "simulator: chip ", c.name, " (", c.file, ") has no ", mx ? "MXFP8" : "FP8", " GEMM rate (",
              mx ? "mxfp8_tflops" : "fp8_tflops", " in its spec): the step's float8 GEMMs (model.converters float8, "
              "float8.recipe) cannot be priced on it; choose a chip with ", mx ? "MXFP8 (B200, GB200, GB300, Trainium3)"
              : "FP8 (H100, H200, B200, GB200, GB300, Trainium2, Trainium3)", " or drop the converter");
  return c.peak_tflops * v / c.headline_tflops;
}

double attention_efficiency(const ChipSpec& c, int64_t head_dim, bool backward) {
  const auto& t = c.attention_by_head_dim;
  if (t.empty() || head_dim < 1)
    return backward && c.attention_backward_efficiency > 0 ? c.attention_backward_efficiency : c.attention_efficiency;
  auto at = [&](const AttentionPoint& p) { return backward ? p.backward : p.forward; };
  if (head_dim <= t.front().head_dim) return at(t.front());
  if (head_dim >= t.back().head_dim) return at(t.back());
  size_t i = 1;
  while (t[i].head_dim < head_dim) ++i;  // t[i - 1] < head_dim <= t[i]
  const double x = std::log2((double)head_dim), x0 = std::log2((double)t[i - 1].head_dim),
               x1 = std::log2((double)t[i].head_dim);
  return at(t[i - 1]) + (at(t[i]) - at(t[i - 1])) * (x - x0) / (x1 - x0);
}

KernelTime kernel_time(const ChipSpec& c, int rpc, const Kernel& k, ExecMode mode) {
  KernelTime t;
  const double peak = c.peak_tflops * 1e12 / rpc;
  const double hbm = c.hbm_tbps * 1e12 * c.memory_efficiency / rpc;
  if (k.kind == KernelKind::Gemm && k.m > 0 && k.n > 0 && k.k > 0) {
    const double b = (double)std::max(1LL, k.batch);
    const double real = 2.0 * b * (double)k.m * (double)k.n * (double)k.k;
    const double padded = 2.0 * b * pad(k.m, c.gemm_tile[0]) * pad(k.n, c.gemm_tile[1]) * pad(k.k, c.gemm_tile[2]);
    // a table measured on the whole chip: a rank's call fills its 1/rpc share as a call rpc times larger fills
    // the chip (gemm_efficiency_per: chip); a table of one rank's share is read at the call's size
    const double fill = c.gemm_table_per_chip ? rpc : 1.0;
    const double ratio = gemm_peak_tflops(c, k.precision) / c.peak_tflops;  // 1 in the activation dtype
    const double gpeak = peak * ratio;
    double rate = gpeak * gemm_efficiency(c, fill * real / b / 1e9);  // FLOP/s this rank's share of the chip reaches
    if (c.gemm_power_limit_tflops > 0) rate = std::min(rate, ratio * c.gemm_power_limit_tflops * 1e12 / rpc);
    if (k.split_accumulation && k.precision == GemmPrecision::fp8) rate *= c.fp8_split_accumulation_rate;
    t.efficiency = rate / gpeak * real / padded;
    t.compute_s = padded / rate;
  } else if (k.kind == KernelKind::Attention) {  // a float32 run's attention on the float32 units too
    t.efficiency = attention_efficiency(c, k.attention.d, k.attention.backward);
    const double ratio = k.precision == GemmPrecision::fp32 ? gemm_peak_tflops(c, k.precision) / c.peak_tflops : 1.0;
    t.compute_s = k.flops / (peak * ratio * t.efficiency);
  } else {
    t.compute_s = k.flops / (c.vector_tflops * 1e12 / rpc);
  }
  t.memory_s = k.bytes / hbm;
  t.overhead_s = (mode == ExecMode::Eager ? c.eager_launch_us : c.compiled_launch_us) * 1e-6;
  t.seconds = std::max(t.compute_s, t.memory_s) + t.overhead_s;
  const bool attention_known = k.kind == KernelKind::Attention && k.attention.pairs > 0 && k.attention.d > 0;
  if (c.price_by_engines && (k.kind != KernelKind::Attention || attention_known) &&
      (k.kind != KernelKind::Gemm || k.m > 0)) {
    // the kernel as its engines run it: GEMM tiles on the systolic array, attention tiles across Tensor, Scalar
    // and Vector, elementwise on Vector / Scalar, DMA
    const int cores = std::max(1, c.cores / std::max(1, rpc));
    // FP8 / MXFP8 operands: one byte each, the Tensor engine at the chip's rate for them
    const bool low = k.kind == KernelKind::Gemm && (k.precision == GemmPrecision::fp8 || k.precision == GemmPrecision::mxfp8);
    const double ratio = k.kind == KernelKind::Gemm ? gemm_peak_tflops(c, k.precision) / c.peak_tflops : 1.0;
    const EngineSchedule s =
        k.kind == KernelKind::Gemm
            ? schedule_gemm(c.engines, cores, std::max(1LL, k.batch), k.m, k.n, k.k, low ? 1.0 : k.element_bytes,
                            k.element_bytes, false, ratio)
        : k.kind == KernelKind::Attention
            ? schedule_attention(c.engines, cores, k.attention.pairs, k.attention.d,
                                 std::max<int64_t>(1, k.attention.dv), k.attention.backward, k.bytes)
            : schedule_elementwise(c.engines, cores, k.bytes / (3.0 * k.element_bytes), k.bytes, k.flops);
    t.compute_s = s.busy[(int)Engine::Tensor] + s.busy[(int)Engine::Vector] + s.busy[(int)Engine::Scalar];
    t.memory_s = s.busy[(int)Engine::Dma];
    double seconds = s.seconds;
    if (k.kind == KernelKind::Gemm && c.gemm_power_limit_tflops > 0)  // never above the chip's sustained rate
      seconds = std::max(seconds, 2.0 * std::max(1LL, k.batch) * k.m * k.n * k.k /
                                      (ratio * c.gemm_power_limit_tflops * 1e12 / rpc));
    t.seconds = seconds + t.overhead_s;
    for (int i = 0; i < kEngines; ++i) t.engine_busy[(size_t)i] = s.busy[(size_t)i] / cores;
    if (k.kind == KernelKind::Gemm)
      t.efficiency = 2.0 * (double)std::max(1LL, k.batch) * k.m * k.n * k.k / seconds / (peak * ratio);
    else if (k.kind == KernelKind::Attention)
      t.efficiency = k.flops / seconds / peak;
  }
  return t;
}

std::vector<Kernel> materialized_attention(const Kernel& k, double dropout, ExecMode mode) {
  const AttentionShape& a = k.attention;
  TITAN_CHECK(k.kind == KernelKind::Attention && a.scores > 0 && a.sq > 0 && a.skv > 0 && a.d > 0,
              "simulator: materialized attention needs an attention kernel with its score matrix (scores ", a.scores,
              ", sq ", a.sq, ", skv ", a.skv, ", d ", a.d, "); its record gave none");
  const double N = a.scores, e = k.element_bytes;
  const int64_t dv = a.dv > 0 ? a.dv : a.d;
  const long long heads = std::max(1LL, std::llround(N / ((double)a.sq * (double)a.skv)));  // B x Hq
  const double q = (double)heads * a.sq * a.d * e, kk = (double)heads * a.skv * a.d * e;  // Q, K bytes
  const double v = (double)heads * a.skv * dv * e, o = (double)heads * a.sq * dv * e;     // V, O (dO) bytes
  auto gemm = [&](int64_t m, int64_t n, int64_t depth, double bytes) {
    Kernel g;
    g.kind = KernelKind::Gemm;
    g.batch = heads, g.m = m, g.n = n, g.k = depth;
    g.flops = 2.0 * (double)heads * (double)m * (double)n * (double)depth;
    g.bytes = bytes;
    g.precision = k.precision;
    g.element_bytes = e;
    return g;
  };
  auto pass = [&](double flops_per_score, double bytes) {
    Kernel p;
    p.flops = flops_per_score * N;
    p.bytes = bytes;
    p.element_bytes = e;
    return p;
  };
  const bool drop = dropout > 0, fused = mode != ExecMode::Eager;
  std::vector<Kernel> out;
  if (!a.backward) {
    out.push_back(gemm(a.sq, a.skv, a.d, q + kk + N * e));  // S = Q K^T
    if (drop && fused) {
      out.push_back(pass(7, 2 * N * e + N));  // softmax + dropout: reads S, writes P' and the mask
    } else {
      out.push_back(pass(5, 2 * N * e));                // scale, mask, max, exp, sum, divide
      if (drop) out.push_back(pass(2, 2 * N * e + N));  // dropout: P' and its mask
    }
    out.push_back(gemm(a.sq, dv, a.skv, N * e + v + o));  // O = P' V
  } else {
    out.push_back(gemm(a.sq, a.skv, dv, o + v + N * e));  // dP' = dO V^T
    out.push_back(gemm(a.skv, dv, a.sq, N * e + o + v));  // dV = P'^T dO
    if (drop && fused) {
      out.push_back(pass(5, 3 * N * e + N));  // dropout' + softmax': reads dP', the mask and P, writes dS
    } else {
      if (drop) out.push_back(pass(1, 2 * N * e + N));  // dropout': reads dP' and the mask, writes dP
      out.push_back(pass(4, 3 * N * e));                // softmax': reads P and dP, writes dS
    }
    out.push_back(gemm(a.sq, a.d, a.skv, N * e + kk + q));  // dQ = dS K
    out.push_back(gemm(a.skv, a.d, a.sq, N * e + q + kk));  // dK = dS^T Q
  }
  return out;
}

int GroupSpan::product() const {
  int n = ranks_on_chip * systems;
  for (int u : units) n *= u;
  return n;
}

int GroupSpan::size() const { return members > 0 ? members : product(); }

GroupSpan group_span(const SystemSpec& sys, int rpc, const std::vector<int>& ranks) {
  GroupSpan g;
  const size_t L = sys.levels.size();
  std::vector<std::set<int>> coords(L);
  std::vector<std::set<int>> tx(L), ty(L);
  std::map<int, int> systems;  // system -> members in it
  std::map<int, int> per_chip;
  for (int r : ranks) {
    const int chip = r / rpc;
    ++per_chip[chip];
    ++systems[chip / sys.chips];
    int c = chip % sys.chips;
    for (size_t l = 0; l < L; ++l) {
      const int u = sys.levels[l].units;
      const int at = c % u;
      coords[l].insert(at);
      if (sys.levels[l].topology == Topology::Torus2D) {
        tx[l].insert(at % sys.levels[l].shape[0]);
        ty[l].insert(at / sys.levels[l].shape[0]);
      }
      c /= u;
    }
  }
  g.ranks_on_chip = 1;
  for (auto& [chip, n] : per_chip) g.ranks_on_chip = std::max(g.ranks_on_chip, n);
  g.systems = (int)systems.size();
  g.members = (int)ranks.size();
  g.fewest_in_a_system = g.members;
  for (auto& [system, n] : systems) g.fewest_in_a_system = std::min(g.fewest_in_a_system, n);
  for (size_t l = 0; l < L; ++l) {
    g.units.push_back((int)coords[l].size());
    g.torus_extent.push_back(sys.levels[l].topology == Topology::Torus2D
                                 ? std::vector<int>{(int)tx[l].size(), (int)ty[l].size()}
                                 : std::vector<int>{});
  }
  return g;
}

namespace {
struct Hop {  // one level of the hierarchy as a group sees it
  std::string name;
  Topology topo;
  int n;             // units spanned
  double bw;         // bytes/s per chip usable by this group at this level
  double latency;    // s per step
  double link_bw;    // bytes/s per link (bisection)
  int cut_links;     // links crossing the bisection of the spanned part (0: switch)
  int steps_ring;    // latency steps of a ring-style pass
  bool scale_out;    // the network between systems
};

std::vector<Hop> hops(const ChipSpec& c, const SystemSpec& sys, const GroupSpan& g) {
  std::vector<Hop> h;
  // on one chip: copies through HBM (read + write), or the chip's measured exchange (local_comm_*)
  h.push_back({"chip", Topology::Chip, g.ranks_on_chip,
               c.local_comm_gbps > 0 ? c.local_comm_gbps * 1e9 : c.hbm_tbps * 1e12 * c.memory_efficiency / 2,
               c.local_comm_gbps > 0 ? c.local_comm_latency_us * 1e-6 : 1e-6, 0, 0, g.ranks_on_chip - 1, false});
  auto level = [&](const NetworkLevel& l, int n, const std::vector<int>& ext, bool scale_out) {
    Hop x{l.name, l.topology, n, 0, l.latency_us * 1e-6, l.bandwidth_gbps * 1e9 * l.efficiency / l.links_per_chip, 0,
          n - 1, scale_out};
    int usable = l.links_per_chip;
    if (l.topology == Topology::Torus2D) {
      usable = 0;
      x.steps_ring = 0;
      for (int d = 0; d < 2; ++d) {
        const int e = ext.empty() ? 1 : ext[d];
        if (e >= 3 && e == l.shape[d]) usable += 2;       // a full ring with its wraparound: both neighbours
        else if (e >= 2) usable += 1;                     // a line: one link each way
        x.steps_ring += e - 1;
      }
      usable = std::max(1, std::min(usable, l.links_per_chip));
      const int ex = ext.empty() ? 1 : ext[0], ey = ext.empty() ? 1 : ext[1];
      const int longer = std::max(ex, ey), other = longer == ex ? ey : ex;
      x.cut_links = (longer >= 3 && longer == (longer == ex ? l.shape[0] : l.shape[1]) ? 2 : 1) * other;
    } else if (l.topology == Topology::Ring) {
      usable = (n >= 3 && n == l.units) ? l.links_per_chip : std::max(1, l.links_per_chip / 2);
      x.cut_links = (n >= 3 && n == l.units) ? 2 : 1;
    }
    x.bw = x.link_bw * usable;
    h.push_back(x);
  };
  for (size_t i = 0; i < sys.levels.size(); ++i) level(sys.levels[i], g.units[i], g.torus_extent[i], false);
  if (g.systems > 1) {
    if (!sys.has_scale_out)
      throw std::runtime_error("system " + sys.name + " (" + sys.file +
                               ") has no scale_out network, but a group spans " + std::to_string(g.systems) +
                               " systems");
    level(sys.scale_out, g.systems, {}, true);
  }
  return h;
}
}  // namespace

CollectiveTime collective_time(const ChipSpec& c, const SystemSpec& sys, int rpc, Collective kind, double bytes,
                               const GroupSpan& g) {
  CollectiveTime out;
  if (g.size() <= 1 || bytes <= 0) {
    out.algorithm = "local";
    return out;
  }
  const std::vector<Hop> h = hops(c, sys, g);
  const double n_total = (double)g.size();
  double seconds = 0, inner = 1;
  for (const Hop& x : h) {
    if (x.n <= 1) continue;
    std::string alg;
    double t = 0;
    if (kind == Collective::AllToAll) {
      // bytes leaving this rank's unit of the level below, staying inside this level
      const double per_rank = bytes * inner * (x.n - 1) / n_total;
      const double per_chip = per_rank * rpc;
      double tb = per_chip / x.bw;
      alg = "direct";
      if (x.cut_links > 0) {
        const double chips = x.n;
        const double bis = (chips * per_chip / 4) / (x.cut_links * x.link_bw);
        if (bis > tb) {
          tb = bis;
          alg = "bisection-bound";
        }
      }
      t = tb + (x.n - 1) * x.latency;
      out.levels.push_back({x.name, tb, (x.n - 1) * x.latency});
    } else {
      // what each rank moves at this level: (n - 1) / n of the shard the levels below left it; between systems
      // holding unequal numbers of members, what the fewest members of one system take in from all the others
      const double m = g.size(), fewest = g.fewest_in_a_system;
      const double per_rank = x.scale_out && fewest > 0 && fewest * g.systems != m
                                  ? bytes * (m - fewest) / (m * fewest)
                                  : (x.n - 1) * bytes / (inner * x.n);
      const double tb = per_rank * rpc / x.bw;
      const bool rd = pow2(x.n) && (x.topo == Topology::Switch || x.topo == Topology::Chip);
      const int steps = rd ? (int)std::lround(std::log2(x.n)) : x.steps_ring;
      alg = rd ? "halving-doubling" : (x.topo == Topology::Torus2D ? "torus-rings" : "ring");
      t = tb + steps * x.latency;
      const double f = kind == Collective::AllReduce ? 2.0 : 1.0;  // all-reduce: reduce-scatter + all-gather
      t *= f;
      out.levels.push_back({x.name, f * tb, f * steps * x.latency});
    }
    seconds += t;
    out.algorithm += (out.algorithm.empty() ? "" : " + ") + x.name + ":" + alg;
    inner *= x.n;
  }
  out.seconds = seconds;
  if (sys.library == CollectiveLibrary::nccl && kind != Collective::AllToAll && !out.levels.empty()) {
    // the library's algorithm and protocol: its latency replaces the levels' steps, its protocol's share of
    // the link rate stretches each level's transfer
    double transfer = 0;
    for (const auto& lv : out.levels) transfer += lv.transfer_s;
    // NVLS: an all-reduce whose ranks lie on as many chips of one switch level of one system, a switch that
    // reduces (nvls_efficiency); a chip's `rpc` ranks share its links, as on the ring
    double nvls = 0;
    if (kind == Collective::AllReduce)
      for (size_t i = 0; i < sys.levels.size(); ++i)
        if (g.units[i] == g.product() && sys.levels[i].nvls_efficiency > 0)
          nvls = bytes * (1.0 + 1.0 / g.size()) * rpc /
                 (sys.levels[i].bandwidth_gbps * 1e9 * sys.levels[i].nvls_efficiency);
    const LibraryChoice c = nccl_choice(kind, g.size(), g.systems, transfer, nvls);
    out.seconds = c.latency_s;
    for (auto& lv : out.levels) {
      lv.transfer_s /= c.bandwidth;
      lv.latency_s = 0;
      out.seconds += lv.transfer_s;
    }
    out.levels.front().latency_s = c.latency_s;
    std::string over;
    for (const auto& lv : out.levels) over += (over.empty() ? "" : " + ") + lv.name;
    out.algorithm = "nccl " + c.algorithm + " over " + over;
  }
  return out;
}

CollectiveTime p2p_time(const ChipSpec& c, const SystemSpec& sys, double bytes, const GroupSpan& g) {
  CollectiveTime out;
  if (g.size() <= 1 || bytes <= 0) {
    out.algorithm = "local";
    return out;
  }
  const std::vector<Hop> h = hops(c, sys, g);
  const Hop* outer = nullptr;
  for (const Hop& x : h)
    if (x.n > 1) outer = &x;
  if (!outer) {
    out.algorithm = "local";
    return out;
  }
  const bool neighbour = outer->topo == Topology::Torus2D || outer->topo == Topology::Ring;
  const double tb = bytes / (neighbour ? outer->link_bw : outer->bw);
  out.seconds = outer->latency + tb;
  out.algorithm = outer->name + ":p2p";
  out.levels.push_back({outer->name, tb, outer->latency});
  return out;
}

}  // namespace titan::sim
