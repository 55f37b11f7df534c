// comms/watchdog.h — the collective watchdog.
//
// The communication thread marks each collective it runs (kind, group, the
// group's sequence number, start time) on an arrival board: a small shared
// memory segment with one slot per world rank, mapped by every rank of the
// node. A watchdog thread aborts the whole job when the running collective
// exceeds the timeout (comm.init_timeout_seconds until training starts, then
// comm.train_timeout_seconds), naming the collective, its group, its sequence
// number and the ranks of the group that have not arrived at it (with what
// each was last doing), each named with its host. A board is per host (shared
// memory): ranks on other hosts are named as such, their own host's watchdog
// reports what they were doing; a watchdog that can only point at other hosts
// waits 3 s longer, so the one that sees the culprit speaks first. A signal
// that arrives while a collective is stuck gets the same account, without the
// abort (watchdog_signal_received).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

typedef struct ompi_communicator_t* MPI_Comm;

namespace titan::comms {

struct OpMark {
  const char* kind;
  const std::string* group;
  uint64_t group_id;
  int64_t seq;
  const std::vector<int>* members;  // world ranks of the group
};

// Collective over world (agrees on the board's name); starts the watchdog thread.
void watchdog_start(MPI_Comm world);
void watchdog_stop();
// A signal handler's call (async-signal-safe): the job was told to end. If the collective this rank is in
// when the signal arrives has waited, or goes on to wait, 1 s or more, the watchdog says once on stderr whom it
// waits for, with their hosts: when a launcher ends a job because it lost a host, the ranks it can still reach
// name the ranks on the lost host before they are killed. sig 0: forget the signal (a new preemption guard).
void watchdog_signal_received(int sig);
// seconds <= 0: off. `key` is the config key named in the message.
void set_collective_timeout(double seconds, const std::string& key);
// The timeout in force and its config key (<= 0: none): a wait outside the communication thread
// (pipeline point-to-point) applies it itself.
double collective_timeout(std::string* key = nullptr);
// The communication thread, around each MPI call.
void op_begin(const OpMark& op);
void op_end();

}  // namespace titan::comms
