// The container log rotation flags, the kubelet's: --container-log-max-size (a quantity, default
// 10Mi), --container-log-max-files (at least 2, default 5) and nodelet's own
// --container-log-monitor-interval (the kubelet's fixed 10 s). The supervisor (nodelet) takes
// them and passes them to podworkerd, which takes the same flags and rotates the logs
// (svc-podworkerd/container_log_manager.h, docs/logging.md). Header-only: both link lib/pod for
// the quantity.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "lib/pod/quantity.h"
#include "lib/service/options.h"

namespace nodelet {

struct ContainerLogFlags {
  std::string max_size = "10Mi";
  int max_files = 5;
  std::string monitor_interval = "10s";
};

// The bytes of a --container-log-max-size: a quantity of at least one byte.
inline Result<int64_t> ParseContainerLogMaxSize(const std::string& text) {
  auto q = pod::Quantity::Parse(text);
  if (!q.ok())
    return InvalidArgument("\"" + text + "\" is not a quantity: " + q.status().message());
  if (q->Value() < 1) return InvalidArgument("\"" + text + "\" is not a positive size");
  return q->Value();
}

inline void AddContainerLogOptions(CLI::App& app, ContainerLogFlags& flags) {
  app.add_option("--container-log-max-size", flags.max_size,
                 "Size (a quantity, e.g. 10Mi) at which a running container's log is rotated")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            auto size = ParseContainerLogMaxSize(text);
            return size.ok() ? std::string() : size.status().message();
          },
          "QUANTITY"))
      ->capture_default_str();
  app.add_option("--container-log-max-files", flags.max_files,
                 "Most log files kept per container, the current one included (at least 2)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              size_t used = 0;
              const long n = std::stol(text, &used);
              if (used == text.size() && n >= 2 && n <= 1000) return std::string();
            } catch (const std::exception&) {
            }
            return "\"" + text + "\" is not a number of files from 2 to 1000";
          },
          "N"))
      ->capture_default_str();
  app.add_option("--container-log-monitor-interval", flags.monitor_interval,
                 "How often the running containers' log sizes are checked for rotation")
      ->check(DurationValidator())
      ->capture_default_str();
}

}  // namespace nodelet
