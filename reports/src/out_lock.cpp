// One run per output folder and report stem: an flock on dir/.<stem>.lock held for the run.
// The lock file holds the owner's pid for the message a second run prints; it is removed on
// release (a run that finds a replaced file after locking locks the new one instead).
#include <ampscope/reports/files.h>
#include <ampscope/reports/out_dir.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ampscope::reports {
namespace {

/// The pid written in a lock file (0 when unreadable).
long pid_in(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::strtol(buf, nullptr, 10) : 0;
}

/// True when `fd` is still the file at `path` (not unlinked by a releasing owner).
bool still_linked(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_ino == b.st_ino &&
         a.st_dev == b.st_dev;
}

}  // namespace

OutLock::OutLock(const std::string& dir, const std::string& stem)
    : path_(join_path(dir, "." + stem + ".lock")), owner_pid_(static_cast<int>(::getpid())) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("--out " + dir + ": cannot create " + path_ + ": " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const long other = pid_in(fd_);
      ::close(fd_);
      fd_ = -1;
      throw std::runtime_error("--out " + dir + " is in use by another ampscope run" +
                               (other > 0 ? " (pid " + std::to_string(other) + ")" : "") +
                               " writing " + stem + ".json; use another --out");
    }
    if (still_linked(fd_, path_)) break;
    ::close(fd_);  // released and removed meanwhile: lock the new file
    fd_ = -1;
  }
  if (fd_ < 0) throw std::runtime_error("--out " + dir + ": cannot lock " + path_);
  const std::string pid = std::to_string(owner_pid_) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

OutLock::~OutLock() {
  if (fd_ < 0) return;
  // A forked child closes its copy only: the lock and the file stay the parent's.
  if (::getpid() == owner_pid_) ::unlink(path_.c_str());
  ::close(fd_);
}

std::unique_ptr<OutLock> claim_out_dir(const std::string& dir, const std::string& stem) {
  check_writable(dir);
  auto lock = std::make_unique<OutLock>(dir, stem);
  recover_pending(dir);
  return lock;
}

}  // namespace ampscope::reports
