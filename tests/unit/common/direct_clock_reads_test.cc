// Time is read only through Clock (lib/common/clock.h): this test walks the production sources
// (supervisor/, svc-*/, lib/ except lib/common, ctl/) and fails naming file:line for every
// direct clock read. Tests and benchmarks may read clocks directly. The source root comes from
// meson (NODELET_SOURCE_ROOT, tests/unit/meson.build).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace nodelet {
namespace {

namespace fs = std::filesystem;

// Any std::chrono clock's now() (under whatever alias), and the C and POSIX clock calls.
const std::regex& DirectRead() {
  static const std::regex re(
      R"(::now\s*\(|(^|[^A-Za-z0-9_])(clock_gettime|gettimeofday|timespec_get)\s*\(|)"
      R"((^|[^A-Za-z0-9_])(std::)?time\s*\(\s*(nullptr|NULL|0)\s*\))");
  return re;
}

bool IsSource(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".cc" || ext == ".h" || ext == ".cpp" || ext == ".hpp";
}

// The production folders, relative to the source root.
std::vector<fs::path> ProductionDirs(const fs::path& root) {
  std::vector<fs::path> dirs = {root / "supervisor", root / "ctl"};
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("svc-", 0) == 0) {
      dirs.push_back(entry.path());
    }
  }
  for (const auto& entry : fs::directory_iterator(root / "lib")) {
    if (entry.is_directory() && entry.path().filename() != "common") dirs.push_back(entry.path());
  }
  return dirs;
}

// "file:line: text" for each direct clock read under `dirs`; line comments are skipped.
std::vector<std::string> FindDirectReads(const fs::path& root, const std::vector<fs::path>& dirs) {
  std::vector<std::string> found;
  for (const auto& dir : dirs) {
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file() || !IsSource(entry.path())) continue;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        const std::string code = line.substr(0, line.find("//"));
        // Every form names "now", "time" or "gettimeofday"; the cheap test first.
        if (code.find("now") == std::string::npos && code.find("time") == std::string::npos) {
          continue;
        }
        if (std::regex_search(code, DirectRead())) {
          found.push_back(fs::relative(entry.path(), root).string() + ":" + std::to_string(n) +
                          ": " + line);
        }
      }
    }
  }
  return found;
}

TEST(DirectClockReadsTest, PatternCatchesEveryFormAndNothingElse) {
  for (const char* bad : {"auto t = std::chrono::steady_clock::now();",
                          "x = std::chrono::system_clock::now()", "SteadyClock::now() + d",
                          "clock_gettime(CLOCK_MONOTONIC, &ts);", "gettimeofday(&tv, nullptr);",
                          "time_t t = time(nullptr);", "std::time(NULL)", "f(time(0))"}) {
    EXPECT_TRUE(std::regex_search(std::string(bad), DirectRead())) << bad;
  }
  for (const char* fine : {"clock_.Now()", "runtime(nullptr)", "MonoTime now = clock.Now();",
                           "uptime(0)", "my_clock_gettime_count", "WallTime known;"}) {
    EXPECT_FALSE(std::regex_search(std::string(fine), DirectRead())) << fine;
  }
}

TEST(DirectClockReadsTest, NamesFileAndLineAndSkipsLibCommonAndComments) {
  const fs::path root =
      fs::path(::testing::TempDir()) /
      ("clock-reads-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(root);
  fs::create_directories(root / "svc-x" / "sub");
  fs::create_directories(root / "lib" / "common");
  fs::create_directories(root / "lib" / "ipc");
  fs::create_directories(root / "supervisor");
  fs::create_directories(root / "ctl");
  std::ofstream(root / "svc-x" / "sub" / "a.cc") << "int a;\n// steady_clock::now() in a comment\n"
                                                 << "auto t = std::chrono::steady_clock::now();\n";
  std::ofstream(root / "lib" / "common" / "clock.cc")
      << "auto t = std::chrono::steady_clock::now();\n";
  std::ofstream(root / "lib" / "ipc" / "b.h") << "\n\ntime_t t = time(nullptr);\n";
  std::ofstream(root / "ctl" / "c.txt") << "gettimeofday(&tv, nullptr);\n";
  auto found = FindDirectReads(root, ProductionDirs(root));
  std::sort(found.begin(), found.end());
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].substr(0, found[0].find(": ")), "lib/ipc/b.h:3");
  EXPECT_EQ(found[1].substr(0, found[1].find(": ")), "svc-x/sub/a.cc:3");
  fs::remove_all(root);
}

TEST(DirectClockReadsTest, ProductionCodeReadsTimeOnlyThroughClock) {
  const char* root_env = std::getenv("NODELET_SOURCE_ROOT");
  ASSERT_NE(root_env, nullptr) << "NODELET_SOURCE_ROOT is not set (tests/unit/meson.build)";
  const fs::path root(root_env);
  ASSERT_TRUE(fs::is_directory(root / "lib" / "common")) << root;
  const auto dirs = ProductionDirs(root);
  ASSERT_GE(dirs.size(), 6u);  // supervisor, ctl, the services, lib/*
  std::string report;
  for (const auto& f : FindDirectReads(root, dirs)) report += "\n  " + f;
  EXPECT_TRUE(report.empty()) << "direct clock reads outside lib/common (take a Clock from "
                                 "the creator instead, lib/common/clock.h):"
                              << report;
}

}  // namespace
}  // namespace nodelet
