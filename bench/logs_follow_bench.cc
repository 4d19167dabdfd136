// Following a container that never ends its line: a real nodelet on a private containerd runs
// a container that writes N bytes (1 GB by default) without a newline and then idles; the
// containerd logger cuts that into 16 KiB partial (P) pieces. `nodeletctl logs -f` follows it
// from the start, its stdout read (and counted) by this benchmark through a pipe, until all but
// the last piece (which containerd keeps until a newline or the end) has come through. The
// figure: the follower's peak RSS (VmHWM of /proc/PID/status), which must stay bounded whatever
// the container writes; beside it, the rate at which the bytes came through.
//
//   logs-follow-bench --bin-dir DIR --images-dir DIR [--bytes N] [--timeout-s S] [--json FILE]
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_nodelet.h"
#include "bench/bench_report.h"

extern char** environ;

using namespace nodelet;
using namespace nodelet::bench;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr char kPod[] = "chatty";
constexpr size_t kPiece = 16 * 1024;  // containerd's cut of a long line

std::string PodYaml(long long bytes) {
  return std::string("apiVersion: v1\nkind: Pod\nmetadata:\n  name: ") + kPod +
         "\nspec:\n  hostNetwork: true\n  restartPolicy: Never\n"
         "  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n"
         "    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
         "    command: [\"sh\", \"-c\", \"head -c " +
         std::to_string(bytes) +
         " /dev/zero | tr '\\\\0' a; trap 'exit 0' TERM; sleep 100000000 & wait\"]\n";
}

// VmHWM of `pid` in KiB (0 when it cannot be read).
long VmHwmKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

// The follower: nodeletctl with its stdout on a pipe this process reads.
struct Follower {
  pid_t pid = -1;
  int out = -1;
  ~Follower() {
    if (out >= 0) close(out);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

bool StartFollower(const std::vector<std::string>& args, Follower& f) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int rc = posix_spawn(&f.pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  f.out = p[0];
  if (rc != 0) {
    f.pid = -1;
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir, images_dir, json_path;
  long long bytes = 1000000000;
  int timeout_s = 900;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--bin-dir" && i + 1 < argc)
      bin_dir = argv[++i];
    else if (a == "--images-dir" && i + 1 < argc)
      images_dir = argv[++i];
    else if (a == "--bytes" && i + 1 < argc)
      bytes = std::atoll(argv[++i]);
    else if (a == "--timeout-s" && i + 1 < argc)
      timeout_s = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: logs-follow-bench --bin-dir DIR --images-dir DIR [--bytes N] "
                   "[--timeout-s S] [--json FILE]\n");
      return 2;
    }
  }
  if (bin_dir.empty() || images_dir.empty() || bytes < static_cast<long long>(2 * kPiece) ||
      timeout_s < 1) {
    std::fprintf(stderr,
                 "logs-follow-bench: --bin-dir and --images-dir are required, --bytes >= %zu\n",
                 2 * kPiece);
    return 2;
  }
  auto b = BenchNodelet::Start(images_dir);
  if (!b) return 1;
  if (!b->StartNodelet(bin_dir, "logs")) return 1;

  // The follow starts once the container runs (statusd's watch stream says so).
  ipc::Context ctx;
  status::StatusWatcher watcher(ctx, b->run_dir());
  if (!watcher.Connect().ok()) return 1;
  (void)watcher.Next(milliseconds(300));
  b->Write("chatty.yaml", PodYaml(bytes));
  status::PodStatusRecord latest;
  const auto run_deadline = SteadyClock::now() + std::chrono::seconds(120);
  while (!AllRunning(latest, 1)) {
    if (SteadyClock::now() >= run_deadline) {
      std::fprintf(stderr, "the pod did not reach Running\n");
      return 1;
    }
    auto ev = watcher.Next(milliseconds(500));
    if (ev.ok() && ev->kind == status::WatchEvent::Kind::kChanged &&
        ev->record.pod.name.rfind(kPod, 0) == 0)
      latest = ev->record;
  }

  Follower f;
  if (!StartFollower(
          {bin_dir + "/nodeletctl", "--run-dir", b->run_dir(), "logs", latest.pod.name, "-f"}, f)) {
    std::fprintf(stderr, "cannot start nodeletctl\n");
    return 1;
  }
  // Everything but the piece containerd still holds.
  const long long want = bytes - static_cast<long long>(kPiece);
  long long got = 0;
  std::vector<char> buf(1 << 20);
  const auto t0 = SteadyClock::now();
  const auto deadline = t0 + std::chrono::seconds(timeout_s);
  bool ended = false;
  while (got < want && !ended) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) break;
    pollfd p{f.out, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000))) < 0 &&
        errno != EINTR)
      break;
    if (!(p.revents & (POLLIN | POLLHUP))) continue;
    const ssize_t n = read(f.out, buf.data(), buf.size());
    if (n > 0) got += n;
    if (n == 0) ended = true;  // the follower exited
  }
  const double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  const long hwm_kib = VmHwmKib(f.pid);
  b->Remove("chatty.yaml");
  if (got < want) {
    std::fprintf(stderr, "logs -f passed on %lld of %lld bytes in %.0f s%s\n", got, want, secs,
                 ended ? " (it exited)" : "");
    return 1;
  }
  const double hwm_mib = static_cast<double>(hwm_kib) / 1024.0;
  const double mb_per_s = static_cast<double>(got) / 1e6 / secs;
  Figure rss = Value("logs -f peak RSS, a container writing " + std::to_string(bytes / 1000000) +
                         " MB without a newline",
                     "MiB", hwm_mib, 1);
  SetGoal(rss, "value", "<", 32);
  Figure rate = Value("logs -f throughput of a line that never ends", "MB/s", mb_per_s, 1);
  std::printf("logs -f: %lld bytes passed on in %.1f s (%.1f MB/s), peak RSS %.1f MiB\n", got, secs,
              mb_per_s, hwm_mib);
  WriteReport(json_path, {rss, rate}, {{"bytes_written", bytes}, {"bytes_passed_on", got}});
  if (!b->WaitRuntimeEmpty(milliseconds(60000))) std::fprintf(stderr, "the pod stayed\n");
  return 0;
}
