// What containerd's log tells of the runtime's own losses at a restart (chaos_soak.h): the
// shims it found gone while booting again, and the RunPodSandbox calls its stop cut off.
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "tests/chaos/chaos_soak.h"

namespace nodelet::chaos {

std::set<std::string> ShimsLostAtBoot(const std::string& containerd_log) {
  std::set<std::string> out;
  bool booting = false;
  std::istringstream lines(containerd_log);
  const std::string key = " id=";
  for (std::string line; std::getline(lines, line);) {
    if (line.find("msg=\"starting containerd\"") != std::string::npos) {
      booting = true;
    } else if (line.find("msg=\"containerd successfully booted") != std::string::npos) {
      booting = false;
    } else if (booting &&
               line.find("msg=\"cleaning up after shim disconnected\"") != std::string::npos) {
      auto at = line.find(key);
      if (at == std::string::npos) continue;
      at += key.size();
      auto end = line.find(' ', at);
      out.insert(line.substr(at, end == std::string::npos ? std::string::npos : end - at));
    }
  }
  return out;
}

int SandboxCallsCutByStop(const std::string& containerd_log) {
  const std::string start = "msg=\"RunPodSandbox for &PodSandboxMetadata{";
  std::map<std::string, int> open;  // calls in flight, by their metadata (a retry has the same)
  int cut = 0;
  std::istringstream lines(containerd_log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("msg=\"Stop CRI service\"") != std::string::npos) {
      for (const auto& [meta, n] : open) cut += n;
      open.clear();
      continue;
    }
    auto at = line.find(start);
    if (at == std::string::npos) continue;
    at += start.size();
    auto close = line.find("}", at);
    if (close == std::string::npos) continue;
    std::string meta = line.substr(at, close - at);
    // "...{META}" opens a call; "...{META} returns sandbox id" and "...{META} failed" end it.
    if (line.compare(close, 2, "}\"") == 0) {
      ++open[meta];
    } else if (auto it = open.find(meta); it != open.end() && --it->second == 0) {
      open.erase(it);
    }
  }
  return cut;
}

}  // namespace nodelet::chaos
