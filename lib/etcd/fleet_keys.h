// The fleet's keyspace in etcd (docs/fleet.md), under a prefix ("/nodelet/v1" by default, no
// trailing "/"): one place that spells every key, for the supervisor's pod source, statusd's
// status sink and `nodeletctl fleet`.
//
//   PREFIX/pods/NODE/NAMESPACE/NAME    a v1 Pod for NODE (YAML or JSON)
//   PREFIX/pods/_all/NAMESPACE/NAME    a v1 Pod every node runs
//   PREFIX/configmaps/NAMESPACE/NAME   a v1 ConfigMap
//   PREFIX/secrets/NAMESPACE/NAME      a v1 Secret
//   PREFIX/status/NODE/NAMESPACE/NAME  the pod's status as NODE last wrote it
//   PREFIX/nodes/NODE                  NODE's v1 Node, attached to its lease
//   PREFIX/registrations/NODE          that NODE joined (no lease: it outlives the Node key, so
//                                      a node whose lease expired is still listed, NotReady)
#pragma once

#include <string>

namespace nodelet::etcd {

inline constexpr char kDefaultFleetPrefix[] = "/nodelet/v1";
// The pods of every node live under this "node" name (not a valid node name: it has "_").
inline constexpr char kAllNodes[] = "_all";

struct FleetKeys {
  std::string prefix = kDefaultFleetPrefix;

  std::string Pods() const { return prefix + "/pods/"; }
  std::string NodePods(const std::string& node) const { return Pods() + node + "/"; }
  std::string AllPods() const { return NodePods(kAllNodes); }
  std::string Pod(const std::string& node, const std::string& ns, const std::string& name) const {
    return NodePods(node) + ns + "/" + name;
  }
  // kind: "ConfigMap" or "Secret".
  std::string Config(const std::string& kind, const std::string& ns,
                     const std::string& name) const {
    return prefix + (kind == "Secret" ? "/secrets/" : "/configmaps/") + ns + "/" + name;
  }
  std::string Statuses() const { return prefix + "/status/"; }
  std::string StatusOfNode(const std::string& node) const { return Statuses() + node + "/"; }
  std::string Status(const std::string& node, const std::string& ns,
                     const std::string& name) const {
    return StatusOfNode(node) + ns + "/" + name;
  }
  std::string Nodes() const { return prefix + "/nodes/"; }
  std::string Node(const std::string& node) const { return Nodes() + node; }
  std::string Registrations() const { return prefix + "/registrations/"; }
  std::string Registration(const std::string& node) const { return Registrations() + node; }
};

}  // namespace nodelet::etcd
