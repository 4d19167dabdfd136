// Conversion between the pod status values of pod_status.h and status.fbs: building request,
// reply and watch messages, reading verified ones, and the record blobs statusd's store keeps.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <string>
#include <vector>

#include "lib/common/status.h"
#include "lib/ipc/codec.h"
#include "lib/status/pod_status.h"
#include "status_generated.h"

namespace nodelet::status {

namespace fb = ::nodelet::ipc::status;

// Writers (into a builder that the caller finishes).
flatbuffers::Offset<fb::PodIdentity> WritePodIdentity(flatbuffers::FlatBufferBuilder& fbb,
                                                      const PodIdentity& pod);
flatbuffers::Offset<fb::PodStatus> WritePodStatus(flatbuffers::FlatBufferBuilder& fbb,
                                                  const PodStatus& status);
flatbuffers::Offset<fb::PodStatusRecord> WritePodStatusRecord(flatbuffers::FlatBufferBuilder& fbb,
                                                              const PodStatusRecord& record);

// Readers of verified buffers; a missing table gives the default value.
PodIdentity ReadPodIdentity(const fb::PodIdentity* pod);
PodStatus ReadPodStatus(const fb::PodStatus* status);
PodStatusRecord ReadPodStatusRecord(const fb::PodStatusRecord* record);
flatbuffers::Offset<fb::EventRecord> WriteEvent(flatbuffers::FlatBufferBuilder& fbb,
                                                const PodEvent& event);
PodEvent ReadEvent(const fb::EventRecord* event);

// Finishes `fbb` as a StatusMessage with a fresh envelope from `envelope`.
void FinishStatusMessage(flatbuffers::FlatBufferBuilder& fbb, ipc::EnvelopeWriter& envelope,
                         fb::Body type, flatbuffers::Offset<void> body);

// Verified decode of a StatusMessage (size limit, identifier, verifier, envelope).
Result<const fb::StatusMessage*> DecodeStatusMessage(const void* data, size_t size,
                                                     size_t max_bytes);

// The request id of any request or reply body; 0 when it has none.
uint64_t RequestIdOf(const fb::StatusMessage& message);

// ErrorReply codes and Status codes map one to one.
fb::ErrorCode ToErrorCode(StatusCode code);
StatusCode FromErrorCode(fb::ErrorCode code);

// The store's blob for one record (a size-prefixed-free PodStatusRecord buffer), and back.
// Decoding verifies the blob; a broken one gives InvalidArgument.
std::string EncodeRecordBlob(const PodStatusRecord& record);
Result<PodStatusRecord> DecodeRecordBlob(const void* data, size_t size);

}  // namespace nodelet::status
