#include "svc-podworkerd/leftover_cgroups.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "lib/service/cgroup_flags.h"

namespace nodelet::podworkerd {
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
    if (!IsPlainCgroupComponent(p.substr(start, end - start))) return std::nullopt;
    start = end + 1;
  }
  return p;
}

std::optional<std::string> NamespaceCgroupPath(const std::string& ns, const std::string& id) {
  if (!IsPlainCgroupComponent(ns) || !IsPlainCgroupComponent(id)) return std::nullopt;
  return "/" + ns + "/" + id;
}

std::vector<std::string> CgroupHierarchies(const std::string& cgroup_root) {
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
  return hierarchies;
}

int RemoveLeftoverCgroups(const std::vector<std::string>& paths, const std::string& cgroup_root) {
  if (paths.empty()) return 0;
  const std::vector<std::string> hierarchies = CgroupHierarchies(cgroup_root);
  int removed = 0;
  for (const auto& path : paths) {
    for (const auto& h : hierarchies) {
      if (rmdir((h + path).c_str()) == 0) ++removed;
    }
  }
  return removed;
}

}  // namespace nodelet::podworkerd
