// The --etcd-* flags (docs/fleet.md), one definition for every program that reaches the fleet's
// etcd: nodelet (the pod source, and what it passes to statusd), nodelet-statusd (the status
// sink) and `nodeletctl fleet`. Each flag is also a config key of the same name.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/fleet_keys.h"

namespace nodelet::etcd {

struct EtcdFlags {
  std::vector<std::string> endpoints;        // --etcd-endpoints (comma-separated); empty: no fleet
  std::string prefix = kDefaultFleetPrefix;  // --etcd-prefix
  std::string cafile, certfile, keyfile;     // --etcd-cafile, -certfile, -keyfile
  int lease_seconds = 40;                    // --node-lease-duration-seconds (nodes only)
  // --etcd-allow-insecure: plain-text endpoints (http://, or HOST:PORT with no TLS file) are
  // refused without it: the fleet's pods, ConfigMaps and Secrets would cross the network in the
  // clear and anyone on the path could write this node's pods.
  bool allow_insecure = false;

  bool enabled() const { return !endpoints.empty(); }
  // What the TLS files, the endpoints and the prefix must be: refused with the flag's name.
  Status Check() const;
  // True when `endpoint` is dialled without TLS under these flags.
  bool PlainText(const std::string& endpoint) const;
  ClientOptions ToClientOptions() const;
};

// Adds the flags to `app`, bound to `flags`; `node`: also --node-lease-duration-seconds.
void AddEtcdFlags(CLI::App& app, EtcdFlags* flags, bool node);

}  // namespace nodelet::etcd
