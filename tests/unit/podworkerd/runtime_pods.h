// RuntimePods: pods and container instances made directly in the fake runtime, labelled as
// podworkerd labels what it creates, for the podworkerd unit tests (GC, probes): one sandbox per
// pod uid, instances by attempt, and the containers left listed in a compact, sorted form.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "svc-podworkerd/cri_configs.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::testing {

class RuntimePods {
 public:
  RuntimePods(FakeCriRuntime& runtime, std::string image)
      : runtime_(runtime), image_(std::move(image)) {
    runtime_.AddImage(image_);
  }

  // Instances `first_attempt`.. of container `name` in pod `uid` (`count` of them), each started
  // and then exited, except the last one when `last_running`; labelled as podworkerd's unless
  // !managed. Their ids, in attempt order.
  std::vector<std::string> Instances(const std::string& uid, const std::string& name, int count,
                                     bool last_running = false, bool managed = true,
                                     uint32_t first_attempt = 0) {
    std::vector<std::string> ids;
    if (!sandboxes_.count(uid)) {
      runtime::v1::PodSandboxConfig sb;
      sb.mutable_metadata()->set_name("pod-" + uid);
      sb.mutable_metadata()->set_uid(uid);
      sb.mutable_metadata()->set_namespace_("default");
      auto id = runtime_.RunPodSandbox(sb, "");
      if (!id.ok()) {
        ADD_FAILURE() << "RunPodSandbox: " << id.status().ToString();
        return ids;
      }
      sandboxes_[uid] = {*id, sb};
    }
    const auto& [sandbox_id, sb] = sandboxes_[uid];
    for (int i = 0; i < count; ++i) {
      runtime::v1::ContainerConfig c;
      c.mutable_metadata()->set_name(name);
      c.mutable_metadata()->set_attempt(first_attempt + static_cast<uint32_t>(i));
      c.mutable_image()->set_image(image_);
      if (managed) (*c.mutable_labels())[podworkerd::kManagedLabel] = "true";
      (*c.mutable_labels())[podworkerd::kPodUidLabel] = uid;
      (*c.mutable_labels())[podworkerd::kContainerNameLabel] = name;
      auto id = runtime_.CreateContainer(sandbox_id, c, sb);
      if (!id.ok()) {
        ADD_FAILURE() << "CreateContainer: " << id.status().ToString();
        return ids;
      }
      EXPECT_TRUE(runtime_.StartContainer(*id).ok());
      if (!(last_running && i == count - 1)) {
        EXPECT_TRUE(runtime_.ExitContainer(*id, 1).ok());
      }
      ids.push_back(*id);
    }
    return ids;
  }

  // A running instance of container `name` in pod `uid`; its id.
  std::string Running(const std::string& uid, const std::string& name, uint32_t attempt = 0) {
    auto ids = Instances(uid, name, 1, /*last_running=*/true, /*managed=*/true, attempt);
    return ids.empty() ? "" : ids.front();
  }

  // "uid/name/attempt" of every container left, "R" appended to running ones, sorted.
  std::vector<std::string> Left() {
    std::vector<std::string> out;
    auto list = runtime_.ListContainers({});
    if (!list.ok()) return out;
    for (const auto& c : *list) {
      auto uid = c.labels().find(podworkerd::kPodUidLabel);
      out.push_back((uid == c.labels().end() ? "" : uid->second) + "/" + c.metadata().name() + "/" +
                    std::to_string(c.metadata().attempt()) +
                    (c.state() == runtime::v1::CONTAINER_RUNNING ? "R" : ""));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  FakeCriRuntime& runtime_;
  std::string image_;
  std::map<std::string, std::pair<std::string, runtime::v1::PodSandboxConfig>> sandboxes_;
};

}  // namespace nodelet::testing
