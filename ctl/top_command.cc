#include "ctl/top_command.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ctl/ctl_client.h"
#include "ctl/output_flags.h"
#include "ctl/pods_command.h"
#include "ctl/service_commands.h"
#include "lib/common/fs.h"
#include "lib/common/unique_fd.h"
#include "lib/ipc/endpoints.h"
#include "lib/pod/quantity.h"

namespace nodelet::ctl {
namespace {

using nlohmann::json;

// /stats/summary of a node with many pods is a few MB at most.
constexpr size_t kMaxBody = 64 << 20;

std::optional<uint64_t> NanoCores(const json& stats) {
  if (!stats.is_object()) return std::nullopt;
  auto cpu = stats.find("cpu");
  if (cpu == stats.end() || !cpu->is_object()) return std::nullopt;
  auto v = cpu->find("usageNanoCores");
  if (v == cpu->end() || !v->is_number_unsigned()) return std::nullopt;
  return v->get<uint64_t>();
}

std::optional<int64_t> WorkingSet(const json& stats) {
  if (!stats.is_object()) return std::nullopt;
  auto mem = stats.find("memory");
  if (mem == stats.end() || !mem->is_object()) return std::nullopt;
  auto v = mem->find("workingSetBytes");
  if (v == mem->end() || !v->is_number_integer()) return std::nullopt;
  return v->get<int64_t>();
}

std::string Cpu(const std::optional<uint64_t>& n) { return n ? FormatMilliCores(*n) : "-"; }
std::string Memory(const std::optional<int64_t>& b) { return b ? FormatMebibytes(*b) : "-"; }

Result<json> ParseSummary(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("node") || !j["node"].is_object()) {
    return InvalidArgument("/stats/summary is not a Summary");
  }
  return j;
}

// "host:port" or "[v6]:port" into its two parts.
bool SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->front() == '[') {
    if (host->size() < 3 || host->back() != ']') return false;
    *host = host->substr(1, host->size() - 2);
  }
  return true;
}

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
bool WaitFd(const Clock& clock, int fd, short events, MonoTime deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const long ms = MillisUntil(clock, deadline, 60000);
    int r = poll(&p, 1, static_cast<int>(ms));
    if (r > 0) return true;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && ms > 0) continue;  // the 60 s cap of one poll, not the deadline
    return false;
  }
}

Result<std::string> HttpAddress(const TopOptions& o) {
  if (!o.http_address.empty()) return o.http_address;
  const std::string file = o.run_dir + "/" + ipc::kHttpAddressFile;
  auto text = ReadFileBounded(file, 512);
  if (!text.ok()) {
    return Unavailable("no HTTP endpoint address in " + file +
                       " (nodelet not running, or with --http-address \"\"; give --http-address)");
  }
  std::string a = *text;
  while (!a.empty() && (a.back() == '\n' || a.back() == ' ')) a.pop_back();
  return a;
}

Result<std::string> FetchSummary(const TopOptions& o) {
  auto address = HttpAddress(o);
  if (!address.ok()) return address.status();
  auto body = HttpGet(*o.clock, *address, "/stats/summary", o.timeout);
  if (!body.ok())
    return Unavailable("GET http://" + *address + "/stats/summary: " + body.status().message());
  return body;
}

}  // namespace

std::string FormatMilliCores(uint64_t nano_cores) {
  return std::to_string((nano_cores + 999999) / 1000000) + "m";
}

std::string FormatMebibytes(int64_t bytes) {
  return std::to_string(std::max<int64_t>(0, bytes) / (1024 * 1024)) + "Mi";
}

Result<json> TopPodsDocument(const std::string& summary, const std::string& namespace_) {
  auto j = ParseSummary(summary);
  if (!j.ok()) return j.status();
  json pods = json::array();
  if (j->contains("pods") && (*j)["pods"].is_array()) {
    for (const auto& p : (*j)["pods"]) {
      if (!p.is_object() || !p.contains("podRef") || !p["podRef"].is_object()) continue;
      if (!namespace_.empty() && p["podRef"].value("namespace", "") != namespace_) continue;
      pods.push_back(p);
    }
  }
  return json{{"pods", pods}};
}

Result<std::string> FormatTopPods(const std::string& summary, const std::string& namespace_,
                                  bool containers) {
  auto j = ParseSummary(summary);
  if (!j.ok()) return j.status();
  std::vector<std::vector<std::string>> rows;
  if (containers) {
    rows.push_back({"POD", "NAME", "CPU(cores)", "MEMORY(bytes)"});
  } else {
    rows.push_back({"NAME", "CPU(cores)", "MEMORY(bytes)"});
  }
  std::vector<std::vector<std::string>> body;
  if (j->contains("pods") && (*j)["pods"].is_array()) {
    for (const auto& p : (*j)["pods"]) {
      if (!p.is_object() || !p.contains("podRef") || !p["podRef"].is_object()) continue;
      const std::string ns = p["podRef"].value("namespace", "");
      const std::string name = p["podRef"].value("name", "");
      if (!namespace_.empty() && ns != namespace_) continue;
      std::vector<std::string> lead = {name};
      if (!containers) {
        // The pod's cgroup; without one (no --cgroups-per-qos), the sum of its containers.
        std::optional<uint64_t> cpu = NanoCores(p);
        std::optional<int64_t> mem = WorkingSet(p);
        if ((!cpu || !mem) && p.contains("containers") && p["containers"].is_array()) {
          std::optional<uint64_t> csum;
          std::optional<int64_t> msum;
          for (const auto& c : p["containers"]) {
            if (auto n = NanoCores(c)) csum = csum.value_or(0) + *n;
            if (auto b = WorkingSet(c)) msum = msum.value_or(0) + *b;
          }
          if (!cpu) cpu = csum;
          if (!mem) mem = msum;
        }
        lead.push_back(Cpu(cpu));
        lead.push_back(Memory(mem));
        body.push_back(std::move(lead));
        continue;
      }
      if (!p.contains("containers") || !p["containers"].is_array()) continue;
      for (const auto& c : p["containers"]) {
        if (!c.is_object()) continue;
        auto row = lead;
        row.push_back(c.value("name", ""));
        row.push_back(Cpu(NanoCores(c)));
        row.push_back(Memory(WorkingSet(c)));
        body.push_back(std::move(row));
      }
    }
  }
  std::sort(body.begin(), body.end());
  rows.insert(rows.end(), body.begin(), body.end());
  return Columns(rows);
}

Result<std::string> FormatTopNode(const std::string& summary,
                                  std::optional<int64_t> allocatable_cpu_milli,
                                  std::optional<int64_t> allocatable_memory_bytes) {
  auto j = ParseSummary(summary);
  if (!j.ok()) return j.status();
  const json& node = (*j)["node"];
  const auto cpu = NanoCores(node);
  const auto mem = WorkingSet(node);
  auto percent = [](std::optional<double> used, std::optional<int64_t> total) -> std::string {
    if (!used || !total || *total <= 0) return "<unknown>";
    return std::to_string(static_cast<int64_t>(*used * 100.0 / static_cast<double>(*total))) + "%";
  };
  std::optional<double> cpu_milli;
  if (cpu) cpu_milli = static_cast<double>((*cpu + 999999) / 1000000);
  std::optional<double> mem_bytes;
  if (mem) mem_bytes = static_cast<double>(*mem);
  return Columns({{"NAME", "CPU(cores)", "CPU%", "MEMORY(bytes)", "MEMORY%"},
                  {node.value("nodeName", ""), Cpu(cpu), percent(cpu_milli, allocatable_cpu_milli),
                   Memory(mem), percent(mem_bytes, allocatable_memory_bytes)}});
}

Result<std::string> HttpGet(const Clock& clock, const std::string& address, const std::string& path,
                            std::chrono::milliseconds timeout) {
  const MonoTime deadline = clock.Now() + timeout;
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) {
    return InvalidArgument("\"" + address + "\": want HOST:PORT");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Unavailable(std::string("cannot resolve ") + host + ": " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(found, freeaddrinfo);
  UniqueFd fd;
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s.valid()) continue;
    if (connect(s.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        why = std::strerror(errno);
        continue;
      }
      if (!WaitFd(clock, s.get(), POLLOUT, deadline)) {
        why = "connect timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        why = std::strerror(err);
        continue;
      }
    }
    fd = std::move(s);
    break;
  }
  if (!fd.valid()) return Unavailable("cannot connect: " + why);

  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN && WaitFd(clock, fd.get(), POLLOUT, deadline)) {
      continue;
    } else {
      return Unavailable("sending the request failed");
    }
  }
  std::string response;
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
      if (response.size() > kMaxBody) return ResourceExhausted("answer over 64 MiB");
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN && WaitFd(clock, fd.get(), POLLIN, deadline)) continue;
    return DeadlineExceeded(errno == EAGAIN
                                ? "no answer within " + std::to_string(timeout.count()) + " ms"
                                : std::string("read: ") + std::strerror(errno));
  }
  const size_t head_end = response.find("\r\n\r\n");
  if (response.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) {
    return InvalidArgument("not an HTTP answer");
  }
  const size_t sp = response.find(' ');
  const int code = sp < head_end ? std::atoi(response.c_str() + sp + 1) : 0;
  std::string body = response.substr(head_end + 4);
  if (code != 200) {
    std::string first = body.substr(0, std::min<size_t>(body.find('\n'), 200));
    return Unavailable("HTTP " + std::to_string(code) + (first.empty() ? "" : ": " + first));
  }
  return body;
}

int RunTopPods(const TopOptions& o, std::ostream& out, std::ostream& err) {
  auto summary = FetchSummary(o);
  if (!summary.ok()) {
    Error(err) << summary.status().message() << "\n";
    return kExitUnknown;
  }
  if (o.format == OutputFormat::kJson || o.format == OutputFormat::kYaml ||
      o.format == OutputFormat::kName) {
    auto doc = TopPodsDocument(*summary, o.namespace_);
    if (!doc.ok()) {
      Error(err) << doc.status().message() << "\n";
      return kExitFailed;
    }
    if (PrintDocument(o.format, *doc, out)) return kExitOk;
    for (const auto& p : (*doc)["pods"]) out << "pod/" << p["podRef"].value("name", "") << "\n";
    return kExitOk;
  }
  auto table = FormatTopPods(*summary, o.namespace_, o.containers);
  if (!table.ok()) {
    Error(err) << table.status().message() << "\n";
    return kExitFailed;
  }
  out << *table;
  return kExitOk;
}

int RunTopNode(const TopOptions& o, std::ostream& out, std::ostream& err) {
  auto summary = FetchSummary(o);
  if (!summary.ok()) {
    Error(err) << summary.status().message() << "\n";
    return kExitUnknown;
  }
  if (o.format == OutputFormat::kJson || o.format == OutputFormat::kYaml ||
      o.format == OutputFormat::kName) {
    auto doc = ParseSummary(*summary);
    if (!doc.ok()) {
      Error(err) << doc.status().message() << "\n";
      return kExitFailed;
    }
    const json& node = (*doc)["node"];
    if (!PrintDocument(o.format, node, out)) out << "node/" << node.value("nodeName", "") << "\n";
    return kExitOk;
  }
  // The allocatable the percentages are of, as kubectl top node: from the node's status.
  std::optional<int64_t> cpu_milli, memory;
  auto reply = CtlRequest(*o.clock, o.run_dir, ipc::ctl::RequestKind::Node, {},
                          std::chrono::milliseconds(5000));
  if (reply.ok() && reply->ok) {
    json node = json::parse(reply->node_json, nullptr, false);
    if (!node.is_discarded() && node.contains("status") && node["status"].is_object()) {
      const json alloc = node["status"].value("allocatable", json::object());
      if (alloc.is_object()) {
        if (auto q = pod::Quantity::Parse(alloc.value("cpu", "")); q.ok()) {
          cpu_milli = q->MilliValue();
        }
        if (auto q = pod::Quantity::Parse(alloc.value("memory", "")); q.ok()) memory = q->Value();
      }
    }
  } else {
    Error(err) << "no allocatable for the percentages: "
               << (reply.ok() ? reply->error : reply.status().message()) << "\n";
  }
  auto table = FormatTopNode(*summary, cpu_milli, memory);
  if (!table.ok()) {
    Error(err) << table.status().message() << "\n";
    return kExitFailed;
  }
  out << *table;
  return kExitOk;
}

void AddTopCommand(CLI::App& app, const std::string* run_dir, int* exit_code) {
  auto opts = std::make_shared<TopOptions>();
  auto timeout_ms = std::make_shared<int>(10000);
  CLI::App* top = app.add_subcommand(
      "top", "What the pods (default) or the node use: CPU and memory, as kubectl top");
  top->fallthrough();
  top->require_subcommand(0, 1);
  top->add_option("--http-address", opts->http_address,
                  "nodelet's HTTP endpoint (default: the address in RUN-DIR/http-address)");
  top->add_option("-n,--namespace", opts->namespace_, "pods: only this namespace");
  top->add_flag("--containers", opts->containers, "pods: a row per container");
  auto output = std::make_shared<OutputFlags>();
  AddOutputFlags(top, output.get(), /*json_alias=*/false,
                 "Output format: json or yaml (the PodStats or NodeStats of /stats/summary), "
                 "name, wide");
  top->add_option("--timeout", *timeout_ms, "How long to wait for the figures, in milliseconds")
      ->capture_default_str();
  top->add_subcommand("pods", "Each pod's CPU and memory (the pod's cgroup)");
  CLI::App* node = top->add_subcommand("node",
                                       "The node's CPU and memory, and their share of "
                                       "the allocatable");
  top->callback([=] {
    if (!output->Resolve(&opts->format, std::cerr)) {
      *exit_code = kExitUsage;
      return;
    }
    opts->run_dir = *run_dir;
    opts->timeout = std::chrono::milliseconds(*timeout_ms);
    *exit_code = node->parsed() ? RunTopNode(*opts, std::cout, std::cerr)
                                : RunTopPods(*opts, std::cout, std::cerr);
  });
}

}  // namespace nodelet::ctl
