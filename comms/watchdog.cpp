#include "comms/watchdog.h"

#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "comms/hosts.h"
#include "comms/process_group.h"

namespace titan::comms {

namespace {
struct Slot {  // one world rank's last collective
  std::atomic<uint64_t> group_id;
  std::atomic<int64_t> seq;
  std::atomic<int64_t> start_ns;  // 0: none yet
  std::atomic<int32_t> busy;
  std::atomic<int64_t> alive_ns;  // the rank's watchdog thread beats every 200 ms; a stopped process goes stale
  char kind[20];
  char group[32];
};

constexpr int kTickMs = 200;   // the watchdog's heartbeat and check period
constexpr double kStuckS = 1.0;  // a collective waiting this long when a signal arrives is reported as stuck
std::atomic<int> g_signal{0};         // the first signal received since the last reset (0: none)
std::atomic<int64_t> g_signal_ns{0};  // when it arrived (steady clock)

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Watchdog {
  Slot* board = nullptr;
  int rank = 0, world = 1;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread th;
  double timeout_s = 0;
  std::string key;
  // the running collective of this rank (copies: the pointers in OpMark live only during the op)
  bool busy = false;
  std::string kind, group;
  uint64_t group_id = 0;
  int64_t seq = 0, start_ns = 0;
  std::vector<int> members;
  int64_t reported_signal_ns = 0;  // the signal last reported (its arrival time)

  // The members of the running collective that have not arrived (or do not answer), each with its host and
  // what it was last doing; `local_missing`: one of them is on this host and not itself waiting on someone.
  // This host's members come from the board; members on other hosts, grouped by host, are that host's
  // watchdog's to describe (it sees their slots). Called with `mu` held.
  std::string describe_missing(bool* local_missing, bool* any_remote) const {
    const Hosts& h = hosts();
    const bool placed = (int)h.host_of.size() == world;
    std::string missing;
    *local_missing = *any_remote = false;
    std::vector<std::vector<int>> remote(placed ? h.count() : 0);
    for (int m : members) {
      if (m == rank) continue;
      if (placed && m < world && h.host_of[m] != h.host_of[rank]) {
        remote[h.host_of[m]].push_back(m);
        continue;
      }
      std::string what;
      bool waiting_itself = false;
      if (!board || m >= world) {
        what = "unknown";
      } else {
        Slot& s = board[m];
        const int64_t t = s.start_ns.load(), alive = s.alive_ns.load();
        const double silent = alive == 0 ? 0.0 : (double)(now_ns() - alive) / 1e9;
        const bool arrived = t != 0 && s.group_id.load() == group_id && s.seq.load() >= seq;
        if (t == 0) {
          what = "no collective recorded yet";
        } else if (arrived && silent < 1.0) {
          continue;  // there and alive
        } else if (silent < 1.0 && s.busy.load()) {
          // alive and inside an earlier collective of its own: waiting on someone too, not the culprit
          char buf[160];
          std::snprintf(buf, sizeof buf, "alive, still in %s #%lld on '%s': waiting itself", s.kind,
                        (long long)s.seq.load(), s.group);
          what = buf;
          waiting_itself = true;
        } else {
          char state[96], buf[256];
          if (silent >= 1.0) std::snprintf(state, sizeof state, "no heartbeat for %.1f s: stopped, hung or dead", silent);
          else std::snprintf(state, sizeof state, "alive, not arrived");
          std::snprintf(buf, sizeof buf, "%s %s #%lld on '%s' %.1f s ago; %s", s.busy.load() ? "entered" : "finished",
                        s.kind, (long long)s.seq.load(), s.group, (double)(now_ns() - t) / 1e9, state);
          what = buf;
        }
      }
      missing += (missing.empty() ? "" : "; ") + rank_where(m) + " (" + what + ")";
      *local_missing = *local_missing || !waiting_itself;
    }
    for (size_t i = 0; i < remote.size(); ++i) {
      if (remote[i].empty()) continue;
      *any_remote = true;
      std::string list;
      for (int m : remote[i]) list += (list.empty() ? "" : ",") + std::to_string(m);
      missing += (missing.empty() ? "" : "; ") + std::string(remote[i].size() > 1 ? "ranks " : "rank ") + list +
                 " on " + h.name[i] + " (another host: not on " + h.name[h.host_of[rank]] + "'s board)";
    }
    return missing;
  }

  // "<kind> #<seq> on group '<group>'" and "[<ranks>]": the running collective. Called with `mu` held.
  std::string running() const { return kind + " #" + std::to_string(seq) + " on group '" + group + "'"; }
  std::string group_ranks() const {
    std::string ranks;
    for (int m : members) ranks += (ranks.empty() ? "" : ",") + std::to_string(m);
    return "[" + ranks + "]";
  }

  void loop() {
    std::unique_lock<std::mutex> lk(mu);
    while (!stop) {
      cv.wait_for(lk, std::chrono::milliseconds(kTickMs));
      if (board) board[rank].alive_ns.store(now_ns());
      if (stop || !busy) continue;
      const double waited = (double)(now_ns() - start_ns) / 1e9;
      // A signal (the launcher ending the job: Open MPI's mpirun sends SIGTERM to the ranks it can still reach
      // when it loses a host) while this rank is stuck in a collective: say whom it waits for before the
      // SIGKILL that follows, once per signal. Only the collective the signal found running, and only once it
      // has waited kStuckS (one in passing, a preemption mid-step, completes and is not reported).
      const int sig = g_signal.load();
      const int64_t sig_ns = g_signal_ns.load();
      if (sig != 0 && sig_ns != reported_signal_ns && start_ns <= sig_ns && waited >= kStuckS) {
        reported_signal_ns = sig_ns;
        bool local_missing, any_remote;
        const std::string missing = describe_missing(&local_missing, &any_remote);
        const std::string name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "signal " + std::to_string(sig);
        char head[96];
        std::snprintf(head, sizeof head, " has waited %.1f s; group ranks ", waited);
        const std::string line = "[titan] " + rank_where(rank) + ": " + name + " arrived while " + running() + head +
                                 group_ranks() + "; not arrived or unresponsive: " +
                                 (missing.empty() ? "none (all arrived and alive: the transfer itself is stuck)" : missing) +
                                 "\n";
        lk.unlock();  // stderr may block: not while op_begin / op_end wait for the lock
        std::fputs(line.c_str(), stderr);
        std::fflush(stderr);
        lk.lock();
        continue;
      }
      if (timeout_s <= 0 || waited < timeout_s) continue;
      // When every member that may be missing is on another host, this rank waits kRemoteGrace longer, so the
      // watchdog that can name the culprit ends the job first.
      bool local_missing, any_remote;
      const std::string missing = describe_missing(&local_missing, &any_remote);
      constexpr double kRemoteGrace = 3.0;  // seconds
      if (!local_missing && any_remote && waited < timeout_s + kRemoteGrace) continue;
      char head[160];
      std::snprintf(head, sizeof head, " has not completed after %.1f s (%s = %g)", waited, key.c_str(), timeout_s);
      const std::string msg = "collective watchdog (" + rank_where(rank) + "): " + running() + head +
                              "; group ranks " + group_ranks() + "; not arrived or unresponsive: " +
                              (missing.empty() ? "none (all arrived and alive: the transfer itself is stuck)" : missing);
      lk.unlock();
      abort_job(msg, 3);
    }
  }
};

Watchdog* g_wd = nullptr;
}  // namespace

void watchdog_start(MPI_Comm world) {
  if (g_wd) return;
  g_wd = new Watchdog();
  MPI_Comm_rank(world, &g_wd->rank);
  MPI_Comm_size(world, &g_wd->world);
  if (g_wd->world > 1) {
    char name[64] = {0};
    if (g_wd->rank == 0)
      std::snprintf(name, sizeof name, "/titan-watchdog-%d-%lld", (int)getpid(), (long long)now_ns());
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, world);
    const size_t bytes = sizeof(Slot) * (size_t)g_wd->world;
    const int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) g_wd->board = (Slot*)p;
    }
    if (fd >= 0) close(fd);
    MPI_Barrier(world);  // every rank has it mapped: the name can go, on every host (a board per host)
    if (hosts().local_rank[g_wd->rank] == 0) shm_unlink(name);
  }
  g_wd->th = std::thread([] { g_wd->loop(); });
}

void watchdog_stop() {
  if (!g_wd) return;
  {
    std::lock_guard<std::mutex> lk(g_wd->mu);
    g_wd->stop = true;
  }
  g_wd->cv.notify_all();
  if (g_wd->th.joinable()) g_wd->th.join();
  // the board stays mapped until exit (other ranks may still read it)
  delete g_wd;
  g_wd = nullptr;
}

void watchdog_signal_received(int sig) {  // lock-free atomics and clock_gettime: async-signal-safe
  if (sig == 0) {
    g_signal.store(0);
    return;
  }
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) g_signal_ns.store(now_ns());
}

void set_collective_timeout(double seconds, const std::string& key) {
  if (!g_wd) return;
  std::lock_guard<std::mutex> lk(g_wd->mu);
  g_wd->timeout_s = seconds;
  g_wd->key = key;
}

double collective_timeout(std::string* key) {
  if (!g_wd) return 0;
  std::lock_guard<std::mutex> lk(g_wd->mu);
  if (key) *key = g_wd->key;
  return g_wd->timeout_s;
}

void op_begin(const OpMark& op) {
  if (!g_wd) return;
  const int64_t t = now_ns();
  {
    std::lock_guard<std::mutex> lk(g_wd->mu);
    g_wd->busy = true;
    g_wd->kind = op.kind;
    g_wd->group = *op.group;
    g_wd->group_id = op.group_id;
    g_wd->seq = op.seq;
    g_wd->start_ns = t;
    g_wd->members = *op.members;
  }
  if (g_wd->board) {
    Slot& s = g_wd->board[g_wd->rank];
    std::snprintf(s.kind, sizeof s.kind, "%s", op.kind);
    std::snprintf(s.group, sizeof s.group, "%s", op.group->c_str());
    s.group_id.store(op.group_id);
    s.busy.store(1);
    s.start_ns.store(t);
    s.seq.store(op.seq);  // last: a reader that sees the seq sees the rest
  }
}

void op_end() {
  if (!g_wd) return;
  {
    std::lock_guard<std::mutex> lk(g_wd->mu);
    g_wd->busy = false;
  }
  if (g_wd->board) g_wd->board[g_wd->rank].busy.store(0);
}

}  // namespace titan::comms
