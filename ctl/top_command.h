// `nodeletctl top [pods|node]`: what the pods and the node use, as `kubectl top` prints it
// (NAME CPU(cores) MEMORY(bytes) for pods, with CPU% and MEMORY% of the allocatable for the
// node): CPU in millicores ("5m", rounded up), memory working set in MiB ("12Mi").
//
// The figures come from the supervisor's /stats/summary (the kubelet's Summary API) on its HTTP
// endpoint, whose address the supervisor writes to RUN-DIR/http-address (--http-address
// overrides it), so `top` shows exactly what /stats/summary and the usage metrics say; the
// node's allocatable comes from the ctl socket (`nodeletctl node`). A pod's figures are its pod
// cgroup's (its containers and its sandbox); --containers shows each container's. CPU is the
// rate between the summary's two latest samples; "-" when there is no rate yet.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "ctl/cli_output.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::ctl {

struct TopOptions {
  std::string run_dir = "/run/nodelet";
  std::string http_address;  // HOST:PORT; "" reads RUN-DIR/http-address
  std::string namespace_;    // pods: only this namespace ("" all)
  bool containers = false;   // pods: a row per container
  // -o: the table (wide is the same), json or yaml (the pods' PodStats or the node's NodeStats
  // of /stats/summary, the kubelet's Summary API), name (pod/NAME, node/NAME).
  OutputFormat format = OutputFormat::kTable;
  std::chrono::milliseconds timeout{10000};
  const Clock* clock = &RealClock::Get();
};

// Exit codes: 0; 1 a bad answer; 4 nodelet (or its HTTP endpoint) cannot be reached.
int RunTopPods(const TopOptions& options, std::ostream& out, std::ostream& err);
int RunTopNode(const TopOptions& options, std::ostream& out, std::ostream& err);

// Formatting, exposed for tests. `summary` is /stats/summary's JSON.
// What -o json|yaml|name print for `top pods`: {"pods": [PodStats of the namespace]}.
Result<nlohmann::json> TopPodsDocument(const std::string& summary, const std::string& namespace_);
Result<std::string> FormatTopPods(const std::string& summary, const std::string& namespace_,
                                  bool containers);
// `allocatable_*` nullopt: the percentages are "<unknown>".
Result<std::string> FormatTopNode(const std::string& summary,
                                  std::optional<int64_t> allocatable_cpu_milli,
                                  std::optional<int64_t> allocatable_memory_bytes);
// kubectl's "5m" (nanocores in millicores, rounded up) and "12Mi" (bytes in MiB, rounded down).
std::string FormatMilliCores(uint64_t nano_cores);
std::string FormatMebibytes(int64_t bytes);

// The body of GET `path` at HOST:PORT (HTTP/1.0, through lib/http's client) within `timeout`; an
// error for anything but 200.
Result<std::string> HttpGet(const Clock& clock, const std::string& address, const std::string& path,
                            std::chrono::milliseconds timeout);

// Adds `top` with its `pods` (the default) and `node` subcommands.
void AddTopCommand(CLI::App& app, const std::string* run_dir, int* exit_code);

}  // namespace nodelet::ctl
