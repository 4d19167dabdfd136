// The pods of the chaos soak (tests/chaos): a mix of long-running, crash-looping and completing
// pods, some with volumes (emptyDir on disk and in memory, configMap) and probes (exec, tcpSocket,
// httpGet), rendered as manifests, and what nodelet must make of them (UID, name, container spec
// hashes), computed with lib/pod exactly as the supervisor does.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "lib/common/status.h"

namespace nodelet::chaos {

enum class PodKind {
  kLongRunning,        // sleeps until SIGTERM
  kLongWithInit,       // an init container fills an emptyDir, then a long-running app
  kLongWithVolumes,    // emptyDir (disk and Memory) and configMap, two containers; the writer
                       // has a preStop hook and checks its emptyDir data through the grace
                       // period (kGraceResults)
  kLongWithProbes,     // httpd on a loopback port; liveness httpGet + exec, readiness tcpSocket
  kCrashLooping,       // exit 1, restartPolicy Always (crash-loop backoff)
  kCompleteNever,      // exit 0, restartPolicy Never
  kCompleteOnFailure,  // exit 0, restartPolicy OnFailure
};

const char* PodKindName(PodKind kind);
// Long-running kinds: their containers must never be restarted by a fault.
bool IsLongRunning(PodKind kind);
// The kind of the i-th pod of the initial set and of later additions (a fixed rotation, so
// every run has the same proportions: 7 of 10 long-running, 1 crash-looping, 2 completing).
PodKind KindForIndex(int index);

// The ConfigMap the volume pods mount.
inline constexpr char kConfigMapName[] = "chaos-config";

// One pod as the soak writes it. Edits bump `generation` (an env value: the container spec
// hash changes, so the container must be restarted) or `label_generation` (a label: the pod's
// config hash changes but no container may restart).
struct ChaosPod {
  std::string name;  // as written; nodelet names it NAME-NODE
  PodKind kind = PodKind::kLongRunning;
  int port = 0;  // kLongWithProbes: the loopback port its httpd serves
  int generation = 0;
  int label_generation = 0;
  // kLongWithVolumes: the host directory (hostPath) where the writer's SIGTERM handler appends
  // its verdict to a file named after the pod: "ok" (its emptyDir files were there throughout
  // the handler and its preStop hook had run), "missing" (a file was gone: a violation) or
  // "no-prestop". Empty: no verdicts.
  std::string results_dir;
  // On the private containerd's pod network (no hostNetwork): the sandbox gets an IP of the
  // instance's bridge subnet. Probe pods stay on the host network (their probes go to loopback).
  bool pod_network = false;
};

// The writer's verdicts (see ChaosPod::results_dir).
inline constexpr char kGraceOk[] = "ok";
inline constexpr char kGraceMissing[] = "missing";
inline constexpr char kGraceNoPreStop[] = "no-prestop";

// The manifest file of a pod (YAML).
std::string RenderPodManifest(const ChaosPod& pod);
// The ConfigMap manifest, with `value` under the key "greeting".
std::string RenderConfigMapManifest(const std::string& value);

// What nodelet must run for a manifest: the static pod's UID and name, and each regular
// container's spec hash (nodelet.io/container-hash), computed with lib/pod.
struct ExpectedPod {
  std::string uid;
  std::string full_name;
  std::string restart_policy;
  std::map<std::string, std::string> container_hashes;  // container name -> hash (hex)
};
Result<ExpectedPod> ExpectPod(const std::string& manifest, const std::string& path,
                              const std::string& node_name);

}  // namespace nodelet::chaos
