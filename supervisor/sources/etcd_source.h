// EtcdPodSource: the `--etcd-endpoints` pod source (docs/fleet.md). It serves the node's pods
// from an etcd v3 cluster, as full snapshots like the other sources:
//
//   PREFIX/pods/NODE/NAMESPACE/NAME   this node's pods (a v1 Pod, YAML or JSON)
//   PREFIX/pods/_all/NAMESPACE/NAME   pods every node runs
//   PREFIX/configmaps/NAMESPACE/NAME  a v1 ConfigMap; read only when a desired pod refers to it
//   PREFIX/secrets/NAMESPACE/NAME     a v1 Secret; likewise (SetWanted)
//
// A thread lists both pod prefixes at one revision, then watches them from the next one; each
// ConfigMap or Secret the pods refer to is read and then watched alone (a node's etcd role may
// grant it single keys). A watch that breaks (a member down, the whole cluster away) is opened
// again from the revision after the last one it delivered, so nothing that changed meanwhile is
// lost, with back-off; a watch whose revision was compacted meanwhile makes the source list
// again. A burst of changes becomes one snapshot.
//
// The source is ready (SourceSnapshot without from_cache) after its first list. Until then a
// list that fails yields a snapshot with `failure`, so the pods it served stay and nothing is
// removed. Every snapshot is also written to `cache_file` (mode 0600: it holds Secrets); at start
// that file is delivered first, marked from_cache, so a node restarted while etcd is away runs
// what it ran. Losing etcd never removes a pod; pods deleted in etcd while the node was cut off
// go when the watch (or the list after a compaction) reports it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/fleet_keys.h"
#include "lib/pod/pod.h"
#include "supervisor/sources/manifest_source.h"

namespace nodelet::supervisor {

using etcd::FleetKeys;

// What a pod key says of its pod: PREFIX/pods/(NODE|_all)/NAMESPACE/NAME, each a plain name;
// nullopt for any other key.
struct PodKeyParts {
  std::string node;  // "_all" for every node's pods
  std::string namespace_name, name;
};
std::optional<PodKeyParts> ParsePodKey(const std::string& prefix, const std::string& key);

// The ConfigMaps and Secrets `pod` reads (volumes, env valueFrom, envFrom, in every container,
// imagePullSecrets), as "ConfigMap/NAMESPACE/NAME" and "Secret/NAMESPACE/NAME".
std::set<std::string> ConfigRefs(const pod::Pod& pod);

// The cache file's text for these manifests (key -> the value in etcd) and the pods' keys'
// create_revisions: {"manifests": {...}, "revisions": {...}}.
// The values are whatever was put in etcd: bytes that are not UTF-8 are written as U+FFFD (such a
// manifest does not parse either way), never a throw on the source's thread.
std::string EtcdCacheText(const std::map<std::string, std::string>& manifests,
                          const std::map<std::string, int64_t>& revisions = {});

struct EtcdSourceOptions {
  std::string prefix = "/nodelet/v1";
  std::string node_name;
  // The last snapshot, for a start while etcd is away; empty: none kept.
  std::string cache_file;
  std::chrono::milliseconds retry_min{200}, retry_max{5000};
  // Changes that arrive within this of each other make one snapshot.
  std::chrono::milliseconds coalesce{20};
  // Called from the source's thread when Poll() has a snapshot; must be thread-safe
  // (EventLoop::Post). Required.
  std::function<void()> on_snapshot;
};

class EtcdPodSource {
 public:
  EtcdPodSource(const Clock& clock, std::unique_ptr<etcd::Client> client,
                EtcdSourceOptions options);
  ~EtcdPodSource();
  EtcdPodSource(const EtcdPodSource&) = delete;
  EtcdPodSource& operator=(const EtcdPodSource&) = delete;

  // Delivers the cache file (if any) and starts the thread.
  Status Start();
  void Stop();
  // The newest snapshot not yet taken, if any.
  std::optional<SourceSnapshot> Poll();
  // The ConfigMaps and Secrets the desired pods refer to (ConfigRefs' form): each is read and
  // watched; the others are dropped from the snapshots. Thread-safe.
  void SetWanted(std::set<std::string> refs);

  struct Counters {
    uint64_t lists = 0, list_failures = 0, compactions = 0, watch_restarts = 0, snapshots = 0,
             cache_writes = 0, cache_write_failures = 0;
  };
  Counters counters() const;
  // Why the cache file was not used at start (empty: it was, or there was none).
  std::string cache_error() const;

 private:
  class Pump;
  struct Change;

  void Loop();
  // Loop, started over after an exception (reported as the source's failure).
  void GuardedLoop();
  bool List();
  // Reads and watches the wanted ConfigMaps and Secrets not yet watched, drops the others;
  // false when one could not be read (tried again after a back-off).
  bool SyncConfigWatches();
  // A pump for `key` (a pod prefix, or one ConfigMap's or Secret's key when `config`) whose
  // batches go to changes_.
  std::unique_ptr<Pump> StartPump(const std::string& key, bool config, int64_t start_revision);
  void Apply(const Change& change);
  void Publish();
  void Fail(Status why);
  bool WaitFor(std::chrono::milliseconds timeout);

  const Clock& clock_;
  std::unique_ptr<etcd::Client> client_;
  EtcdSourceOptions options_;
  FleetKeys keys_;

  // The source thread's own state.
  bool listed_ = false;
  std::map<std::string, std::string> pods_;  // key -> value
  std::map<std::string, int64_t> created_;   // pod key -> its create_revision (its pod's uid)
  std::map<std::string, std::optional<std::string>> configs_;  // key -> value (nullopt: absent)
  std::map<std::string, std::unique_ptr<Pump>> pod_pumps_, config_pumps_;  // by key or prefix
  std::chrono::milliseconds backoff_{0}, config_backoff_{0};
  bool failed_reported_ = false;
  bool configs_complete_ = true;
  std::atomic<uint64_t> watch_restarts_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<Change> changes_;   // from the pumps
  std::set<std::string> wanted_;  // config keys
  bool wanted_changed_ = false;
  std::optional<SourceSnapshot> ready_;
  Counters counters_;
  std::string cache_error_;
  std::thread thread_;
};

}  // namespace nodelet::supervisor
