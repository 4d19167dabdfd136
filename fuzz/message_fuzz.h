// Shared body of the FlatBuffers message fuzz targets: the decode path every receiver runs
// (lib/ipc/codec.h: size limit, identifier, verifier, envelope, schema version), then a full
// read of the verified message through the generated object API (UnPack touches every field,
// as PlegMirror does with pod records), then the copy is packed again and must verify.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "lib/ipc/codec.h"

namespace nodelet::fuzz {

// Returns the verified root (aliasing `data`) or nullptr when the decoder refused the bytes.
// Aborts when a verified message cannot be read in full or does not survive a round trip.
template <typename Root>
const Root* DecodeAndReadAll(const uint8_t* data, size_t size, const char* identifier) {
  auto msg = ipc::DecodeMessage<Root>(data, size, identifier);
  if (!msg.ok()) {
    if (msg.status().message().empty()) std::abort();  // every refusal has a reason
    return nullptr;
  }
  const Root* root = *msg;
  // UnPack returns an owning raw pointer in this flatbuffers version.
  std::unique_ptr<typename Root::NativeTableType> copy(root->UnPack());
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(Root::Pack(fbb, copy.get()), identifier);
  if (!ipc::DecodeMessage<Root>(fbb.GetBufferPointer(), fbb.GetSize(), identifier,
                                /*max_bytes=*/64 << 20)
           .ok()) {
    std::abort();
  }
  return root;
}

}  // namespace nodelet::fuzz
