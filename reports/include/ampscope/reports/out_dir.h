// The output folder of a run: checked at start-up, claimed by one run at a time, and written so
// that a kill at any moment leaves the report files of one run or of none.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace ampscope::reports {

/// One file of a set that is written together.
struct FileContent {
  std::string path;
  std::string content;
};

/// Writes every file of the set to a temp file in its folder, then a commit marker, then renames
/// them all into place and removes the marker. A writer killed before the marker leaves the
/// previous files; one killed after it leaves a set recover_pending() completes. All files must
/// be in one folder. Throws std::runtime_error naming the path (temps are removed).
void write_files_atomic(const std::vector<FileContent>& files);

/// Finishes what writers killed in `dir` left behind: committed sets are renamed into place,
/// uncommitted temp files removed. Temps of live processes are left alone.
void recover_pending(const std::string& dir);

/// Checks at start-up that `dir` can take the report files: created if missing, a probe file
/// written and removed, at least min_free_bytes() free. Throws std::runtime_error (one line).
void check_writable(const std::string& dir);
/// Free space a run needs in its output folder: env AMPSCOPE_MIN_FREE_BYTES, default 4 MiB.
unsigned long long min_free_bytes();

/// An exclusive claim on the report files `<stem>.*` in `dir` for the lifetime of the object
/// (flock on dir/.<stem>.lock, removed on release). A second run into the same folder and stem
/// fails at start-up instead of overwriting the first one's report.
class OutLock {
 public:
  /// Throws std::runtime_error saying which process holds the folder.
  OutLock(const std::string& dir, const std::string& stem);
  ~OutLock();
  OutLock(const OutLock&) = delete;
  OutLock& operator=(const OutLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
  int owner_pid_ = 0;
};

/// check_writable + recover_pending + an OutLock: what every front end does before a run.
std::unique_ptr<OutLock> claim_out_dir(const std::string& dir, const std::string& stem);

}  // namespace ampscope::reports
