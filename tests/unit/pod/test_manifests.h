// Manifests shared by the lib/pod unit tests.
#pragma once

namespace nodelet::pod::testing {

// A pod using every field of the model.
inline constexpr char kFullPodYaml[] = R"(# a full manifest
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: prod
  labels:
    app: web
    example.com/tier: frontend
  annotations:
    note: "hello"
  creationTimestamp: null
  deletionGracePeriodSeconds: 15
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 10
  activeDeadlineSeconds: 600
  hostNetwork: true
  nodeName: ignored-for-static
  unknownField: {a: [1, 2, 3]}
  initContainers:
  - name: init
    image: busybox:1.36
    command: [sh, -c, "echo init"]
  containers:
  - name: app
    image: registry.local:5000/app
    imagePullPolicy: IfNotPresent
    command: ["/bin/app"]
    args: ["--port", "8080"]
    workingDir: /srv
    env:
    - name: MODE
      value: "production"
    - name: EMPTY
    ports:
    - name: http
      containerPort: 8080
      hostPort: 8080
    - containerPort: 9090
      protocol: UDP
    resources:
      requests:
        cpu: 100m
        memory: 64Mi
      limits:
        cpu: "0.5"
        memory: 128Mi
        ephemeral-storage: 1G
    volumeMounts:
    - name: data
      mountPath: /data
    - name: config
      mountPath: /etc/app
      readOnly: true
      subPath: app
    livenessProbe:
      httpGet:
        port: http
        path: /healthz
        httpHeaders:
        - name: X-Probe
          value: "1"
      initialDelaySeconds: 5
    readinessProbe:
      tcpSocket:
        port: 8080
      periodSeconds: 2
      successThreshold: 2
    startupProbe:
      exec:
        command: [cat, /tmp/ready]
      failureThreshold: 30
    securityContext:
      runAsUser: 1000
      runAsGroup: 1000
      runAsNonRoot: true
      privileged: false
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
    terminationMessagePath: /tmp/term
  - name: sidecar
    image: busybox
  volumes:
  - name: data
    emptyDir:
      medium: Memory
      sizeLimit: 64Mi
  - name: host
    hostPath:
      path: /var/log
      type: Directory
  - name: config
    configMap:
      name: app-config
      items:
      - key: app.conf
        path: app/app.conf
        mode: 0600
      defaultMode: 0644
      optional: true
  - name: creds
    secret:
      secretName: app-creds
      defaultMode: 256
  - name: info
    downwardAPI:
      items:
      - path: labels
        fieldRef:
          fieldPath: metadata.labels
      - path: cpu
        resourceFieldRef:
          containerName: app
          resource: limits.cpu
          divisor: 1m
  - name: scratch
status:
  phase: Running
)";

// The same pod as JSON (fewer fields).
inline constexpr char kSmallPodJson[] = R"({
  "apiVersion": "v1",
  "kind": "Pod",
  "metadata": {"name": "api", "labels": {"app": "api"}},
  "spec": {
    "containers": [{
      "name": "api",
      "image": "busybox:latest",
      "command": ["sleep", "3600"],
      "ports": [{"containerPort": 80}],
      "resources": {"limits": {"cpu": 1, "memory": "32Mi"}},
      "livenessProbe": {"tcpSocket": {"port": 80}}
    }]
  }
})";

inline constexpr char kMinimalPodYaml[] = R"(apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "3600"]
)";

}  // namespace nodelet::pod::testing
