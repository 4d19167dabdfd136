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
  if (!allow_insecure) {
    for (const auto& e : endpoints) {
      if (PlainText(e)) {
        return InvalidArgument("--etcd-endpoints " + e +
                               ": plain text (no TLS), refused: use https:// (with "
                               "--etcd-cafile), or pass --etcd-allow-insecure to allow it");
      }
    }
  }
  if (prefix.empty() || prefix.front() != '/' || prefix.back() == '/') {
    return InvalidArgument("--etcd-prefix '" + prefix + "' must start with / and not end with /");
  }
  return Status::Ok();
}

bool EtcdFlags::PlainText(const std::string& endpoint) const {
  if (endpoint.rfind("http://", 0) == 0) return true;
  if (endpoint.rfind("https://", 0) == 0) return false;
  // HOST:PORT: TLS when a TLS file is given (as the client dials it), else plain text.
  return cafile.empty() && certfile.empty();
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
  app.add_flag("--etcd-allow-insecure", flags->allow_insecure,
               "Allow plain-text etcd endpoints (http://, or HOST:PORT without a TLS file); "
               "refused without it, as anyone on the path could read and write the fleet's keys");
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
