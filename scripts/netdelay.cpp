// titan-netdelay — added one-way latency on a host's link where the kernel has no netem (scripts/cluster.sh).
//
//   titan-netdelay --queue Q --delay D      (run inside the host's network namespace; D as tc writes it: 50ms,
//                                            100us, 1s)
//
// Packets reach it through netfilter's queue Q (cluster.sh adds `iptables -A INPUT -i eth0 -j NFQUEUE
// --queue-num Q` in the host's namespace: the way in, where the sender's socket no longer accounts for the
// packet, so TCP's small-queue limit does not throttle a delayed sender): it holds each packet's verdict for D,
// then accepts it, in arrival order (a constant delay keeps the order, as netem's does). Only the packets' metadata cross to user space
// (NFQNL_COPY_META), so the bytes stay in the kernel. Without this process the queue has no reader and the
// kernel drops what is queued: a delayed link never silently becomes an undelayed one.
//
// Why not netem: some kernels (this project's CI machines among them) are built without sch_netem, and no other
// queueing discipline in them delays packets. libnetfilter_queue (Debian's libnetfilter-queue-dev) is the
// library netfilter's own tools use for this queue.
// netinet/in.h (arpa/inet.h) before the kernel headers: glibc then keeps linux/in.h from defining it again
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

struct Held {
  uint32_t id;
  Clock::time_point release;
};

std::deque<Held> held;
std::chrono::nanoseconds delay{0};
volatile sig_atomic_t stop = 0;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "titan-netdelay: %s\n", what.c_str());
  std::exit(1);
}

// "50ms", "100us", "1.5s" -> nanoseconds; refused unless a positive number with its unit, at most 60 s
std::chrono::nanoseconds parse_delay(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  double scale = 0;
  if (unit == "us") scale = 1e3;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "s") scale = 1e9;
  if (errno != 0 || end == s.c_str() || scale == 0 || !(v > 0) || v * scale > 60e9)
    die("--delay takes a time such as 50ms, 100us or 1s (at most 60 s), got '" + s + "'");
  return std::chrono::nanoseconds((int64_t)(v * scale));
}

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* nfa, void*) {
  const nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph) held.push_back({ntohl(ph->packet_id), Clock::now() + delay});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int queue = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--queue" && i + 1 < argc) {
      queue = std::atoi(argv[++i]);
    } else if (a == "--delay" && i + 1 < argc) {
      delay = parse_delay(argv[++i]);
    } else {
      die("usage: titan-netdelay --queue Q --delay D (unknown argument '" + a + "')");
    }
  }
  if (queue < 0 || queue > 65535 || delay.count() == 0) die("usage: titan-netdelay --queue Q --delay D");
  // SIGTERM / SIGINT end it, between packets only: blocked except while it waits in ppoll (a signal arriving
  // between the loop's check and the wait is delivered as the wait starts, not lost until the next packet)
  struct sigaction sa {};
  sa.sa_handler = [](int) { stop = 1; };
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigset_t blocked, waiting;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigprocmask(SIG_BLOCK, &blocked, &waiting);

  prctl(PR_SET_TIMERSLACK, 1000UL);  // wake within ~1 us of a packet's release, not the default 50 us
  nfq_handle* h = nfq_open();
  if (!h) die(std::string("nfq_open: ") + std::strerror(errno) + " (needs root and netfilter's queue)");
  nfq_q_handle* qh = nfq_create_queue(h, (uint16_t)queue, &on_packet, nullptr);
  if (!qh) die("nfq_create_queue " + std::to_string(queue) + ": " + std::strerror(errno) + " (another reader?)");
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) die("nfq_set_mode: " + std::string(std::strerror(errno)));
  nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);  // large (GRO) packets queued whole, not cut up
  nfq_set_queue_maxlen(qh, 1 << 16);                   // the packets in flight over D at the link's rate
  nfnl_rcvbufsiz(nfq_nfnlh(h), 16 << 20);              // and their notices between two reads
  const int fd = nfq_fd(h);
  std::fprintf(stderr, "titan-netdelay: queue %d, delay %.3f ms\n", queue, delay.count() / 1e6);

  alignas(8) static char buf[1 << 16];
  long overruns = 0;
  // every held packet now due, in order (ppoll's nanosecond timeout: sub-millisecond delays hold, give or take
  // the timer's slack, set to ~1 us above)
  auto release_due = [&] {
    const auto now = Clock::now();
    while (!held.empty() && held.front().release <= now) {
      nfq_set_verdict(qh, held.front().id, NF_ACCEPT, 0, nullptr);
      held.pop_front();
    }
  };
  while (!stop) {
    // wait for a packet, or until the oldest held one is due
    timespec ts{}, *timeout = nullptr;
    if (!held.empty()) {
      const int64_t left = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::nanoseconds>(held.front().release - Clock::now()).count());
      ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
      timeout = &ts;
    }
    pollfd p{fd, POLLIN, 0};
    const int r = ppoll(&p, 1, timeout, &waiting);
    if (r < 0 && errno != EINTR) die("poll: " + std::string(std::strerror(errno)));
    if (r > 0) {
      for (;;) {
        const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          nfq_handle_packet(h, buf, (int)n);
          release_due();  // under a steady stream too, not only once the socket is drained
          continue;
        }
        if (n < 0 && errno == ENOBUFS) {  // the kernel dropped notices (their packets are lost: TCP resends)
          if (overruns++ == 0)
            std::fprintf(stderr, "titan-netdelay: receive overrun: packets dropped beyond the shaped loss\n");
          continue;
        }
        break;
      }
    }
    release_due();
  }
  for (const Held& p : held) nfq_set_verdict(qh, p.id, NF_ACCEPT, 0, nullptr);
  nfq_destroy_queue(qh);
  nfq_close(h);
  if (overruns) std::fprintf(stderr, "titan-netdelay: %ld receive overruns (packets lost, resent by TCP)\n", overruns);
  return 0;
}
