// The node's DNS flags for pods, the kubelet's: --cluster-dns, --cluster-domain, --resolv-conf.
// The supervisor (nodelet) takes them and passes them to podworkerd, which takes the same
// flags (docs/pods.md, "DNS and /etc/hosts"). Header-only: both link lib/pod for the checks.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "lib/pod/names.h"

namespace nodelet {

inline void AddDnsOptions(CLI::App& app, std::vector<std::string>& cluster_dns,
                          std::string& cluster_domain, std::string& resolv_conf) {
  app.add_option("--cluster-dns", cluster_dns,
                 "Comma-separated IP addresses of the cluster's DNS servers (repeatable): the "
                 "name servers of ClusterFirst pods")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return pod::IsValidIp(text).empty() ? std::string()
                                                : "\"" + text + "\" is not an IP address";
          },
          "IP"));
  app.add_option("--cluster-domain", cluster_domain,
                 "The cluster's DNS domain (e.g. cluster.local): ClusterFirst pods search "
                 "NAMESPACE.svc.DOMAIN, svc.DOMAIN and DOMAIN")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            auto msgs = pod::IsDns1123Subdomain(text);
            return msgs.empty() ? std::string()
                                : "\"" + text + "\" is not a DNS subdomain: " + msgs[0];
          },
          "DOMAIN"));
  app.add_option("--resolv-conf", resolv_conf,
                 "The resolver config whose servers, searches and options pods with dnsPolicy "
                 "Default get (\"\": none, the pods resolve through 127.0.0.1)")
      ->capture_default_str();
}

}  // namespace nodelet
