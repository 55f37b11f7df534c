#include "job/job_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "src/tensor/error.h"

namespace titan {

JobLock::JobLock(const std::string& dump_folder) {
  std::filesystem::create_directories(dump_folder);
  const std::string path = dump_folder + "/.titan.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TITAN_CHECK(fd_ >= 0, "job: cannot open the job lock '", path, "': ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[512] = {0};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string holder = n > 0 ? std::string(buf, (size_t)n) : std::string("unknown");
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    fail("job: the dump folder '", dump_folder, "' is in use by another titan job (", holder,
         "); two jobs in one folder would overwrite each other's checkpoints and metrics. Wait for it to end, or "
         "set a different job.dump_folder");
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  char when[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  const std::string who = std::string("host ") + host + ", pid " + std::to_string(::getpid()) + ", since " + when + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, who.data(), who.size(), 0);
}

JobLock::~JobLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace titan
