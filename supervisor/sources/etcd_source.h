// EtcdPodSource: the `--etcd-endpoints` pod source (docs/fleet.md). It serves the node's pods
// from an etcd v3 cluster, as full snapshots like the other sources:
//
//   PREFIX/pods/NODE/NAMESPACE/NAME   this node's pods (a v1 Pod, YAML or JSON)
//   PREFIX/pods/_all/NAMESPACE/NAME   pods every node runs
//   PREFIX/configmaps/NAMESPACE/NAME  a v1 ConfigMap; read only when a desired pod refers to it
//   PREFIX/secrets/NAMESPACE/NAME     a v1 Secret; likewise (SetWanted)
//
// The source lists both pod prefixes at one revision, then watches them from the next one; each
// ConfigMap or Secret the pods refer to is read and then watched alone (a node's etcd role may
// grant it single keys). A watch that breaks (a member down, the whole cluster away) is opened
// again from the revision after the last one it delivered, so nothing that changed meanwhile is
// lost, with back-off (etcd_watch_pump.h); a watch whose revision was compacted meanwhile makes
// the source list again. A burst of changes becomes one snapshot.
//
// It runs on the supervisor's loop: the back-offs, the retries of a list or of a read, and the
// window that gathers a burst are loop timers; the etcd calls (the list, the reads, opening and
// reading the watches) and the cache file's writes run on the source's executor, one thread per
// open watch and two more, and their results come back to the loop's thread. Every method is
// called on the loop's thread.
//
// The source is ready (SourceSnapshot without from_cache) after its first list. Until then a
// list that fails yields a snapshot with `failure`, so the pods it served stay and nothing is
// removed. Every snapshot is also written to `cache_file` (mode 0600: it holds Secrets); at start
// that file is delivered first, marked from_cache, so a node restarted while etcd is away runs
// what it ran. Losing etcd never removes a pod; pods deleted in etcd while the node was cut off
// go when the watch (or the list after a compaction) reports it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/fleet_keys.h"
#include "lib/pod/pod.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
#include "supervisor/sources/etcd_watch_pump.h"
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
// manifest does not parse either way), never a throw on the loop's thread.
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
  // Called on the loop's thread when Poll() has a snapshot. Required.
  std::function<void()> on_snapshot;
};

class EtcdPodSource {
 public:
  EtcdPodSource(EventLoop& loop, std::unique_ptr<etcd::Client> client, EtcdSourceOptions options);
  ~EtcdPodSource();
  EtcdPodSource(const EtcdPodSource&) = delete;
  EtcdPodSource& operator=(const EtcdPodSource&) = delete;

  // Delivers the cache file (if any) and starts the first list.
  Status Start();
  // Cancels the watches and waits for the etcd calls in flight (each within its deadline).
  void Stop();
  // The newest snapshot not yet taken, if any.
  std::optional<SourceSnapshot> Poll();
  // The ConfigMaps and Secrets the desired pods refer to (ConfigRefs' form): each is read and
  // watched; the others are dropped from the snapshots.
  void SetWanted(std::set<std::string> refs);

  struct Counters {
    uint64_t lists = 0, list_failures = 0, compactions = 0, watch_restarts = 0, snapshots = 0,
             cache_writes = 0, cache_write_failures = 0;
  };
  Counters counters() const { return counters_; }
  // Why the cache file was not used at start (empty: it was, or there was none).
  std::string cache_error() const { return cache_error_; }
  // A list or a read of ConfigMaps and Secrets is on the executor.
  bool call_running() const { return call_running_; }
  // Both pod prefixes are listed and their watches open.
  bool watching() const;
  // Events the watches delivered that no snapshot holds yet.
  size_t pending_events() const;

 private:
  struct Change;
  struct Listing;
  struct ConfigReads;

  // Runs a step on the loop; whatever it throws is reported as the source's failure, and the
  // source starts over from a fresh list after retry_max.
  void Guarded(const std::function<void()>& step);
  // Lists both pod prefixes on the executor; Listed takes the result on the loop.
  void List();
  void Listed(Listing& listing);
  // Drops the ConfigMaps and Secrets no longer wanted and reads the wanted ones not yet watched
  // on the executor; then publishes when `dirty` or when what is held changed from `before`
  // entries.
  void SyncConfigs(bool dirty, size_t before);
  void ConfigsRead(ConfigReads& reads, bool dirty, size_t before);
  // A change came (or a read is due again): gather what else comes within the window.
  void Kick();
  // Applies the changes gathered, then lists again, reads again or publishes as they require.
  void Drain();
  // A pump for `key` (a pod prefix, or one ConfigMap's or Secret's key when `config`) whose
  // batches go to changes_.
  std::unique_ptr<EtcdWatchPump> StartPump(const std::string& key, bool config,
                                           int64_t start_revision);
  // One executor thread per watch, and one each for the calls and the cache writes.
  void SizeExecutor();
  void Apply(const Change& change);
  void Publish();
  void WriteCache(std::string text);
  void Fail(Status why);
  std::chrono::milliseconds NextBackoff(std::chrono::milliseconds backoff) const;

  EventLoop& loop_;
  std::unique_ptr<etcd::Client> client_;
  EtcdSourceOptions options_;
  FleetKeys keys_;

  bool stopped_ = false;
  bool listed_ = false;
  bool call_running_ = false;                // a list or the reads of ConfigMaps and Secrets
  std::map<std::string, std::string> pods_;  // key -> value
  std::map<std::string, int64_t> created_;   // pod key -> its create_revision (its pod's uid)
  std::map<std::string, std::optional<std::string>> configs_;  // key -> value (nullopt: absent)
  std::map<std::string, std::unique_ptr<EtcdWatchPump>> pod_pumps_, config_pumps_;  // by key
  std::chrono::milliseconds backoff_{0}, config_backoff_{0};
  bool failed_reported_ = false;
  bool configs_complete_ = true;
  std::vector<Change> changes_;   // from the pumps, not yet applied
  std::set<std::string> wanted_;  // config keys
  bool wanted_changed_ = false;
  std::optional<SourceSnapshot> ready_;
  Counters counters_;
  std::string cache_error_;
  bool writing_ = false;                     // a cache write is on the executor
  std::optional<std::string> cache_queued_;  // the text to write after it

  EventLoop::Timer list_retry_;    // the next list after a failed one
  EventLoop::Timer config_retry_;  // the next read of ConfigMaps and Secrets that failed
  EventLoop::Timer coalesce_;      // the end of the window that gathers a burst
  // Last: stopped (the calls in flight waited for) before the members they use go.
  BlockingExecutor executor_;
};

}  // namespace nodelet::supervisor
