// libFuzzer target: nodelet's configuration file (/etc/nodelet/nodelet.yaml, or a kubelet's
// KubeletConfiguration) as the supervisor reads it: the flags' parse with --config, the
// settings a reload compares, and the per-service command lines. Each input is written to one
// temporary file and read from there, as nodelet reads it. Invariants: nothing throws past the
// readers but CLI11's parse errors, which name the problem; a reload's reading of a file that
// the start accepted succeeds.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "lib/service/config_reload.h"
#include "supervisor/supervisor_options.h"

namespace {

std::string ConfigPath() {
  static const std::string path = [] {
    char name[] = "/tmp/nodelet-fuzz-config-XXXXXX";
    int fd = mkstemp(name);
    if (fd < 0) std::abort();
    close(fd);
    return std::string(name);
  }();
  return path;
}

void WriteFileOrDie(const std::string& path, const uint8_t* data, size_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) std::abort();
  size_t off = 0;
  while (off < size) {
    ssize_t n = write(fd, data + off, size - off);
    if (n <= 0) std::abort();
    off += static_cast<size_t>(n);
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nodelet;
  const std::string path = ConfigPath();
  WriteFileOrDie(path, data, size);

  // One app for every input (making it is most of a run's time); each parse starts clear.
  static supervisor::SupervisorOptions options;
  static auto flags = supervisor::MakeSupervisorFlags(&options);
  flags->app.clear();
  std::vector<std::string> args = {"nodelet", "--config", path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  bool started = true;
  try {
    flags->app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    started = false;
    if (std::string(e.what()).empty()) std::abort();  // a refusal says why
  }
  auto settings = ReadFileSettings(path, "supervisor", flags->app);
  if (started && !settings.ok()) std::abort();
  (void)supervisor::ReadServiceConfigs(path);
  return 0;
}
