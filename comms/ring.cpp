#include "comms/ring.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "src/tensor/bfloat16.h"
#include "src/tensor/error.h"

namespace titan::comms::detail {

namespace {
template <typename T>
void sum(const void* own, const void* in, void* dst, int64_t n) {
  const T* a = static_cast<const T*>(own);
  const T* b = static_cast<const T*>(in);
  T* d = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i];
}
template <typename T>
void maximum(const void* own, const void* in, void* dst, int64_t n) {
  const T* a = static_cast<const T*>(own);
  const T* b = static_cast<const T*>(in);
  T* d = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = std::max(a[i], b[i]);
}
void bf16_sum(const void* own, const void* in, void* dst, int64_t n) {
  const uint16_t* a = static_cast<const uint16_t*>(own);
  const uint16_t* b = static_cast<const uint16_t*>(in);
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16_bits(bf16_bits_to_float(a[i]) + bf16_bits_to_float(b[i]));
}
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail("ring collective: ", what, ": ", std::string(msg, len));
}
// This rank's place on the ring of comm and where each chunk starts: chunk q is elements [at[q], at[q + 1]).
struct Ring {
  int p = 1, r = 0, right = 0, left = 0;
  std::vector<int64_t> at;
  Ring(const std::vector<int64_t>& counts, MPI_Comm comm, const char* what) {
    MPI_Comm_size(comm, &p);
    MPI_Comm_rank(comm, &r);
    TITAN_CHECK((int)counts.size() == p, what, ": ", counts.size(), " chunk counts for ", p, " ranks");
    at.assign(p + 1, 0);
    for (int q = 0; q < p; ++q) {
      TITAN_CHECK(counts[q] >= 0 && counts[q] <= INT_MAX, what, ": chunk ", q, " of ", counts[q],
                  " elements (MPI counts are int)");
      at[q + 1] = at[q] + counts[q];
    }
    right = (r + 1) % p, left = (r + p - 1) % p;
  }
  int chunk(int q) const { return ((q % p) + p) % p; }  // q modulo p, q may be negative
};
}  // namespace

Combine combine_for(DType t, bool max) {
  switch (t) {
    case DType::F32: return max ? maximum<float> : sum<float>;
    case DType::F64: return max ? maximum<double> : sum<double>;
    case DType::I32: return max ? maximum<int32_t> : sum<int32_t>;
    case DType::I64: return max ? maximum<int64_t> : sum<int64_t>;
    case DType::BF16:
      TITAN_CHECK(!max, "ring_reduce_scatter: max of bf16 bits: reduce their float32 values");
      return bf16_sum;
    default: fail("ring_reduce_scatter: no reduction of dtype ", dtype_name(t));
  }
}

void ring_reduce_scatter(const void* in, void* out, const std::vector<int64_t>& counts, size_t esize,
                         MPI_Datatype type, Combine combine, void* scratch, MPI_Comm comm, const Complete& complete) {
  const Ring g(counts, comm, "ring_reduce_scatter");
  auto chunk = [&](int q) { return static_cast<const char*>(in) + g.at[q] * esize; };
  if (g.p == 1) {
    std::memcpy(out, chunk(0), (size_t)counts[0] * esize);
    return;
  }
  const size_t stride = (size_t)*std::max_element(counts.begin(), counts.end()) * esize;
  char* buf[2] = {static_cast<char*>(scratch), static_cast<char*>(scratch) + stride};
  // step s: send the partial sum of chunk (r - s - 1) (at s = 0 this rank's own input), receive the left
  // neighbour's partial sum of chunk (r - s - 2) and add this rank's input to it; at s = p - 2 that chunk is r's.
  for (int s = 0; s < g.p - 1; ++s) {
    const int send_q = g.chunk(g.r - s - 1), recv_q = g.chunk(g.r - s - 2);
    const void* send = s == 0 ? chunk(send_q) : buf[(s - 1) % 2];
    char* recv = buf[s % 2];
    MPI_Request req[2];
    check(MPI_Irecv(recv, (int)counts[recv_q], type, g.left, 0, comm, &req[0]), "irecv");
    check(MPI_Isend(send, (int)counts[send_q], type, g.right, 0, comm, &req[1]), "isend");
    complete(req, 2);
    combine(chunk(recv_q), recv, s == g.p - 2 ? out : recv, counts[recv_q]);
  }
}

void ring_all_gather(void* buf, const std::vector<int64_t>& counts, size_t esize, MPI_Datatype type, MPI_Comm comm,
                     const Complete& complete) {
  const Ring g(counts, comm, "ring_all_gather");
  char* b = static_cast<char*>(buf);
  // step s: pass on chunk (r - s) (this rank's own at s = 0), receive chunk (r - s - 1) in its place
  for (int s = 0; s < g.p - 1; ++s) {
    const int send_q = g.chunk(g.r - s), recv_q = g.chunk(g.r - s - 1);
    MPI_Request req[2];
    check(MPI_Irecv(b + g.at[recv_q] * esize, (int)counts[recv_q], type, g.left, 1, comm, &req[0]), "irecv");
    check(MPI_Isend(b + g.at[send_q] * esize, (int)counts[send_q], type, g.right, 1, comm, &req[1]), "isend");
    complete(req, 2);
  }
}

}  // namespace titan::comms::detail
