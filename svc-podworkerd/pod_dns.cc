#include "svc-podworkerd/pod_dns.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <random>

#include "lib/common/beneath.h"
#include "lib/common/fs.h"
#include "lib/common/safe_path.h"
#include "lib/common/unique_fd.h"
#include "lib/pod/names.h"

namespace nodelet::podworkerd {
namespace {

constexpr size_t kMaxResolvConfBytes = 10 << 20;  // the kubelet's maxResolvConfLength
constexpr size_t kHostnameMaxLength = 63;
constexpr size_t kFqdnMaxLength = 64;

std::vector<std::string> Fields(std::string_view line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i > start) out.emplace_back(line.substr(start, i - start));
  }
  return out;
}

std::string_view OptionName(std::string_view option) { return option.substr(0, option.find(':')); }

// Options by name: a later option replaces an earlier one of the same name, in the earlier's
// place (the kubelet goes through a Go map, so its order is random; this one is stable).
void MergeOption(std::vector<std::string>& options, std::string option) {
  for (auto& existing : options) {
    if (OptionName(existing) == OptionName(option)) {
      existing = std::move(option);
      return;
    }
  }
  options.push_back(std::move(option));
}

// Appends `more` to `list`, leaving out what is already there (the kubelet's omitDuplicates of
// the concatenation).
void AppendUnique(std::vector<std::string>& list, const std::vector<std::string>& more) {
  std::vector<std::string> all = std::move(list);
  all.insert(all.end(), more.begin(), more.end());
  list.clear();
  for (auto& s : all) {
    if (std::find(list.begin(), list.end(), s) == list.end()) list.push_back(std::move(s));
  }
}

std::string Join(const std::vector<std::string>& list, const char* sep) {
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) out += (i ? sep : "") + list[i];
  return out;
}

enum class DnsType { kNone, kCluster, kHost };

DnsType PodDnsType(const pod::Pod& pod) {
  const std::string& policy = pod.spec.dns_policy;
  if (policy == pod::kDnsNone) return DnsType::kNone;
  if (policy == pod::kDnsClusterFirstWithHostNet) return DnsType::kCluster;
  if (policy == pod::kDnsDefault) return DnsType::kHost;
  // ClusterFirst (and, as the kubelet, anything validation let through).
  return pod.spec.host_network ? DnsType::kHost : DnsType::kCluster;
}

// The kubelet's formDNSSearchFitsLimits and formDNSNameserversFitsLimits.
void FitLimits(DnsSettings& c, std::vector<DnsEvent>& events) {
  if (c.servers.size() > pod::kMaxDnsNameservers) {
    c.servers.resize(pod::kMaxDnsNameservers);
    events.push_back({"Warning", "DNSConfigForming",
                      "Nameserver limits were exceeded, some nameservers have been omitted, the "
                      "applied nameserver line is: " +
                          Join(c.servers, " ")});
  }
  bool exceeded = false;
  if (c.searches.size() > pod::kMaxDnsSearchPaths) {
    c.searches.resize(pod::kMaxDnsSearchPaths);
    exceeded = true;
  }
  // glibc resolvers abort on a search name over 255 characters: those are left out.
  auto long_name = [](const std::string& s) { return s.size() > pod::kDns1123SubdomainMaxLength; };
  if (std::any_of(c.searches.begin(), c.searches.end(), long_name)) {
    c.searches.erase(std::remove_if(c.searches.begin(), c.searches.end(), long_name),
                     c.searches.end());
    exceeded = true;
  }
  size_t line = Join(c.searches, " ").size();
  if (line > pod::kMaxDnsSearchListChars) {
    while (!c.searches.empty() && line > pod::kMaxDnsSearchListChars) {
      line -= std::min(line, c.searches.back().size() + 1);
      c.searches.pop_back();
    }
    exceeded = true;
  }
  if (exceeded) {
    events.push_back({"Warning", "DNSConfigForming",
                      "Search Line limits were exceeded, some search paths have been omitted, the "
                      "applied search line is: " +
                          Join(c.searches, " ")});
  }
}

}  // namespace

Result<DnsSettings> ParseResolvConf(std::string_view content) {
  DnsSettings out;
  std::vector<std::string> errors;
  size_t pos = 0;
  while (pos <= content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::vector<std::string> f = Fields(content.substr(pos, end - pos));
    pos = end + 1;
    if (f.empty() || f[0][0] == '#') continue;
    if (f[0] == "nameserver") {
      if (f.size() >= 2) {
        out.servers.push_back(f[1]);
      } else {
        errors.push_back("nameserver list is empty");
      }
    } else if (f[0] == "search") {
      out.searches.clear();
      for (size_t i = 1; i < f.size(); ++i) {
        if (f[i] == ".") continue;
        std::string s = f[i];
        if (s.back() == '.') s.pop_back();
        out.searches.push_back(std::move(s));
      }
    } else if (f[0] == "options") {
      for (size_t i = 1; i < f.size(); ++i) MergeOption(out.options, f[i]);
    }
  }
  if (!errors.empty()) return InvalidArgument(Join(errors, "; "));
  return out;
}

Result<DnsSettings> ReadResolvConf(const std::string& path) {
  if (path.empty()) return DnsSettings{};
  auto content = ReadFileBounded(path, kMaxResolvConfBytes);
  if (!content.ok()) return content.status();
  auto parsed = ParseResolvConf(*content);
  if (!parsed.ok()) {
    return InvalidArgument("Encountered error while parsing resolv conf file " + path + ": " +
                           parsed.status().message());
  }
  return parsed;
}

PodDns ComposePodDns(const pod::Pod& pod, const NodeDnsSettings& settings,
                     const DnsSettings& host) {
  PodDns out;
  DnsSettings& c = out.config;
  c = host;
  DnsType type = PodDnsType(pod);
  if (type == DnsType::kNone) {
    c = {};
  } else if (type == DnsType::kCluster && !settings.cluster_dns.empty()) {
    // The cluster DNS servers are the pod's only servers: they forward what they cannot answer.
    c.servers = settings.cluster_dns;
    if (!settings.cluster_domain.empty()) {
      const std::string& d = settings.cluster_domain;
      std::vector<std::string> searches = {pod.metadata.namespace_name + ".svc." + d, "svc." + d,
                                           d};
      AppendUnique(searches, host.searches);
      c.searches = std::move(searches);
    }
    c.options = {"ndots:5"};
  } else {
    if (type == DnsType::kCluster) {
      const std::string message =
          "nodelet does not have ClusterDNS IP configured and cannot create Pod using "
          "\"ClusterFirst\" policy. Falling back to \"Default\" policy.";
      out.events.push_back({"Warning", "MissingClusterDNS",
                            "pod: \"" + pod.metadata.name + "_" + pod.metadata.namespace_name +
                                "(" + pod.metadata.uid + ")\". " + message});
    }
    if (settings.resolv_conf.empty()) {
      // No resolver config: the local machine's name server (the kubelet's rule, which says
      // this is what a resolver without servers does) and no search.
      c.servers = {"127.0.0.1"};
      c.searches = {"."};
    }
  }
  if (const auto& d = pod.spec.dns_config) {
    AppendUnique(c.servers, d->nameservers);
    AppendUnique(c.searches, d->searches);
    for (const auto& o : d->options) {
      MergeOption(c.options, o.value && !o.value->empty() ? o.name + ":" + *o.value : o.name);
    }
  }
  FitLimits(c, out.events);
  return out;
}

Result<PodHostname> GeneratePodHostnameAndDomain(const pod::Pod& pod,
                                                 const std::string& cluster_domain) {
  PodHostname out;
  out.hostname = pod.metadata.name;
  if (!pod.spec.hostname.empty()) {
    if (auto msgs = pod::IsDns1123Label(pod.spec.hostname); !msgs.empty()) {
      return InvalidArgument("pod Hostname \"" + pod.spec.hostname +
                             "\" is not a valid DNS label: " + Join(msgs, ";"));
    }
    out.hostname = pod.spec.hostname;
  }
  if (out.hostname.size() > kHostnameMaxLength) {
    std::string cut = out.hostname.substr(0, kHostnameMaxLength);
    while (!cut.empty() && (cut.back() == '-' || cut.back() == '.')) cut.pop_back();
    if (cut.empty()) {
      return InvalidArgument("hostname for pod \"" + pod.metadata.name + "\" was invalid: \"" +
                             out.hostname + "\"");
    }
    out.hostname = std::move(cut);
  }
  if (!pod.spec.subdomain.empty()) {
    if (auto msgs = pod::IsDns1123Label(pod.spec.subdomain); !msgs.empty()) {
      return InvalidArgument("pod Subdomain \"" + pod.spec.subdomain +
                             "\" is not a valid DNS label: " + Join(msgs, ";"));
    }
    out.domain = pod.spec.subdomain + "." + pod.metadata.namespace_name + ".svc." + cluster_domain;
  }
  return out;
}

Result<std::string> KernelHostname(const PodHostname& name, std::optional<bool> as_fqdn) {
  if (name.domain.empty() || !as_fqdn.value_or(false)) return name.hostname;
  std::string fqdn = name.hostname + "." + name.domain;
  if (fqdn.size() > kFqdnMaxLength) {
    return InvalidArgument("failed to construct FQDN from pod hostname and cluster domain, FQDN " +
                           fqdn + " is too long (" + std::to_string(kFqdnMaxLength) +
                           " characters is the max, " + std::to_string(fqdn.size()) +
                           " characters requested)");
  }
  return fqdn;
}

namespace {

std::string HostAliasLines(const std::vector<pod::HostAlias>& aliases) {
  if (aliases.empty()) return "";
  std::string out = "\n# Entries added by HostAliases.\n";
  for (const auto& a : aliases) out += a.ip + "\t" + Join(a.hostnames, "\t") + "\n";
  return out;
}

}  // namespace

std::string ManagedHostsFileContent(const std::vector<std::string>& pod_ips,
                                    const PodHostname& name,
                                    const std::vector<pod::HostAlias>& aliases) {
  std::string out =
      "# Kubernetes-managed hosts file.\n"
      "127.0.0.1\tlocalhost\n"
      "::1\tlocalhost ip6-localhost ip6-loopback\n"
      "fe00::0\tip6-localnet\n"
      "fe00::0\tip6-mcastprefix\n"
      "fe00::1\tip6-allnodes\n"
      "fe00::2\tip6-allrouters\n";
  for (const auto& ip : pod_ips) {
    if (name.domain.empty()) {
      out += ip + "\t" + name.hostname + "\n";
    } else {
      out += ip + "\t" + name.hostname + "." + name.domain + "\t" + name.hostname + "\n";
    }
  }
  return out + HostAliasLines(aliases);
}

std::string HostNetworkHostsFileContent(std::string_view node_hosts,
                                        const std::vector<pod::HostAlias>& aliases) {
  std::string out = "# Kubernetes-managed hosts file (host network).\n";
  out.append(node_hosts);
  return out + HostAliasLines(aliases);
}

bool ShouldMountHostsFile(const pod::Container& container) {
  for (const auto& m : container.volume_mounts) {
    if (m.mount_path == "/etc/hosts") return false;
  }
  return true;
}

Result<std::string> WriteEtcHostsFile(const std::string& root_dir, const std::string& pod_uid,
                                      std::string_view content) {
  auto pod_dir = JoinComponent(root_dir + "/pods", pod_uid);
  if (!pod_dir.ok()) return pod_dir.status();
  UniqueFd root(open(root_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return ErrnoStatus("open the root directory " + root_dir, errno);
  auto dir = OpenOrCreateBeneath(root.get(), "pods/" + pod_uid, 0750, *pod_dir);
  if (!dir.ok()) return dir.status();
  std::mt19937_64 rng(std::random_device{}());
  const std::string tmp = ".etc-hosts." + std::to_string(rng());
  UniqueFd fd(
      openat(dir->get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) return ErrnoStatus("create " + *pod_dir + "/" + tmp, errno);
  Status st = Status::Ok();
  if (fchmod(fd.get(), 0644) != 0) st = ErrnoStatus("chmod " + *pod_dir + "/" + tmp, errno);
  for (size_t done = 0; st.ok() && done < content.size();) {
    ssize_t n = write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = ErrnoStatus("write " + *pod_dir + "/" + tmp, errno);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (st.ok() && fsync(fd.get()) != 0) st = ErrnoStatus("fsync " + *pod_dir + "/" + tmp, errno);
  if (st.ok() && renameat(dir->get(), tmp.c_str(), dir->get(), "etc-hosts") != 0) {
    st = ErrnoStatus("rename " + tmp + " to " + *pod_dir + "/etc-hosts", errno);
  }
  if (!st.ok()) {
    (void)unlinkat(dir->get(), tmp.c_str(), 0);
    return st;
  }
  return *pod_dir + "/etc-hosts";
}

}  // namespace nodelet::podworkerd
