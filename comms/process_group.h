// comms/process_group.h — collectives on tensors over Open MPI.
//
// One ProcessGroup per mesh dimension (an MPI communicator from
// MPI_Comm_split). Every MPI call of the process runs on one communication
// thread, in the order the program issued them, so:
//   - blocking collectives = enqueue + wait;
//   - *_async collectives return a Work whose wait() blocks until done, and
//     the transfer really overlaps the compute issued in between;
//   - all ranks issue collectives in the same order (program order).
// Meta tensors return correctly shaped meta results without communicating.
// Every collective is recorded (kind, group, bytes, busy seconds, and the
// seconds the caller waited = exposed time).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/tensor/cost.h"
#include "src/tensor/tensor.h"

typedef struct ompi_communicator_t* MPI_Comm;

namespace titan::comms {

enum class ReduceOp { Sum, Avg, Max };

// ---- process-wide setup ---------------------------------------------------
// Initializes MPI (MPI_THREAD_MULTIPLE) once; safe without mpirun (world of 1).
void init(int* argc, char*** argv);
void finalize();
bool initialized();
int world_rank();
int world_size();
MPI_Comm world_comm();  // MPI_COMM_WORLD (for parallel HDF5)
// Collectives that run longer than `seconds` abort the job naming themselves and the ranks that have not
// arrived (comms/watchdog.h); `key` is the config key the message names. init() sets 300 s.
void set_collective_timeout(double seconds, const std::string& key);
// Every rank calls it with whether it failed: the lowest failing rank (-1: none), agreed by all. Errors every
// rank meets before any other communication (the config, the layout) end the job cleanly with it: one message,
// from that rank, and MPI_Finalize on every rank, instead of an MPI_Abort per rank.
int lowest_failing_rank(bool failed);
// Ends the whole job promptly (MPI_Abort) after printing the message with the rank.
[[noreturn]] void abort_job(const std::string& message, int code = 1);

// ---- bookkeeping --------------------------------------------------------
struct CommRecord {
  std::string kind, group;
  int64_t bytes = 0;     // payload bytes sent by this rank
  double busy_s = 0;     // time the transfer took on the communication thread
  double exposed_s = 0;  // time the issuing thread blocked waiting for it
};
class CommLog {
 public:
  static CommLog& get();
  void add(const CommRecord& r);
  std::vector<CommRecord> take();  // returns and clears
  void clear();
  bool enabled = true;

 private:
  std::vector<CommRecord> records_;
};

class Work {  // handle of an async collective
 public:
  Work() = default;
  void wait();
  // Runs f on the waiting thread once the transfer is done (e.g. a layout fix-up).
  void then(std::function<void()> f);
  bool valid() const { return state_ != nullptr; }
  struct State;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  // Wraps (and owns a duplicate of) `comm`.
  ProcessGroup(MPI_Comm comm, std::string name);
  // A group with no communication: meta tensors only (planning / simulation).
  // world_ranks: the members in group-rank order (the world a simulation plays).
  static std::shared_ptr<ProcessGroup> fake(int rank, std::vector<int> world_ranks, std::string name);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The group's members as world ranks, in group-rank order (fake groups: the simulated world's).
  const std::vector<int>& world_ranks() const { return *world_ranks_; }
  // What cost traces record of the group (name label, id, world ranks).
  CommGroupRef ref() const { return {name_, id_, world_ranks_}; }
  const std::string& name() const { return name_; }
  bool is_fake() const { return fake_; }

  // Reductions on a bfloat16 wire (wire = DType::BF16, x float32): x's values rounded to bf16 and sent as 2-byte
  // bits, summed as NCCL sums bf16 (each addition in float32, its result rounded to bf16: per hop, in the
  // library's order), the result's float32 values bf16 values (Avg: each rank's rounded value first times
  // bf16(1 / size), rounded, as NCCL's ncclAvg pre-multiplies). Recorded as typed 2-byte traffic; a planned one
  // (meta, fake group) records the 2 bytes without stand-in buffers. A DType::BF16 x (bits) reduces the same way,
  // Sum only.
  Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::Sum, DType wire = DType::F32);
  // Concatenates every rank's x along `dim`; sizes[r] = rank r's extent along
  // dim (empty: all equal to the local extent).
  // wire = DType::BF16 (x float32): x's values rounded to bf16 and moved as 2-byte bits, the result float32
  // (lossless for bf16 values; recorded as typed 2-byte traffic).
  Tensor all_gather(const Tensor& x, int64_t dim = 0, const std::vector<int64_t>& sizes = {},
                    DType wire = DType::F32);
  // Reduces x over ranks and returns this rank's chunk along `dim`; sizes[r]
  // = chunk extents (empty: equal chunks).
  Tensor reduce_scatter(const Tensor& x, int64_t dim = 0, ReduceOp op = ReduceOp::Sum,
                        const std::vector<int64_t>& sizes = {}, DType wire = DType::F32);
  Tensor broadcast(const Tensor& x, int root = 0);
  Tensor all_to_all(const Tensor& x);  // dim 0 split in size() equal chunks
  // Rows along dim 0: send_rows[r] rows to rank r (in rank order); returns the
  // received rows (in source-rank order) and fills recv_rows.
  // Planning (meta tensors or a fake group): planned_recv = the rows expected from each rank (empty: what
  // this rank sends, a balanced exchange); a real exchange learns the counts from the peers.
  // wire = DType::BF16 (x float32): the rows' values rounded to bf16 and moved as 2-byte bits (typed).
  Tensor all_to_all_v(const Tensor& x, const std::vector<int64_t>& send_rows, std::vector<int64_t>* recv_rows,
                      const std::vector<int64_t>& planned_recv = {}, DType wire = DType::F32);
  void send(const Tensor& x, int dst, int tag = 0);
  Tensor recv(const Shape& shape, DType dtype, int src, int tag = 0);
  // Nonblocking point-to-point (pipeline stages), posted and completed on the calling thread, not the
  // communication thread: a transfer waiting for its peer never holds up the collectives queued
  // behind it. wait() polls (sleeping between tests) and aborts the job naming the peer and tag after
  // the collective timeout. Use a group that runs no collectives (DeviceMesh::pp_p2p). Planned
  // (meta / fake): recorded with the peer's world rank and the tag, so a simulation pairs them.
  // wire = DType::BF16 (float32 values): sent as bf16 bits (rounded), received into float32 — both ends alike.
  Work isend(const Tensor& x, int dst, int tag, DType wire = DType::F32);
  // into: a contiguous tensor of that shape and dtype to receive into (a block of a larger one), else a new one.
  std::pair<Tensor, Work> irecv(const Shape& shape, DType dtype, int src, int tag, DType wire = DType::F32,
                                const Tensor& into = Tensor());
  // One step of a ring every member takes at once (async tensor parallel, comms/collective_matmul.h): x sent to
  // group rank dst while a tensor of its shape and dtype comes from src, on the communication thread, whose
  // polling moves it while the caller computes (a pair posted on the calling thread moves only inside its
  // wait); queued in program order as collectives are. Recorded as the send and the receive it is (a plan pairs
  // them as isend / irecv's); wire and into as irecv's.
  std::pair<Tensor, Work> exchange_async(const Tensor& x, int dst, int src, int tag, DType wire = DType::F32,
                                         const Tensor& into = Tensor());
  void barrier();
  // Sub-groups: the ranks of equal color_of(group rank), ordered by key_of
  // (collective over this group). Functions of any member's group rank, so a
  // fake group computes its sub-group's members without communicating.
  std::shared_ptr<ProcessGroup> split(const std::function<int(int)>& color_of, const std::function<int(int)>& key_of,
                                      const std::string& name);

  std::pair<Tensor, Work> all_reduce_async(const Tensor& x, ReduceOp op = ReduceOp::Sum, DType wire = DType::F32);
  std::pair<Tensor, Work> all_gather_async(const Tensor& x, int64_t dim = 0, const std::vector<int64_t>& sizes = {},
                                           DType wire = DType::F32);
  std::pair<Tensor, Work> reduce_scatter_async(const Tensor& x, int64_t dim = 0, ReduceOp op = ReduceOp::Sum,
                                               const std::vector<int64_t>& sizes = {}, DType wire = DType::F32);

 private:
  ProcessGroup() = default;
  std::vector<int64_t> even_sizes(int64_t n, const char* op) const;
  void set_members(std::vector<int> world_ranks);  // world_ranks_ and the id hashed from them and the name
  friend struct GroupAccess;
  MPI_Comm comm_ = nullptr;
  MPI_Comm ring_ = nullptr;  // a duplicate of comm_ for the ring collectives' point-to-point steps
  int rank_ = 0, size_ = 1;
  std::shared_ptr<const std::vector<int>> world_ranks_ = std::make_shared<const std::vector<int>>();
  uint64_t id_ = 0;   // the same on every member: a hash of the name and the world ranks
  int64_t seq_ = 0;   // collectives issued on this group (program order: the same on every member)
  std::string name_;
  bool fake_ = false;
};

using PG = std::shared_ptr<ProcessGroup>;

// Sizes of `n` split into `parts` chunks as torch.chunk does: ceil(n/parts)
// each, the last ones smaller or empty. This is titan's sharding rule.
std::vector<int64_t> chunk_sizes(int64_t n, int64_t parts);

}  // namespace titan::comms
