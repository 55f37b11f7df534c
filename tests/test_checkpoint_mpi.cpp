// Collective checkpoint writes under mpirun: ranks that would write different
// lists of datasets get an error naming them on every rank, not a hang (a
// parallel HDF5 file creates its datasets collectively; the checksums are
// all-reduced), and nothing is left on disk; ranks that agree write a file
// that reads back.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fcntl.h>
#include <semaphore.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/error_of.h"
#include "tests/mpi_main.h"
#include "comms/process_group.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/h5.h"
#include "src/checkpoint/safetensors.h"
#include "src/ops/ops.h"

using namespace titan;
using titan::testing::error_of;
namespace fs = std::filesystem;

namespace {
int rank() { return comms::world_rank(); }

std::string folder() {  // one per test run, shared by the ranks: named by rank 0's process id (ctest runs np2 and
                         // np3 at once, and a rank 0 clearing the other run's folder failed it)
  long id = rank() == 0 ? (long)::getpid() : 0;
  MPI_Bcast(&id, 1, MPI_LONG, 0, comms::world_comm());
  const std::string f = (fs::temp_directory_path() / ("titan_checkpoint_mpi_" + std::to_string(id))).string();
  struct RemovedAtExit {  // rank 0 removes the run's folder when the process ends
    std::string path;
    ~RemovedAtExit() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  };
  static RemovedAtExit at_exit;
  if (rank() == 0) {
    fs::remove_all(f);
    fs::create_directories(f);
    at_exit.path = f;
  }
  MPI_Barrier(comms::world_comm());
  return f;
}

// Rank r holds rows [2r, 2r + 2) of "w" [2n, 3] (an FSDP-style row split) and "b" [4] whole, written by rank 0.
struct Params {
  Tensor w, b, extra;
  std::vector<Region> regions;
  explicit Params(bool extra_on_rank1 = false, bool reshape_on_rank1 = false) {
    int n = 1;
    MPI_Comm_size(comms::world_comm(), &n);
    w = full({2, 3}, 1.0f + (float)rank());
    b = full({4}, 0.5f);
    regions.push_back({"w", &w, {2 * n, 3}, {2 * rank(), 0}, true});
    regions.push_back({"b", &b, reshape_on_rank1 && rank() == 1 ? Shape{2, 2} : Shape{4}, {0}, rank() == 0});
    if (reshape_on_rank1 && rank() == 1) {
      b = b.reshape({2, 2}).contiguous();
      regions.back().offset = {0, 0};
    }
    if (extra_on_rank1 && rank() == 1) {
      extra = full({3}, 2.0f);
      regions.push_back({"extra", &extra, {3}, {0}, true});
    }
  }
};

}  // namespace

TEST(CheckpointMpi, RanksThatWouldWriteDifferentDatasetsFailTogetherAndWriteNothing) {
  const std::string dir = folder();
  for (bool extra : {true, false}) {
    Params p(/*extra_on_rank1=*/extra, /*reshape_on_rank1=*/!extra);
    const std::string path = dir + (extra ? "/extra.h5" : "/reshaped.h5");
    std::string e = error_of([&] { save_checkpoint(path, p.regions, nullptr, TrainState{}, comms::world_comm()); });
    EXPECT_NE(e.find("rank 1"), std::string::npos) << e;  // every rank names rank 1
    EXPECT_NE(e.find("different list of datasets than rank 0"), std::string::npos) << e;
    EXPECT_NE(e.find(path), std::string::npos) << e;
    e = error_of([&] { export_hf(dir + "/export.h5", p.regions, "{}", DType::F32, comms::world_comm()); });
    EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
    e = error_of([&] {
      save_safetensors(dir + "/st", p.regions, SafetensorsDType::F32, int64_t(1) << 30, comms::world_comm());
    });
    EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
    MPI_Barrier(comms::world_comm());
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(dir + "/export.h5"));
  }
}

TEST(CheckpointMpi, RanksThatAgreeWriteAFileThatReadsBack) {
  const std::string dir = folder();
  Params p;
  const std::string path = dir + "/ok.h5";
  save_checkpoint(path, p.regions, nullptr, TrainState{7, 0, 0, "", ""}, comms::world_comm());
  EXPECT_EQ(verify_checkpoint(path, comms::world_comm()), "");
  Params q;
  q.w = zeros({2, 3});
  q.b = zeros({4});
  q.regions[0].local = &q.w;
  q.regions[1].local = &q.b;
  TrainState st = load_checkpoint(path, q.regions, nullptr, comms::world_comm());
  EXPECT_EQ(st.step, 7);
  EXPECT_EQ(q.w.to_vector<float>(), p.w.to_vector<float>());
  EXPECT_EQ(q.b.to_vector<float>(), p.b.to_vector<float>());
}

// A process killed inside an MPI-IO open leaves Open MPI's OMPIO_<base name> semaphore taken, and every later
// parallel open of a file of that name waited on it forever (src/checkpoint/h5.h): each rank's open now removes one
// that no process holds. One some process holds (an open in progress) is left alone. Without the removal the write
// below waits until ctest's timeout.
TEST(CheckpointMpi, AStaleMpiIoSemaphoreOfTheFilesNameDoesNotHangItsOpen) {
  const std::string dir = folder();
  const std::string base = fs::path(dir).filename().string() + "_stale.h5";  // one name per run (np 2 and 3 at once)
  const std::string name = "OMPIO_" + base, file = "/dev/shm/sem." + name, path = dir + "/" + base;
  sem_t* sem = SEM_FAILED;
  if (rank() == 0) {
    sem = sem_open(name.c_str(), O_CREAT, 0644, 0);  // taken (value 0), and held: mapped by rank 0
    EXPECT_NE(sem, SEM_FAILED);
  }
  MPI_Barrier(comms::world_comm());
  EXPECT_FALSE(h5::clear_stale_mpiio_semaphore(path)) << "a semaphore rank 0 holds was removed";
  MPI_Barrier(comms::world_comm());
  EXPECT_TRUE(fs::exists(file));
  if (rank() == 0 && sem != SEM_FAILED) sem_close(sem);  // still taken, now held by no process: a killed open's
  MPI_Barrier(comms::world_comm());
  {
    h5::File f(path, h5::File::Create, comms::world_comm());
    f.write_region("x", {3}, {0}, full({3}, 2.0f), rank() == 0);
    f.close();
  }
  MPI_Barrier(comms::world_comm());
  EXPECT_FALSE(fs::exists(file)) << "the stale semaphore, or Open MPI's own one after the open";
  h5::File r(path, h5::File::Read, comms::world_comm());
  EXPECT_EQ(r.shape("x"), (Shape{3}));
}

int main(int argc, char** argv) { return titan::testing::run_mpi_tests(argc, argv); }
