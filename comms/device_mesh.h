// comms/device_mesh.h — an N-D mesh of ranks with named dimensions, in
// TorchTitan's order (pp, dp_replicate, dp_shard, cp, tp): pp is outermost and tp
// innermost, so position = (((pp_rank * dp_replicate + replicate) * dp_shard + shard) * cp + cp_rank) * tp + tp_rank,
// where a rank's position is its world rank when mpirun placed the ranks host by host (else comms/hosts.h).
#pragma once
#include <string>
#include <vector>

#include "comms/process_group.h"

namespace titan::comms {

struct MeshDegrees {
  int64_t dp_replicate = 1;
  int64_t dp_shard = -1;  // -1: the ranks left over
  int64_t tp = 1;
  int64_t pp = 1;  // pipeline stages (the outermost dimension; last here so {dp_replicate, dp_shard, tp} reads on)
  int64_t cp = 1;  // context parallel: each sequence over cp ranks (between dp_shard and tp)

  // The one rule on the sequence length: cut into 2 x cp chunks (context parallel; cp 1: no cut), then each
  // rank's S / cp tokens split over tp (sequence parallel, and between pipeline stages). Throws naming `key`
  // (training.seq_len, or titan-eval's --seq-len) with what is expected.
  void check_sequence_length(int64_t seq_len, bool sequence_parallel, const std::string& key = "training.seq_len") const;
};

// Resolves -1 and checks the product equals `world`; throws naming the
// degrees and the world size otherwise (before anything is allocated).
MeshDegrees resolve_degrees(MeshDegrees d, int64_t world);

class DeviceMesh {
 public:
  // Splits MPI_COMM_WORLD (or builds fake groups for `rank` when fake: on one host, or on the hosts
  // `fake_hosts` gives each world rank, as comms/hosts.h numbers them).
  DeviceMesh(MeshDegrees d, bool fake = false, int fake_rank = 0, int fake_world = 1, std::vector<int> fake_hosts = {});
  MeshDegrees degrees;
  int rank = 0, world = 1;
  // position -> world rank: the mesh's coordinates are those of a rank's position (the ranks of a host at
  // consecutive positions, comms/hosts.h), equal to the world rank when mpirun placed the ranks host by host
  std::vector<int> order;
  std::vector<int> host_of;  // [world] each world rank's host (comms/hosts.h; a fake mesh: the hosts it was given)
  int position = 0;
  int pp_rank = 0, replicate_rank = 0, shard_rank = 0, cp_rank = 0, tp_rank = 0;
  PG world_pg, dp_replicate, dp_shard, dp, tp;  // dp = replicate x shard (data-parallel ranks)
  // cp: the ranks sharing each sequence (equal coordinates but cp); cp_p2p: the same ranks, a communicator of
  // their own for the ring exchange's point-to-point transfers; dp_shard_cp = dp_shard x cp, the group FSDP
  // shards parameters and reduces gradients over (TorchTitan folds cp into it: cp ranks see different tokens)
  PG cp, cp_p2p, dp_shard_cp;
  PG pp;      // the ranks of one pipeline: equal (dp_replicate, dp_shard, tp) coordinates, by pp rank
  PG pp_p2p;  // the same ranks, a communicator of its own for the stages' point-to-point transfers
  int64_t dp_size() const { return degrees.dp_replicate * degrees.dp_shard; }
  int64_t dp_rank() const { return replicate_rank * degrees.dp_shard + shard_rank; }
  // "world 4 = dp_replicate 1 x dp_shard 2 x tp 2" (pp first, cp before tp when > 1); over several hosts
  // followed by " over 2 hosts (h1: ranks 0,1; h2: ranks 2,3)"
  std::string describe() const;

 private:
  bool fake_ = false;
  std::string over_hosts() const;
};

}  // namespace titan::comms
