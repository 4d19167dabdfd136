// nodelet-chaos: the chaos soak's command line (./dev chaos). Exit 0 when every check passed,
// 1 on any violation, 2 when the soak could not run or on bad flags.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>

#include "lib/service/options.h"
#include "tests/chaos/chaos_soak.h"

namespace {

// The build tree's directory `sub` next to tests/ (the binary is build/tests/chaos/nodelet-chaos).
std::string BuildDir(const std::string& sub) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path().parent_path().parent_path() / sub).string();
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "nodelet chaos soak: faults and churn against a real nodelet and containerd, then "
      "checks through CRI and statusd (docs/chaos.md)"};
  nodelet::chaos::SoakOptions o;
  o.bin_dir = EnvOr("NODELET_BIN_DIR", BuildDir("bin"));
  o.images_dir = EnvOr("NODELET_IMAGES_DIR", BuildDir("images"));
  std::string duration = "5m", json_path;
  app.add_option("--duration", duration, "How long faults and churn go on (e.g. 60s, 5m)")
      ->check(nodelet::DurationValidator())
      ->capture_default_str();
  app.add_option("--pods", o.pods, "Desired pods, kept about constant")
      ->check(CLI::Range(1, 500))
      ->capture_default_str();
  // Without --seed every run picks a new seed and prints it first, so that repeated runs (CI's
  // chaos-short) explore different schedules and a failing one can be replayed exactly.
  std::optional<uint64_t> seed;
  app.add_option("--seed", seed, "Random seed (faults, churn); default: a new one, printed");
  app.add_option("--bin-dir", o.bin_dir, "Where nodelet, nodeletctl and the services are")
      ->capture_default_str();
  app.add_option("--images-dir", o.images_dir, "Where pause.tar and busybox.tar are")
      ->capture_default_str();
  app.add_option("--json", json_path, "Also write the figures as JSON to this file");
  app.add_flag("--keep", o.keep_dir, "Keep the work directory even when the soak passes");
  app.add_flag("-v,--verbose", o.verbose, "Log every fault and churn step");
  bool no_containerd_restart = false;
  app.add_flag("--no-containerd-restart", no_containerd_restart,
               "Do not restart containerd halfway (the short run in ./dev test)");
  CLI11_PARSE(app, argc, argv);
  o.containerd_restart = !no_containerd_restart;
  o.seed = seed ? *seed : std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  std::cout << "nodelet-chaos: seed " << o.seed << (seed ? "" : " (chosen for this run)")
            << "; replay with --seed " << o.seed << std::endl;
  o.duration = *nodelet::ParseDuration(duration);
  if (geteuid() != 0) {
    std::cerr << "nodelet-chaos: must run as root (containerd, mounts, cgroups)\n";
    return 2;
  }
  if (access((o.bin_dir + "/nodelet").c_str(), X_OK) != 0) {
    std::cerr << "nodelet-chaos: no nodelet in --bin-dir '" << o.bin_dir << "'\n";
    return 2;
  }
  auto figures = nodelet::chaos::RunSoak(o);
  if (!figures.ok()) {
    std::cerr << "nodelet-chaos: the soak could not run: " << figures.status().ToString() << "\n";
    return 2;
  }
  std::cout << figures->Summary();
  if (!json_path.empty()) {
    std::ofstream out(json_path, std::ios::trunc);
    out << figures->ToJson().dump(2) << "\n";
    if (!out) {
      std::cerr << "nodelet-chaos: cannot write '" << json_path << "'\n";
      return 2;
    }
  }
  return figures->violations() == 0 ? 0 : 1;
}
