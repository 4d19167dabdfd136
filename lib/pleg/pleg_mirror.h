// PlegMirror: a subscriber's replica of plegd's pod cache (the ZeroMQ guide's Clone pattern).
// It subscribes first, then asks for a snapshot, applies only updates newer than the snapshot,
// and asks again whenever it sees a gap in the sequence numbers or a new plegd incarnation, so
// a restart of plegd or of the subscriber, or a dropped message, never loses anything.
//
// It runs on an EventLoop: Connect(loop) registers its two sockets and its snapshot retry timer
// there, and on_event/on_resync/on_applied are called from the loop. A test or a benchmark runs
// its own loop (RunOnce). Used by the supervisor, podworkerd, the tests and the benchmarks. One
// thread: the loop's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/status.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/message.h"
#include "lib/ipc/sockets.h"
#include "lib/service/event_loop.h"
#include "pleg_generated.h"

namespace nodelet::pleg {

class PlegMirror {
 public:
  // `clock` times snapshot requests (the loop's clock).
  PlegMirror(ipc::Context& ctx, const Clock& clock, std::string run_dir, ipc::ServiceId self,
             std::chrono::milliseconds snapshot_timeout = std::chrono::milliseconds(1000));
  // Subscribes to plegd's events, asks for the first snapshot, and runs on `loop`: its sockets
  // are read and its snapshot requests retried there. The loop must outlive the mirror.
  Status Connect(EventLoop& loop);

  bool in_sync() const { return in_sync_; }
  // In sync with a plegd that has completed a relist: only then does the replica hold every pod
  // the runtime lists. A plegd that just started (or cannot reach the runtime) serves an empty
  // snapshot; acting on it would take every pod for one without a sandbox.
  bool ready() const { return in_sync_ && relist_ > 0; }
  const std::map<std::string, ipc::pleg::PodRecordT>& pods() const { return pods_; }
  // The last relist plegd completed, as far as this replica knows.
  uint64_t relist() const { return relist_; }
  // When the last successful relist this replica heard of started, in CLOCK_MONOTONIC
  // nanoseconds (plegd's RelistDone.started_at_mono_ns: the same clock in every process on the
  // node, immune to wall-clock steps); 0 until a RelistDone arrived. A consumer that changed the
  // runtime at its Clock::MonoNanos() T waits for a relist that started after T before it
  // trusts the replica for that pod again.
  int64_t relist_started_mono_ns() const { return relist_started_mono_ns_; }
  // Asks plegd to relist these pods alone now (podworkerd, after changing them): their records
  // then come with a listed_at_mono_ns after this call. No reply; an error when plegd is not
  // there (the next full relist covers the pods then).
  Status RequestRelist(const std::vector<std::string>& uids);
  uint64_t relist_requests() const { return relist_requests_; }
  uint64_t gaps() const { return gaps_; }
  uint64_t snapshots() const { return snapshots_; }
  uint64_t bad_messages() const { return bad_messages_.count(); }
  // The last relist error plegd reported, empty when the last relist succeeded.
  const std::string& relist_error() const { return relist_error_; }
  // When the last message (update or snapshot) came from plegd.
  MonoTime last_heard() const { return last_heard_; }

  // Called for every lifecycle event applied from an update (not for snapshots).
  std::function<void(const ipc::pleg::Event&, const ipc::pleg::PodRecordT&)> on_event;
  // Called after a snapshot replaced the replica.
  std::function<void()> on_resync;
  // Called after each batch of messages from plegd was handled (after the on_event and
  // on_resync calls it caused), for work that waits for a newer relist.
  std::function<void()> on_applied;

 private:
  // Creates and connects the two sockets and asks for the first snapshot.
  Status ConnectSockets();
  // Handles snapshot replies and queued updates.
  void OnReadable();
  // Re-asks for a snapshot whose answer is overdue (plegd down or restarting).
  void Tick();
  // When Tick() is due next; MonoTime::max() while in sync.
  MonoTime NextTick() const;
  void RequestSnapshot();
  void HandleSnapshotReply();
  void DrainUpdates();
  void Apply(const ipc::pleg::PlegMessage& msg);
  // (Re-)registers the snapshot socket (Reconnect replaces it) and re-arms the timer.
  void WatchSnapshotSocket();
  void ArmRetry();

  ipc::Context& ctx_;
  const Clock& clock_;
  std::string run_dir_;
  std::chrono::milliseconds snapshot_timeout_;
  ipc::EnvelopeWriter envelope_;
  std::unique_ptr<ipc::Subscriber> sub_;
  std::unique_ptr<ipc::DealerClient> snapshot_;
  std::map<std::string, ipc::pleg::PodRecordT> pods_;
  bool in_sync_ = false;
  uint64_t outstanding_ = 0;  // request id of the snapshot asked for, 0 when none
  MonoTime asked_at_{};
  uint64_t incarnation_ = 0;
  uint64_t sequence_ = 0;
  uint64_t relist_ = 0;
  int64_t relist_started_mono_ns_ = 0;
  uint64_t next_request_id_ = 1;
  uint64_t gaps_ = 0, snapshots_ = 0, relist_requests_ = 0;
  ipc::BadMessageCounter bad_messages_;
  std::string relist_error_;
  MonoTime last_heard_{};
  // On the loop (declared last: removed from the loop before the sockets close).
  EventLoop* loop_ = nullptr;
  EventLoop::Handle sub_source_, snapshot_source_;
  EventLoop::Timer retry_;
};

}  // namespace nodelet::pleg
