// Reading JSON files for every reader (reports, precision maps; C++ and, through the core,
// Python): regular files only, a depth limit, a byte-order mark skipped, and every failure a
// ReportError whose one-line message starts with the file name.
#include <ampscope/reports/files.h>
#include <ampscope/reports/report_json.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ampscope::reports {
namespace {

using json = nlohmann::json;

/// Printable ASCII only, at most max_len bytes: for text quoted from a corrupt file.
std::string printable(const std::string& s, std::size_t max_len) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max_len) return out + "...";
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  return out;
}

/// The deepest nesting of [ and { outside strings, stopping once past `limit`.
int nesting_depth(const std::string& text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size() && deepest <= limit; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

/// The whole regular file; FIFOs, devices and sockets are refused before anything is opened
/// for reading (opened non-blocking, so a FIFO swapped in meanwhile cannot hang us either).
std::string read_regular_file(const std::string& path, const std::string& what) {
  int err = 0;
  const PathKind kind = path_kind(path, &err);
  if (kind == PathKind::kMissing) {
    if (err) throw ReportError(what + ".read", path + ": cannot read: " + std::strerror(err));
    throw ReportError(what + ".missing", path + ": no such file");
  }
  if (kind == PathKind::kDirectory)
    throw ReportError(what + ".directory", path + ": is a directory, not a " + what + " file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw ReportError(what + ".read", path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ReportError(what + ".read", path + ": not a regular file (a FIFO, device or socket?)");
  }
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string e = std::strerror(errno);
      ::close(fd);
      throw ReportError(what + ".read", path + ": read error: " + e);
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

json parse_json_text(const std::string& raw, const std::string& where, const std::string& what) {
  const bool bom = raw.rfind("\xEF\xBB\xBF", 0) == 0;
  const std::string text = bom ? raw.substr(3) : raw;
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw ReportError(what + ".empty", where + ": file is empty");
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    throw ReportError(what + ".depth", where + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
                                           " levels: not a " + what + " file");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    // nlohmann's text may quote bytes of the file; keep it printable ASCII and short. Numbers
    // past double's range (1e400) land here too (out_of_range.406).
    std::string detail = e.what();
    if (auto p = detail.find("] "); p != std::string::npos) detail = detail.substr(p + 2);
    throw ReportError(what + ".parse", where + ": not valid JSON (truncated or corrupt file?): " +
                                           printable(detail, 240));
  }
}

json read_json_file(const std::string& path, const std::string& what) {
  return parse_json_text(read_regular_file(path, what), path, what);
}

}  // namespace ampscope::reports
