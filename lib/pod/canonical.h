// Canonical encodings of the Pod model and the hashes nodelet derives from them: the container
// spec hash (podworkerd restarts a container whose hash changed) and the static pod UID.
//
// Both must stay stable across nodelet versions: changing either restarts every container or
// re-creates every static pod on upgrade. The encoding is field-by-field with fixed numeric
// tags (canonical.cc is the specification; docs/pods.md summarises it): a field at its zero
// value is omitted, so adding a field to the model does not change the hash of a pod that does
// not use it. Rule for future fields: give them a new tag and omit them when unset or at their
// default. Never change a tag, the order, or the hash functions below.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lib/pod/pod.h"

namespace nodelet::pod {

// The fields that define a running container, in this order (tags 1..11): name, image,
// command, args, workingDir, env (name, value, valueFrom), ports (name, containerPort, protocol,
// hostPort, hostIP), resources (requests, limits: name and exact value), volumeMounts (name,
// mountPath, readOnly, subPath), securityContext (runAsUser, runAsGroup, runAsNonRoot,
// privileged, readOnlyRootFilesystem, allowPrivilegeEscalation, then capabilities,
// seccompProfile, appArmorProfile, procMount), terminationMessagePath; then
// (tags 16..18) envFrom, lifecycle and terminationMessagePolicy unless it is the default File.
// An unset field writes nothing, so adding one leaves existing hashes as they were.
// Not included: imagePullPolicy and the probes, which podworkerd applies without a restart.
std::string CanonicalContainerSpec(const Container& container);

// FNV-1a 64 of "nodelet.container-spec.v1\n" followed by CanonicalContainerSpec. Call it on a
// defaulted container (so an explicit default and an omitted one hash alike).
uint64_t ContainerSpecHash(const Container& container);
// The hash as 16 lowercase hex digits (how it is stamped on CRI containers).
std::string ContainerSpecHashHex(const Container& container);

// Every field of the model.
std::string CanonicalPod(const Pod& pod);

// FNV-1a with the standard offset bases and primes.
uint64_t Fnv1a64(std::string_view data);
unsigned __int128 Fnv1a128(std::string_view data);

// 32 lowercase hex digits of a 128-bit value.
std::string Hex128(unsigned __int128 v);

}  // namespace nodelet::pod
