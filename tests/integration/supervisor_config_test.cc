// nodelet's flags and config file with the real binaries (the fixture is in
// supervisor_fixture.h): cgroup flags and an unknown --admin-group refused at start naming the
// flag, a rejected manifest shown by `nodeletctl manifests` and sent as a Warning event, SIGHUP
// reloading the config file (what is live applied, the rest named), and a
// KubeletConfiguration as the config file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/integration/supervisor_fixture.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// The cgroup flags are checked at start, by nodelet and by podworkerd alike: a --cgroup-root
// that is not an absolute path of plain components, or with the systemd driver not a slice's
// path, is refused naming the flag (docs/resources.md); podworkerd refuses the systemd driver
// when no systemd answers on the system bus (this machine's PID 1 is not systemd).
TEST_F(SupervisorTest, UnsupportedCgroupFlagsAreStartupErrorsNamingTheFlag) {
  for (const std::string bin : {"nodelet", "nodelet-podworkerd"}) {
    auto driver = RunCommand({BinDir() + "/" + bin, "--root-dir", dir_.Sub("root"), "--run-dir",
                              dir_.Sub("run"), "--cgroup-driver", "upstart"},
                             15s);
    EXPECT_EQ(driver.exit_code, 2) << driver.output;
    EXPECT_THAT(driver.output, HasSubstr("--cgroup-driver"));
    EXPECT_THAT(driver.output, HasSubstr("\"upstart\" is not a cgroup driver (cgroupfs, systemd)"));
    auto root = RunCommand({BinDir() + "/" + bin, "--root-dir", dir_.Sub("root"), "--run-dir",
                            dir_.Sub("run"), "--cgroup-root", "/a/../b"},
                           15s);
    EXPECT_EQ(root.exit_code, 2) << root.output;
    EXPECT_THAT(root.output, HasSubstr("--cgroup-root"));
    auto slice = RunCommand(
        {BinDir() + "/" + bin, "--root-dir", dir_.Sub("root"), "--run-dir", dir_.Sub("run"),
         "--cgroup-driver", "systemd", "--cgroup-root", "/nodelet-test/x"},
        15s);
    EXPECT_NE(slice.exit_code, 0) << slice.output;
    EXPECT_THAT(slice.output,
                HasSubstr("--cgroup-root \"/nodelet-test/x\": with the systemd driver"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.Sub("run"))) << "nothing is made or bound";
  if (!std::filesystem::exists("/run/systemd/system")) {
    auto no_systemd =
        RunCommand({BinDir() + "/nodelet-podworkerd", "--root-dir", dir_.Sub("root"), "--run-dir",
                    dir_.Sub("run-systemd"), "--cgroup-driver", "systemd"},
                   15s);
    EXPECT_NE(no_systemd.exit_code, 0) << no_systemd.output;
    EXPECT_THAT(no_systemd.output,
                HasSubstr("--cgroup-driver systemd needs systemd on the system bus"));
  }
  auto levels = RunCommand({BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir",
                            dir_.Sub("run"), "--enforce-node-allocatable", "pods,system-reserved"},
                           15s);
  EXPECT_EQ(levels.exit_code, 2) << levels.output;
  EXPECT_THAT(levels.output, HasSubstr("\"system-reserved\" is not supported by nodelet yet"));
  auto per_qos = RunCommand({BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir",
                             dir_.Sub("run"), "--cgroups-per-qos=false"},
                            15s);
  EXPECT_NE(per_qos.exit_code, 0) << per_qos.output;
  EXPECT_THAT(per_qos.output, HasSubstr("--enforce-node-allocatable=pods needs --cgroups-per-qos"));
}

TEST_F(SupervisorTest, UnknownAdminGroupIsAStartupErrorNamingTheFlag) {
  auto r = RunCommand(
      {BinDir() + "/nodelet", "--root-dir", dir_.Sub("root"), "--run-dir", dir_.Sub("run"),
       "--log-dir", dir_.Sub("log"), "--admin-group", "no-such-group-for-nodelet"},
      15s);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("nodelet: --admin-group: no group named "
                                  "'no-such-group-for-nodelet'"));
  EXPECT_FALSE(std::filesystem::exists(dir_.Sub("run"))) << "nothing is made or bound";
  // Each service binary refuses it alike (systemd mode gives them the flag themselves).
  auto svc = RunCommand({BinDir() + "/nodelet-statusd", "--root-dir", dir_.Sub("root"), "--run-dir",
                         dir_.Sub("run"), "--admin-group", "no-such-group-for-nodelet"},
                        15s);
  EXPECT_EQ(svc.exit_code, 2) << svc.output;
  EXPECT_THAT(svc.output, HasSubstr("nodelet-statusd: --admin-group: no group named "
                                    "'no-such-group-for-nodelet'"));
}

// A rejected manifest is visible without reading logs. A good manifest and
// one with a bad field in the manifest directory: `nodeletctl manifests` shows the pod of the
// first and the field error of the second (exit 1), and a FailedToParseManifest Warning reaches
// statusd (`nodeletctl events`); a broken file dropped in later gets its own event, and once it
// is fixed every manifest is taken (exit 0).
TEST_F(SupervisorTest, RejectedManifestIsShownByCtlAndSentAsAWarningEvent) {
  const std::string manifests = dir_.Sub("manifests");
  std::filesystem::create_directories(manifests);
  auto pod = [](const std::string& name, const std::string& port) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\nspec:\n  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
           "    ports:\n    - containerPort: " +
           port + "\n";
  };
  { std::ofstream(manifests + "/good.yaml") << pod("good", "8080"); }
  { std::ofstream(manifests + "/bad.yaml") << pod("bad", "0"); }
  Start({"--pod-manifest-path", manifests, "--node-name", "testnode"});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));

  auto listed = Ctl({"manifests"});
  EXPECT_EQ(listed.exit_code, 1) << "a manifest was rejected: exit 1\n" << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("SOURCE"));
  EXPECT_THAT(listed.output, HasSubstr("PODS/REASON"));
  EXPECT_THAT(listed.output,
              ::testing::ContainsRegex("file +" + manifests +
                                       "/good.yaml +Taken +pod default/good-testnode \\(uid "
                                       "[0-9a-f-]+\\) admitted"));
  EXPECT_THAT(listed.output,
              ::testing::ContainsRegex(
                  "file +" + manifests +
                  "/bad.yaml +Rejected +spec\\.containers\\[0\\]\\.ports\\[0\\]\\.containerPort: "
                  "Invalid value: 0: must be between 1 and 65535, inclusive"));
  auto json = nlohmann::json::parse(Ctl({"manifests", "-o", "json"}).output, nullptr, false);
  ASSERT_FALSE(json.is_discarded());
  ASSERT_EQ(json["manifests"].size(), 2u) << json.dump();
  EXPECT_EQ(json["manifests"][0]["status"], "Rejected");
  EXPECT_EQ(json["manifests"][1]["pods"][0]["name"], "good-testnode");
  EXPECT_EQ(json["manifests"][1]["pods"][0]["admission"], "admitted");

  // The event is recorded once statusd is up (the pod manager read the directory before the
  // services started, and retries its events with each housekeeping send, every 2 s).
  auto wait_for_event = [&](const std::string& needle) {
    CommandResult events;
    const auto end = std::chrono::steady_clock::now() + 20s;
    do {
      events = Ctl({"events"});
      if (events.output.find(needle) != std::string::npos) break;
      notify_->Receive(200ms);  // paces the polling; datagrams are not what we wait for
    } while (std::chrono::steady_clock::now() < end);
    return events;
  };
  const std::string bad_event = "Rejected manifest " + manifests +
                                "/bad.yaml: spec.containers[0].ports[0].containerPort: Invalid "
                                "value: 0";
  auto events = wait_for_event(bad_event);
  EXPECT_THAT(events.output, HasSubstr(bad_event));
  EXPECT_THAT(events.output,
              ::testing::ContainsRegex("Warning +FailedToParseManifest +node/testnode"));

  // A file dropped in later that is not YAML at all: seen through inotify, its own event.
  { std::ofstream(manifests + "/broken.yaml") << "kind: Pod\napiVersion: v1\n  bad: [indent\n"; }
  events = wait_for_event(manifests + "/broken.yaml");
  EXPECT_THAT(events.output, HasSubstr("Rejected manifest " + manifests + "/broken.yaml"));
  listed = Ctl({"manifests"});
  EXPECT_THAT(listed.output,
              ::testing::ContainsRegex("file +" + manifests + "/broken.yaml +Rejected +[^\n]+"));

  // Fixed and removed: every manifest taken, exit 0.
  { std::ofstream(manifests + "/bad.yaml") << pod("bad", "8081"); }
  std::filesystem::remove(manifests + "/broken.yaml");
  const auto end = std::chrono::steady_clock::now() + 20s;
  do {
    listed = Ctl({"manifests"});
    if (listed.exit_code == 0) break;
    notify_->Receive(200ms);
  } while (std::chrono::steady_clock::now() < end);
  EXPECT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output,
              ::testing::ContainsRegex("/bad.yaml +Taken +pod default/bad-testnode \\(uid"));
  EXPECT_THAT(listed.output, ::testing::Not(HasSubstr("broken.yaml")));
}

TEST_F(SupervisorTest, SighupReloadsTheConfigFileAppliesWhatIsLiveAndNamesTheRest) {
  const std::string config = dir_.Sub("nodelet.yaml");
  const std::string first = dir_.Sub("manifests-a"), second = dir_.Sub("manifests-b");
  std::filesystem::create_directories(first);
  std::filesystem::create_directories(second);
  auto pod = [](const std::string& name) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\nspec:\n  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n";
  };
  WriteTextFile(first + "/a.yaml", pod("a"));
  WriteTextFile(second + "/b.yaml", pod("b"));
  auto write_config = [&](const std::string& level, const std::string& dir,
                          const std::string& max_pods) {
    WriteTextFile(config, "log-level: " + level + "\nsupervisor:\n  pod-manifest-path: " + dir +
                              "\n  max-pods: " + max_pods +
                              "\n  eviction-hard: memory.available<100Mi\n");
  };
  write_config("info", first, "110");
  Start({"--config", config, "--node-name", "testnode"});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s));
  EXPECT_THAT(Ctl({"manifests"}).output, HasSubstr(first + "/a.yaml"));
  const auto before = Pids();

  // The log level and the manifest directory change live; max-pods needs a restart.
  write_config("debug", second, "5");
  nodelet_->Signal(SIGHUP);
  ASSERT_TRUE(notify_->WaitFor("RELOADING=1", 10s));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 10s));
  std::string log = ReadTextFile(dir_.Sub("nodelet.log"));
  EXPECT_THAT(log, HasSubstr("Reloaded " + config +
                             ": applied log-level, pod-manifest-path; not applied (a restart is "
                             "needed): max-pods"));
  auto listed = Ctl({"manifests"});
  EXPECT_THAT(listed.output, HasSubstr(second + "/b.yaml"));
  EXPECT_THAT(listed.output, ::testing::Not(HasSubstr(first))) << "the old directory's pods go";
  // Each service takes the supervisor's level (its command line holds the old one).
  for (const auto& service : kServices) {
    const std::string path = dir_.Sub("log") + "/" + service + ".log";
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (ReadTextFile(path).find("log level debug, the supervisor's") == std::string::npos &&
           std::chrono::steady_clock::now() < end) {
      notify_->Receive(100ms);  // paces the polling
    }
    EXPECT_THAT(ReadTextFile(path), HasSubstr("Reloaded " + config)) << service;
    EXPECT_THAT(ReadTextFile(path), HasSubstr("log level debug, the supervisor's")) << service;
  }
  EXPECT_EQ(Pids(), before) << "a reload restarts no service";

  // Unchanged again: max-pods is named once more (still not applied), nothing else.
  nodelet_->Signal(SIGHUP);
  ASSERT_TRUE(notify_->WaitFor("RELOADING=1", 10s));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 10s));
  EXPECT_THAT(ReadTextFile(dir_.Sub("nodelet.log")),
              HasSubstr("Reloaded " + config + ": not applied (a restart is needed): max-pods"));

  // A broken file, or an invalid value, is refused whole: nothing changes, nodelet runs on.
  WriteTextFile(config, "log-levle: info\nsupervisor:\n  pod-manifest-path: " + first + "\n");
  nodelet_->Signal(SIGHUP);
  ASSERT_TRUE(notify_->WaitFor("RELOADING=1", 10s));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 10s));
  WriteTextFile(config, "supervisor:\n  pod-manifest-path: " + first +
                            "\n  eviction-hard: memory.available<lots\n");
  nodelet_->Signal(SIGHUP);
  ASSERT_TRUE(notify_->WaitFor("RELOADING=1", 10s));
  ASSERT_TRUE(notify_->WaitFor("READY=1", 10s));
  log = ReadTextFile(dir_.Sub("nodelet.log"));
  EXPECT_THAT(log, ::testing::ContainsRegex("Reload of " + config +
                                            " refused, nothing changed: [^\n]*log-levle"));
  EXPECT_THAT(log, ::testing::ContainsRegex("Reload of " + config +
                                            " refused, nothing changed: [^\n]*eviction-hard"));
  listed = Ctl({"manifests"});
  EXPECT_THAT(listed.output, HasSubstr(second + "/b.yaml"));
  EXPECT_EQ(Ctl({"status"}).exit_code, 0);
  EXPECT_EQ(Pids(), before);
}

TEST_F(SupervisorTest, AKubeletConfigurationAsConfigRunsEveryService) {
  const std::string manifests = dir_.Sub("static");
  std::filesystem::create_directories(manifests);
  WriteTextFile(manifests + "/a.yaml",
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n"
                "  - name: app\n    image: nodelet.local/busybox:1.0\n");
  const std::string config = dir_.Sub("kubelet.yaml");
  WriteTextFile(config,
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                "staticPodPath: " +
                    manifests +
                    "\nmaxPods: 5\nreadOnlyPort: 0\nsyncFrequency: 30s\n"
                    "logging: {verbosity: 4}\nfailSwapOn: false\n");
  Start({"--config", config, "--node-name", "testnode"});
  ASSERT_TRUE(notify_->WaitFor("READY=1", 20s)) << "every service read the kubelet's file";
  for (const auto& service : kServices) EXPECT_GT(Pid(service), 0) << service;
  EXPECT_THAT(Ctl({"manifests"}).output, HasSubstr(manifests + "/a.yaml"));
  EXPECT_THAT(ReadTextFile(dir_.Sub("nodelet.log")), HasSubstr(" debug [ipc] Allowed uid 0"))
      << "logging.verbosity 4 is debug: nodeletctl's connections are logged";

  // A field nodelet does not have stops it at start, naming the file and the field.
  nodelet_->Signal(SIGTERM);
  ASSERT_TRUE(nodelet_->Wait(30s).has_value());
  WriteTextFile(config,
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                "cpuManagerPolicy: static\n");
  Start({"--config", config});
  auto code = nodelet_->Wait(20s);
  ASSERT_TRUE(code.has_value());
  EXPECT_TRUE(WIFEXITED(*code) && WEXITSTATUS(*code) == 2) << *code;
  EXPECT_THAT(ReadTextFile(dir_.Sub("nodelet.log")),
              HasSubstr(config + ": KubeletConfiguration fields nodelet refuses: "
                                 "'cpuManagerPolicy' (nodelet supports only none)"));
}

}  // namespace
}  // namespace nodelet::testing
