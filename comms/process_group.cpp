#include "comms/process_group.h"

#include <climits>

#include "comms/hosts.h"
#include "comms/ring.h"
#include "comms/watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sched.h>

#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"
#include "src/tensor/bfloat16.h"
#include "src/tensor/cost.h"

namespace titan::comms {

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The communication thread: runs MPI calls FIFO.
class CommThread {
 public:
  static CommThread& get() {
    static CommThread* t = new CommThread();  // joined by finalize()
    return *t;
  }
  void enqueue(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (th_.joinable()) th_.join();
  }

 private:
  CommThread() : th_([this] { loop(); }) {}
  void loop() {
#ifdef __linux__
    // complete()'s 20 us naps as asked: the default 50 us timer slack made each one ~90 us on a VM
    prctl(PR_SET_TIMERSLACK, 1UL);
#endif
    while (true) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        f = std::move(q_.front());
        q_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  std::thread th_;
};

bool g_init = false;
bool g_we_initialized = false;

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I64: return MPI_INT64_T;
    case DType::I32: return MPI_INT32_T;
    case DType::BF16: return MPI_UINT16_T;  // bits: moved as they are, reduced by bf16_sum_op
    case DType::U8: return MPI_UINT8_T;     // FP8 codes (a float8 wire): moved as they are, never reduced
    default: fail("comms: no MPI type for dtype ", dtype_name(t));
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    abort_job(std::string("MPI error in ") + what + ": " + std::string(msg, len));
  }
}

// Threads blocked in Work::wait on a collective (the communication thread runs FIFO: whatever it completes now
// stands before what they wait for).
std::atomic<int> g_waiters{0};
struct Waiting {  // RAII: this thread waits on the communication thread
  Waiting() { g_waiters.fetch_add(1, std::memory_order_relaxed); }
  ~Waiting() { g_waiters.fetch_sub(1, std::memory_order_relaxed); }
};

// Completes a nonblocking MPI operation from the communication thread. MPI progresses a nonblocking collective (its
// rounds, a large message's fragments) only inside a call, so each poll is a step of the collective. While a thread
// waits on it the rank computes nothing: test in a tight loop (yielding the core to a runnable thread, if any), for up
// to 50 ms of waiting (a peer that late is computing still or a slow link carries the data: on a machine with more
// ranks than cores the spin would take its turns; measured back to back on TP 2 + SP here, a 2 ms bound left 29-47 ms
// of exposed communication a step, 50 ms and none 12-24 ms). Otherwise (a prefetch or a gradient reduction in flight
// under the compute) test in a tight loop for the first ~50 us, then nap 20 us between tests: polling would take the
// core the compute needs (two ranks on two cores). Napping while a thread waits made each collective of a TP step ~1 ms
// on two ranks (one round a nap of ~90 us), 4-5x what the exchange costs.
void complete(MPI_Request* reqs, int n, const char* what) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto waited_since = clock::time_point::max();  // when a waiting thread was first seen (max: none waits)
  int done = 0;
  for (;;) {
    check_mpi(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE), what);
    if (done) return;
    const auto now = clock::now();
    if (g_waiters.load(std::memory_order_relaxed) > 0) {
      if (waited_since == clock::time_point::max()) waited_since = now;
      if (now - waited_since < std::chrono::milliseconds(50)) {
        sched_yield();
        continue;
      }
    } else {
      waited_since = clock::time_point::max();
    }
    if (now - t0 > std::chrono::microseconds(50)) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}
void complete(MPI_Request& req, const char* what) { complete(&req, 1, what); }

// An all-reduce of this many bytes or more runs as a ring reduce-scatter and an all-gather (each rank moves
// 2 (p - 1) / p of the buffer, as NCCL's ring, in 2 (p - 1) steps); below it MPI's own (Open MPI's libnbc: a
// reduce to one rank and a broadcast on under 4 ranks or 64 KiB, fewer steps). Measured on two ranks here
// (titan-bench-collectives): the ring took 1.1-1.9x MPI's time at 64-256 KiB, the same at 1 MiB, 0.85-0.89x at
// 4 MiB and 0.66-0.79x at 16 MiB. The choice depends on the size alone, never on where the ranks run: a
// reduction's bits (its order) are the same on one host and across hosts, so a checkpoint saved on 4 hosts
// resumes bit-exact on one machine (tests/parallel/multihost.py; with the ring within a host and MPI's across,
// the resumed run's lm_head differed). Across hosts the ring's p - 1 lockstep exchanges over links with latency
// are untimed: the namespace cluster's rows (4 ranks on 2 cores) moved 20-40% between repeats of one build.
constexpr int64_t kRingAllReduceBytes = 1 << 20;

// A reduce-scatter as NCCL's ring runs it (comms/ring.h says why not MPI's), on the group's ring communicator;
// scratch from the tensor pool (allocated on the calling thread: no fresh pages on the communication thread).
Tensor ring_scratch(const std::vector<int64_t>& counts, DType t, Device d) {
  if (counts.size() < 2) return empty({0}, t, d);  // a group of one copies its chunk
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  return empty({(counts.size() > 2 ? 2 : 1) * most}, t, d);
}
void ring_reduce_scatter(const Tensor& in, void* out, const std::vector<int64_t>& counts, ReduceOp op,
                         const Tensor& scratch, MPI_Comm ring, const char* what) {
  detail::ring_reduce_scatter(in.raw_data(), out, counts, dtype_size(in.dtype()), mpi_type(in.dtype()),
                              detail::combine_for(in.dtype(), op == ReduceOp::Max), scratch.raw_data(), ring,
                              [what](MPI_Request* r, int n) { complete(r, n, what); });
}

// ---- the bf16 wire ---------------------------------------------------------------
// MPI's reduction of bf16 bits as NCCL sums bf16: each addition in float32, its result rounded to bf16 (nearest
// even), hop by hop in the library's order: the ring's own sum of bf16 bits (comms/ring.h).
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  static const detail::Combine add = detail::combine_for(DType::BF16, /*max=*/false);
  add(in, inout, inout, *len);
}
std::mutex g_bf16_sum_mu;
MPI_Op g_bf16_sum = MPI_OP_NULL;
MPI_Op bf16_sum_op() {
  std::lock_guard<std::mutex> lk(g_bf16_sum_mu);
  if (g_bf16_sum == MPI_OP_NULL) check_mpi(MPI_Op_create(&bf16_sum, /*commute=*/1, &g_bf16_sum), "MPI_Op_create");
  return g_bf16_sum;
}
MPI_Op reduction_op(ReduceOp op, DType t) { return t == DType::BF16 ? bf16_sum_op() : mpi_op(op); }

// A real float32 x's values as bf16 bits in x's shape (rounded to nearest even), what a bf16 wire sends; scale != 1
// (an average's 1 / ranks): each rounded value times bf16(scale), rounded again, as NCCL's bf16 ncclAvg
// pre-multiplies its inputs. Not priced, as autocast's roundings are not: the step on a chip holds these tensors
// in bf16 already (float32 tensors with bf16 values are the CPU's stand-in for them).
Tensor to_bf16_bits(const Tensor& x, double scale = 1.0) {
  Tensor in = x.contiguous();
  Tensor bits = empty(x.shape(), DType::BF16, x.device());
  uint16_t* b = static_cast<uint16_t*>(bits.raw_data());
  const float* v = in.data<float>();
  const int64_t n = x.numel();
  if (scale == 1.0) {
    float_to_bf16_bits(v, b, n);
  } else {
    const float s = round_to_bf16((float)scale);
    for (int64_t i = 0; i < n; ++i) b[i] = float_to_bf16_bits(round_to_bf16(v[i]) * s);
  }
  return bits;
}
// A bf16 wire's result into float32 `out` (contiguous, as many elements).
void from_bf16_bits(const Tensor& bits, const Tensor& out) {
  bf16_bits_to_float(static_cast<const uint16_t*>(bits.raw_data()), out.data<float>(), out.numel());
}
// The bytes of a bf16 (bits) tensor into another of its size (a group of one's reduction).
void copy_bits(const Tensor& dst, const Tensor& src) { std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes()); }

// A reduction's wire: x's own dtype, or bf16 for a float32 x (refused otherwise, naming the collective).
bool bf16_wire(const Tensor& x, DType wire, ReduceOp op, const char* what, const std::string& group) {
  TITAN_CHECK(wire == DType::F32 || wire == DType::BF16, what, ": wire dtype ", dtype_name(wire), " (group '", group,
              "'): float32 (as the tensor is) or bfloat16");
  const bool bf16 = wire == DType::BF16 || x.dtype() == DType::BF16;
  TITAN_CHECK(!bf16 || x.dtype() == DType::F32 || x.dtype() == DType::BF16, what, ": a bf16 wire carries float32 "
              "values or bf16 bits, got ", dtype_name(x.dtype()), " ", shape_str(x.shape()), " (group '", group, "')");
  TITAN_CHECK(!bf16 || op != ReduceOp::Max, what, ": max on a bf16 wire (", shape_str(x.shape()), ", group '", group,
              "'): reduce its float32 values");
  TITAN_CHECK(!(x.dtype() == DType::BF16 && op == ReduceOp::Avg), what, ": avg of bf16 bits (", shape_str(x.shape()),
              ", group '", group, "'): pass the float32 values with wire bfloat16");
  return bf16 && x.dtype() == DType::F32;
}
// What a planned transfer of float32 values records: on a bf16 wire 2 bytes an element, typed, and no stand-in
// buffers (on a chip the tensors are bf16 already; the plan's memory is the float32 stand-in's, priced by dtype).
double recorded_bytes(double f32_bytes, bool to_wire) { return to_wire ? f32_bytes / 2 : f32_bytes; }
DType recorded_dtype(DType t, bool to_wire) { return to_wire ? DType::BF16 : t; }
}  // namespace

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int64_t trace_id = -1;  // record_comm_start id (simulation input)
  int64_t trace_id2 = -1;  // a second record the wait closes (an exchange's send; its receive is trace_id)
  CommRecord rec;
  std::function<void()> finish;  // runs on the waiting thread after completion
  std::function<bool()> test;    // point-to-point: polled by the waiting thread until true (done stays false)
  bool logged = true;            // CommLog keeps its record (not a planned collective: meta or fake group)
};

void Work::then(std::function<void()> f) {
  TITAN_CHECK(state_ != nullptr, "Work::then: no pending collective");
  auto prev = std::move(state_->finish);
  state_->finish = [prev = std::move(prev), f = std::move(f)] {
    if (prev) prev();
    f();
  };
}

void Work::wait() {
  if (!state_) return;
  const double t0 = now();
  record_comm_wait(state_->trace_id);  // the wait begins (measured timelines: the stall follows)
  if (state_->trace_id2 >= 0) record_comm_wait(state_->trace_id2);
  if (state_->test) {
    std::string key;
    const double limit = collective_timeout(&key);
    int spins = 0;
    while (!state_->test()) {
      if (++spins > 50) std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (limit > 0 && now() - t0 > limit)
        abort_job("point-to-point " + state_->rec.kind + " on group '" + state_->rec.group + "' did not complete in " +
                  std::to_string((int)limit) + " s (" + key + "): its peer stage never arrived");
    }
  } else {
    Waiting waiting;
    std::unique_lock<std::mutex> lk(state_->mu);
    state_->cv.wait(lk, [&] { return state_->done; });
  }
  if (state_->finish) {
    state_->finish();
    state_->finish = nullptr;
  }
  state_->rec.exposed_s += now() - t0;
  if (state_->logged && CommLog::get().enabled) CommLog::get().add(state_->rec);
  state_.reset();
}

struct GroupAccess {  // what submit() reads of a group
  static int64_t next_seq(ProcessGroup& g) { return ++g.seq_; }
  static int64_t seq(const ProcessGroup& g) { return g.seq_; }
  static uint64_t id(const ProcessGroup& g) { return g.id_; }
  static std::shared_ptr<const std::vector<int>> members(const ProcessGroup& g) { return g.world_ranks_; }
};

namespace {
// Runs `body` on the communication thread; returns its Work. The watchdog sees it from start to end.
Work submit(const std::string& kind, ProcessGroup& pg, int64_t bytes, std::function<void()> body,
           int64_t trace_id = -1, bool collective = true, int64_t trace_id2 = -1) {
  auto st = std::make_shared<Work::State>();
  st->trace_id = trace_id;
  st->trace_id2 = trace_id2;
  const std::string group = pg.name();
  st->rec = {kind, group, bytes, 0, 0};
  // collectives are numbered in program order, the same on every member (point-to-point ops are not)
  const int64_t seq = collective ? GroupAccess::next_seq(pg) : GroupAccess::seq(pg);
  const uint64_t gid = GroupAccess::id(pg);
  auto members = GroupAccess::members(pg);
  CommThread::get().enqueue([st, body = std::move(body), kind, group, seq, gid, members] {
    const double t0 = now();
    op_begin({kind.c_str(), &group, gid, seq, members.get()});
    try {  // the communication thread runs MPI and the ring's reductions; anything thrown there ends the job
      body();
      op_end();
    } catch (const std::exception& e) {
      abort_job("communication thread, " + kind + " on group '" + group + "': " + e.what());
    } catch (...) {
      abort_job("communication thread, " + kind + " on group '" + group + "': unknown exception");
    }
    std::lock_guard<std::mutex> lk(st->mu);
    st->rec.busy_s = now() - t0;
    st->done = true;
    st->cv.notify_all();
  });
  return Work(st);
}

// A collective with nothing to move: a group of one, or a planned one (meta tensors or a fake group: planning
// neither logs it nor counts it as this process's traffic, and plans stages on several threads).
Work done_work(const std::string& kind, const std::string& group, int64_t bytes, int64_t trace_id, bool planned,
               int64_t trace_id2 = -1) {
  auto st = std::make_shared<Work::State>();
  st->logged = !planned;
  st->trace_id = trace_id;
  st->trace_id2 = trace_id2;
  st->rec = {kind, group, bytes, 0, 0};
  st->done = true;
  return Work(st);
}
}  // namespace

// ---- setup -------------------------------------------------------------------
void init(int* argc, char*** argv) {
  if (g_init) return;
  int already = 0;
  MPI_Initialized(&already);
  if (already) {  // someone else initialized MPI: it must still allow both threads
    int provided = 0;
    MPI_Query_thread(&provided);
    TITAN_CHECK(provided == MPI_THREAD_MULTIPLE, "comms: MPI was initialized with thread level ", provided,
                "; titan needs MPI_THREAD_MULTIPLE");
  }
  if (!already) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    // MPI runs on two threads: collectives on the communication thread, and communicator set-up, parallel
    // HDF5 and checkpoint agreement on the caller's (never on a communicator with work in flight).
    TITAN_CHECK(provided == MPI_THREAD_MULTIPLE, "comms: this MPI provides thread level ", provided,
                " (MPI_THREAD_MULTIPLE = ", MPI_THREAD_MULTIPLE, " needed: titan calls MPI from its communication "
                "thread and its main thread); use an Open MPI built with MPI_THREAD_MULTIPLE support");
    g_we_initialized = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  g_init = true;
  discover_hosts();
  watchdog_start(MPI_COMM_WORLD);
  set_collective_timeout(300, "comm.init_timeout_seconds");  // until the job sets its own
}

void finalize() {
  if (!g_init) return;
  watchdog_stop();
  CommThread::get().stop();
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && g_bf16_sum != MPI_OP_NULL) MPI_Op_free(&g_bf16_sum);
  if (g_we_initialized && !fin) MPI_Finalize();
  g_init = false;
}

bool initialized() { return g_init; }
int world_rank() {
  if (!g_init) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  if (!g_init) return 1;
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

MPI_Comm world_comm() { return MPI_COMM_WORLD; }

int lowest_failing_rank(bool failed) {
  if (!g_init || world_size() == 1) return failed ? 0 : -1;
  int mine = failed ? world_rank() : world_size(), lowest = 0;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return lowest == world_size() ? -1 : lowest;
}

#ifdef TITAN_COVERAGE
extern "C" void __gcov_dump(void);  // gcc's: writes this process's line counts now
#endif

void abort_job(const std::string& message, int code) {
  const Hosts& h = hosts();  // the host too when the job spans several
  const int r = world_rank();
  std::cerr << "[titan rank " << r << "/" << world_size()
            << (h.count() > 1 && r < (int)h.host_of.size() ? " on " + h.name[h.host_of[r]] : std::string())
            << "] fatal: " << message << std::endl;
#ifdef TITAN_COVERAGE
  // the coverage build (scripts/sanitizer_selection.py): MPI_Abort ends the process without the exit that writes
  // its counts, and the failing rank's lines are the ones only this path runs
  __gcov_dump();
#endif
  if (g_init) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

CommLog& CommLog::get() {
  static CommLog* l = new CommLog();
  return *l;
}
void CommLog::add(const CommRecord& r) { records_.push_back(r); }
std::vector<CommRecord> CommLog::take() {
  std::vector<CommRecord> out;
  out.swap(records_);
  return out;
}
void CommLog::clear() { records_.clear(); }

std::vector<int64_t> chunk_sizes(int64_t n, int64_t parts) {
  const int64_t c = (n + parts - 1) / parts;
  std::vector<int64_t> s(parts);
  for (int64_t r = 0; r < parts; ++r) s[r] = std::max<int64_t>(0, std::min(c, n - r * c));
  return s;
}

// ---- groups ----------------------------------------------------------------
ProcessGroup::ProcessGroup(MPI_Comm comm, std::string name) : name_(std::move(name)) {
  TITAN_CHECK(g_init, "ProcessGroup: call comms::init first");
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_dup(comm_, &ring_);  // the ring collectives' point-to-point traffic, apart from the callers' own
  MPI_Comm_set_errhandler(ring_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Group mine, world;
  MPI_Comm_group(comm_, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(size_), global(size_);
  for (int r = 0; r < size_; ++r) local[r] = r;
  MPI_Group_translate_ranks(mine, size_, local.data(), world, global.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  set_members(std::move(global));
}

void ProcessGroup::set_members(std::vector<int> global) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the name and the world ranks
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (char ch : name_) mix((uint8_t)ch);
  for (int g : global) mix((uint64_t)g + 1);
  id_ = h;
  world_ranks_ = std::make_shared<const std::vector<int>>(std::move(global));
}

std::shared_ptr<ProcessGroup> ProcessGroup::fake(int rank, std::vector<int> world_ranks, std::string name) {
  TITAN_CHECK(!world_ranks.empty() && rank >= 0 && rank < (int)world_ranks.size(), "ProcessGroup::fake: rank ", rank,
              " outside the ", world_ranks.size(), " members of group '", name, "'");
  std::shared_ptr<ProcessGroup> pg(new ProcessGroup());
  pg->rank_ = rank;
  pg->size_ = (int)world_ranks.size();
  pg->name_ = std::move(name);
  pg->fake_ = true;
  pg->set_members(std::move(world_ranks));
  return pg;
}

ProcessGroup::~ProcessGroup() {
  if (comm_ && g_init) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
      MPI_Comm c = comm_, r = ring_;
      Work w = submit("comm_free", *this, 0, [c, r]() mutable {
        MPI_Comm_free(&r);
        MPI_Comm_free(&c);
      });
      w.wait();
    }
  }
}

std::vector<int64_t> ProcessGroup::even_sizes(int64_t n, const char* op) const {
  TITAN_CHECK(n % size_ == 0, op, ": extent ", n, " is not divisible by the ", size_, " ranks of group '", name_,
              "' (pass explicit sizes for an uneven split)");
  return std::vector<int64_t>(size_, n / size_);
}

namespace {
// [a chunk per rank along dim] laid out contiguously rank after rank
Tensor chunks_contiguous(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  if (dim == 0) return x.contiguous();
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (auto s : sizes) {
    parts.push_back(slice(x, dim, at, at + s).contiguous().reshape({-1}));
    at += s;
  }
  return concat(parts, 0);
}
}  // namespace

std::pair<Tensor, Work> ProcessGroup::all_reduce_async(const Tensor& x, ReduceOp op, DType wire) {
  NoGradGuard ng;
  const bool to_wire = bf16_wire(x, wire, op, "all_reduce", name_);
  if (to_wire && !x.is_meta() && !fake_) {  // Avg: NCCL's pre-multiplied sum
    auto [sum, w] = all_reduce_async(to_bf16_bits(x, op == ReduceOp::Avg ? 1.0 / size_ : 1.0), ReduceOp::Sum);
    Tensor out = empty(x.shape(), DType::F32, x.device());
    w.then([sum = sum, out] { from_bf16_bits(sum, out); });
    return {out, w};
  }
  Tensor in = x.contiguous();
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const int64_t bytes = x.nbytes();
  const int64_t tid = record_comm_start("all_reduce", ref(), recorded_bytes((double)bytes, to_wire),
                                        recorded_dtype(x.dtype(), to_wire));
  if (x.is_meta() || fake_ || size_ == 1) {
    if (!x.is_meta()) x.dtype() == DType::BF16 ? copy_bits(out, in) : copy_(out, in);
    return {out, done_work("all_reduce", name_, bytes, tid, x.is_meta() || fake_)};
  }
  MPI_Comm c = comm_, ring = ring_;
  Work w;
  if (bytes >= kRingAllReduceBytes) {  // ring reduce-scatter into this rank's part of out, all-gather
    const std::vector<int64_t> counts = chunk_sizes(in.numel(), size_);
    int64_t at = 0;
    for (int r = 0; r < rank_; ++r) at += counts[r];
    Tensor scratch = ring_scratch(counts, in.dtype(), in.device());
    const size_t mine = (size_t)at * dtype_size(in.dtype());
    w = submit("all_reduce", *this, bytes, [=]() {
      ring_reduce_scatter(in, static_cast<char*>(out.raw_data()) + mine, counts, op, scratch, ring, "all_reduce");
      detail::ring_all_gather(out.raw_data(), counts, dtype_size(in.dtype()), mpi_type(in.dtype()), ring,
                              [](MPI_Request* r, int k) { complete(r, k, "all_reduce"); });
    }, tid);
  } else {  // below the threshold: MPI's own (Open MPI's libnbc picks its algorithm)
    const MPI_Op mop = reduction_op(op, x.dtype());
    w = submit("all_reduce", *this, bytes, [=]() {
      MPI_Request req;
      check_mpi(MPI_Iallreduce(in.raw_data(), out.raw_data(), (int)in.numel(), mpi_type(in.dtype()), mop, c, &req),
                "all_reduce");
      complete(req, "all_reduce");
    }, tid);
  }
  if (op == ReduceOp::Avg) {  // MPI sums; the mean is taken on the waiting thread (async and blocking alike)
    const double scale = 1.0 / size_;
    w.then([out, scale] {
      NoGradGuard g;
      mul_(out, scale);
    });
  }
  return {out, w};
}

Tensor ProcessGroup::all_reduce(const Tensor& x, ReduceOp op, DType wire) {
  auto [out, w] = all_reduce_async(x, op, wire);
  w.wait();
  return out;
}

std::pair<Tensor, Work> ProcessGroup::all_gather_async(const Tensor& x, int64_t dim, const std::vector<int64_t>& sz,
                                                       DType wire) {
  NoGradGuard ng;
  dim = wrap_dim(dim, x.dim(), "all_gather");
  std::vector<int64_t> sizes = sz.empty() ? std::vector<int64_t>(size_, x.size(dim)) : sz;
  TITAN_CHECK((int)sizes.size() == size_ && sizes[rank_] == x.size(dim), "all_gather: sizes must list ", size_,
              " extents with this rank's equal to ", x.size(dim), " (group '", name_, "')");
  const bool to_wire = bf16_wire(x, wire, ReduceOp::Sum, "all_gather", name_);
  if (dim != 0 && !x.is_meta() && !fake_) {  // gather along dim 0 of the transpose, transpose back on wait
    auto [gt, w] = all_gather_async(transpose(x, 0, dim).contiguous(), 0, sizes, wire);
    Shape os = x.shape();
    os[dim] = gt.size(0);
    Tensor out = empty(os, x.dtype(), x.device());
    w.then([gt = gt, out, dim] {
      NoGradGuard g;
      copy_(out, transpose(gt, 0, dim));
    });
    return {out, w};
  }
  if (to_wire && !x.is_meta() && !fake_) {  // dim 0
    auto [bits, w] = all_gather_async(to_bf16_bits(x), dim, sizes);
    Tensor out = empty(bits.shape(), DType::F32, x.device());
    w.then([bits = bits, out] { from_bf16_bits(bits, out); });
    return {out, w};
  }
  Shape os = x.shape();
  int64_t total = 0;
  for (auto s : sizes) total += s;
  os[dim] = total;
  Tensor out = empty(os, x.dtype(), x.device());
  const int64_t bytes = x.nbytes();
  const int64_t tid = record_comm_start("all_gather", ref(), recorded_bytes((double)out.nbytes(), to_wire),
                                        recorded_dtype(x.dtype(), to_wire));
  if (x.is_meta() || fake_) return {out, done_work("all_gather", name_, bytes, tid, true)};
  const int64_t row = numel(Shape(x.shape().begin() + 1, x.shape().end()));  // elements per row of dim 0
  TITAN_CHECK(out.numel() <= (int64_t)INT_MAX, "all_gather: ", out.numel(), " gathered elements (", shape_str(os),
              ", group '", name_, "') exceed MPI's int counts (", INT_MAX, "); gather in smaller pieces");
  std::vector<int> counts(size_), displs(size_);
  int64_t at = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = (int)(sizes[r] * row);
    displs[r] = (int)at;
    at += counts[r];
  }
  Tensor in = x.contiguous();
  MPI_Comm c = comm_;
  Work w = submit("all_gather", *this, bytes, [=]() {
    MPI_Request req;
    check_mpi(MPI_Iallgatherv(in.raw_data(), (int)in.numel(), mpi_type(in.dtype()), out.raw_data(), counts.data(),
                              displs.data(), mpi_type(in.dtype()), c, &req),
              "all_gather");
    complete(req, "all_gather");
  }, tid);
  return {out, w};
}

Tensor ProcessGroup::all_gather(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes, DType wire) {
  auto [out, w] = all_gather_async(x, dim, sizes, wire);
  w.wait();
  return out;
}

std::pair<Tensor, Work> ProcessGroup::reduce_scatter_async(const Tensor& x, int64_t dim, ReduceOp op,
                                                           const std::vector<int64_t>& sz, DType wire) {
  NoGradGuard ng;
  dim = wrap_dim(dim, x.dim(), "reduce_scatter");
  TITAN_CHECK(op != ReduceOp::Max, "reduce_scatter: max is not supported (sum or avg)");
  std::vector<int64_t> sizes = sz.empty() ? even_sizes(x.size(dim), "reduce_scatter") : sz;
  int64_t total = 0;
  for (auto s : sizes) total += s;
  TITAN_CHECK((int)sizes.size() == size_ && total == x.size(dim), "reduce_scatter: sizes must list ", size_,
              " extents summing to ", x.size(dim), " (group '", name_, "')");
  Shape os = x.shape();
  os[dim] = sizes[rank_];
  const bool to_wire = bf16_wire(x, wire, op, "reduce_scatter", name_);
  if (to_wire && !x.is_meta() && !fake_) {  // every rank's chunks rank after rank, as bits [n]; Avg pre-multiplied
    const int64_t row = x.numel() / std::max<int64_t>(1, x.size(dim));
    std::vector<int64_t> flat(sizes.size());
    for (size_t r = 0; r < sizes.size(); ++r) flat[r] = sizes[r] * row;
    Tensor chunks = chunks_contiguous(x, dim, sizes).reshape({-1});
    auto [bits, w] =
        reduce_scatter_async(to_bf16_bits(chunks, op == ReduceOp::Avg ? 1.0 / size_ : 1.0), 0, ReduceOp::Sum, flat);
    Tensor out = empty(os, DType::F32, x.device());
    w.then([bits = bits, out] { from_bf16_bits(bits, out); });
    return {out, w};
  }
  Tensor out = empty(os, x.dtype(), x.device());
  const int64_t bytes = x.nbytes();
  const int64_t tid = record_comm_start("reduce_scatter", ref(), recorded_bytes((double)bytes, to_wire),
                                        recorded_dtype(x.dtype(), to_wire));
  if (x.is_meta() || fake_) return {out, done_work("reduce_scatter", name_, bytes, tid, true)};
  const int64_t row = x.numel() / std::max<int64_t>(1, x.size(dim));
  std::vector<int64_t> counts(size_);
  for (int r = 0; r < size_; ++r) counts[r] = sizes[r] * row;
  Tensor in = chunks_contiguous(x, dim, sizes);
  const double scale = op == ReduceOp::Avg ? 1.0 / size_ : 1.0;
  Tensor scratch = ring_scratch(counts, in.dtype(), in.device());
  MPI_Comm ring = ring_;
  Work w = submit("reduce_scatter", *this, bytes, [=]() {
    ring_reduce_scatter(in, out.raw_data(), counts, ReduceOp::Sum, scratch, ring, "reduce_scatter");
  }, tid);
  if (scale != 1.0)  // the mean on the waiting thread (async and blocking alike)
    w.then([out, scale] {
      NoGradGuard g;
      mul_(out, scale);
    });
  return {out, w};
}

Tensor ProcessGroup::reduce_scatter(const Tensor& x, int64_t dim, ReduceOp op, const std::vector<int64_t>& sizes,
                                    DType wire) {
  auto [out, w] = reduce_scatter_async(x, dim, op, sizes, wire);
  w.wait();
  return out;
}

Tensor ProcessGroup::broadcast(const Tensor& x, int root) {
  NoGradGuard ng;
  TITAN_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside group '", name_, "' of ", size_);
  Tensor out = x.clone().detach();
  if (x.is_meta() || fake_ || size_ == 1) return out;
  MPI_Comm c = comm_;
  submit("broadcast", *this, x.nbytes(), [=]() {
    check_mpi(MPI_Bcast(out.raw_data(), (int)out.numel(), mpi_type(out.dtype()), root, c), "broadcast");
  }).wait();
  return out;
}

Tensor ProcessGroup::all_to_all(const Tensor& x) {
  std::vector<int64_t> rows = even_sizes(x.size(0), "all_to_all");
  std::vector<int64_t> recv;
  return all_to_all_v(x, rows, &recv);
}

Tensor ProcessGroup::all_to_all_v(const Tensor& x, const std::vector<int64_t>& send_rows,
                                  std::vector<int64_t>* recv_rows, const std::vector<int64_t>& planned_recv,
                                  DType wire) {
  NoGradGuard ng;
  const bool to_wire = bf16_wire(x, wire, ReduceOp::Sum, "all_to_all_v", name_);
  if (to_wire && !x.is_meta() && !fake_) {
    Tensor bits = all_to_all_v(to_bf16_bits(x), send_rows, recv_rows, planned_recv);
    Tensor out = empty(bits.shape(), DType::F32, x.device());
    from_bf16_bits(bits, out);
    return out;
  }
  TITAN_CHECK((int)send_rows.size() == size_, "all_to_all_v: send_rows must have ", size_, " entries (group '",
              name_, "')");
  int64_t total = 0;
  for (auto s : send_rows) total += s;
  TITAN_CHECK(total == x.size(0), "all_to_all_v: send_rows sum to ", total, " but x has ", x.size(0), " rows");
  const int64_t row = x.size(0) ? x.numel() / x.size(0) : numel(Shape(x.shape().begin() + 1, x.shape().end()));
  std::vector<int64_t> rr(size_);
  if (x.is_meta() || fake_) {  // planning: what the caller expects to receive, else a balanced exchange
    TITAN_CHECK(planned_recv.empty() || (int)planned_recv.size() == size_, "all_to_all_v: planned_recv must have ",
                size_, " entries (group '", name_, "')");
    rr = planned_recv.empty() ? send_rows : planned_recv;
    if (size_ > 1) {  // the real exchange's count all-to-all, then the host sizes the buffers with the counts
      record_comm_wait(record_comm_start("all_to_all", ref(), 8.0 * size_, DType::I64));
      record_cost("all_to_all_counts", 0, 0, KernelClass::HostSync);
    }
  } else if (size_ == 1) {
    rr = send_rows;
  } else {
    MPI_Comm c = comm_;
    std::vector<int64_t> sr = send_rows;
    const int64_t cid = record_comm_start("all_to_all", ref(), 8.0 * size_, DType::I64);  // the counts, as planned below
    submit("all_to_all_counts", *this, 8 * size_, [&, c]() {
      check_mpi(MPI_Alltoall(sr.data(), 1, MPI_INT64_T, rr.data(), 1, MPI_INT64_T, c), "all_to_all_v counts");
    }).wait();
    record_comm_wait(cid);
    record_cost("all_to_all_counts", 0, 0, KernelClass::HostSync);
  }
  int64_t rtotal = 0;
  for (auto r : rr) rtotal += r;
  Shape os = x.shape();
  os[0] = rtotal;
  Tensor out = empty(os, x.dtype(), x.device());
  // priced by the larger of what this rank sends and receives (under uneven routing the busiest rank receives more)
  const int64_t tid =
      record_comm_start("all_to_all", ref(), recorded_bytes((double)std::max(x.nbytes(), out.nbytes()), to_wire),
                        recorded_dtype(x.dtype(), to_wire));
  if (recv_rows) *recv_rows = rr;
  if (x.is_meta() || fake_) {
    record_comm_wait(tid);
    return out;
  }
  Tensor in = x.contiguous();
  if (size_ == 1) {
    x.dtype() == DType::BF16 ? copy_bits(out, in) : copy_(out, in);
    record_comm_wait(tid);
    return out;
  }
  std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
  int64_t a = 0, b = 0;
  for (int r = 0; r < size_; ++r) {
    sc[r] = (int)(send_rows[r] * row);
    sd[r] = (int)a;
    a += sc[r];
    rc[r] = (int)(rr[r] * row);
    rd[r] = (int)b;
    b += rc[r];
  }
  MPI_Comm c = comm_;
  submit("all_to_all_v", *this, x.nbytes(), [=]() {
    check_mpi(MPI_Alltoallv(in.raw_data(), sc.data(), sd.data(), mpi_type(in.dtype()), out.raw_data(), rc.data(),
                            rd.data(), mpi_type(in.dtype()), c),
              "all_to_all_v");
  }, tid).wait();
  return out;
}

void ProcessGroup::send(const Tensor& x, int dst, int tag) {
  if (x.is_meta() || fake_) return;
  Tensor in = x.contiguous();
  MPI_Comm c = comm_;
  submit("send", *this, x.nbytes(), [=]() {
    check_mpi(MPI_Send(in.raw_data(), (int)in.numel(), mpi_type(in.dtype()), dst, tag, c), "send");
  }, -1, /*collective=*/false).wait();
}

Tensor ProcessGroup::recv(const Shape& shape, DType dtype, int src, int tag) {
  Tensor out = empty(shape, dtype, fake_ ? Device::Meta : default_device());
  if (out.is_meta()) return out;
  MPI_Comm c = comm_;
  submit("recv", *this, 0, [=]() {
    check_mpi(MPI_Recv(out.raw_data(), (int)out.numel(), mpi_type(dtype), src, tag, c, MPI_STATUS_IGNORE), "recv");
  }, -1, /*collective=*/false).wait();
  return out;
}

namespace {
// A point-to-point Work: the request is tested by the waiting thread (Work::wait polls `test`).
Work p2p_work(const char* kind, const std::string& group, int64_t bytes, int64_t trace_id,
              std::shared_ptr<MPI_Request> req, Tensor keep) {
  auto st = std::make_shared<Work::State>();
  st->trace_id = trace_id;
  st->rec = {kind, group, bytes, 0, 0};
  st->test = [req, keep, kind]() {
    int done = 0;
    check_mpi(MPI_Test(req.get(), &done, MPI_STATUS_IGNORE), kind);
    return done != 0;
  };
  return Work(st);
}
}  // namespace

Work ProcessGroup::isend(const Tensor& x, int dst, int tag, DType wire) {
  TITAN_CHECK(dst >= 0 && dst < size_ && dst != rank_, "isend: destination ", dst, " is not another rank of group '",
              name_, "' (", size_, " ranks)");
  const bool to_wire = bf16_wire(x, wire, ReduceOp::Sum, "isend", name_);
  if (to_wire && !x.is_meta() && !fake_) return isend(to_bf16_bits(x), dst, tag);
  const int64_t tid = record_p2p_start(/*send=*/true, ref(), recorded_bytes((double)x.nbytes(), to_wire),
                                       (*world_ranks_)[dst], tag, recorded_dtype(x.dtype(), to_wire));
  if (x.is_meta() || fake_) return done_work("send", name_, x.nbytes(), tid, true);
  Tensor in = x.contiguous();
  auto req = std::make_shared<MPI_Request>();
  check_mpi(MPI_Isend(in.raw_data(), (int)in.numel(), mpi_type(in.dtype()), dst, tag, comm_, req.get()), "isend");
  return p2p_work("send", name_, x.nbytes(), tid, req, in);  // `in` lives until the send completes
}

std::pair<Tensor, Work> ProcessGroup::irecv(const Shape& shape, DType dtype, int src, int tag, DType wire,
                                             const Tensor& into) {
  TITAN_CHECK(src >= 0 && src < size_ && src != rank_, "irecv: source ", src, " is not another rank of group '", name_,
              "' (", size_, " ranks)");
  TITAN_CHECK(!into.defined() || (into.shape() == shape && into.dtype() == dtype && into.is_contiguous() &&
                                  into.is_meta() == (fake_ || default_device() == Device::Meta)),
              "irecv: the destination must be a contiguous ", shape_str(shape), " ", dtype_name(dtype),
              " tensor on the group's device, got ", shape_str(into.shape()), " ", dtype_name(into.dtype()));
  TITAN_CHECK(wire == DType::F32 || (wire == DType::BF16 && (dtype == DType::F32 || dtype == DType::BF16)),
              "irecv: a ", dtype_name(dtype), " tensor on a ", dtype_name(wire), " wire (group '", name_,
              "'): float32 values on a bfloat16 wire, or a tensor's own dtype");
  const bool to_wire = wire == DType::BF16 && dtype == DType::F32;
  const Device device = fake_ ? Device::Meta : default_device();
  if (to_wire && device != Device::Meta) {
    auto [bits, w] = irecv(shape, DType::BF16, src, tag);
    Tensor out = into.defined() ? into : empty(shape, DType::F32, device);
    w.then([bits = bits, out] { from_bf16_bits(bits, out); });
    return {out, w};
  }
  Tensor out = into.defined() ? into : empty(shape, dtype, device);
  const int64_t tid = record_p2p_start(/*send=*/false, ref(), recorded_bytes((double)out.nbytes(), to_wire),
                                       (*world_ranks_)[src], tag, recorded_dtype(out.dtype(), to_wire));
  if (out.is_meta()) return {out, done_work("recv", name_, 0, tid, true)};
  auto req = std::make_shared<MPI_Request>();
  check_mpi(MPI_Irecv(out.raw_data(), (int)out.numel(), mpi_type(dtype), src, tag, comm_, req.get()), "irecv");
  return {out, p2p_work("recv", name_, out.nbytes(), tid, req, out)};
}

std::pair<Tensor, Work> ProcessGroup::exchange_async(const Tensor& x, int dst, int src, int tag, DType wire,
                                                     const Tensor& into) {
  NoGradGuard ng;
  TITAN_CHECK(dst >= 0 && dst < size_ && dst != rank_ && src >= 0 && src < size_ && src != rank_, "exchange: send to ",
              dst, " and receive from ", src, ": both must be other ranks of group '", name_, "' (", size_, " ranks)");
  const bool to_wire = bf16_wire(x, wire, ReduceOp::Sum, "exchange", name_);
  const Device device = fake_ ? Device::Meta : default_device();
  const DType got = to_wire ? DType::F32 : x.dtype();
  TITAN_CHECK(!into.defined() || (into.shape() == x.shape() && into.dtype() == got && into.is_contiguous() &&
                                  into.is_meta() == (device == Device::Meta)),
              "exchange: the destination must be a contiguous ", shape_str(x.shape()), " ", dtype_name(got),
              " tensor on the group's device, got ", shape_str(into.shape()), " ", dtype_name(into.dtype()));
  if (to_wire && !x.is_meta() && !fake_) {  // bf16 bits both ways, float32 values on arrival
    Tensor out = into.defined() ? into : empty(x.shape(), DType::F32, device);
    auto [bits, w] = exchange_async(to_bf16_bits(x), dst, src, tag);
    w.then([bits = bits, out] { from_bf16_bits(bits, out); });
    return {out, w};
  }
  const double bytes = recorded_bytes((double)x.nbytes(), to_wire);
  const DType typed = recorded_dtype(x.dtype(), to_wire);
  const int64_t send_id = record_p2p_start(/*send=*/true, ref(), bytes, (*world_ranks_)[dst], tag, typed);
  const int64_t recv_id = record_p2p_start(/*send=*/false, ref(), bytes, (*world_ranks_)[src], tag, typed);
  Tensor out = into.defined() ? into : empty(x.shape(), got, device);
  if (x.is_meta() || fake_) return {out, done_work("exchange", name_, x.nbytes(), recv_id, true, send_id)};
  Tensor in = x.contiguous();
  MPI_Comm c = comm_;
  Work w = submit(
      "exchange", *this, x.nbytes(),
      [in, out, c, dst, src, tag]() {
        MPI_Request reqs[2];
        const MPI_Datatype t = mpi_type(in.dtype());
        check_mpi(MPI_Isend(in.raw_data(), (int)in.numel(), t, dst, tag, c, &reqs[0]), "exchange");
        check_mpi(MPI_Irecv(out.raw_data(), (int)out.numel(), t, src, tag, c, &reqs[1]), "exchange");
        complete(reqs, 2, "exchange");
      },
      recv_id, /*collective=*/false, send_id);
  return {out, w};
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(const std::function<int(int)>& color_of,
                                                   const std::function<int(int)>& key_of, const std::string& name) {
  const int color = color_of(rank_), key = key_of(rank_);
  if (fake_) {
    std::vector<std::pair<int, int>> m;  // (key, group rank) of the members of this color
    for (int r = 0; r < size_; ++r)
      if (color_of(r) == color) m.emplace_back(key_of(r), r);
    std::stable_sort(m.begin(), m.end());
    std::vector<int> world;
    int me = 0;
    for (size_t i = 0; i < m.size(); ++i) {
      if (m[i].second == rank_) me = (int)i;
      world.push_back((*world_ranks_)[m[i].second]);
    }
    return fake(me, std::move(world), name);
  }
  MPI_Comm c = comm_, out = nullptr;
  submit("comm_split", *this, 0, [&, c]() { check_mpi(MPI_Comm_split(c, color, key, &out), "comm_split"); }).wait();
  auto pg = std::make_shared<ProcessGroup>(out, name);
  MPI_Comm_free(&out);
  return pg;
}

void ProcessGroup::barrier() {
  if (fake_ || size_ == 1) return;
  MPI_Comm c = comm_;
  submit("barrier", *this, 0, [=]() { check_mpi(MPI_Barrier(c), "barrier"); }).wait();
}

}  // namespace titan::comms
