#include "ctl/service_commands.h"

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ctl/ctl_client.h"
#include "lib/ipc/process_state_name.h"
#include "nodelet_version.h"

namespace nodelet::ctl {
namespace {

using ipc::ctl::ProcessState;
using ipc::ctl::RequestKind;

std::string Pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

}  // namespace

int Unreachable(const CtlOptions& o, const Status& s, std::ostream& err) {
  if (s.code() == StatusCode::kPermissionDenied) {
    // "nodeletctl: permission denied: RUN/ctl.sock (needs root or group X)"; LSB's 4 is also
    // "insufficient privilege" for actions.
    Error(err) << s.message() << "\n";
    return kExitUnknown;
  }
  Error(err) << "nodelet is not running, or not with --run-dir " << o.run_dir
             << " (cannot reach nodelet at " << o.run_dir << "/ctl.sock: " << s.message() << ")\n";
  return kExitUnknown;
}

std::string FormatUptime(uint64_t uptime_ms) {
  uint64_t s = uptime_ms / 1000;
  uint64_t days = s / 86400;
  s %= 86400;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", static_cast<unsigned long long>(s / 3600),
                static_cast<unsigned long long>((s % 3600) / 60),
                static_cast<unsigned long long>(s % 60));
  if (days == 0) return buf;
  return std::to_string(days) + (days == 1 ? " day, " : " days, ") + buf;
}

namespace {

// supervisorctl's lines; `wide` adds a header and the RESTARTS and HEALTH columns.
std::string StatusLines(const std::vector<std::unique_ptr<ipc::ctl::ServiceStatusT>>& services,
                        bool wide) {
  size_t maxlen = 30;
  for (const auto& s : services) maxlen = std::max(maxlen, s->name.size());
  std::ostringstream out;
  if (wide) {
    out << Pad("NAME", maxlen + 3) << Pad("STATE", 10) << Pad("RESTARTS", 10) << Pad("HEALTH", 10)
        << "DESCRIPTION\n";
  }
  for (const auto& s : services) {
    std::string desc = s->description;
    if (s->state == ProcessState::Running) {
      desc = "pid " + std::to_string(s->pid) + ", uptime " + FormatUptime(s->uptime_ms);
    }
    out << Pad(s->name, maxlen + 3) << Pad(ipc::ProcessStateName(s->state), 10);
    if (wide) {
      out << Pad(std::to_string(s->restarts), 10) << Pad(s->health.empty() ? "-" : s->health, 10);
    }
    out << desc << "\n";
  }
  return out.str();
}

}  // namespace

std::string FormatStatus(const std::vector<std::unique_ptr<ipc::ctl::ServiceStatusT>>& services) {
  return StatusLines(services, false);
}

std::string FormatStatusWide(
    const std::vector<std::unique_ptr<ipc::ctl::ServiceStatusT>>& services) {
  return StatusLines(services, true);
}

nlohmann::json StatusJson(const std::vector<std::unique_ptr<ipc::ctl::ServiceStatusT>>& services) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& s : services) {
    arr.push_back({{"name", s->name},
                   {"state", ipc::ProcessStateName(s->state)},
                   {"pid", s->pid},
                   {"uptime_ms", s->uptime_ms},
                   {"description", s->description},
                   {"restarts", s->restarts},
                   {"health", s->health},
                   {"log_path", s->log_path},
                   {"state_since", s->state_since_epoch_s}});
  }
  return arr;
}

int RunStatus(const CtlOptions& o, const std::vector<std::string>& names, OutputFormat format,
              std::ostream& out, std::ostream& err) {
  auto reply = CtlRequest(*o.clock, o.run_dir, RequestKind::Status, names, o.timeout);
  if (!reply.ok()) return Unreachable(o, reply.status(), err);
  const bool structured = PrintDocument(format, StatusJson(reply->services), out);
  if (format == OutputFormat::kName) {
    for (const auto& s : reply->services) out << s->name << "\n";
  } else if (format == OutputFormat::kWide) {
    out << FormatStatusWide(reply->services);
  } else if (!structured) {
    out << FormatStatus(reply->services);
  }
  int rc = kExitOk;
  for (const auto& s : reply->services) {
    if (s->state != ProcessState::Running) rc = kExitNotRunning;
  }
  for (const auto& r : reply->results) {
    if (!structured) out << r->name << ": ERROR (" << r->message << ")\n";
    rc = kExitUnknown;
  }
  return rc;
}

int RunAction(const CtlOptions& o, RequestKind kind, const std::vector<std::string>& names,
              std::ostream& out, std::ostream& err) {
  if (names.empty()) {
    Error(err) << "name one or more services, or 'all'\n";
    return kExitUsage;
  }
  auto reply = CtlRequest(*o.clock, o.run_dir, kind, names, o.action_timeout);
  if (!reply.ok()) return Unreachable(o, reply.status(), err);
  int rc = kExitOk;
  for (const auto& r : reply->results) {
    if (r->ok) {
      out << r->name << ": " << r->message << "\n";
    } else {
      out << r->name << ": ERROR (" << r->message << ")\n";
      rc = r->message == "no such process" ? kExitUnknown : std::max(rc, kExitFailed);
    }
  }
  return rc;
}

int RunPid(const CtlOptions& o, const std::vector<std::string>& names, std::ostream& out,
           std::ostream& err) {
  auto reply = CtlRequest(*o.clock, o.run_dir, RequestKind::Pid, names, o.timeout);
  if (!reply.ok()) return Unreachable(o, reply.status(), err);
  if (names.empty()) {
    out << reply->supervisor_pid << "\n";
    return kExitOk;
  }
  for (const auto& s : reply->services) out << s->pid << "\n";
  for (const auto& r : reply->results) {
    Error(err) << r->name << ": ERROR (" << r->message << ")\n";
    return kExitUnknown;
  }
  return kExitOk;
}

int RunVersion(const CtlOptions& o, bool client_only, std::ostream& out, std::ostream& err) {
  out << "Client Version: " << NODELET_VERSION << "\n";
  out.flush();
  if (client_only) return kExitOk;
  auto reply = CtlRequest(*o.clock, o.run_dir, RequestKind::Version, {}, o.timeout);
  if (!reply.ok()) return Unreachable(o, reply.status(), err);
  out << "Server Version: " << reply->version << "\n";
  return kExitOk;
}

namespace {

std::string ShortId(const std::string& id) { return id.substr(0, 13); }

const char* ContainerStateName(ipc::pleg::ContainerState s) {
  switch (s) {
    case ipc::pleg::ContainerState::Created:
      return "CREATED";
    case ipc::pleg::ContainerState::Running:
      return "RUNNING";
    case ipc::pleg::ContainerState::Exited:
      return "EXITED";
    case ipc::pleg::ContainerState::Unknown:
      return "UNKNOWN";
  }
  return "UNKNOWN";
}

}  // namespace

std::string FormatRuntime(const ipc::ctl::CtlReplyT& reply) {
  std::ostringstream out;
  out << Pad("POD", 40) << Pad("NAMESPACE", 14) << Pad("SANDBOX", 15) << Pad("STATE", 10)
      << "NOTE\n";
  for (const auto& p : reply.runtime_pods) {
    std::string sandbox = "-", state = "-";
    if (!p->sandboxes.empty()) {
      sandbox = ShortId(p->sandboxes[0]->id);
      state = p->sandboxes[0]->state == ipc::pleg::SandboxState::Ready ? "READY" : "NOTREADY";
    }
    std::string note = p->foreign ? "foreign (not nodelet's)" : "";
    if (!p->inspect_error.empty())
      note += (note.empty() ? "" : "; ") + ("stale: " + p->inspect_error);
    out << Pad(p->name.empty() ? p->uid : p->name, 40) << Pad(p->namespace_, 14) << Pad(sandbox, 15)
        << Pad(state, 10) << note << "\n";
    for (const auto& c : p->containers) {
      std::string detail;
      if (c->state == ipc::pleg::ContainerState::Exited) {
        detail = "exit " + std::to_string(c->exit_code) +
                 (c->reason.empty() ? "" : " (" + c->reason + ")");
      }
      out << "  " << Pad(c->name, 38) << Pad("", 14) << Pad(ShortId(c->id), 15)
          << Pad(ContainerStateName(c->state), 10) << detail << "\n";
    }
  }
  if (!reply.runtime_error.empty()) out << "(" << reply.runtime_error << ")\n";
  return out.str();
}

int RunRuntime(const CtlOptions& o, OutputFormat format, std::ostream& out, std::ostream& err) {
  auto reply = CtlRequest(*o.clock, o.run_dir, RequestKind::Runtime, {}, o.timeout);
  if (!reply.ok()) return Unreachable(o, reply.status(), err);
  if (format == OutputFormat::kName) {
    // What names each pod sandbox: NAMESPACE/NAME, or the uid of a pod without a name.
    for (const auto& p : reply->runtime_pods) {
      out << (p->name.empty() ? p->uid : p->namespace_ + "/" + p->name) << "\n";
    }
    return kExitOk;
  }
  if (format == OutputFormat::kTable || format == OutputFormat::kWide) {
    out << FormatRuntime(*reply);
    return kExitOk;
  }
  nlohmann::json pods = nlohmann::json::array();
  for (const auto& p : reply->runtime_pods) {
    nlohmann::json containers = nlohmann::json::array();
    for (const auto& c : p->containers) {
      containers.push_back({{"id", c->id},
                            {"name", c->name},
                            {"state", ContainerStateName(c->state)},
                            {"exit_code", c->exit_code},
                            {"attempt", c->attempt},
                            {"image", c->image}});
    }
    nlohmann::json sandboxes = nlohmann::json::array();
    for (const auto& s : p->sandboxes) {
      sandboxes.push_back(
          {{"id", s->id},
           {"state", s->state == ipc::pleg::SandboxState::Ready ? "READY" : "NOTREADY"}});
    }
    pods.push_back({{"uid", p->uid},
                    {"name", p->name},
                    {"namespace", p->namespace_},
                    {"foreign", p->foreign},
                    {"sandboxes", sandboxes},
                    {"containers", containers},
                    {"inspect_error", p->inspect_error}});
  }
  PrintDocument(
      format,
      nlohmann::json{
          {"relist", reply->runtime_relist}, {"error", reply->runtime_error}, {"pods", pods}},
      out);
  return kExitOk;
}

std::string LastLines(const std::string& path, int lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  // Read back in blocks until enough newlines are seen (bounded to 4 MiB).
  std::string data;
  std::streamoff pos = size;
  const std::streamoff kBlock = 8192, kMax = 4 * 1024 * 1024;
  while (pos > 0 && size - pos < kMax) {
    std::streamoff n = std::min(kBlock, pos);
    pos -= n;
    std::string block(static_cast<size_t>(n), '\0');
    in.seekg(pos);
    in.read(block.data(), n);
    data = block + data;
    if (std::count(data.begin(), data.end(), '\n') > lines) break;
  }
  // Keep the last `lines` lines (a final newline does not start a new line).
  size_t end = data.size();
  if (end > 0 && data[end - 1] == '\n') --end;
  size_t start = end;
  int seen = 0;
  while (start > 0) {
    if (data[start - 1] == '\n' && ++seen == lines) break;
    --start;
  }
  return lines <= 0 ? "" : data.substr(start);
}

int RunTail(const CtlOptions& o, const std::string& name, int lines, bool follow, std::ostream& out,
            std::ostream& err) {
  auto reply = CtlRequest(*o.clock, o.run_dir, RequestKind::LogPath, {name}, o.timeout);
  if (!reply.ok()) return Unreachable(o, reply.status(), err);
  if (!reply->results.empty() || reply->services.empty()) {
    Error(err) << name << ": ERROR (no such process)\n";
    return kExitUnknown;
  }
  const std::string path = reply->services[0]->log_path;
  if (path.empty()) {
    // systemd mode: the services are units and their output is in the journal.
    Error(err) << name << ": no log file; its output is in the journal (journalctl -u nodelet-"
               << name << ".service)\n";
    return kExitFailed;
  }
  out << LastLines(path, lines);
  out.flush();
  if (!follow) return kExitOk;

  // Follow: inotify on the directory catches both appends and rotation (the file renamed away
  // and a new one created), so this waits on events, never on a timer.
  int ino = inotify_init1(IN_CLOEXEC);
  if (ino < 0) {
    Error(err) << "inotify: " << std::strerror(errno) << "\n";
    return kExitFailed;
  }
  std::string dir = path.substr(0, path.rfind('/'));
  std::string base = path.substr(path.rfind('/') + 1);
  inotify_add_watch(ino, dir.c_str(), IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE);
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  char buf[65536];
  for (;;) {
    pollfd p{ino, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) break;
    alignas(inotify_event) char evbuf[4096];
    ssize_t n = read(ino, evbuf, sizeof evbuf);
    bool rotated = false;
    for (char* q = evbuf; n > 0 && q < evbuf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(q);
      if (ev->len > 0 && base == ev->name && (ev->mask & (IN_CREATE | IN_MOVED_TO))) rotated = true;
      q += sizeof(inotify_event) + ev->len;
    }
    // Print what is left of the old file, then switch to the new one from its start.
    for (;;) {
      in.read(buf, sizeof buf);
      if (in.gcount() <= 0) break;
      out.write(buf, in.gcount());
    }
    in.clear();
    if (rotated) {
      in.close();
      in.open(path, std::ios::binary);
      for (;;) {
        in.read(buf, sizeof buf);
        if (in.gcount() <= 0) break;
        out.write(buf, in.gcount());
      }
      in.clear();
    }
    out.flush();
    if (!out) break;  // the reader went away
  }
  close(ino);
  return kExitOk;
}

int RunNode(const CtlOptions& o, OutputFormat format, std::ostream& out, std::ostream& err) {
  auto reply = CtlRequest(*o.clock, o.run_dir, RequestKind::Node, {}, o.timeout);
  if (!reply.ok()) return Unreachable(o, reply.status(), err);
  if (!reply->ok) {
    Error(err) << reply->error << "\n";
    return kExitUnknown;
  }
  if (format == OutputFormat::kJson) {
    out << reply->node_json << "\n";
    return kExitOk;
  }
  auto node = nlohmann::json::parse(reply->node_json, nullptr, false);
  if (node.is_discarded() || !node.is_object()) {
    Error(err) << "the node status is not valid JSON\n";
    return kExitFailed;
  }
  if (PrintDocument(format, node, out)) return kExitOk;
  if (format == OutputFormat::kName) {
    out << "node/" << node["metadata"].value("name", "") << "\n";
    return kExitOk;
  }
  const auto& st = node["status"];
  out << "Name:        " << node["metadata"].value("name", "") << "\n";
  out << "Runtime:     " << st["nodeInfo"].value("containerRuntimeVersion", "") << "\n";
  out << "Nodelet:     " << st["nodeInfo"].value("kubeletVersion", "") << "\n";
  out << "Kernel:      " << st["nodeInfo"].value("kernelVersion", "") << "\n";
  out << "Conditions:\n";
  out << "  " << Pad("TYPE", 16) << Pad("STATUS", 8) << Pad("SINCE", 22) << Pad("REASON", 32)
      << "MESSAGE\n";
  for (const auto& c : st["conditions"]) {
    out << "  " << Pad(c.value("type", ""), 16) << Pad(c.value("status", ""), 8)
        << Pad(c.value("lastTransitionTime", ""), 22) << Pad(c.value("reason", ""), 32)
        << c.value("message", "") << "\n";
  }
  out << "Capacity:    ";
  for (const auto& [k, v] : st["capacity"].items()) out << k << "=" << v.get<std::string>() << " ";
  out << "\nAllocatable: ";
  for (const auto& [k, v] : st["allocatable"].items())
    out << k << "=" << v.get<std::string>() << " ";
  out << "\nImages:      " << st["images"].size() << "\n";
  return kExitOk;
}

}  // namespace nodelet::ctl
