// Container log rotation end to end through the real `nodelet` on a private containerd: a
// busybox container writes numbered lines at about 1 MiB/s while podworkerd rotates its log at
// 200Ki, keeping 3 files, every second. Checks:
// - sampled over ~10 s, the container never has more than 3 log files (a file and its
//   compressed copy while it is being compressed count as one);
// - the numbered lines across the kept files (the .gz ones decompressed) are in order with no
//   gap: rotation loses nothing but the oldest files, as the kubelet's;
// - LOG-DIR/containers/POD_NAMESPACE_CONTAINER-ID.log points at the current log;
// - once the manifest is deleted, the pod's log directory and the symlink go.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/log_files.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// About 1 MiB/s of CRI log lines: 2000 numbered lines (~50 bytes each with the runtime's
// timestamp and stream prefix) ten times a second, until /tmp/stop exists.
constexpr char kWriter[] =
    "trap 'exit 0' TERM; i=1; while [ ! -e /tmp/stop ]; do seq $i $((i+1999)); "
    "i=$((i+2000)); sleep 0.1; done; echo stopped; while true; do sleep 0.2; done";

std::string PodYaml() {
  return std::string(
             "apiVersion: v1\nkind: Pod\nmetadata:\n  name: logger\nspec:\n"
             "  terminationGracePeriodSeconds: 2\n"
             "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
             "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"") +
         kWriter + "\"]\n";
}

// The log generations in a container's directory: a file, its compressed copy and its
// temporary file are one.
std::set<std::string> Generations(const std::vector<std::string>& names) {
  std::set<std::string> out;
  for (std::string n : names) {
    for (const std::string suffix : {".tmp", ".gz"}) {
      if (n.size() > suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
        n.resize(n.size() - suffix.size());
      }
    }
    out.insert(n);
  }
  return out;
}

class LogRotationTest : public NodeletTest {
 protected:
  // LOG-DIR/pods/default_logger-node1_UID, "" until it exists.
  std::string PodLogDir() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_.Sub("log") + "/pods", ec)) {
      if (e.path().filename().string().rfind("default_logger-node1_", 0) == 0) return e.path();
    }
    return "";
  }
};

TEST_F(LogRotationTest, RotatesUnderAFastWriterKeepingMaxFilesAndLosingNoLineBetweenThem) {
  Write("logger.yaml", PodYaml());
  StartNodelet({"--container-log-max-size", "200Ki", "--container-log-max-files", "3",
                "--container-log-monitor-interval", "1s"});
  std::string id;
  ASSERT_TRUE(WaitFor(
      [&] {
        id = RunningContainer("logger-node1", "app");
        return !id.empty();
      },
      60s));
  std::string pod_dir;
  ASSERT_TRUE(WaitFor(
      [&] {
        pod_dir = PodLogDir();
        return !pod_dir.empty() && fs::exists(pod_dir + "/app/0.log");
      },
      10s));
  const std::string dir = pod_dir + "/app";

  // Sampled every 50 ms for 10 s (there is no event for a rename in another process's
  // directory that this test could wait on).
  size_t most = 0;
  std::set<std::string> seen;
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < end) {
    auto names = SortedNames(dir);
    most = std::max(most, Generations(names).size());
    EXPECT_LE(Generations(names).size(), 3u) << ::testing::PrintToString(names);
    for (const auto& n : names) seen.insert(n);
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(most, 3u);
  // Rotated several times: more than three distinct rotated names went by, some compressed.
  EXPECT_GE(seen.size(), 6u) << ::testing::PrintToString(seen);
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const std::string& n) {
    return n.size() > 3 && n.compare(n.size() - 3, 3, ".gz") == 0;
  })) << ::testing::PrintToString(seen);

  // The writer stops; the files settle once a pass finds the current log small.
  auto stop = containerd_->cri().ExecSync(id, {"touch", "/tmp/stop"}, 10);
  ASSERT_TRUE(stop.ok() && stop->exit_code() == 0);
  std::vector<std::string> settled;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto before = SortedNames(dir);
        // The last line is in the current log or, rotated once more, in the newest plain file.
        bool stopped = false;
        for (const auto& n : before) {
          if (n.size() > 3 && n.compare(n.size() - 3, 3, ".gz") == 0) continue;
          stopped = stopped || ReadLogFile(dir + "/" + n).find(" stopped\n") != std::string::npos;
        }
        std::this_thread::sleep_for(1500ms);  // longer than a monitor interval
        settled = SortedNames(dir);
        return stopped && before == settled;
      },
      20s));

  // Oldest first: the rotated files by their stamps, then the current one.
  std::vector<std::string> order;
  for (const auto& n : settled) {
    if (n != "0.log") order.push_back(n);
  }
  std::sort(order.begin(), order.end(), [](std::string a, std::string b) {
    if (a.size() > 3 && a.compare(a.size() - 3, 3, ".gz") == 0) a.resize(a.size() - 3);
    if (b.size() > 3 && b.compare(b.size() - 3, 3, ".gz") == 0) b.resize(b.size() - 3);
    return a < b;
  });
  order.push_back("0.log");
  ASSERT_LE(order.size(), 3u);
  long previous = 0;
  long lines = 0;
  bool saw_stopped = false;
  bool first = true;
  // The CRI log format splits a line into partial (P) pieces ended by a full (F) one, and
  // containerd does so whenever podworkerd reopens the log between two of the writer's
  // 4 KiB stdio chunks: the old file ends with the line's head as P, the new one starts with its
  // tail as F. A reader joins them, as the kubelet's log reader does, also across files.
  std::string pending;
  for (const auto& n : order) {
    std::istringstream in(ReadLogFile(dir + "/" + n));
    std::string line;
    while (std::getline(in, line)) {
      // TIMESTAMP STREAM TAG TEXT
      std::istringstream fields(line);
      std::string ts, stream, tag, text;
      fields >> ts >> stream >> tag >> text;
      ASSERT_TRUE(tag == "F" || tag == "P") << n << ": " << line;
      if (tag == "P") {
        pending += text;
        continue;
      }
      text = pending + text;
      pending.clear();
      if (text == "stopped") {
        saw_stopped = true;
        continue;
      }
      ASSERT_FALSE(saw_stopped) << n << ": " << line;
      const long v = std::stol(text);
      // The oldest kept line may be the tail of a line whose head went with a deleted file.
      if (first) {
        first = false;
        continue;
      }
      if (previous != 0) {
        ASSERT_EQ(v, previous + 1) << "gap in " << n << " after " << previous;
      }
      previous = v;
      ++lines;
    }
  }
  EXPECT_EQ(pending, "");
  EXPECT_TRUE(saw_stopped);
  std::cout << "kept lines " << previous - lines + 1 << ".." << previous << " in "
            << ::testing::PrintToString(order) << "; " << seen.size()
            << " file names seen while sampling\n";
  // At least 200Ki in the kept rotated files: thousands of lines.
  EXPECT_GT(lines, 5000);
  EXPECT_GT(previous, lines);  // the oldest files went

  // The symlink for log shippers points at the current log.
  const std::string link = dir_.Sub("log") + "/containers/logger-node1_default_app-" + id + ".log";
  ASSERT_TRUE(fs::is_symlink(link))
      << ::testing::PrintToString(SortedNames(dir_.Sub("log") + "/containers"));
  EXPECT_EQ(fs::read_symlink(link).string(), dir + "/0.log");

  // The pod goes: its log directory and the symlink with it.
  fs::remove(manifests() + "/logger.yaml");
  EXPECT_TRUE(WaitFor([&] { return !fs::exists(pod_dir) && !fs::is_symlink(link); }, 30s))
      << ::testing::PrintToString(SortedNames(dir_.Sub("log") + "/pods")) << " "
      << ::testing::PrintToString(SortedNames(dir_.Sub("log") + "/containers"));
}

}  // namespace
}  // namespace nodelet::testing
