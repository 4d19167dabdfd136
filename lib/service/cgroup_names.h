// Cgroup names under both drivers, as the kubelet forms them (docs/resources.md, "Pod cgroups").
//
// A cgroup is named by its components from the root, e.g. {"kubepods", "burstable", "pod<UID>"}
// (the kubelet's CgroupName). The cgroupfs driver turns that into the path
// "/kubepods/burstable/pod<UID>". The systemd driver turns it into a slice unit: each component
// with '-' replaced by '_', joined with '-', plus ".slice" ("kubepods-burstable-pod<UID>.slice"),
// whose cgroup path is the chain of its parent slices
// ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice"). Shared by
// podworkerd (which makes the cgroups) and the supervisor (which reads their usage).
// Header-only.
#pragma once

#include <string>
#include <vector>

namespace nodelet {

using CgroupName = std::vector<std::string>;

// A cgroup path component nodelet writes or removes: letters, digits, '.', '_', '-', at most 255
// bytes, not "." or "..". Shared by --cgroup-root, the pod cgroups and the leftover-cgroup
// clean-up (svc-podworkerd).
inline bool IsPlainCgroupComponent(const std::string& c) {
  if (c.empty() || c == "." || c == ".." || c.size() > 255) return false;
  for (char ch : c) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

// The kubelet's escapeSystemdCgroupName: '-' separates a slice's ancestors, so a component's
// own dashes become '_'.
inline std::string EscapeSystemdComponent(std::string part) {
  for (char& c : part) {
    if (c == '-') c = '_';
  }
  return part;
}

// "kubepods-burstable-pod<UID>.slice"; "-.slice" (systemd's root slice) for no component.
inline std::string SystemdSliceName(const CgroupName& name) {
  if (name.empty()) return "-.slice";
  std::string out;
  for (const auto& part : name) {
    if (!out.empty()) out += '-';
    out += EscapeSystemdComponent(part);
  }
  return out + ".slice";
}

// The cgroupfs path of `name` under the driver: "/a/b/c", or "/a.slice/a-b.slice/a-b-c.slice"
// with systemd; "/" for no component.
inline std::string CgroupPath(bool systemd, const CgroupName& name) {
  if (name.empty()) return "/";
  std::string path;
  if (!systemd) {
    for (const auto& part : name) path += "/" + part;
    return path;
  }
  std::string prefix;
  for (const auto& part : name) {
    if (!prefix.empty()) prefix += '-';
    prefix += EscapeSystemdComponent(part);
    path += "/" + prefix + ".slice";
  }
  return path;
}

// Parses --cgroup-root into components; "" when valid, else the reason. cgroupfs: "/" or an
// absolute path of plain components ("/a/b" -> {a, b}). systemd: "/" or a slice's full path, each
// level a slice named after its parent ("/a.slice/a-b.slice" -> {a, b}), as systemd nests them.
inline std::string ParseCgroupRoot(const std::string& root, bool systemd, CgroupName* out) {
  CgroupName parts;
  if (root != "/") {
    if (root.empty() || root[0] != '/' || root.back() == '/') {
      return "\"" + root + "\" must be \"/\" or an absolute path without a trailing \"/\"";
    }
    size_t start = 1;
    while (start <= root.size()) {
      size_t end = root.find('/', start);
      if (end == std::string::npos) end = root.size();
      const std::string part = root.substr(start, end - start);
      if (!IsPlainCgroupComponent(part)) {
        return "\"" + root +
               "\": each component must be letters, digits, '.', '_' or '-' (not "
               "\".\" or \"..\")";
      }
      parts.push_back(part);
      start = end + 1;
    }
  }
  if (systemd && !parts.empty()) {
    // The last slice names the whole chain: "a-b.slice" is {a, b}.
    const std::string& last = parts.back();
    const std::string suffix = ".slice";
    CgroupName chain;
    if (last.size() > suffix.size() &&
        last.compare(last.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string stem = last.substr(0, last.size() - suffix.size());
      size_t start = 0;
      while (start <= stem.size()) {
        size_t end = stem.find('-', start);
        if (end == std::string::npos) end = stem.size();
        chain.push_back(stem.substr(start, end - start));
        start = end + 1;
      }
    }
    bool valid = !chain.empty();
    for (const auto& c : chain) valid = valid && IsPlainCgroupComponent(c);
    if (!valid || CgroupPath(true, chain) != root) {
      return "\"" + root +
             "\": with the systemd driver it must be \"/\" or a slice's full path, each level "
             "named after its parent (\"/a.slice/a-b.slice\")";
    }
    parts = chain;
  }
  if (out != nullptr) *out = std::move(parts);
  return "";
}

}  // namespace nodelet
