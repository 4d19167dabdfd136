// The byte bounds of every ZeroMQ channel (docs/security.md section 9), defined once next to the
// endpoints so that both ends of a channel are built from the same numbers.
//
// ZeroMQ's high-water marks count messages, not bytes, so a byte budget becomes a message count
// through the largest message the queue can hold: hwm = budget / max message (HwmForBudget), and
// hwm x max <= budget. The largest message is made true on each side: inbound, ZeroMQ refuses
// (and disconnects) a peer whose frame is over the socket's maxmsgsize; outbound, Send() and
// Publish() refuse a frame over the limit (ResourceExhausted). Every bound is per peer and per
// side: a stalled reader and its writer each hold at most one budget for that connection.
#pragma once

#include <cstddef>

namespace nodelet::ipc {

// The message high-water mark that keeps `max_message_bytes`-sized messages within
// `budget_bytes`; at least 1 (one message of the largest size is always allowed).
constexpr int HwmForBudget(size_t budget_bytes, size_t max_message_bytes) {
  if (max_message_bytes == 0) return 1;
  size_t n = budget_bytes / max_message_bytes;
  if (n < 1) n = 1;
  if (n > 1000000) n = 1000000;
  return static_cast<int>(n);
}

// One direction of a channel: the largest message, and the bytes one queue may hold.
struct QueueLimits {
  size_t max_message_bytes;
  size_t budget_bytes;
  constexpr int hwm() const { return HwmForBudget(budget_bytes, max_message_bytes); }
};

// Both directions of a request/reply channel (control and work): requests from the DEALER
// clients to the ROUTER server, replies back. RouterServer and DealerClient take the same value.
struct ChannelLimits {
  QueueLimits requests;
  QueueLimits replies;
};

inline constexpr size_t kKiB = 1024;
inline constexpr size_t kMiB = 1024 * kKiB;

// plegd PUB -> subscribers (PlegMirror): one PodUpdate (one pod's record and its events) or one
// RelistDone per message, a few KiB each. 256 messages per queue: a relist that changes every
// pod of a full node (110, --max-pods) fits in one side's queue with room to spare. A PodUpdate
// over 1 MiB is not published: its sequence number is spent, so every subscriber sees the gap
// and takes a snapshot, which carries the record (below).
inline constexpr QueueLimits kPlegEvents{1 * kMiB, 256 * kMiB};

// plegd ROUTER <- DEALER (PlegMirror): SnapshotRequest (tiny) -> Snapshot (every cached pod).
// A mirror has one request out at a time: 16 requests and 2 snapshots per peer.
inline constexpr ChannelLimits kPlegSnapshots{{64 * kKiB, 1 * kMiB}, {64 * kMiB, 128 * kMiB}};

// volumed PUB -> podworkerd: VolumesChanged (a pod uid and a flag). 1024 messages per queue.
inline constexpr QueueLimits kVolumeEvents{64 * kKiB, 64 * kMiB};

// podworkerd ROUTER <- the supervisor's DEALER: DesiredPods (the whole desired state, resent
// every 2 s and on change) -> WorkAck or ErrorReply. 2 desired sets per peer queued each way:
// a resend replaces what was lost (level-triggered); 16 replies per peer.
inline constexpr ChannelLimits kPodWorkChannel{{64 * kMiB, 128 * kMiB}, {1 * kMiB, 16 * kMiB}};

// volumed ROUTER <- DEALERs: DesiredPods (supervisor), PodVolumesRequest (podworkerd),
// VolumesQuery (nodeletctl) -> WorkAck, PodVolumes, VolumesReport, ErrorReply. The requests'
// limit is DesiredPods'; replies are small but a VolumesReport lists every volume of the node.
inline constexpr ChannelLimits kVolumeChannel{{64 * kMiB, 128 * kMiB}, {4 * kMiB, 16 * kMiB}};

// The supervisor's ROUTER <- every service's DEALER: Hello, Heartbeat (health and counters, a
// few KiB), Reply -> Welcome, Command (a few bytes). The requests' limit stays the 4 MiB it
// always was (docs/supervisor.md, "Hostile input"); 16 of them per peer, one heartbeat a second.
inline constexpr ChannelLimits kControlChannel{{4 * kMiB, 64 * kMiB}, {64 * kKiB, 4 * kMiB}};

// The supervisor's ROUTER <- nodeletctl's DEALER: CtlRequest -> CtlReply (`runtime` carries the
// runtime view of every pod). One request per connection: 16 requests and 2 replies per peer.
inline constexpr ChannelLimits kCtlChannel{{64 * kKiB, 1 * kMiB}, {64 * kMiB, 128 * kMiB}};

// A RequestClient (one request out at a time, a fresh socket after each lost reply) queues at
// most this many messages each way.
inline constexpr int kRequestClientQueueDepth = 4;

}  // namespace nodelet::ipc
