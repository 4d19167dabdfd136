#include "ctl/top_command.h"

#include <algorithm>
#include <charconv>
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
#include "lib/http/http_client.h"
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

// "host:port" or "[v6]:port" into its two parts; the port a number from 1 to 65535.
bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  const char* first = address.data() + colon + 1;
  const char* last = address.data() + address.size();
  if (auto [end, ec] = std::from_chars(first, last, *port);
      ec != std::errc() || end != last || *port < 1 || *port > 65535) {
    return false;
  }
  if (host->front() == '[') {
    if (host->size() < 3 || host->back() != ']') return false;
    *host = host->substr(1, host->size() - 2);
  }
  return true;
}

// What a failed exchange says to the user of `top`.
Status FetchFailure(const http::Error& e, const std::string& host,
                    std::chrono::milliseconds timeout) {
  const bool late = e.kind == http::ErrorKind::kTimeout || e.kind == http::ErrorKind::kDeadline;
  if (!e.dial_reason.empty()) {
    if (e.unresolved) return Unavailable("cannot resolve " + host + ": " + e.dial_reason);
    return Unavailable("cannot connect: " + (late ? "connect timed out" : e.dial_reason));
  }
  if (late) return DeadlineExceeded("no answer within " + std::to_string(timeout.count()) + " ms");
  if (e.kind == http::ErrorKind::kProtocol || e.kind == http::ErrorKind::kTooLarge) {
    return InvalidArgument("not an HTTP answer");
  }
  return Unavailable(e.message);
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
  http::Request request;
  if (!SplitHostPort(address, &request.host, &request.port)) {
    return InvalidArgument("\"" + address + "\": want HOST:PORT");
  }
  request.path = path;
  request.host_header = address;
  request.http10 = true;
  request.user_agent = "nodeletctl";
  http::Limits limits;
  limits.deadline = clock.Now() + timeout;
  http::Exchange exchange(clock, limits);
  http::ResponseHead head;
  std::string body;
  // One byte past the cap tells an answer over it.
  if (!exchange.Start(request, head) ||
      !exchange.ReadBody(kMaxBody + 1, [&](const char* data, size_t len) {
        body.append(data, len);
        return true;
      })) {
    return FetchFailure(exchange.error(), request.host, timeout);
  }
  if (body.size() > kMaxBody) return ResourceExhausted("answer over 64 MiB");
  if (head.status != 200) {
    std::string first = body.substr(0, std::min<size_t>(body.find('\n'), 200));
    return Unavailable("HTTP " + std::to_string(head.status) + (first.empty() ? "" : ": " + first));
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
