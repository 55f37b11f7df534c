#include "comms/link_probe.h"

#include <algorithm>
#include <chrono>

#include "comms/hosts.h"
#include "src/log/log.h"

namespace titan::comms {

LinkProbe::LinkProbe(const PG& world) {
  const Hosts& h = hosts();
  if (h.count() <= 1 || (int)h.host_of.size() != world->size()) return;
  active_ = true;
  auto color = [&h](int r) { return h.local_rank[r] == 0 ? 0 : 1; };
  auto key = [&h](int r) { return h.host_of[r]; };
  leaders_ = world->split(color, key, "hosts");
  leaders_p2p_ = world->split(color, key, "hosts_p2p");
}

std::vector<double> LinkProbe::measure(int64_t bytes) {
  if (!active_ || hosts().local_rank[world_rank()] != 0) return {};
  const int H = leaders_->size(), me = leaders_->rank();
  Tensor block = zeros({std::max<int64_t>(1, bytes / 4)}, DType::F32);  // [bytes / 4]
  // the fastest of a few rounds (a rank descheduled or late to the barrier adds to one round, not to all), as
  // many as fit in kBudgetSeconds: the ranks that do not probe wait for it in their next collective, under the
  // collective timeout. The leaders agree on each further round (the slowest link's time, all-reduced).
  double in_s = 1e300;
  for (int round = 0; round < kRounds; ++round) {
    leaders_->barrier();  // every host's first rank here: the clocks below start together
    const auto t0 = std::chrono::steady_clock::now();
    auto [got, in] = leaders_p2p_->irecv(block.shape(), DType::F32, (me + H - 1) % H, 7);
    Work out = leaders_p2p_->isend(block, (me + 1) % H, 7);
    in.wait();
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    in_s = std::min(in_s, t);
    out.wait();
    const double slowest = leaders_->all_reduce(from_vector<double>({t}, {1}), ReduceOp::Max).to_vector<double>()[0];
    if ((double)(round + 2) * slowest > kBudgetSeconds) break;
  }
  return leaders_->all_gather(from_vector<double>({in_s}, {1})).to_vector<double>();  // [H]
}

std::string LinkProbe::slowest(const std::vector<double>& in_s, const std::vector<std::string>& names, int64_t bytes,
                               double factor) {
  const int H = (int)in_s.size();
  if (H < 2 || (int)names.size() != H) return "";
  const std::string size = fmt("%.0f", (double)bytes / (1 << 20)) + " MiB";
  auto ms = [](double s) { return fmt(s < 0.01 ? "%.1f" : "%.0f", s * 1e3) + " ms"; };
  if (H == 2) {  // two links, one per direction: which end is slow cannot be told apart
    const double worst = std::max(in_s[0], in_s[1]), best = std::min(in_s[0], in_s[1]);
    if (worst < factor * best || worst < best + kMarginSeconds) return "";
    return "the link between " + names[0] + " and " + names[1] + ": " + size + " in " + ms(in_s[1]) + " to " +
           names[1] + ", " + ms(in_s[0]) + " back";
  }
  // host i's links: into it (in_s[i], from i-1) and out of it (in_s[i+1], into i+1): both slow names it
  int worst = -1;
  double score = 0;
  for (int i = 0; i < H; ++i) {
    const double both = std::min(in_s[i], in_s[(i + 1) % H]);
    if (both > score) score = both, worst = i;
  }
  if (worst < 0) return "";
  std::vector<double> others;  // the links that do not touch that host
  for (int i = 0; i < H; ++i)
    if (i != worst && i != (worst + 1) % H) others.push_back(in_s[i]);
  std::sort(others.begin(), others.end());
  const double median = others[(others.size() - 1) / 2];  // the lower median
  if (score < factor * median || score < median + kMarginSeconds) return "";
  return names[worst] + "'s link: " + size + " in " + ms(in_s[worst]) + " into " + names[worst] + ", " +
         ms(in_s[(worst + 1) % H]) + " out (the other links' median " + ms(median) + ")";
}

}  // namespace titan::comms
