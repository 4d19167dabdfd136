#include "tests/chaos/chaos_pods.h"

#include "lib/pod/canonical.h"
#include "lib/pod/static_pod.h"

namespace nodelet::chaos {
namespace {

constexpr char kImage[] = "nodelet.local/busybox:1.0";
// A shell that exits at once on SIGTERM, so a kill takes no grace period.
constexpr char kServe[] = "trap 'exit 0' TERM; while true; do sleep 0.3; done";

std::string Container(const std::string& name, const std::string& command,
                      const std::string& extra = "") {
  return std::string("  - name: ") + name + "\n    image: " + kImage +
         "\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"" + command + "\"]\n" +
         extra;
}

}  // namespace

const char* PodKindName(PodKind kind) {
  switch (kind) {
    case PodKind::kLongRunning:
      return "long-running";
    case PodKind::kLongWithInit:
      return "long-running+init";
    case PodKind::kLongWithVolumes:
      return "long-running+volumes";
    case PodKind::kLongWithProbes:
      return "long-running+probes";
    case PodKind::kCrashLooping:
      return "crash-looping";
    case PodKind::kCompleteNever:
      return "completing(Never)";
    case PodKind::kCompleteOnFailure:
      return "completing(OnFailure)";
  }
  return "?";
}

bool IsLongRunning(PodKind kind) {
  return kind == PodKind::kLongRunning || kind == PodKind::kLongWithInit ||
         kind == PodKind::kLongWithVolumes || kind == PodKind::kLongWithProbes;
}

PodKind KindForIndex(int index) {
  static constexpr PodKind kRotation[] = {PodKind::kLongRunning,     PodKind::kLongWithVolumes,
                                          PodKind::kCrashLooping,    PodKind::kLongWithProbes,
                                          PodKind::kCompleteNever,   PodKind::kLongWithInit,
                                          PodKind::kLongRunning,     PodKind::kCompleteOnFailure,
                                          PodKind::kLongWithVolumes, PodKind::kLongWithProbes};
  return kRotation[static_cast<size_t>(index) % (sizeof kRotation / sizeof kRotation[0])];
}

std::string RenderPodManifest(const ChaosPod& pod) {
  std::string restart_policy = "Always";
  if (pod.kind == PodKind::kCompleteNever) restart_policy = "Never";
  if (pod.kind == PodKind::kCompleteOnFailure) restart_policy = "OnFailure";
  std::string gen_env =
      "    env:\n    - name: GENERATION\n      value: \"" + std::to_string(pod.generation) + "\"\n";
  std::string out = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + pod.name +
                    "\n  labels:\n    app: chaos\n    kind: " +
                    std::string(pod.kind == PodKind::kLongRunning ? "plain" : "mixed") +
                    "\n    label-generation: \"" + std::to_string(pod.label_generation) +
                    "\"\nspec:\n" + std::string(pod.pod_network ? "" : "  hostNetwork: true\n") +
                    "  terminationGracePeriodSeconds: 3\n  restartPolicy: " + restart_policy + "\n";
  switch (pod.kind) {
    case PodKind::kLongRunning:
      out += "  containers:\n" + Container("app", kServe, gen_env);
      break;
    case PodKind::kLongWithInit:
      out +=
          "  volumes:\n  - name: work\n    emptyDir: {}\n"
          "  initContainers:\n" +
          Container("prepare", "echo prepared > /work/ready",
                    "    volumeMounts:\n    - {name: work, mountPath: /work}\n") +
          "  containers:\n" +
          Container("app", std::string("test -f /work/ready || exit 3; ") + kServe,
                    gen_env + "    volumeMounts:\n    - {name: work, mountPath: /work}\n");
      break;
    case PodKind::kLongWithVolumes: {
      std::string mounts =
          "    volumeMounts:\n    - {name: scratch, mountPath: /scratch}\n"
          "    - {name: memory, mountPath: /memory}\n"
          "    - {name: config, mountPath: /config, readOnly: true}\n";
      const bool results = !pod.results_dir.empty();
      // The writer's SIGTERM handler checks its emptyDir files three times over about a second
      // of its 3 s grace period, after its preStop hook left /scratch/prestop.
      std::string writer =
          "echo $GENERATION > /scratch/gen; echo kept > /scratch/marker; "
          "echo kept > /memory/marker; rm -f /scratch/prestop; ";
      if (results) {
        writer +=
            std::string("on_term() { trap '' TERM; r=") + kGraceOk +
            "; [ -f /scratch/prestop ] || r=" + kGraceNoPreStop +
            "; for i in 1 2 3; do [ \\\"$(cat /scratch/marker)\\\" = kept ] || r=" + kGraceMissing +
            "; [ \\\"$(cat /memory/marker)\\\" = kept ] || r=" + kGraceMissing +
            "; sleep 0.3; done; echo $r >> /results/$POD_NAME; exit 0; }; "
            "trap on_term TERM; while true; do sleep 0.3; done";
      } else {
        writer += kServe;
      }
      std::string writer_extra = gen_env + mounts;
      if (results) {
        writer_extra +=
            "    - {name: results, mountPath: /results}\n"
            "    lifecycle:\n      preStop:\n        exec:\n"
            "          command: [\"sh\", \"-c\", \"echo done > /scratch/prestop\"]\n";
        // POD_NAME from the downward API (fieldRef), after GENERATION.
        writer_extra.insert(gen_env.size(),
                            "    - name: POD_NAME\n      valueFrom:\n        fieldRef:\n"
                            "          fieldPath: metadata.name\n");
      }
      out += std::string(
                 "  volumes:\n  - name: scratch\n    emptyDir: {}\n"
                 "  - name: memory\n    emptyDir:\n      medium: Memory\n      sizeLimit: 4Mi\n"
                 "  - name: config\n    configMap:\n      name: ") +
             kConfigMapName + "\n" +
             (results ? "  - name: results\n    hostPath:\n      path: " + pod.results_dir + "\n"
                      : std::string()) +
             "  containers:\n" + Container("writer", writer, writer_extra) +
             Container("reader", std::string("cat /config/greeting > /memory/seen; ") + kServe,
                       mounts);
      break;
    }
    case PodKind::kLongWithProbes: {
      std::string port = std::to_string(pod.port);
      std::string probes = "    livenessProbe:\n      httpGet: {host: 127.0.0.1, port: " + port +
                           ", path: /index.html}\n      periodSeconds: 5\n      timeoutSeconds: 5\n"
                           "      failureThreshold: 12\n"
                           "    readinessProbe:\n      tcpSocket: {host: 127.0.0.1, port: " +
                           port +
                           "}\n      periodSeconds: 3\n"
                           "    startupProbe:\n      exec:\n        command: [\"test\", \"-f\", "
                           "\"/www/index.html\"]\n"
                           "      periodSeconds: 1\n      failureThreshold: 60\n";
      out += "  containers:\n" +
             Container("web",
                       "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 127.0.0.1:" +
                           port + " -h /www",
                       gen_env + probes) +
             Container(
                 "check", kServe,
                 "    livenessProbe:\n      exec:\n        command: [\"true\"]\n"
                 "      periodSeconds: 5\n      timeoutSeconds: 5\n      failureThreshold: 12\n");
      break;
    }
    case PodKind::kCrashLooping:
      out += "  containers:\n" + Container("app", "echo crashing; exit 1", gen_env);
      break;
    case PodKind::kCompleteNever:
    case PodKind::kCompleteOnFailure:
      out += "  containers:\n" + Container("app", "echo done; exit 0", gen_env);
      break;
  }
  return out;
}

std::string RenderConfigMapManifest(const std::string& value) {
  return std::string("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ") + kConfigMapName +
         "\ndata:\n  greeting: \"" + value + "\"\n";
}

Result<ExpectedPod> ExpectPod(const std::string& manifest, const std::string& path,
                              const std::string& node_name) {
  pod::StaticPodOrigin origin;
  origin.kind = pod::PodSourceKind::kFile;
  origin.source = path;
  origin.node_name = node_name;
  auto parsed = pod::LoadStaticPods(manifest, origin);
  if (!parsed.errors.empty()) return InvalidArgument(parsed.errors.front().message);
  if (parsed.pods.size() != 1) {
    return InvalidArgument(path + ": expected one pod, found " +
                           std::to_string(parsed.pods.size()));
  }
  const pod::Pod& p = parsed.pods.front().pod;
  ExpectedPod out;
  out.uid = p.metadata.uid;
  out.full_name = p.metadata.name;
  out.restart_policy = p.spec.restart_policy;
  for (const auto& c : p.spec.containers)
    out.container_hashes[c.name] = pod::ContainerSpecHashHex(c);
  return out;
}

}  // namespace nodelet::chaos
