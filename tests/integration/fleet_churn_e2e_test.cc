// fleet-e2e's churn: 45 pods across three nodes on a real 3-member etcd cluster, changed in
// bursts while the soak's faults strike, checked as the chaos soak checks a node (the fixture is
// in fleet_e2e_fixture.h).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/integration/fleet_e2e_fixture.h"
#include "tests/testing/harness.h"

namespace nodelet::testing {
namespace {

using namespace std::chrono_literals;

// A pod of the churn test: host network (no IP to hand out 45 times), a shell that sleeps
// until SIGTERM without waking; `gen` is in its command (an edit there replaces the container),
// `label` in its labels (an edit there must not).
std::string ChurnPodYaml(const std::string& name, int gen, int label) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  labels: {churn: \"" +
         std::to_string(label) +
         "\"}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 2\n"
         "  containers:\n  - name: app\n    image: nodelet.local/busybox:1.0\n"
         "    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; echo " +
         std::to_string(gen) + "; sleep 3600 & wait\"]\n";
}

// 45 pods across the three nodes (what more pods cost is measured by `./dev bench`, not here),
// then rounds of churn written in bursts (adds, deletes, moves between nodes, edits that replace a
// container and label edits that must not), each round with one of the soak's faults (the etcd
// leader killed, a node's podworkerd and statusd SIGKILLed, a node's nodelet restarted while its
// pods change); checked as the chaos soak checks a node (docs/chaos.md): every desired pod runs on
// its node exactly once with the right container, nothing undesired runs anywhere, no container
// that should have kept running was replaced, and no status's version ever went backwards
// (statusd's version, the status's resourceVersion, sampled all along); the pods' cgroups and
// mounts go with the test (TearDown).
TEST_F(FleetE2eTest, PodsAcrossThreeNodesWithChurnKeepTheSoaksPromises) {
  const std::vector<std::string> names = {"node-a", "node-b", "node-c"};
  for (const auto& n : names) AddNode(n);
  for (auto& n : nodes_) ASSERT_TRUE(StartNodelet(*n));

  struct Desired {
    std::string node;
    int gen = 0;
    int label = 0;
  };
  std::map<std::string, Desired> desired;  // pod name -> where and what
  int next_pod = 0;
  auto put = [&](const std::string& name) {
    const Desired& d = desired[name];
    return etcd_->Put(keys_.Pod(d.node, "default", name), ChurnPodYaml(name, d.gen, d.label)).ok();
  };
  for (; next_pod < 45; ++next_pod) {
    const std::string name = "p" + std::to_string(next_pod);
    desired[name] = {names[next_pod % 3], 0, 0};
    ASSERT_TRUE(put(name)) << name;
  }

  // The status sampler: every status key, its pod's UID and version, read all along.
  std::atomic<bool> stop_sampling{false};
  std::atomic<int> samples{0};
  std::mutex violations_mu;
  std::vector<std::string> violations;
  std::thread sampler([&] {
    std::map<std::string, std::pair<std::string, int64_t>> last;  // key -> (uid, version)
    while (!stop_sampling.load()) {
      auto all = etcd_->GetPrefix(keys_.Statuses());
      if (all.ok()) {
        ++samples;
        for (const auto& kv : all->kvs) {
          auto doc = nlohmann::json::parse(kv.value, nullptr, false);
          if (!doc.is_object() || !doc.contains("metadata")) continue;
          const std::string uid = doc["metadata"].value("uid", "");
          const int64_t version =
              std::stoll(doc["metadata"].value("resourceVersion", std::string("0")));
          auto it = last.find(kv.key);
          if (it != last.end() && it->second.first == uid && version < it->second.second) {
            std::lock_guard<std::mutex> lock(violations_mu);
            violations.push_back(kv.key + ": version " + std::to_string(version) + " after " +
                                 std::to_string(it->second.second));
          }
          last[kv.key] = {uid, version};
        }
      }
      std::this_thread::sleep_for(300ms);  // the sampling pace, not a wait for an event
    }
  });
  // Stops and joins the sampler on every way out of the test: a failed ASSERT returns early, and
  // a joinable thread's destructor would abort the whole suite (and skip every clean-up).
  struct SamplerStop {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~SamplerStop() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } sampler_stop{stop_sampling, sampler};

  // The running containers of each pod on each node, from the runtimes (CRI labels).
  auto running = [&] {
    std::map<std::string, std::map<std::string, std::vector<std::string>>> out;  // node->pod->ids
    for (const auto& n : nodes_) {
      auto list = n->containerd->cri().ListContainers({});
      if (!list.ok()) continue;
      for (const auto& c : *list) {
        if (c.state() != ::runtime::v1::CONTAINER_RUNNING) continue;
        auto pod = c.labels().find("io.kubernetes.pod.name");
        if (pod != c.labels().end()) out[n->name][pod->second].push_back(c.id());
      }
    }
    return out;
  };
  // Converged: each desired pod runs once on its node with a Running status there, and nothing
  // else runs anywhere; `why` says what is not yet so.
  std::string why;
  auto converged = [&](std::map<std::string, std::map<std::string, std::vector<std::string>>>* r) {
    *r = running();
    for (const auto& [name, d] : desired) {
      auto& on = (*r)[d.node];
      if (on[name].size() != 1) {
        why = name + " has " + std::to_string(on[name].size()) + " running containers on " + d.node;
        return false;
      }
    }
    for (const auto& [node, pods] : *r) {
      for (const auto& [name, ids] : pods) {
        if (ids.empty()) continue;
        auto it = desired.find(name);
        if (it == desired.end() || it->second.node != node) {
          why = name + " still runs on " + node;
          return false;
        }
      }
    }
    auto statuses = etcd_->GetPrefix(keys_.Statuses());
    if (!statuses.ok()) {
      why = statuses.status().ToString();
      return false;
    }
    std::map<std::string, std::string> phase;  // status key -> phase
    for (const auto& kv : statuses->kvs) {
      auto doc = nlohmann::json::parse(kv.value, nullptr, false);
      phase[kv.key] = doc.is_object() && doc.contains("status") ? doc["status"].value("phase", "")
                                                                : std::string("?");
    }
    for (const auto& [name, d] : desired) {
      const std::string key = keys_.Status(d.node, "default", name);
      if (phase[key] != "Running") {
        why = key + " is \"" + phase[key] + "\"";
        return false;
      }
    }
    for (const auto& [key, p] : phase) {
      const std::string name = key.substr(key.rfind('/') + 1);
      const std::string node =
          key.substr(keys_.Statuses().size(),
                     key.find('/', keys_.Statuses().size()) - keys_.Statuses().size());
      auto it = desired.find(name);
      if ((it == desired.end() || it->second.node != node) && !p.empty()) {
        why = "status " + key + " of a pod not desired there";
        return false;
      }
    }
    return true;
  };

  std::map<std::string, std::map<std::string, std::vector<std::string>>> before;
  ASSERT_TRUE(Eventually([&] { return converged(&before); }, 300s)) << why;

  std::mt19937 rng(20261127);
  auto pick = [&](std::set<std::string>& taken) {
    for (;;) {
      auto it = desired.begin();
      std::advance(it, std::uniform_int_distribution<size_t>(0, desired.size() - 1)(rng));
      if (taken.insert(it->first).second) return it->first;
    }
  };
  std::set<std::string> replaced;  // their container must have changed (edited, moved, new)
  int adds = 0, deletes = 0, moves = 0, edits = 0, relabels = 0;
  // The soak's faults, one per round: an etcd member (the leader) killed; node-b's podworkerd
  // and statusd SIGKILLed (its supervisor starts them again); node-c's nodelet SIGTERMed with
  // its services and started again (its pods keep running, as the kubelet's do).
  // The service's pid once it runs: on a loaded machine (the suites run side by side, under
  // ASan) it may be between a restart and its READY when asked.
  auto service_pid = [&](FleetNode& n, const std::string& service) {
    pid_t pid = 0;
    Eventually(
        [&] {
          auto r = RunCommand(
              {BinDir() + "/nodeletctl", "--run-dir", n.dir + "/run", "pid", service}, 10s);
          pid = r.exit_code == 0 ? static_cast<pid_t>(std::atoi(r.output.c_str())) : 0;
          return pid > 0;
        },
        60s);
    return pid;
  };
  for (int round = 0; round < 3; ++round) {
    if (round == 0) {
      auto leader = cluster_->Leader();
      ASSERT_TRUE(leader.ok());
      ASSERT_TRUE(cluster_->Kill(*leader).ok());
    } else if (round == 1) {
      for (const char* service : {"podworkerd", "statusd"}) {
        const pid_t pid = service_pid(*nodes_[1], service);
        ASSERT_GT(pid, 0) << service;
        ASSERT_EQ(kill(pid, SIGKILL), 0) << service;
      }
    } else {
      StopNodelet(*nodes_[2]);
    }
    std::set<std::string> taken;
    std::vector<std::pair<std::string, std::string>> writes;  // key -> value ("" deletes)
    for (int i = 0; i < 4; ++i) {
      const std::string name = pick(taken);
      writes.push_back({keys_.Pod(desired[name].node, "default", name), ""});
      desired.erase(name);
      replaced.erase(name);
      ++deletes;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string name = pick(taken);
      Desired& d = desired[name];
      writes.push_back({keys_.Pod(d.node, "default", name), ""});
      d.node = names[(std::find(names.begin(), names.end(), d.node) - names.begin() + 1) % 3];
      writes.push_back({keys_.Pod(d.node, "default", name), ChurnPodYaml(name, d.gen, d.label)});
      replaced.insert(name);
      ++moves;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string name = pick(taken);
      Desired& d = desired[name];
      ++d.gen;
      writes.push_back({keys_.Pod(d.node, "default", name), ChurnPodYaml(name, d.gen, d.label)});
      replaced.insert(name);
      ++edits;
    }
    for (int i = 0; i < 3; ++i) {
      const std::string name = pick(taken);
      Desired& d = desired[name];
      ++d.label;
      writes.push_back({keys_.Pod(d.node, "default", name), ChurnPodYaml(name, d.gen, d.label)});
      ++relabels;
    }
    for (int i = 0; i < 4; ++i, ++next_pod) {
      const std::string name = "p" + std::to_string(next_pod);
      desired[name] = {names[next_pod % 3], 0, 0};
      writes.push_back({keys_.Pod(desired[name].node, "default", name), ChurnPodYaml(name, 0, 0)});
      replaced.insert(name);
      ++adds;
    }
    // As an operator's script would: each write retried while the cluster elects a leader.
    for (const auto& [key, value] : writes) {
      ASSERT_TRUE(Eventually(
          [&, &key = key, &value = value] {
            return value.empty() ? etcd_->Delete(key).ok() : etcd_->Put(key, value).ok();
          },
          30s))
          << key;
    }
    if (round == 2) {
      ASSERT_TRUE(StartNodelet(*nodes_[2]));
    }
    // A round's burst lands while the previous one may still be settling: no wait between.
  }

  std::map<std::string, std::map<std::string, std::vector<std::string>>> after;
  EXPECT_TRUE(Eventually([&] { return converged(&after); }, 300s)) << why;
  stop_sampling = true;
  sampler.join();

  // No container that should have kept running was replaced; every replaced one was.
  int kept = 0;
  for (const auto& [name, d] : desired) {
    auto was = before[d.node].find(name);
    const bool existed = was != before[d.node].end() && !was->second.empty();
    if (replaced.count(name) == 0) {
      ASSERT_TRUE(existed) << name;
      EXPECT_EQ(after[d.node][name], was->second) << name << " was restarted";
      ++kept;
    } else if (existed) {
      EXPECT_NE(after[d.node][name], was->second) << name << " was not replaced";
    }
  }
  EXPECT_GE(kept, 10);  // the check above was not vacuous
  EXPECT_GT(samples.load(), 10);
  {
    std::lock_guard<std::mutex> lock(violations_mu);
    EXPECT_TRUE(violations.empty()) << violations.size() << " status versions went backwards, "
                                    << "first: " << violations.front();
  }
  std::cerr << "[fleet churn] " << desired.size() << " pods desired at the end; " << adds
            << " adds, " << deletes << " deletes, " << moves << " moves, " << edits
            << " container edits, " << relabels << " label edits; " << kept << " containers kept; "
            << samples.load() << " status samples\n";
}

}  // namespace
}  // namespace nodelet::testing
