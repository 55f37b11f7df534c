// job/job_lock.h — one job per dump folder.
//
// Rank 0 holds an exclusive flock on <dump_folder>/.titan.lock for the job's
// life (the kernel releases it on any exit, kill -9 included) and writes its
// host, pid and start time there; a second job on the same folder is refused
// at once, naming the holder.
#pragma once
#include <string>

namespace titan {

class JobLock {
 public:
  explicit JobLock(const std::string& dump_folder);  // throws naming the holder when the folder is taken
  ~JobLock();
  JobLock(const JobLock&) = delete;
  JobLock& operator=(const JobLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace titan
