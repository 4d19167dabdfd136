// A pod's DNS, hostname and /etc/hosts as the kubelet makes them (pkg/kubelet/network/dns,
// GeneratePodHostNameAndDomain, GetNodenameForKernel, managedHostsFileContent): the resolver
// config handed to the runtime in the sandbox config, the kernel hostname of the sandbox, and
// the content of the /etc/hosts file mounted into each container. Pure functions, except the
// readers of the node's files (ReadResolvConf, WriteEtcHostsFile). docs/pods.md, "DNS and
// /etc/hosts", says what each rule follows.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/common/status.h"
#include "lib/pod/pod.h"

namespace nodelet::podworkerd {

// The node's DNS settings (podworkerd's --cluster-dns, --cluster-domain, --resolv-conf).
struct NodeDnsSettings {
  std::vector<std::string> cluster_dns;          // IPs of the cluster's DNS servers
  std::string cluster_domain;                    // e.g. cluster.local; empty: none
  std::string resolv_conf = "/etc/resolv.conf";  // the host's resolver config; empty: none
};

// A resolver configuration: what CRI's DNSConfig carries.
struct DnsSettings {
  std::vector<std::string> servers;
  std::vector<std::string> searches;
  std::vector<std::string> options;  // "ndots:5", "edns0"
  bool operator==(const DnsSettings&) const = default;
};

// An event about the pod (Warning MissingClusterDNS, DNSConfigForming).
struct DnsEvent {
  std::string type;
  std::string reason;
  std::string message;
};

struct PodDns {
  DnsSettings config;
  std::vector<DnsEvent> events;
};

// The kubelet's parseResolvConf: "nameserver" lines accumulate, the last "search" line wins
// (its names without a trailing dot, "." dropped), "options" lines merge by option name (a
// later one replaces an earlier); "#" comments and every other line ("domain", "sortlist")
// are ignored, as the kubelet ignores them. A "nameserver" line without an address is an error.
Result<DnsSettings> ParseResolvConf(std::string_view content);

// ParseResolvConf of the file at `path` (at most 10 MiB, as the kubelet); an empty path gives
// an empty config. An error when the file cannot be read.
Result<DnsSettings> ReadResolvConf(const std::string& path);

// The kubelet's GetPodDNS: the pod's resolver config from its dnsPolicy (None: nothing;
// ClusterFirstWithHostNet, and ClusterFirst without hostNetwork: the cluster DNS servers, the
// searches NS.svc.DOMAIN, svc.DOMAIN, DOMAIN then the host's, options ndots:5; Default, and
// ClusterFirst with hostNetwork: the host's, or 127.0.0.1 and "." when `resolv_conf` is empty),
// ClusterFirst without cluster DNS servers falling back to Default with a MissingClusterDNS
// event; then dnsConfig merged in (nameservers and searches appended without duplicates,
// options by name with the pod's winning); then the limits (3 servers, 32 searches of at most
// 253 characters, 2048 characters in all) with a DNSConfigForming event when something was cut.
// `host` is the host's config (ReadResolvConf of settings.resolv_conf).
PodDns ComposePodDns(const pod::Pod& pod, const NodeDnsSettings& settings, const DnsSettings& host);

// The kubelet's GeneratePodHostNameAndDomain: spec.hostname or the pod's name, cut to 63
// characters without a trailing '-' or '.'; the domain is SUBDOMAIN.NS.svc.CLUSTER-DOMAIN when
// spec.subdomain is set, else empty.
struct PodHostname {
  std::string hostname;
  std::string domain;
};
Result<PodHostname> GeneratePodHostnameAndDomain(const pod::Pod& pod,
                                                 const std::string& cluster_domain);

// The kubelet's GetNodenameForKernel: the hostname, or HOSTNAME.DOMAIN with setHostnameAsFQDN
// and a domain, refused when longer than 64 characters (the kernel's limit).
Result<std::string> KernelHostname(const PodHostname& name, std::optional<bool> as_fqdn);

// The kubelet's managedHostsFileContent: the header, localhost and the IPv6 names, each pod IP
// with the hostname (the FQDN first when there is a domain), then the host aliases.
std::string ManagedHostsFileContent(const std::vector<std::string>& pod_ips,
                                    const PodHostname& name,
                                    const std::vector<pod::HostAlias>& aliases);
// The kubelet's nodeHostsFileContent for a hostNetwork pod: its header, the node's /etc/hosts
// as it is, then the host aliases.
std::string HostNetworkHostsFileContent(std::string_view node_hosts,
                                        const std::vector<pod::HostAlias>& aliases);

// The kubelet's shouldMountHostsFile and makeMounts rule: the container gets the pod's
// /etc/hosts unless one of its volumeMounts is at /etc/hosts.
bool ShouldMountHostsFile(const pod::Container& container);

// Writes `content` as ROOT/pods/UID/etc-hosts (mode 0644) and returns that path: the pod
// directory is opened beneath ROOT without following links (made when missing), the content
// goes to a new temporary file in it, then renamed over etc-hosts, so a link planted at either
// name is replaced, never followed.
Result<std::string> WriteEtcHostsFile(const std::string& root_dir, const std::string& pod_uid,
                                      std::string_view content);

}  // namespace nodelet::podworkerd
