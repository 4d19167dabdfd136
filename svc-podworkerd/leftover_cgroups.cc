#include "svc-podworkerd/leftover_cgroups.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace nodelet::podworkerd {
namespace {

bool PlainComponent(const std::string& c) {
  if (c.empty() || c == "." || c == ".." || c.size() > 255) return false;
  for (char ch : c) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    ch == '.' || ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> CgroupsPathFromInfo(const std::string& info_json) {
  auto info = nlohmann::json::parse(info_json, nullptr, /*allow_exceptions=*/false);
  if (info.is_discarded() || !info.is_object()) return std::nullopt;
  auto spec = info.find("runtimeSpec");
  if (spec == info.end() || !spec->is_object()) return std::nullopt;
  auto linux_section = spec->find("linux");
  if (linux_section == spec->end() || !linux_section->is_object()) return std::nullopt;
  auto path = linux_section->find("cgroupsPath");
  if (path == linux_section->end() || !path->is_string()) return std::nullopt;
  const std::string p = path->get<std::string>();
  if (p.size() < 2 || p[0] != '/' || p.size() > 4096) return std::nullopt;
  size_t start = 1;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    if (!PlainComponent(p.substr(start, end - start))) return std::nullopt;
    start = end + 1;
  }
  return p;
}

int RemoveLeftoverCgroups(const std::vector<std::string>& paths, const std::string& cgroup_root) {
  if (paths.empty()) return 0;
  std::vector<std::string> hierarchies = {cgroup_root};
  if (DIR* d = opendir(cgroup_root.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      std::string full = cgroup_root + "/" + name;
      struct stat st {};
      // A controller mount (or the unified one) is a directory; files (cgroup.procs on v2) and
      // the comounted aliases (symlinks such as cpu -> cpu,cpuacct) are skipped.
      if (lstat(full.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) hierarchies.push_back(full);
    }
    closedir(d);
  }
  int removed = 0;
  for (const auto& path : paths) {
    for (const auto& h : hierarchies) {
      if (rmdir((h + path).c_str()) == 0) ++removed;
    }
  }
  return removed;
}

}  // namespace nodelet::podworkerd

namespace nodelet::podworkerd {

std::vector<int> OrphanShimPids(const std::string& id, const std::string& containerd_socket,
                                const std::string& proc_root) {
  std::vector<int> out;
  if (id.empty() || containerd_socket.empty()) return out;
  DIR* d = opendir(proc_root.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    FILE* f = fopen((proc_root + "/" + name + "/cmdline").c_str(), "re");
    if (f == nullptr) continue;
    std::string raw;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && raw.size() < 65536) raw.append(buf, n);
    fclose(f);
    std::vector<std::string> argv;
    size_t start = 0;
    while (start < raw.size()) {
      size_t end = raw.find('\0', start);
      if (end == std::string::npos) end = raw.size();
      argv.push_back(raw.substr(start, end - start));
      start = end + 1;
    }
    if (argv.empty()) continue;
    const std::string base = argv[0].substr(argv[0].rfind('/') + 1);
    if (base.rfind("containerd-shim", 0) != 0) continue;
    bool id_matches = false, address_matches = false;
    for (size_t i = 1; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-id" && argv[i + 1] == id) id_matches = true;
      if (argv[i] == "-address" && argv[i + 1] == containerd_socket) address_matches = true;
    }
    if (id_matches && address_matches) out.push_back(std::stoi(name));
  }
  closedir(d);
  return out;
}

}  // namespace nodelet::podworkerd
