#include "lib/pod/downward_api.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "lib/pod/field_error.h"

namespace nodelet::pod {
namespace {

// A downwardAPI file's rendering of a whole label or annotation map: one `key="value"` line
// per entry (each ending in a newline), sorted by key, the value quoted as Go's %q quotes
// printable text.
std::string MapText(const std::map<std::string, std::string>& m) {
  std::string out;
  for (const auto& [k, v] : m) out += k + "=" + QuoteValue(v, std::string::npos) + "\n";
  return out;
}

// ceil(a / b) for a >= 0, b > 0, in 128 bits.
__int128 CeilDiv(__int128 a, __int128 b) { return a <= 0 ? 0 : (a + b - 1) / b; }

std::string ToDecimal(__int128 v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  if (neg) v = -v;
  std::string s;
  while (v > 0) {
    s.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  if (neg) s.push_back('-');
  std::reverse(s.begin(), s.end());
  return s;
}

}  // namespace

NodeAllocatable ReadNodeAllocatable(const std::string& root_dir) {
  NodeAllocatable r;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  r.cpu_milli = std::max(1L, cpus) * 1000;
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") {
      r.memory_bytes = kb * 1024;
      break;
    }
  }
  struct statvfs fs {};
  if (statvfs(root_dir.c_str(), &fs) == 0) {
    r.ephemeral_storage_bytes =
        static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize);
  }
  return r;
}

Result<std::string> PodFieldValue(const Pod& pod, std::string_view path,
                                  const PodRuntimeFields& runtime) {
  const ObjectMeta& md = pod.metadata;
  if (path == "metadata.name") return md.name;
  if (path == "metadata.namespace") return md.namespace_name;
  if (path == "metadata.uid") return md.uid;
  if (path == "metadata.labels") return MapText(md.labels);
  if (path == "metadata.annotations") return MapText(md.annotations);
  for (const auto& [prefix, map] :
       {std::pair{std::string_view("metadata.labels['"), &md.labels},
        std::pair{std::string_view("metadata.annotations['"), &md.annotations}}) {
    if (path.size() > prefix.size() + 2 && path.substr(0, prefix.size()) == prefix &&
        path.substr(path.size() - 2) == "']") {
      std::string key(path.substr(prefix.size(), path.size() - prefix.size() - 2));
      auto it = map->find(key);
      return it == map->end() ? std::string() : it->second;
    }
  }
  if (path == "spec.nodeName") return pod.spec.node_name;
  if (path == "spec.serviceAccountName") return pod.spec.service_account_name;
  if (path == "status.podIP" || path == "status.podIPs") return runtime.pod_ip;
  if (path == "status.hostIP" || path == "status.hostIPs") return runtime.host_ip;
  return InvalidArgument("unsupported fieldPath \"" + std::string(path) + "\"");
}

Result<std::string> ResourceFieldValue(const Pod& pod, const ResourceFieldSelector& ref,
                                       const std::string& default_container,
                                       const NodeAllocatable& node) {
  const std::string& name = ref.container_name.empty() ? default_container : ref.container_name;
  const Container* container = nullptr;
  for (const auto* list : {&pod.spec.containers, &pod.spec.init_containers}) {
    for (const Container& c : *list) {
      if (c.name == name) container = &c;
    }
  }
  if (container == nullptr) {
    return InvalidArgument("resourceFieldRef: no container named \"" + name + "\"");
  }
  auto dot = ref.resource.find('.');
  if (dot == std::string::npos) {
    return InvalidArgument("resourceFieldRef: unsupported resource \"" + ref.resource + "\"");
  }
  const std::string kind = ref.resource.substr(0, dot);  // limits or requests
  const std::string resource = ref.resource.substr(dot + 1);
  const ResourceList& list =
      kind == "limits" ? container->resources.limits : container->resources.requests;
  if ((kind != "limits" && kind != "requests") ||
      (resource != "cpu" && resource != "memory" && resource != "ephemeral-storage")) {
    return InvalidArgument("resourceFieldRef: unsupported resource \"" + ref.resource + "\"");
  }
  constexpr __int128 kNanosPerUnit = 1000000000;
  __int128 nanos = 0;  // the quantity in 10^-9 units
  auto it = list.find(resource);
  if (it != list.end()) {
    nanos = it->second.Nanos();
  } else if (kind == "limits") {
    int64_t node_value = resource == "cpu"      ? 0
                         : resource == "memory" ? node.memory_bytes
                                                : node.ephemeral_storage_bytes;
    nanos = resource == "cpu" ? static_cast<__int128>(node.cpu_milli) * (kNanosPerUnit / 1000)
                              : static_cast<__int128>(node_value) * kNanosPerUnit;
  }
  __int128 divisor = ref.divisor ? ref.divisor->Nanos() : kNanosPerUnit;
  if (divisor <= 0) return InvalidArgument("resourceFieldRef: the divisor must be positive");
  if (resource == "cpu") {
    // The kubelet divides milli-values: a CPU quantity is first rounded up to 1m.
    __int128 milli = CeilDiv(nanos, kNanosPerUnit / 1000);
    __int128 divisor_milli = std::max<__int128>(1, CeilDiv(divisor, kNanosPerUnit / 1000));
    return ToDecimal(CeilDiv(milli, divisor_milli));
  }
  // Memory and storage divide whole values (bytes), rounded up.
  __int128 value = CeilDiv(nanos, kNanosPerUnit);
  __int128 divisor_value = std::max<__int128>(1, CeilDiv(divisor, kNanosPerUnit));
  return ToDecimal(CeilDiv(value, divisor_value));
}

std::string ExpandReferences(
    std::string_view in,
    const std::function<std::optional<std::string>(std::string_view)>& lookup) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    if (in[i] != '$' || i + 1 >= in.size()) {
      out.push_back(in[i++]);
      continue;
    }
    char next = in[i + 1];
    if (next == '$') {  // an escaped '$'
      out.push_back('$');
      i += 2;
      continue;
    }
    if (next == '(') {
      size_t close = in.find(')', i + 2);
      if (close == std::string_view::npos) {  // unterminated: kept as written
        out.append("$(");
        i += 2;
        continue;
      }
      std::string_view name = in.substr(i + 2, close - i - 2);
      auto value = name.empty() ? std::nullopt : lookup(name);
      if (value) {
        out.append(*value);
      } else {
        out.append(in.substr(i, close - i + 1));
      }
      i = close + 1;
      continue;
    }
    out.push_back('$');  // any other '$' stays, and so does the character after it
    out.push_back(next);
    i += 2;
  }
  return out;
}

}  // namespace nodelet::pod
