#include "lib/ipc/codec.h"

namespace nodelet::ipc {

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

flatbuffers::Offset<Envelope> EnvelopeWriter::Write(flatbuffers::FlatBufferBuilder& fbb) {
  return CreateEnvelope(fbb, kSchemaVersion, sender_, incarnation_, ++sequence_,
                        clock_->MonoNanos());
}

}  // namespace nodelet::ipc
