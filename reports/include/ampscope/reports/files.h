// Small POSIX file helpers. Not std::filesystem: the PyPI libtorch exports its own copies of
// std::filesystem symbols, and code loaded next to it can bind to them and crash (seen with
// remove_all), so nothing in ampscope calls std::filesystem.
#pragma once

#include <string>

namespace ampscope::reports {

/// What a path is: kMissing, kFile (or anything else that is not a directory), kDirectory.
enum class PathKind { kMissing, kFile, kDirectory };
/// The kind of `path`; sets *err (when given) to errno for failures other than "missing".
PathKind path_kind(const std::string& path, int* err = nullptr);
/// Creates `dir` and its missing parents (mkdir -p); throws std::runtime_error naming it.
void make_directories(const std::string& dir);
/// "dir/name" (no doubled slash).
std::string join_path(const std::string& dir, const std::string& name);
/// The folder part of a path ("." when it has none).
std::string parent_dir(const std::string& path);
/// The last component of a path.
std::string base_name(const std::string& path);

}  // namespace ampscope::reports
