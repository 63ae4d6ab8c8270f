// Output folders: a writer SIGKILLed at random moments leaves both files of one set or of the
// previous one (after recover_pending), never a mix and no temp files; one claim per folder and
// stem; unusable folders are found up front; the writer registry writes one whole set.
#include <ampscope/reports/files.h>
#include <ampscope/reports/out_dir.h>
#include <ampscope/reports/precision_map.h>
#include <ampscope/reports/report_json.h>
#include <ampscope/reports/writers.h>
#include <gtest/gtest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>

namespace {

using namespace ampscope::reports;

std::string temp_dir(const std::string& name) {
  std::string d = "/tmp/ampscope_test_out_dir_" + std::to_string(::getpid()) + "_" + name;
  std::system(("rm -rf " + d).c_str());
  make_directories(d);
  return d;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// "<generation>\n" followed by filler: large enough that a write takes a while.
std::string content(int generation, std::size_t size) {
  std::string s = std::to_string(generation) + "\n";
  s.resize(size, 'x');
  return s;
}

int generation_of(const std::string& text) { return text.empty() ? -1 : std::atoi(text.c_str()); }

std::vector<std::string> hidden_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  while (const dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(".ampscope.", 0) == 0) out.push_back(n);
  }
  ::closedir(d);
  return out;
}

TEST(OutDir, KillAtRandomMomentsLeavesOneSetOrThePrevious) {
  const std::string dir = temp_dir("kill");
  const std::string a = join_path(dir, "report.html"), b = join_path(dir, "report.json");
  std::mt19937 rng(15);
  int sets_seen = 0;
  for (int round = 0; round < 24; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // writes generation after generation until killed
      for (int g = round * 1000;; ++g) write_files_atomic({{a, content(g, 1 << 20)}, {b, content(g, 3 << 19)}});
    }
    ::usleep(std::uniform_int_distribution<int>(2000, 40000)(rng));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    recover_pending(dir);
    const int ga = generation_of(slurp(a)), gb = generation_of(slurp(b));
    EXPECT_EQ(ga, gb) << "round " << round << ": report.html and report.json of different runs";
    EXPECT_TRUE(hidden_files(dir).empty()) << "round " << round << ": " << hidden_files(dir).front();
    sets_seen += ga >= 0;
  }
  EXPECT_GT(sets_seen, 0);
}

TEST(OutDir, NormalWriteLeavesNoTempFiles) {
  const std::string dir = temp_dir("normal");
  write_files_atomic({{join_path(dir, "x.json"), "1"}, {join_path(dir, "y.html"), "2"}});
  EXPECT_EQ(slurp(join_path(dir, "x.json")), "1");
  EXPECT_EQ(slurp(join_path(dir, "y.html")), "2");
  EXPECT_TRUE(hidden_files(dir).empty());
}

TEST(OutDir, UncommittedTempsOfDeadWritersAreRemovedLiveOnesKept) {
  const std::string dir = temp_dir("stale");
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = join_path(dir, ".ampscope." + std::to_string(dead) + ".0.report.json.tmp");
  const std::string live = join_path(dir, ".ampscope." + std::to_string(::getppid()) + ".0.report.json.tmp");
  std::ofstream(stale) << "half";
  std::ofstream(live) << "busy";
  recover_pending(dir);
  EXPECT_EQ(path_kind(stale), PathKind::kMissing);
  EXPECT_EQ(path_kind(live), PathKind::kFile);
  EXPECT_EQ(path_kind(join_path(dir, "report.json")), PathKind::kMissing);  // never committed
}

TEST(OutDir, CommittedSetOfAKilledWriterIsRenamedIntoPlace) {
  // The state a SIGKILL between the renames leaves: marker written, html renamed, json not yet.
  const std::string dir = temp_dir("rollforward");
  std::ofstream(join_path(dir, "report.json")) << "0\nold";
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string id = ".ampscope." + std::to_string(dead) + ".3.";
  std::ofstream(join_path(dir, "report.html")) << "1\nnew";
  std::ofstream(join_path(dir, id + "report.json.tmp")) << "1\nnew";
  std::ofstream(join_path(dir, id + "commit")) << "report.html\nreport.json\n";
  recover_pending(dir);
  EXPECT_EQ(slurp(join_path(dir, "report.json")), "1\nnew");
  EXPECT_EQ(slurp(join_path(dir, "report.html")), "1\nnew");
  EXPECT_TRUE(hidden_files(dir).empty());
}

TEST(OutDir, SecondClaimOnTheSameFolderAndStemFails) {
  const std::string dir = temp_dir("lock");
  auto first = claim_out_dir(dir, "report");
  try {
    OutLock second(dir, "report");
    FAIL() << "a second claim succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("in use by another ampscope run (pid " + std::to_string(::getpid())),
              std::string::npos) << e.what();
  }
  OutLock other_rank(dir, "report.rank1");  // ranks write their own stems side by side
  first.reset();
  OutLock again(dir, "report");  // released: free again, and the lock file was removed
}

TEST(OutDir, UnusableFoldersAreFoundUpFront) {
  const std::string dir = temp_dir("bad");
  std::ofstream(join_path(dir, "file")) << "x";
  EXPECT_THROW(check_writable(join_path(dir, "file/sub")), std::runtime_error);
  EXPECT_THROW(check_writable("/proc/ampscope-cannot-be-here"), std::runtime_error);
  ::setenv("AMPSCOPE_MIN_FREE_BYTES", "18446744073709551615", 1);
  EXPECT_THROW(check_writable(dir), std::runtime_error);  // "full": less free than needed
  ::unsetenv("AMPSCOPE_MIN_FREE_BYTES");
  check_writable(dir);
  EXPECT_TRUE(hidden_files(dir).empty());  // the probe is gone
}

/// The HTML report's script nonce is random per rendering.
std::string without_nonce(const std::string& s) {
  return std::regex_replace(s, std::regex("[0-9a-f]{32}"), "N");
}

TEST(Writers, EverySetFileComesFromItsWriterAndSkipLeavesItOut) {
  Report r;
  r.run.steps = 3;
  Recommendation pin;
  pin.layer = "blocks.1.ffn.wo";
  pin.action = Action::kPinFp32;
  pin.severity = Severity::kCritical;
  r.recommendations.push_back(pin);
  ASSERT_EQ(writers().back().name, "report");  // written last: its presence means a whole set
  const std::string d = temp_dir("writers");
  const std::string json = write_report_set(r, d, "report.rank1");
  EXPECT_EQ(json, join_path(d, "report.rank1.json"));
  for (const Writer& w : writers()) {
    EXPECT_EQ(find_writer(w.name), &w);
    EXPECT_EQ(without_nonce(slurp(join_path(d, w.file("report.rank1")))), without_nonce(w.write(r))) << w.name;
  }
  // independent of the registry: the map pins the layer, the JSON reads back
  EXPECT_EQ(read_precision_map(join_path(d, "precision_map.rank1.json")).pin_fp32.size(), 1u);
  EXPECT_EQ(read_report(json).run.steps, 3);
  const std::string d2 = temp_dir("writers_skip");
  write_report_set(r, d2, "report", {"html"});
  EXPECT_EQ(path_kind(join_path(d2, "report.html")), PathKind::kMissing);
  EXPECT_EQ(path_kind(join_path(d2, "report.json")), PathKind::kFile);
  EXPECT_EQ(find_writer("nope"), nullptr);
}

}  // namespace
