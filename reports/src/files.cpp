#include <ampscope/reports/files.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ampscope::reports {

PathKind path_kind(const std::string& path, int* err) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (err) *err = (errno == ENOENT || errno == ENOTDIR) ? 0 : errno;
    return PathKind::kMissing;
  }
  if (err) *err = 0;
  return S_ISDIR(st.st_mode) ? PathKind::kDirectory : PathKind::kFile;
}

void make_directories(const std::string& dir) {
  if (dir.empty() || path_kind(dir) == PathKind::kDirectory) return;
  std::string parent = parent_dir(dir);
  if (parent != dir && parent != "." && parent != "/") make_directories(parent);
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create directory " + dir + ": " + std::strerror(errno));
  }
  if (path_kind(dir) != PathKind::kDirectory) {
    throw std::runtime_error("cannot create directory " + dir + ": a file is in the way");
  }
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string parent_dir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace ampscope::reports
