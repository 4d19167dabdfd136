// EtcdStatusSink: the supervisor's sink to the fleet's etcd cluster (docs/fleet.md), driven by the
// SinkSyncer like any sink (status_sink.h: newest version first, failed syncs retried, a full
// pass every 10 s):
//
//   PREFIX/status/NODE/NAMESPACE/NAME  the pod's status: the v1 Pod that `nodeletctl pods -o
//                                      json` prints (metadata with resourceVersion = statusd's
//                                      version of the status, and the v1 PodStatus)
//   PREFIX/nodes/NODE                  the node's v1 Node, attached to a lease of 40 s renewed
//                                      every 10 s: a node that stops renewing loses the key
//                                      (`nodeletctl fleet nodes` then shows it NotReady)
//   PREFIX/registrations/NODE          written once, without a lease: the node joined
//
// A status write never replaces a newer one: the key is read and written only when it holds
// another pod's status (a pod of that name made again) or an older version of this pod's, in a
// transaction that compares the key's mod_revision with what was read; a concurrent writer makes
// it read again. A pod's key is deleted when statusd removes the pod (unless another pod of the
// name holds it by then). The lease is renewed on a timer of the supervisor's loop, each renewal
// made on a one-thread executor of the sink's own (not behind the status writes, which run on the
// sink's executor in SinkWorker), so a slow status write never lets it lapse; a lease that lapsed
// anyway (etcd away for 40 s) is granted again and the Node written with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "lib/common/clock.h"
#include "lib/etcd/etcd_client.h"
#include "lib/etcd/fleet_keys.h"
#include "lib/service/blocking_executor.h"
#include "lib/service/event_loop.h"
#include "supervisor/status_sink.h"

namespace nodelet::supervisor {

// What a status key holds: the v1 Pod JSON of the record. Its strings are the pod's and the
// containers' text: any bytes are written as valid UTF-8 (U+FFFD for invalid ones), never a throw.
std::string EtcdStatusValue(const PodStatusRecord& record);

struct EtcdSinkOptions {
  std::string prefix = etcd::kDefaultFleetPrefix;
  std::string node_name;  // normalized (lowercase)
  std::chrono::seconds lease_ttl{40};
  std::chrono::seconds lease_renew{10};
};

class EtcdStatusSink : public StatusSink {
 public:
  // Made on the loop's thread, which renews the lease (the first time at the loop's next
  // iteration); the loop's clock dates the registration.
  EtcdStatusSink(EventLoop& loop, std::unique_ptr<etcd::Client> client, EtcdSinkOptions options);
  // Waits for a renewal in flight; on the loop's thread.
  ~EtcdStatusSink() override;
  EtcdStatusSink(const EtcdStatusSink&) = delete;
  EtcdStatusSink& operator=(const EtcdStatusSink&) = delete;

  std::string Name() const override { return "etcd"; }
  Status Sync(const PodStatusRecord& record) override;
  Status Remove(const PodIdentity& pod) override;
  Status SyncNode(const status::NodeStatusRecord& node) override;
  // Deletes this node's status keys of pods statusd does not hold.
  Status Prune(const std::set<std::string>& uids) override;

  struct Counters {
    uint64_t writes = 0, skipped_not_newer = 0, deletes = 0, lease_grants = 0, lease_renewals = 0,
             node_writes = 0;
  };
  Counters counters() const;

 private:
  // Grants a lease when there is none (or it lapsed) and writes the Node with it when it is
  // not written under the current lease. Under mu_.
  Status KeepNodeLocked(bool renew);
  // Submits a renewal; its continuation arms the timer for the next (on the loop's thread).
  void Renew();

  std::unique_ptr<etcd::Client> client_;
  const Clock& clock_;
  const EtcdSinkOptions options_;
  const etcd::FleetKeys keys_;

  // Shared by the status writes (SinkWorker's executor) and the renewals (renewer_).
  mutable std::mutex mu_;
  std::string node_json_;     // the newest Node statusd gave
  std::string node_written_;  // what the Node key holds under lease_
  int64_t lease_ = 0;
  bool registered_ = false;  // PREFIX/registrations/NODE is there
  Counters counters_;
  EventLoop::Timer renew_timer_;
  // Last: stopped before the members its work and continuations use go.
  BlockingExecutor renewer_;
};

}  // namespace nodelet::supervisor
