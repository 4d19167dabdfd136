// One fixture Pod with every field of the model set somewhere, through every
// place that lists the fields by hand: the manifest parser, validation, the FlatBuffers codec
// and the canonical encoding. The checks are generic over the model (aggregate_fields.h), so a
// field added to lib/pod/pod.h and forgotten in one of those places fails here:
// - the fixture must set every field of the model somewhere (a new field is missing from the
//   fixture until the parser reads it, since the parser refuses fields it does not know);
// - each single change of any field value must survive the FlatBuffers round trip and change
//   CanonicalPod.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "lib/pod/canonical.h"
#include "lib/pod/defaults.h"
#include "lib/pod/manifest_parser.h"
#include "lib/pod/pod.h"
#include "lib/pod/pod_flatbuffers.h"
#include "lib/pod/validation.h"
#include "tests/unit/pod/aggregate_fields.h"

namespace nodelet::pod {
namespace {

using testing::ForEachField;
using testing::ModelStruct;
using testing::TypeName;

// Every field is set in at least one place; where the API allows only one of several (a probe's
// handler, a volume's source) the fixture uses each somewhere.
constexpr char kEveryField[] = R"(apiVersion: v1
kind: Pod
metadata:
  name: every-field
  namespace: fields
  uid: 0b4c8a52-1d5e-4f5a-9d53-2f8f1e2a9c11
  labels: {app: fields}
  annotations: {note: "every field"}
  creationTimestamp: "2026-01-02T03:04:05Z"
  deletionTimestamp: "2026-01-02T04:05:06Z"
  deletionGracePeriodSeconds: 12
spec:
  nodeName: node-a
  hostNetwork: true
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 45
  activeDeadlineSeconds: 600
  runtimeClassName: runc-fast
  priorityClassName: system-node-critical
  serviceAccountName: builder
  imagePullSecrets: [{name: registry-a}, {name: registry-b}]
  hostPID: true
  hostIPC: true
  shareProcessNamespace: false
  securityContext:
    runAsUser: 2000
    runAsGroup: 2001
    runAsNonRoot: true
    fsGroup: 2002
    fsGroupChangePolicy: OnRootMismatch
    supplementalGroups: [2003, 2004]
    sysctls: [{name: kernel.shm_rmid_forced, value: "1"}]
    seccompProfile: {type: RuntimeDefault}
    appArmorProfile: {type: Localhost, localhostProfile: nodelet-test}
  hostname: fields-host
  subdomain: sub
  setHostnameAsFQDN: true
  hostAliases:
  - {ip: 10.1.2.3, hostnames: [db.local, cache.local]}
  dnsPolicy: ClusterFirstWithHostNet
  dnsConfig:
    nameservers: [10.0.0.10]
    searches: [example.com]
    options: [{name: ndots, value: "2"}, {name: edns0}]
  initContainers:
  - name: init
    image: nodelet.local/busybox:1.0
    imagePullPolicy: Never
    command: [sh, -c]
    args: ["true"]
  containers:
  - name: app
    image: nodelet.local/busybox:1.0
    imagePullPolicy: IfNotPresent
    command: [sh, -c]
    args: ["sleep 1000"]
    workingDir: /work
    stdin: true
    stdinOnce: true
    tty: true
    env:
    - {name: MODE, value: test}
    - name: POD
      valueFrom: {fieldRef: {apiVersion: v1, fieldPath: metadata.name}}
    - name: MEM
      valueFrom: {resourceFieldRef: {containerName: app, resource: limits.memory, divisor: 1Mi}}
    - name: LEVEL
      valueFrom: {configMapKeyRef: {name: settings, key: level, optional: true}}
    - name: TOKEN
      valueFrom: {secretKeyRef: {name: token, key: t, optional: false}}
    envFrom:
    - prefix: CFG_
      configMapRef: {name: settings, optional: true}
    - secretRef: {name: token, optional: false}
    lifecycle:
      postStart:
        exec: {command: [touch, /tmp/started]}
      preStop:
        httpGet: {port: 8080, path: /stop}
    ports:
    - {name: http, containerPort: 8080, protocol: UDP, hostPort: 8080, hostIP: 127.0.0.1}
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {cpu: "1", memory: 128Mi}
    volumeMounts:
    - {name: scratch, mountPath: /scratch, readOnly: true, subPath: part}
    - {name: host, mountPath: /host}
    - {name: config, mountPath: /config}
    - {name: secret, mountPath: /secret}
    - {name: info, mountPath: /info}
    livenessProbe:
      exec: {command: [cat, /tmp/ok]}
      initialDelaySeconds: 3
      periodSeconds: 7
      timeoutSeconds: 2
      successThreshold: 1
      failureThreshold: 4
    readinessProbe:
      httpGet:
        host: 127.0.0.1
        port: http
        path: /ready
        scheme: HTTPS
        httpHeaders: [{name: X-Check, value: "1"}]
      successThreshold: 2
    startupProbe:
      tcpSocket: {host: 127.0.0.1, port: 8080}
    securityContext:
      runAsUser: 1000
      runAsGroup: 1000
      runAsNonRoot: true
      privileged: false
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}
      seccompProfile: {type: Localhost, localhostProfile: profiles/deny-mkdir.json}
      appArmorProfile: {type: Unconfined}
      procMount: Default
    terminationMessagePath: /dev/last-words
    terminationMessagePolicy: FallbackToLogsOnError
  - name: side
    image: nodelet.local/busybox:1.0
    livenessProbe:
      grpc: {port: 9090, service: health}
    lifecycle:
      preStop:
        sleep: {seconds: 5}
  volumes:
  - name: scratch
    emptyDir: {medium: Memory, sizeLimit: 16Mi}
  - name: host
    hostPath: {path: /var/lib/nodelet-fixture, type: DirectoryOrCreate}
  - name: config
    configMap:
      name: settings
      items: [{key: a, path: a.txt, mode: 0600}]
      defaultMode: 0640
      optional: true
  - name: secret
    secret:
      secretName: token
      items: [{key: t, path: t.txt}]
      defaultMode: 0400
      optional: false
  - name: info
    downwardAPI:
      defaultMode: 0444
      items:
      - path: name
        fieldRef: {apiVersion: v1, fieldPath: metadata.name}
        mode: 0440
      - path: mem
        resourceFieldRef: {containerName: app, resource: limits.memory, divisor: 1Mi}
)";

Pod FixturePod() {
  ManifestParseResult r = DecodeManifest(kEveryField, "every-field.yaml");
  EXPECT_TRUE(r.errors.empty()) << (r.errors.empty() ? "" : r.errors[0].message);
  EXPECT_EQ(r.pods.size(), 1u);
  return r.pods.empty() ? Pod{} : r.pods[0].pod;
}

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};
template <class T>
struct IsMap : std::false_type {};
template <class K, class V>
struct IsMap<std::map<K, V>> : std::true_type {};

// Records, for every field of every struct of the model ("nodelet::pod::Container.10": field 10
// of Container, counted from 0 in the order of lib/pod/pod.h), whether some value of that struct
// in `v` sets it (differs from its default). An unset optional or an empty list is walked as a
// default value, so the fields of structs that the fixture never uses are listed too.
template <class T>
void Walk(const T& v, const std::string& key, std::map<std::string, bool>& set) {
  if (!key.empty()) set[key] = set[key] || !(v == T{});
  if constexpr (IsOptional<T>::value) {
    using U = typename T::value_type;
    if (v.has_value()) {
      Walk(*v, "", set);
    } else {
      Walk(U{}, "", set);
    }
  } else if constexpr (IsVector<T>::value) {
    using U = typename T::value_type;
    if (v.empty()) Walk(U{}, "", set);
    for (const auto& e : v) Walk(e, "", set);
  } else if constexpr (ModelStruct<T> && !IsMap<T>::value) {
    ForEachField(v, [&](size_t i, const auto& m) {
      Walk(m, std::string(TypeName<T>()) + "." + std::to_string(i), set);
    });
  }
}

// The first field (as Walk names it) where `a` and `b` differ; "" when they are equal.
template <class T>
std::string FirstDifference(const T& a, const T& b, const std::string& key) {
  if (a == b) return "";
  if constexpr (IsOptional<T>::value) {
    if (a.has_value() != b.has_value()) return key + " (set in one only)";
    return FirstDifference(*a, *b, key);
  } else if constexpr (IsVector<T>::value) {
    if (a.size() != b.size()) return key + " (length)";
    for (size_t i = 0; i < a.size(); ++i) {
      if (auto d = FirstDifference(a[i], b[i], key); !d.empty()) return d;
    }
    return key;
  } else if constexpr (ModelStruct<T> && !IsMap<T>::value) {
    std::string found;
    ForEachField(a, [&](size_t i, const auto& ma) {
      ForEachField(b, [&](size_t j, const auto& mb) {
        if constexpr (std::is_same_v<decltype(ma), decltype(mb)>) {
          if (i == j && found.empty()) {
            found = FirstDifference(ma, mb, std::string(TypeName<T>()) + "." + std::to_string(i));
          }
        }
      });
    });
    return found.empty() ? key : found;
  } else {
    return key;
  }
}

// Changes the `target`-th leaf value met in `v` (in the order Walk meets them) and returns true
// then; `counter` counts the leaves passed.
template <class T>
bool MutateNth(T& v, int& counter, int target, std::string& what, const std::string& path) {
  if constexpr (IsOptional<T>::value) {
    return v.has_value() && MutateNth(*v, counter, target, what, path);
  } else if constexpr (IsVector<T>::value) {
    for (auto& e : v) {
      if (MutateNth(e, counter, target, what, path)) return true;
    }
    return false;
  } else if constexpr (std::is_same_v<T, IntOrString>) {
    if (counter++ != target) return false;
    if (v.is_string)
      v.str_value += "x";
    else
      v.int_value += 1;
    what = path;
    return true;
  } else if constexpr (ModelStruct<T> && !IsMap<T>::value) {
    bool done = false;
    ForEachField(v, [&](size_t i, auto& m) {
      if (!done) {
        done = MutateNth(m, counter, target, what,
                         std::string(TypeName<T>()) + "." + std::to_string(i));
      }
    });
    return done;
  } else {
    if (counter++ != target) return false;
    what = path;
    if constexpr (std::is_same_v<T, std::string>) {
      v += "x";
    } else if constexpr (std::is_same_v<T, bool>) {
      v = !v;
    } else if constexpr (std::is_integral_v<T>) {
      v += 1;
    } else if constexpr (std::is_same_v<T, Quantity>) {
      v = Quantity::FromValue(v.Value() + 1);
    } else if constexpr (std::is_same_v<T, std::map<std::string, std::string>>) {
      v["mutated.example.com/key"] = "x";
    } else if constexpr (std::is_same_v<T, ResourceList>) {
      v["example.com/mutated"] = Quantity::FromValue(1);
    } else {
      static_assert(sizeof(T) == 0, "a leaf type MutateNth does not know: add it");
    }
    return true;
  }
}

TEST(PodFieldsTest, TheFixtureSetsEveryFieldOfTheModel) {
  Pod pod = FixturePod();
  std::map<std::string, bool> set;
  Walk(pod, "", set);
  std::vector<std::string> unset;
  for (const auto& [path, is_set] : set) {
    if (!is_set) unset.push_back(path);
  }
  // Each path names the field by its struct and position (field N of the struct, from 0, in
  // the order of lib/pod/pod.h). A field listed here is one the fixture does not set: add it
  // to kEveryField (and to the parser, if it refuses it).
  EXPECT_THAT(unset, ::testing::IsEmpty());
  EXPECT_GT(set.size(), 90u) << "the walk did not reach the model's fields";
}

TEST(PodFieldsTest, TheFixtureIsValidOnceDefaulted) {
  Pod pod = FixturePod();
  ApplyPodDefaults(pod);
  FieldErrors errors = ValidatePod(pod);
  EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors[0].ToString());
}

TEST(PodFieldsTest, EveryFieldSurvivesTheCodecAndChangesTheCanonicalForm) {
  const Pod pod = FixturePod();
  auto buffer = EncodePod(pod);
  auto round_trip = DecodePod(buffer.data(), buffer.size());
  ASSERT_TRUE(round_trip.ok()) << round_trip.status().ToString();
  ASSERT_EQ(FirstDifference(*round_trip, pod, "Pod"), "") << "the FlatBuffers codec loses it";
  const std::string canonical = CanonicalPod(pod);
  int leaves = 0;
  for (int target = 0;; ++target) {
    Pod changed = pod;
    int counter = 0;
    std::string what;
    if (!MutateNth(changed, counter, target, what, "Pod")) break;
    what += " (leaf " + std::to_string(target) + ")";
    ++leaves;
    ASSERT_NE(changed, pod) << what;
    auto changed_buffer = EncodePod(changed);
    auto decoded = DecodePod(changed_buffer.data(), changed_buffer.size());
    ASSERT_TRUE(decoded.ok()) << what << ": " << decoded.status().ToString();
    EXPECT_EQ(FirstDifference(*decoded, changed, "Pod"), "")
        << "the FlatBuffers codec loses a change of " << what;
    EXPECT_NE(CanonicalPod(changed), canonical) << "CanonicalPod ignores a change of " << what;
  }
  EXPECT_GT(leaves, 100) << "the mutation walk did not reach the model's fields";
}

}  // namespace
}  // namespace nodelet::pod
