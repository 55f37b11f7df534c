// comms/link_probe.h — the network between a job's hosts, measured while it trains: each host's first rank
// sends a block to the next host's first rank and receives one from the previous host's (a ring over hosts,
// every link at once), timed. A host whose links in and out are both several times slower than the others'
// is named: the straggler a rate-limited or congested host's link makes, which per-rank step and wait times
// cannot show (every rank of a ring collective waits for the slowest link alike).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comms/process_group.h"

namespace titan::comms {

class LinkProbe {
 public:
  // Collective over `world` (the hosts' first ranks get groups of their own); inactive on one host.
  explicit LinkProbe(const PG& world);
  bool active() const { return active_; }
  // Collective over world's ranks when active: seconds for `bytes` to reach host i from host i-1 (ring order),
  // on every host's first rank ([hosts]); other ranks return {}. Each link's fastest of up to kRounds rounds.
  std::vector<double> measure(int64_t bytes);
  static constexpr int kRounds = 3;
  static constexpr double kBudgetSeconds = 2.0;  // a further round only while the rounds fit in this
  // a straggler's links take `factor` times the others' median and kMarginSeconds more (a shorter lag is within
  // the scheduling noise of busy hosts; a larger block shows a smaller loss of bandwidth)
  static constexpr double kMarginSeconds = 0.020;
  // What the times say: "h3's link: 4 MiB in 171 ms into h3, 170 ms out (the other links' median 3.2 ms)" when
  // both links of one host are `factor` times slower than the median of the links that do not touch it; with
  // two hosts, the link between them when one direction is `factor` times slower than the other; else "" (also
  // when the slow links take less than kMarginSeconds more than the others).
  static std::string slowest(const std::vector<double>& in_s, const std::vector<std::string>& names, int64_t bytes,
                             double factor = 3.0);

 private:
  bool active_ = false;
  PG leaders_, leaders_p2p_;  // the hosts' first ranks, by host (a collective group and a point-to-point one)
};

}  // namespace titan::comms
