// Shared body of the FlatBuffers message fuzz targets: the decode path every receiver runs
// (lib/ipc/codec.h: size limit, identifier, verifier, envelope, schema version), then a full
// read of the verified message through the generated object API (UnPack touches every field,
// as PlegMirror does with pod records), then the copy is packed again and must verify.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
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
  // A body of a type newer than this schema verifies (forward compatibility) and receivers
  // refuse it by type; the object API cannot carry it, so there is no round trip to check.
  using BodyType = decltype(root->body_type());
  if (static_cast<int>(root->body_type()) > static_cast<int>(BodyType::MAX)) return root;
  // UnPack returns an owning raw pointer in this flatbuffers version.
  std::unique_ptr<typename Root::NativeTableType> copy(root->UnPack());
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(Root::Pack(fbb, copy.get()), identifier);
  if (!ipc::DecodeMessage<Root>(fbb.GetBufferPointer(), fbb.GetSize(), identifier,
                                /*max_bytes=*/64 << 20)
           .ok()) {
    std::fprintf(stderr, "a verified message did not survive the object API round trip\n");
    std::abort();
  }
  return root;
}

}  // namespace nodelet::fuzz
