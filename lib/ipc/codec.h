// Encoding and verified decoding of nodelet's FlatBuffers messages.
//
// Every received buffer goes through DecodeMessage before use: a size limit, the file
// identifier, the FlatBuffers verifier (bounded depth and table count), a present envelope and
// a known schema version. Garbage yields an error Status, never a throw or a crash.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <random>
#include <string>

#include "envelope_generated.h"
#include "lib/common/clock.h"
#include "lib/common/status.h"

namespace nodelet::ipc {

// The schema family version written into every envelope. Receivers accept equal or newer
// minor changes (append-only schemas), so only this major number is checked.
inline constexpr uint16_t kSchemaVersion = 1;

// Default size limit for one message; services may choose a larger one for snapshots.
inline constexpr size_t kDefaultMaxMessageBytes = 4 * 1024 * 1024;

// A random, non-zero 64-bit id for this process start.
uint64_t NewIncarnation();

// Writes envelopes for one sender on one socket: fixed sender and incarnation, a sequence that
// increases by one per message, and the send time from `clock` (MonoNanos). The clock defaults
// to the process's RealClock at the creator's call: the send time is only a latency figure.
class EnvelopeWriter {
 public:
  EnvelopeWriter(ServiceId sender, uint64_t incarnation, const Clock& clock = RealClock::Get())
      : sender_(sender), incarnation_(incarnation), clock_(&clock) {}
  flatbuffers::Offset<Envelope> Write(flatbuffers::FlatBufferBuilder& fbb);
  uint64_t last_sequence() const { return sequence_; }
  uint64_t incarnation() const { return incarnation_; }
  ServiceId sender() const { return sender_; }

 private:
  ServiceId sender_;
  uint64_t incarnation_;
  const Clock* clock_;
  uint64_t sequence_ = 0;
};

// Checks size, identifier and structure of a buffer whose root type is `Root` (a generated
// table with a `header()` accessor) and returns the root. The pointer aliases `data`.
template <typename Root>
Result<const Root*> DecodeMessage(const void* data, size_t size, const char* identifier,
                                  size_t max_bytes = kDefaultMaxMessageBytes) {
  if (data == nullptr || size == 0) return InvalidArgument("empty message");
  if (size > max_bytes) {
    return ResourceExhausted("message of " + std::to_string(size) + " bytes exceeds the limit of " +
                             std::to_string(max_bytes));
  }
  if (size < sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength) {
    return InvalidArgument("message of " + std::to_string(size) + " bytes is too short");
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (!flatbuffers::BufferHasIdentifier(bytes, identifier)) {
    return InvalidArgument(std::string("wrong message identifier (want '") + identifier + "')");
  }
  // Depth 32 and 100k tables bound the verifier's own work on hostile input.
  flatbuffers::Verifier verifier(bytes, size, /*max_depth=*/32, /*max_tables=*/100000);
  if (!verifier.VerifyBuffer<Root>(identifier)) {
    return InvalidArgument("message failed FlatBuffers verification");
  }
  const Root* root = flatbuffers::GetRoot<Root>(bytes);
  const Envelope* header = root->header();
  if (header == nullptr) return InvalidArgument("message has no envelope");
  if (header->schema_version() != kSchemaVersion) {
    return InvalidArgument("unsupported schema version " +
                           std::to_string(header->schema_version()) + " (this side speaks " +
                           std::to_string(kSchemaVersion) + ")");
  }
  // The verifier accepts a union whose type is set but whose value is absent; receivers (and
  // the generated object API) read such a body as present. Found by fuzz-status, whose
  // RequestIdOf dereferenced the missing body.
  if constexpr (requires {
                  root->body_type();
                  root->body();
                }) {
    if (static_cast<int>(root->body_type()) != 0 && root->body() == nullptr) {
      return InvalidArgument("message names a body of type " +
                             std::to_string(static_cast<int>(root->body_type())) +
                             " but carries none");
    }
  }
  return root;
}

}  // namespace nodelet::ipc
