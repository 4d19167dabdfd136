// A pod's containers while it runs, through the real `nodelet` on a private containerd (the
// fixture is in lifecycle_e2e_fixture.h; the pod's end of life is in lifecycle_e2e_test.cc).
//
// - Lifecycle hooks: postStart runs after the start (a failing one kills the container, which is
//   restarted), preStop runs before SIGTERM, also when podworkerd is SIGKILLed in the middle of
//   the hook (the new podworkerd reads the hook stamped on the container and runs it again); the
//   httpGet and sleep kinds of preStop too.
// - The environment: fieldRef, resourceFieldRef, configMapKeyRef/secretKeyRef from the
//   manifest's own ConfigMap and Secret, envFrom with a prefix, $(VAR) expansion; a missing
//   ConfigMap is CreateContainerConfigError. runtimeClassName is the CRI runtime handler.
// - Probes: a failing startup probe restarts the container; probes over HTTPS (no certificate
//   check) and gRPC (grpc.health.v1) decide readiness.
// - Termination messages: the terminationMessagePath file, or the log's end on failure.
#include <gmock/gmock.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "lib/common/node_ip.h"
#include "tests/integration/lifecycle_e2e_fixture.h"
#include "tests/testing/harness.h"
#include "tests/testing/httplib_listen.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// A startup probe that never passes fails the container as the kubelet does: the container is
// killed and restarted (restartPolicy Always), its restartCount grows, and "Startup probe
// failed" is a Warning event; the liveness probe behind it never runs.
TEST_F(LifecycleE2eTest, AFailingStartupProbeRestartsTheContainer) {
  Write("slow.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: slow\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n"
        "    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n"
        "    startupProbe:\n      exec:\n        command: [\"false\"]\n"
        "      periodSeconds: 1\n      failureThreshold: 2\n"
        "    livenessProbe:\n      exec:\n        command: [\"sh\", \"-c\", \"echo x >> "
        "/tmp/live\"]\n"
        "      periodSeconds: 1\n");
  StartNodelet(Flags());
  auto restarts = [&] { return RestartCount("slow-node1", "app"); };
  // The first instance fails its probe after about 2 s; the crash-loop back-off (10 s) then
  // delays the next start.
  EXPECT_TRUE(WaitFor([&] { return restarts() >= 1; }, 40s))
      << "the container must be restarted: " << CtlPod("slow-node1").dump(2);
  const std::vector<std::string> messages = EventLines(Uid("slow-node1"));
  EXPECT_TRUE(Has(messages, "Unhealthy: Startup probe failed")) << Join(messages);
  EXPECT_TRUE(Has(messages, "Killing: Container app failed startup probe, will be restarted"))
      << Join(messages);
  for (const auto& m : messages) EXPECT_EQ(m.find("Liveness"), std::string::npos) << m;
}

// Hooks around a container: postStart runs once it started; on deletion preStop runs before the
// SIGTERM. podworkerd is SIGKILLed while the hook runs: the new podworkerd finds the pod
// undesired, reads the hook from the container's annotation and runs it (again) before it sends
// SIGTERM, all inside the grace period.
TEST_F(LifecycleE2eTest, HooksRunAroundTheContainerAlsoAcrossAPodworkerdRestart) {
  Write("hooked.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hooked\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 20\n"
        "  volumes:\n  - name: results\n    hostPath:\n      path: " +
            results_dir() +
            "\n"
            "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
            "    imagePullPolicy: Never\n"
            "    command: [\"sh\", \"-c\", \"trap 'echo term >> /results/out; exit 0' TERM; "
            "echo running >> /results/out; while true; do sleep 0.2; done\"]\n"
            "    lifecycle:\n"
            "      postStart:\n        exec:\n          command: [\"sh\", \"-c\", \"echo "
            "poststart >> /results/out\"]\n"
            "      preStop:\n        exec:\n          command: [\"sh\", \"-c\", \"echo prestop "
            ">> /results/out; sleep 3\"]\n"
            "    volumeMounts:\n    - {name: results, mountPath: /results}\n");
  StartNodelet(Flags({"--restart-intensity", "100"}));
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("poststart") && ResultsHave("running"); }, 40s))
      << ReadTextFile(results_file());
  std::filesystem::remove(manifests() + "/hooked.yaml");
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("prestop"); }, 20s))
      << "the preStop hook never ran: " << ReadTextFile(results_file());
  EXPECT_FALSE(ResultsHave("term")) << "SIGTERM must wait for the preStop hook";
  const pid_t podworkerd = ServicePid("podworkerd");
  ASSERT_GT(podworkerd, 0);
  ASSERT_EQ(kill(podworkerd, SIGKILL), 0);
  ASSERT_TRUE(WaitProcessGone(podworkerd, 10s));
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("term"); }, 40s))
      << "the container never got its SIGTERM: " << ReadTextFile(results_file());
  EXPECT_TRUE(WaitFor([&] { return RunningContainer("hooked-node1").empty(); }, 20s));
  const auto lines = Results();
  // The last preStop run comes before the SIGTERM, and the container was not stopped before.
  auto last_prestop = std::find(lines.rbegin(), lines.rend(), "prestop");
  auto term = std::find(lines.begin(), lines.end(), "term");
  ASSERT_NE(last_prestop, lines.rend());
  EXPECT_LT(std::distance(lines.begin(), last_prestop.base()) - 1,
            std::distance(lines.begin(), term))
      << ReadTextFile(results_file());
  EXPECT_EQ(CountLines(lines, "term"), 1u) << ReadTextFile(results_file());
  EXPECT_GE(CountLines(lines, "prestop"), 2u)
      << "the new podworkerd must run the preStop hook of the container it stops: "
      << ReadTextFile(results_file());
}

// preStop hooks of the other two kinds: httpGet (to a server the test runs on loopback, which a
// hostNetwork pod reaches at its IP, 127.0.0.1) is called before the container's SIGTERM; sleep
// holds the SIGTERM back for its seconds.
TEST_F(LifecycleE2eTest, HttpGetAndSleepPreStopHooksComeBeforeTheSigterm) {
  httplib::Server server;
  std::mutex mu;
  std::vector<std::string> hits;
  server.Get("/stop", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    hits.push_back(req.get_header_value("X-Reason") + " with web term " +
                   (ResultsHave("web term") ? "seen" : "not seen"));
    res.set_content("bye", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread thread = nodelet::testing::ListenInThread(server);
  struct Stop {
    std::function<void()> f;
    ~Stop() { f(); }
  } stop{[&] {
    server.stop();
    if (thread.joinable()) thread.join();
  }};
  auto container = [&](const std::string& name, const std::string& hook) {
    return "  - name: " + name +
           "\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
           "    command: [\"sh\", \"-c\", \"trap 'echo " +
           name + " term >> /results/out; exit 0' TERM; echo " + name +
           " running >> /results/out; while true; do sleep 0.2; done\"]\n"
           "    lifecycle:\n      preStop:\n" +
           hook + "    volumeMounts:\n    - {name: results, mountPath: /results}\n";
  };
  Write("hooks2.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hooks2\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 15\n"
        "  volumes:\n  - name: results\n    hostPath:\n      path: " +
            results_dir() + "\n  containers:\n" +
            container("web", "        httpGet:\n          port: " + std::to_string(port) +
                                 "\n          path: /stop\n          httpHeaders:\n"
                                 "          - {name: X-Reason, value: deleted}\n") +
            container("nap", "        sleep:\n          seconds: 3\n"));
  StartNodelet(Flags());
  ASSERT_TRUE(
      WaitFor([&] { return ResultsHave("web running") && ResultsHave("nap running"); }, 40s))
      << ReadTextFile(results_file());
  const auto deleted = std::chrono::steady_clock::now();
  std::filesystem::remove(manifests() + "/hooks2.yaml");
  ASSERT_TRUE(WaitFor([&] { return ResultsHave("nap term"); }, 30s))
      << ReadTextFile(results_file());
  EXPECT_GE(std::chrono::steady_clock::now() - deleted, 3s)
      << "the sleep hook must hold the SIGTERM back for its 3 seconds";
  EXPECT_TRUE(WaitFor([&] { return ResultsHave("web term"); }, 10s));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(hits, std::vector<std::string>{"deleted with web term not seen"})
      << "the httpGet hook must be called once, before the SIGTERM, with its headers";
}

// A postStart hook that fails: the container is killed (FailedPostStartHook) and restarted as
// its restartPolicy says.
TEST_F(LifecycleE2eTest, AFailingPostStartHookKillsAndRestartsTheContainer) {
  Write("poststart.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: poststart\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n"
        "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
        "    imagePullPolicy: Never\n"
        "    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n"
        "    lifecycle:\n      postStart:\n        exec:\n"
        "          command: [\"sh\", \"-c\", \"echo no; exit 3\"]\n");
  StartNodelet(Flags());
  auto restarts = [&] { return RestartCount("poststart-node1", "app"); };
  EXPECT_TRUE(WaitFor([&] { return restarts() >= 1; }, 40s))
      << "the container must be restarted: " << CtlPod("poststart-node1").dump(2);
  const std::vector<std::string> messages = EventLines(Uid("poststart-node1"));
  bool failed_hook = false;
  for (const auto& m : messages) {
    failed_hook = failed_hook || m.rfind("FailedPostStartHook: command 'sh' exited with 3", 0) == 0;
  }
  EXPECT_TRUE(failed_hook) << Join(messages);
}

// The environment as the kubelet builds it, read from inside the container.
TEST_F(LifecycleE2eTest, EnvironmentFromFieldsResourcesConfigMapsSecretsAndReferences) {
  Write("env.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n"
        "data:\n  level: debug\n  color: blue\n  bad-key: x\n"
        "---\n"
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n"
        "stringData:\n  t: s3cret\n"
        "---\n"
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: env\n  labels: {app: web}\n"
        "spec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n"
        "  serviceAccountName: builder\n"
        "  volumes:\n  - name: results\n    hostPath:\n      path: " +
            results_dir() +
            "\n"
            "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
            "    imagePullPolicy: Never\n"
            "    resources:\n      limits: {memory: 64Mi}\n"
            "    envFrom:\n    - prefix: CFG_\n      configMapRef: {name: settings}\n"
            "    - secretRef: {name: missing, optional: true}\n"
            "    env:\n"
            "    - {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}\n"
            "    - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}\n"
            "    - {name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}\n"
            "    - {name: APP, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}}\n"
            "    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}\n"
            "    - {name: SA, valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}}\n"
            "    - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}\n"
            "    - {name: MEM_MI, valueFrom: {resourceFieldRef: {resource: limits.memory, "
            "divisor: 1Mi}}}\n"
            "    - {name: LEVEL, valueFrom: {configMapKeyRef: {name: settings, key: level}}}\n"
            "    - {name: NONE, valueFrom: {configMapKeyRef: {name: settings, key: nope, "
            "optional: true}}}\n"
            "    - {name: TOKEN, valueFrom: {secretKeyRef: {name: token, key: t}}}\n"
            "    - {name: GREETING, value: \"$(POD) in $(NS) at $(LEVEL), $$(POD) $(UNKNOWN)\"}\n"
            // The environment PID 1 got (a shell would not pass on names such as CFG_bad-key).
            "    command: [\"sh\", \"-c\", \"tr '\\\\0' '\\\\n' < /proc/1/environ > "
            "/results/env.tmp; mv /results/env.tmp "
            "/results/env; echo '$(GREETING)' > /results/args; sleep 3600\"]\n"
            "    volumeMounts:\n    - {name: results, mountPath: /results}\n"
            "---\n"
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: noconfig\nspec:\n  hostNetwork: true\n"
            "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
            "    imagePullPolicy: Never\n    command: [\"sleep\", \"3600\"]\n"
            "    env:\n    - {name: X, valueFrom: {configMapKeyRef: {name: absent, key: k}}}\n");
  StartNodelet(Flags());
  ASSERT_TRUE(WaitFor([&] { return !ReadTextFile(results_dir() + "/env").empty(); }, 40s))
      << CtlPod("env-node1").dump(2);
  std::map<std::string, std::string> env;
  for (const auto& line : Lines(ReadTextFile(results_dir() + "/env"))) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  const std::string uid = Uid("env-node1");
  EXPECT_EQ(env["POD"], "env-node1");
  EXPECT_EQ(env["NS"], "default");
  EXPECT_EQ(env["UID"], uid);
  EXPECT_EQ(env["APP"], "web");
  EXPECT_EQ(env["NODE"], "node1");
  EXPECT_EQ(env["SA"], "builder");
  EXPECT_EQ(env["HOST_IP"], NodeIP("").value());  // the node's address, as /node says
  EXPECT_EQ(env["MEM_MI"], "64");
  EXPECT_EQ(env["LEVEL"], "debug");
  EXPECT_EQ(env["TOKEN"], "s3cret");
  EXPECT_EQ(env["CFG_level"], "debug");
  EXPECT_EQ(env["CFG_color"], "blue");
  EXPECT_EQ(env.count("CFG_bad-key"), 1u) << "'-' is valid in a variable name";
  EXPECT_EQ(env.count("NONE"), 0u) << "an optional missing key leaves the variable out";
  EXPECT_EQ(env["GREETING"], "env-node1 in default at debug, $(POD) $(UNKNOWN)");
  EXPECT_EQ(ReadTextFile(results_dir() + "/args"),
            "env-node1 in default at debug, $(POD) $(UNKNOWN)\n");
  auto waiting = [&] {
    auto p = CtlPod("noconfig-node1");
    if (p.is_null() || !p["status"].contains("containerStatuses")) return std::string();
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.contains("state") && c["state"].contains("waiting")) {
        return c["state"]["waiting"].value("reason", "") + ": " +
               c["state"]["waiting"].value("message", "");
      }
    }
    return std::string();
  };
  EXPECT_TRUE(WaitFor(
      [&] { return waiting() == "CreateContainerConfigError: configmap \"absent\" not found"; },
      20s))
      << waiting();
}

// runtimeClassName names the CRI runtime handler: "runc" (the private containerd's) runs the
// pod; a handler the runtime does not have fails the sandbox, and the status says why. Fields
// nodelet ignores (schedulerName) are named in an IgnoredFields Warning event; dnsPolicy is
// honoured now (docs/network.md), so it is not among them.
TEST_F(LifecycleE2eTest, RuntimeClassNameIsTheRuntimeHandler) {
  for (const char* name : {"known", "unknown"}) {
    Write(std::string(name) + ".yaml",
          "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + std::string(name) +
              "\nspec:\n  hostNetwork: true\n  dnsPolicy: ClusterFirst\n"
              "  schedulerName: my-scheduler\n  runtimeClassName: " +
              (std::string(name) == "known" ? "runc" : "no-such-handler") +
              "\n  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
              "    imagePullPolicy: Never\n    command: [\"sleep\", \"3600\"]\n");
  }
  StartNodelet(Flags());
  EXPECT_TRUE(WaitFor([&] { return !RunningContainer("known-node1").empty(); }, 40s))
      << CtlPod("known-node1").dump(2);
  EXPECT_TRUE(WaitFor(
      [&] {
        auto p = CtlPod("unknown-node1");
        return !p.is_null() && p["status"].value("reason", "") == "CreatePodSandboxError" &&
               p["status"].value("message", "").find("no-such-handler") != std::string::npos;
      },
      30s))
      << CtlPod("unknown-node1").dump(2);
  // The fields nodelet ignores are named in a Warning event, not dropped without a word.
  std::string ignored;
  for (const auto& e : Events(Uid("known-node1"))) {
    if (e.reason == "IgnoredFields" && e.type == "Warning") ignored = e.message;
  }
  EXPECT_THAT(ignored, HasSubstr("known.yaml: nodelet ignores spec.schedulerName"));
  EXPECT_THAT(ignored, ::testing::Not(HasSubstr("dnsPolicy")));
}

// Readiness probes over HTTPS and gRPC. The pod is on the node's network, so its IP is
// 127.0.0.1 and its probes reach servers the test runs on loopback: a TLS server with a
// self-signed certificate (the prober does not check it, as the kubelet's) and a gRPC server
// with gRPC's health service. Each container is ready while its server says so, and not ready
// once the gRPC service turns NOT_SERVING.
TEST_F(LifecycleE2eTest, ReadinessOverHttpsAndGrpc) {
  const std::string certs = dir_.Sub("certs");
  std::filesystem::create_directories(certs);
  ASSERT_EQ(RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-days", "1", "-subj", "/CN=localhost", "-keyout", certs + "/key.pem",
                        "-out", certs + "/cert.pem"},
                       30s)
                .exit_code,
            0);
  httplib::SSLServer https((certs + "/cert.pem").c_str(), (certs + "/key.pem").c_str());
  ASSERT_TRUE(https.is_valid());
  https.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  const int https_port = https.bind_to_any_port("127.0.0.1");
  ASSERT_GT(https_port, 0);
  std::thread https_thread = nodelet::testing::ListenInThread(https);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::CallbackGenericService generic;
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &grpc_port);
  builder.RegisterCallbackGenericService(&generic);
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  ASSERT_NE(grpc_server, nullptr);
  grpc_server->GetHealthCheckService()->SetServingStatus("orders", true);
  struct Stop {
    std::function<void()> f;
    ~Stop() { f(); }
  } stop{[&] {
    https.stop();
    if (https_thread.joinable()) https_thread.join();
    grpc_server->Shutdown(std::chrono::system_clock::now() + 2s);
  }};

  auto container = [](const std::string& name, const std::string& probe) {
    return "  - name: " + name +
           "\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
           "    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 0.2; "
           "done\"]\n"
           "    readinessProbe:\n" +
           probe + "      periodSeconds: 1\n      failureThreshold: 1\n";
  };
  Write("probed.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: probed\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n  containers:\n" +
            container("tls",
                      "      httpGet:\n        scheme: HTTPS\n        path: /healthz\n"
                      "        port: " +
                          std::to_string(https_port) + "\n") +
            container("rpc", "      grpc:\n        port: " + std::to_string(grpc_port) +
                                 "\n        service: orders\n"));
  StartNodelet(Flags());
  auto ready = [&](const std::string& name) {
    auto p = CtlPod("probed-node1");
    if (p.is_null() || !p["status"].contains("containerStatuses")) return false;
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.value("name", "") == name) return c.value("ready", false);
    }
    return false;
  };
  EXPECT_TRUE(WaitFor([&] { return ready("tls") && ready("rpc"); }, 40s))
      << CtlPod("probed-node1").dump(2);
  grpc_server->GetHealthCheckService()->SetServingStatus("orders", false);
  EXPECT_TRUE(WaitFor([&] { return !ready("rpc"); }, 20s)) << CtlPod("probed-node1").dump(2);
  EXPECT_TRUE(ready("tls"));
}

// Termination messages as the kubelet reports them: what the container wrote to its
// terminationMessagePath (the last 4 KiB of it), or with FallbackToLogsOnError and nothing
// written, the end of its log when it failed.
TEST_F(LifecycleE2eTest, TerminationMessagesFromTheFileOrTheLog) {
  auto container = [](const std::string& name, const std::string& script,
                      const std::string& extra) {
    return "  - name: " + name +
           "\n    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
           "    command: [\"sh\", \"-c\", \"" +
           script + "\"]\n" + extra;
  };
  Write("last-words.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: last-words\nspec:\n  hostNetwork: true\n"
        "  restartPolicy: Never\n  containers:\n" +
            container("file", "echo goodbye > /dev/termination-log; exit 1", "") +
            container("custom", "echo custom > /tmp/why; exit 0",
                      "    terminationMessagePath: /tmp/why\n") +
            container("big", "head -c 5000 /dev/zero | tr -c b a > /dev/termination-log; exit 0",
                      "") +
            container("logs", "echo first; echo last words; exit 2",
                      "    terminationMessagePolicy: FallbackToLogsOnError\n") +
            container("quiet", "echo not used; exit 0",
                      "    terminationMessagePolicy: FallbackToLogsOnError\n"));
  StartNodelet(Flags());
  auto messages = [&] {
    std::map<std::string, std::string> out;
    auto p = CtlPod("last-words-node1");
    if (p.is_null() || !p["status"].contains("containerStatuses")) return out;
    for (const auto& c : p["status"]["containerStatuses"]) {
      if (c.contains("state") && c["state"].contains("terminated")) {
        out[c.value("name", "")] = c["state"]["terminated"].value("message", "");
      }
    }
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return messages().size() == 5; }, 40s))
      << CtlPod("last-words-node1").dump(2);
  auto m = messages();
  EXPECT_EQ(m["file"], "goodbye\n");
  EXPECT_EQ(m["custom"], "custom\n");
  // 4 KiB of the file, then the pod's 12 KiB split among its five containers.
  EXPECT_EQ(m["big"], std::string(12 * 1024 / 5, 'a'));
  EXPECT_EQ(m["logs"], "first\nlast words\n");
  EXPECT_EQ(m["quiet"], "") << "the logs are read only for a failed container";
}

}  // namespace
}  // namespace nodelet::testing
