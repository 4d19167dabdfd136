// Pod <-> FlatBuffers (ipc-schemas/pod.fbs). The supervisor's pod manager encodes pods; podworkerd
// and volumed decode them. (Pod -> CRI sandbox and container configs will live next to lib/cri
// once it exists.)
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <vector>

#include "lib/common/status.h"
#include "lib/pod/pod.h"
#include "pod_generated.h"

namespace nodelet::pod {

// Writes `pod` into `fbb` (for embedding in a service message).
flatbuffers::Offset<ipc::pod::Pod> PodToFlatBuffer(flatbuffers::FlatBufferBuilder& fbb,
                                                   const Pod& pod);

// Reads a Pod from a table that is part of a verified buffer. Fails when metadata or spec is
// missing or a quantity does not parse (every field is re-checked by ValidatePod if the caller
// needs a valid pod; this only guarantees a well-formed model).
Result<Pod> PodFromFlatBuffer(const ipc::pod::Pod* fb);

// A standalone buffer with root Pod and identifier "NLPD".
std::vector<uint8_t> EncodePod(const Pod& pod);
// Verifies (size limit, identifier, FlatBuffers verifier) and converts such a buffer.
Result<Pod> DecodePod(const void* data, size_t size, size_t max_bytes = 4 * 1024 * 1024);

}  // namespace nodelet::pod
