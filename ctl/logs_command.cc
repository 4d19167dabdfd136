#include "ctl/logs_command.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "ctl/ctl_client.h"

namespace nodelet::ctl {
namespace {

namespace fs = std::filesystem;
using ipc::ctl::RequestKind;

}  // namespace

std::string CriLogText(const std::string& content, int tail) {
  std::vector<std::string> lines;
  std::string partial;
  std::istringstream in(content);
  for (std::string line; std::getline(in, line);) {
    // TIMESTAMP STREAM TAG TEXT; TAG is F (full) or P (partial: continues on the next line).
    size_t a = line.find(' ');
    size_t b = a == std::string::npos ? a : line.find(' ', a + 1);
    size_t c = b == std::string::npos ? b : line.find(' ', b + 1);
    if (c == std::string::npos) {
      lines.push_back(line);  // not CRI's format: show it as it is
      continue;
    }
    std::string tag = line.substr(b + 1, c - b - 1);
    partial += line.substr(c + 1);
    if (tag == "P") continue;
    lines.push_back(partial);
    partial.clear();
  }
  if (!partial.empty()) lines.push_back(partial);
  size_t from = tail >= 0 && static_cast<size_t>(tail) < lines.size() ? lines.size() - tail : 0;
  std::string out;
  for (size_t i = from; i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

int RunLogs(const CtlOptions& o, const std::string& pod, const std::string& container, int tail,
            std::ostream& out, std::ostream& err) {
  auto reply = CtlRequest(*o.clock, o.run_dir, RequestKind::LogPath, {"plegd"}, o.timeout);
  if (!reply.ok() && reply.status().code() == StatusCode::kPermissionDenied) {
    return Unreachable(o, reply.status(), err);
  }
  if (!reply.ok() || reply->services.empty()) {
    err << "nodeletctl: nodelet is not running, or not with --run-dir " << o.run_dir << "\n";
    return kExitUnknown;
  }
  const std::string service_log = reply->services[0]->log_path;
  const fs::path pods_dir = fs::path(service_log).parent_path() / "pods";
  std::string ns = "default", name = pod;
  if (auto slash = pod.find('/'); slash != std::string::npos) {
    ns = pod.substr(0, slash);
    name = pod.substr(slash + 1);
  }
  const std::string prefix = ns + "_" + name + "_";
  fs::path pod_dir;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(pods_dir, ec)) {
    std::string d = e.path().filename();
    // NAMESPACE_NAME_UID; the UID (32 hex digits or an API UID) has no '_'.
    if (d.rfind(prefix, 0) == 0 && d.find('_', prefix.size()) == std::string::npos)
      pod_dir = e.path();
  }
  if (pod_dir.empty()) {
    err << "nodeletctl: no logs for pod " << ns << "/" << name << " under " << pods_dir.string()
        << "\n";
    return kExitUnknown;
  }
  std::vector<std::string> containers;
  for (const auto& e : fs::directory_iterator(pod_dir, ec)) {
    if (e.is_directory()) containers.push_back(e.path().filename());
  }
  std::sort(containers.begin(), containers.end());
  std::string chosen = container;
  if (chosen.empty()) {
    if (containers.size() != 1) {
      err << "nodeletctl: pod " << name << " has several containers, choose one with -c:";
      for (const auto& c : containers) err << " " << c;
      err << "\n";
      return kExitUnknown;
    }
    chosen = containers[0];
  } else if (std::find(containers.begin(), containers.end(), chosen) == containers.end()) {
    err << "nodeletctl: pod " << name << " has no container " << chosen << "\n";
    return kExitUnknown;
  }
  // The newest instance: the highest N of N.log.
  int best = -1;
  for (const auto& e : fs::directory_iterator(pod_dir / chosen, ec)) {
    std::string f = e.path().filename();
    if (f.size() < 5 || f.substr(f.size() - 4) != ".log") continue;
    try {
      best = std::max(best, std::stoi(f.substr(0, f.size() - 4)));
    } catch (...) {
    }
  }
  if (best < 0) {
    err << "nodeletctl: container " << chosen << " of pod " << name << " has no log yet\n";
    return kExitUnknown;
  }
  std::ifstream in(pod_dir / chosen / (std::to_string(best) + ".log"), std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  out << CriLogText(content, tail);
  return kExitOk;
}

}  // namespace nodelet::ctl
