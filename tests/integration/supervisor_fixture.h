// SupervisorTest, the fixture of the supervisor-integration suite (supervisor_test.cc,
// supervisor_hostile_test.cc, supervisor_config_test.cc): `nodelet` with the real binaries, each
// test with its own directories and a NOTIFY_SOCKET bound here, so the sd_notify datagrams are
// the real ones; nodeletctl run as root or as nobody, and the services' pids from
// `nodeletctl pid`. No containerd: plegd points at a socket that does not exist (it reports
// failing health, which the grace period given here tolerates).
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/harness.h"

namespace nodelet::testing {

// The fixture's timeouts are written with these, as the tests' are.
using namespace std::chrono_literals;

inline const std::vector<std::string> kServices = {"plegd", "statusd", "volumed", "podworkerd"};

class SupervisorTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}, std::map<std::string, std::string> env = {}) {
    notify_ = std::make_unique<NotifyListener>(dir_.Sub("notify.sock"));
    env["NOTIFY_SOCKET"] = notify_->path();
    std::vector<std::string> argv = {BinDir() + "/nodelet",
                                     "--root-dir",
                                     dir_.Sub("root"),
                                     "--run-dir",
                                     dir_.Sub("run"),
                                     "--log-dir",
                                     dir_.Sub("log"),
                                     "--runtime-endpoint",
                                     "unix://" + runtime_socket_,
                                     "--failing-grace",
                                     "1h",
                                     "--cgroup-root",
                                     TestCgroupRoot(dir_.path())};
    argv.insert(argv.end(), extra.begin(), extra.end());
    nodelet_ = std::make_unique<Subprocess>(argv, env, dir_.Sub("nodelet.log"));
  }
  void TearDown() override {
    if (HasFailure()) {
      std::ifstream in(dir_.Sub("nodelet.log"));
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::cerr << "---- nodelet.log\n"
                << (text.size() > 5000 ? text.substr(text.size() - 5000) : text);
    }
  }
  CommandResult Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/nodeletctl", "--run-dir", dir_.Sub("run")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, 10s);
  }
  // nodeletctl as uid and gid 65534 (nobody) with these supplementary groups (setpriv).
  CommandResult CtlAsNobody(std::vector<gid_t> groups, std::vector<std::string> args) {
    std::string groups_flag = "--clear-groups";
    if (!groups.empty()) {
      groups_flag = "--groups=";
      for (size_t i = 0; i < groups.size(); ++i) {
        groups_flag += (i ? "," : "") + std::to_string(groups[i]);
      }
    }
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534",          "--regid=65534",
                                     groups_flag,        BinDir() + "/nodeletctl", "--run-dir",
                                     dir_.Sub("run")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, 15s);
  }
  pid_t Pid(const std::string& service) {
    auto r = Ctl({"pid", service});
    return r.exit_code == 0 ? static_cast<pid_t>(std::atoi(r.output.c_str())) : 0;
  }
  std::map<std::string, pid_t> Pids() {
    std::map<std::string, pid_t> out;
    for (const auto& s : kServices) out[s] = Pid(s);
    return out;
  }

  TempDir dir_;
  std::string runtime_socket_ = dir_.Sub("no-runtime.sock");
  std::unique_ptr<NotifyListener> notify_;
  std::unique_ptr<Subprocess> nodelet_;
};

}  // namespace nodelet::testing
