#include "job/preemption.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include "comms/watchdog.h"

namespace titan {

namespace {
std::atomic<int> g_signal{0};
struct sigaction g_old_term, g_old_int;

void on_signal(int sig) {
  if (g_signal.load() != 0) _exit(128 + sig);  // the second signal: now
  g_signal.store(sig);
  comms::watchdog_signal_received(sig);  // a collective stuck now is reported with whom it waits for
  const char* msg =
      "\n[titan] signal received: finishing the current step, then writing a checkpoint (send it again to exit "
      "now)\n";
  (void)!write(STDERR_FILENO, msg, std::strlen(msg));
}
}  // namespace

PreemptionGuard::PreemptionGuard() {
  g_signal.store(0);
  comms::watchdog_signal_received(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

PreemptionGuard::~PreemptionGuard() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

int PreemptionGuard::signal() const { return g_signal.load(); }

}  // namespace titan
