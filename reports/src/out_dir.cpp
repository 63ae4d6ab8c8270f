// Output folders: start-up checks, one run per folder and stem, and kill-safe sets of files.
//
// A set is written as temps named .ampscope.<pid>.<n>.<name>.tmp, then a commit marker
// .ampscope.<pid>.<n>.commit listing the names, then renamed into place; the marker goes last.
// A writer killed before the marker leaves the previous files (its temps are removed later); one
// killed after it leaves a set that recover_pending() renames into place: one run or none.
#include <ampscope/reports/files.h>
#include <ampscope/reports/out_dir.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace ampscope::reports {
namespace {

constexpr const char* kPrefix = ".ampscope.";

std::string errno_text() { return std::strerror(errno); }

/// "<pid>.<n>" unique to this writer and call.
std::string set_id() {
  static std::atomic<unsigned> counter{0};
  return std::to_string(::getpid()) + "." + std::to_string(counter++);
}

void write_whole(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot create " + path + ": " + errno_text());
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) throw std::runtime_error("write to " + path + " failed: " + errno_text());
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw std::runtime_error("cannot write " + to + ": rename failed: " + errno_text());
}

bool process_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  return names;
}

/// The writer's pid and set id of a name made by write_files_atomic ("" when it is not one).
std::string set_of(const std::string& name, long* pid) {
  if (name.rfind(kPrefix, 0) != 0) return "";
  const std::string rest = name.substr(std::strlen(kPrefix));
  char* end = nullptr;
  *pid = std::strtol(rest.c_str(), &end, 10);
  if (end == rest.c_str() || *end != '.') return "";
  const char* n_end = end + 1;
  while (*n_end >= '0' && *n_end <= '9') ++n_end;
  if (n_end == end + 1 || *n_end != '.') return "";
  return rest.substr(0, static_cast<std::size_t>(n_end - rest.c_str()));
}

/// Renames the temps of a committed set into place, then removes its marker.
void finish_set(const std::string& dir, const std::string& id) {
  const std::string marker = join_path(dir, kPrefix + id + ".commit");
  std::ifstream in(marker);
  for (std::string name; std::getline(in, name);) {
    if (name.empty() || name.find('/') != std::string::npos) continue;
    const std::string tmp = join_path(dir, kPrefix + id + "." + name + ".tmp");
    if (path_kind(tmp) == PathKind::kFile) std::rename(tmp.c_str(), join_path(dir, name).c_str());
  }
  std::remove(marker.c_str());
}

}  // namespace

void write_files_atomic(const std::vector<FileContent>& files) {
  if (files.empty()) return;
  const std::string dir = parent_dir(files.front().path);
  make_directories(dir);
  const std::string id = set_id();
  std::vector<std::string> temps;
  auto remove_temps = [&temps] {
    for (const auto& t : temps) std::remove(t.c_str());
  };
  try {
    std::string listing;
    for (const FileContent& f : files) {
      if (parent_dir(f.path) != dir) throw std::invalid_argument("write_files_atomic: one folder only");
      temps.push_back(join_path(dir, kPrefix + id + "." + base_name(f.path) + ".tmp"));
      write_whole(temps.back(), f.content);
      listing += base_name(f.path) + "\n";
    }
    const std::string marker = join_path(dir, kPrefix + id + ".commit");
    temps.push_back(marker + ".tmp");
    write_whole(temps.back(), listing);
    rename_or_throw(temps.back(), marker);  // the commit point
    temps.back() = marker;
  } catch (const std::exception& e) {
    remove_temps();
    const std::string what = e.what();
    throw std::runtime_error(what.rfind("cannot write", 0) == 0 ? what : "cannot write " + files.front().path + ": " + what);
  }
  for (std::size_t i = 0; i < files.size(); ++i) rename_or_throw(temps[i], files[i].path);
  std::remove(temps.back().c_str());
}

void recover_pending(const std::string& dir) {
  std::map<std::string, bool> dead_sets;  // id -> committed
  std::vector<std::string> names = list_dir(dir);
  for (const std::string& name : names) {
    long pid = 0;
    const std::string id = set_of(name, &pid);
    if (id.empty() || pid == ::getpid() || process_alive(pid)) continue;
    bool& committed = dead_sets[id];
    committed = committed || name == kPrefix + id + ".commit";
  }
  for (const auto& [id, committed] : dead_sets) {
    if (committed) finish_set(dir, id);
    for (const std::string& name : list_dir(dir)) {
      long pid = 0;
      if (set_of(name, &pid) == id) std::remove(join_path(dir, name).c_str());
    }
  }
}

unsigned long long min_free_bytes() {
  const char* env = std::getenv("AMPSCOPE_MIN_FREE_BYTES");
  if (env && *env) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (*end == '\0') return v;
  }
  return 4ull << 20;
}

void check_writable(const std::string& dir) {
  if (dir.empty()) throw std::runtime_error("--out is empty: name a folder");
  try {
    make_directories(dir);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--out ") + dir + " is not usable: " + e.what());
  }
  const std::string probe = join_path(dir, std::string(kPrefix) + set_id() + ".probe.tmp");
  try {
    write_whole(probe, std::string(4096, '\n'));
  } catch (const std::runtime_error& e) {
    std::remove(probe.c_str());
    throw std::runtime_error("--out " + dir + " is not writable: " + e.what());
  }
  std::remove(probe.c_str());
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const unsigned long long free = static_cast<unsigned long long>(vfs.f_bavail) * vfs.f_frsize;
    if (free < min_free_bytes())
      throw std::runtime_error("--out " + dir + ": only " + std::to_string(free >> 10) +
                               " KiB free, the report needs at least " +
                               std::to_string(min_free_bytes() >> 10) + " KiB");
  }
}

}  // namespace ampscope::reports
