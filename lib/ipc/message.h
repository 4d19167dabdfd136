// Building and sending nodelet's IPC messages, and counting the bad ones received.
//
// Every schema's root is `XMessage{header, body}` with a union Body. FinishMessage writes the
// next envelope, the root table and the file identifier for any of them, chosen by the Body
// enum; SendMessage/PublishMessage also send it and return the send Status for the caller to
// judge. BadMessageCounter replaces the hand-kept "count, and log the first" pairs.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "control_generated.h"
#include "ctl_generated.h"
#include "lib/common/status.h"
#include "lib/ipc/codec.h"
#include "lib/ipc/sockets.h"
#include "pleg_generated.h"
#include "podwork_generated.h"
#include "status_generated.h"
#include "volume_generated.h"

namespace nodelet::ipc {

// Finishes `fbb` as a `Root` message: a fresh envelope from `envelope`, `body` of `type`, and
// `identifier`. The fields go in the order of the generated CreateXMessage, so the bytes are
// the same as with it.
template <typename Root>
void FinishRootMessage(flatbuffers::FlatBufferBuilder& fbb, EnvelopeWriter& envelope,
                       const char* identifier,
                       decltype(std::declval<const Root&>().body_type()) type,
                       flatbuffers::Offset<void> body) {
  auto header = envelope.Write(fbb);
  typename Root::Builder builder(fbb);
  builder.add_body(body);
  builder.add_header(header);
  builder.add_body_type(type);
  fbb.Finish(builder.Finish(), identifier);
}

// One overload per schema, picked by the Body enum of `type`.
#define NODELET_IPC_MESSAGE_SCHEMA(ns, Root)                                               \
  inline void FinishMessage(flatbuffers::FlatBufferBuilder& fbb, EnvelopeWriter& envelope, \
                            ns::Body type, flatbuffers::Offset<void> body) {               \
    FinishRootMessage<ns::Root>(fbb, envelope, ns::Root##Identifier(), type, body);        \
  }
NODELET_IPC_MESSAGE_SCHEMA(control, ControlMessage)
NODELET_IPC_MESSAGE_SCHEMA(ctl, CtlMessage)
NODELET_IPC_MESSAGE_SCHEMA(pleg, PlegMessage)
NODELET_IPC_MESSAGE_SCHEMA(podwork, PodWorkMessage)
NODELET_IPC_MESSAGE_SCHEMA(status, StatusMessage)
NODELET_IPC_MESSAGE_SCHEMA(volume, VolumeMessage)
#undef NODELET_IPC_MESSAGE_SCHEMA

// Finishes the message (FinishMessage) and sends it to `peer`.
template <typename Body>
Status SendMessage(RouterServer& socket, const std::string& peer,
                   flatbuffers::FlatBufferBuilder& fbb, EnvelopeWriter& envelope, Body type,
                   flatbuffers::Offset<void> body) {
  FinishMessage(fbb, envelope, type, body);
  return socket.Send(peer, fbb.GetBufferPointer(), fbb.GetSize());
}

// Finishes the message (FinishMessage) and sends it to the server.
template <typename Body>
Status SendMessage(DealerClient& socket, flatbuffers::FlatBufferBuilder& fbb,
                   EnvelopeWriter& envelope, Body type, flatbuffers::Offset<void> body) {
  FinishMessage(fbb, envelope, type, body);
  return socket.Send(fbb.GetBufferPointer(), fbb.GetSize());
}

// Finishes the message (FinishMessage) and publishes it.
template <typename Body>
Status PublishMessage(Publisher& socket, flatbuffers::FlatBufferBuilder& fbb,
                      EnvelopeWriter& envelope, Body type, flatbuffers::Offset<void> body) {
  FinishMessage(fbb, envelope, type, body);
  return socket.Publish(fbb.GetBufferPointer(), fbb.GetSize());
}

// Messages refused by verification (or of an unexpected kind) on one channel. Count() says
// whether it was the first, so that the caller logs one line and not one per message; the
// count is what heartbeats and metrics report. Safe to count from one thread and read from
// others.
class BadMessageCounter {
 public:
  // Counts one bad message; true for the first Count() ever, which the caller logs.
  bool Count() {
    count_.fetch_add(1, std::memory_order_relaxed);
    return !reported_.exchange(true, std::memory_order_relaxed);
  }
  // Counts one that is never logged (e.g. a malformed frame with no peer to name); the next
  // Count() is still the first.
  void CountSilently() { count_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> count_{0};
  std::atomic<bool> reported_{false};
};

}  // namespace nodelet::ipc
