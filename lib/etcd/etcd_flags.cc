#include "lib/etcd/etcd_flags.h"

namespace nodelet::etcd {

Status EtcdFlags::Check() const {
  if (!enabled() && (!cafile.empty() || !certfile.empty() || !keyfile.empty())) {
    return InvalidArgument(
        "--etcd-cafile, --etcd-certfile and --etcd-keyfile need --etcd-endpoints");
  }
  if (certfile.empty() != keyfile.empty()) {
    return InvalidArgument("--etcd-certfile and --etcd-keyfile go together");
  }
  if (prefix.empty() || prefix.front() != '/' || prefix.back() == '/') {
    return InvalidArgument("--etcd-prefix '" + prefix + "' must start with / and not end with /");
  }
  return Status::Ok();
}

ClientOptions EtcdFlags::ToClientOptions() const {
  ClientOptions o;
  o.endpoints = endpoints;
  o.ca_file = cafile;
  o.cert_file = certfile;
  o.key_file = keyfile;
  return o;
}

void AddEtcdFlags(CLI::App& app, EtcdFlags* flags, bool node) {
  app.add_option("--etcd-endpoints", flags->endpoints,
                 "etcd members of the fleet (docs/fleet.md), comma-separated: http://HOST:PORT, "
                 "https://HOST:PORT or HOST:PORT")
      ->delimiter(',')
      ->allow_extra_args(false);
  app.add_option("--etcd-prefix", flags->prefix,
                 "The fleet's keys in etcd: PREFIX/pods/NODE/..., PREFIX/status/NODE/...")
      ->capture_default_str();
  app.add_option("--etcd-cafile", flags->cafile,
                 "PEM file of the CAs that signed the etcd members' certificates");
  app.add_option("--etcd-certfile", flags->certfile,
                 "The etcd client certificate (PEM; with etcd's auth, its CN is the etcd user)");
  app.add_option("--etcd-keyfile", flags->keyfile, "The key of --etcd-certfile (PEM)");
  if (node) {
    app.add_option("--node-lease-duration-seconds", flags->lease_seconds,
                   "The TTL of the node's lease in etcd, renewed every quarter of it (the "
                   "kubelet's flag)")
        ->check(CLI::Range(4, 3600))
        ->capture_default_str();
  }
}

}  // namespace nodelet::etcd
