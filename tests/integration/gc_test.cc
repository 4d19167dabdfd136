// Garbage collection end to end through the real `nodelet` on a private containerd:
// - image GC: containerd's root is a small tmpfs filled with images of random layers; with a
//   short period and no minimum age, podworkerd removes the unused images until the usage is
//   under the low threshold, and never the image a running pod uses nor the sandbox image;
// - dead containers: crash-looping pods keep no more dead containers than the node-wide maximum.
// Settings come from the YAML config's `podworkerd:` section; results are read from CRI, the
// filesystem and /metrics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "tests/testing/containerd.h"
#include "tests/testing/harness.h"
#include "tests/testing/nodelet_fixture.h"

namespace nodelet::testing {
namespace {

namespace v1 = ::runtime::v1;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kFillers = 5;
constexpr uint64_t kFillerBytes = 4 << 20;
constexpr uint64_t kRootBytes = 80 << 20;
constexpr char kAppImage[] = "nodelet.local/gc-app:1.0";

std::string Sha256Of(const std::string& path) {
  auto r = RunCommand({"/usr/bin/sha256sum", path}, 30s);
  return r.exit_code == 0 ? r.output.substr(0, 64) : "";
}

// An OCI image tarball (as images/build-images writes them) with one uncompressed layer: the
// files of `rootfs`. Returns "" on failure (with a test failure added).
std::string BuildImage(const std::string& work, const std::string& name, const std::string& ref,
                       const std::string& rootfs, const std::string& config_fragment) {
  const std::string layout = work + "/" + name + "-layout";
  const std::string blobs = layout + "/blobs/sha256";
  fs::create_directories(blobs);
  const std::vector<std::string> tar = {"/bin/tar",  "--sort=name",     "--mtime=@0",   "--owner=0",
                                        "--group=0", "--numeric-owner", "--format=gnu", "-C"};
  auto run = [&](std::vector<std::string> argv) {
    auto r = RunCommand(argv, 60s);
    EXPECT_EQ(r.exit_code, 0) << argv[0] << ": " << r.output;
    return r.exit_code == 0;
  };
  // Moves `file` into the blobs under its digest; returns {digest, size}.
  auto blob = [&](const std::string& file) {
    std::string digest = Sha256Of(file);
    uint64_t size = fs::file_size(file);
    fs::rename(file, blobs + "/" + digest);
    return std::make_pair(digest, size);
  };
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  };
  std::vector<std::string> layer_cmd = tar;
  layer_cmd.insert(layer_cmd.end(), {rootfs, "-cf", work + "/" + name + "-layer.tar", "."});
  if (!run(layer_cmd)) return "";
  auto [layer, layer_size] = blob(work + "/" + name + "-layer.tar");
  write(work + "/config.json",
        "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":" + config_fragment +
            ",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:" + layer + "\"]}}");
  auto [config, config_size] = blob(work + "/config.json");
  write(work + "/manifest.json",
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"config\":{\"mediaType\":\"application/"
        "vnd.oci.image.config.v1+json\",\"digest\":\"sha256:" +
            config + "\",\"size\":" + std::to_string(config_size) +
            "},\"layers\":[{\"mediaType\":\"application/"
            "vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:" +
            layer + "\",\"size\":" + std::to_string(layer_size) + "}]}");
  auto [manifest, manifest_size] = blob(work + "/manifest.json");
  write(layout + "/index.json",
        "{\"schemaVersion\":2,\"mediaType\":\"application/"
        "vnd.oci.image.index.v1+json\",\"manifests\":"
        "[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:" +
            manifest + "\",\"size\":" + std::to_string(manifest_size) +
            ",\"annotations\":{\"io.containerd.image.name\":\"" + ref +
            "\",\"org.opencontainers.image.ref.name\":\"1.0\"},\"platform\":{\"architecture\":"
            "\"amd64\","
            "\"os\":\"linux\"}}]}");
  write(layout + "/oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
  std::string out = work + "/" + name + ".tar";
  std::vector<std::string> image_cmd = tar;
  image_cmd.insert(image_cmd.end(), {layout, "-cf", out, "."});
  if (!run(image_cmd)) return "";
  fs::remove_all(layout);
  return out;
}

// `bytes` of random data in DIR/blob (so layers neither compress nor deduplicate).
void RandomFile(const std::string& dir, uint64_t bytes, uint64_t seed) {
  fs::create_directories(dir);
  std::mt19937_64 rng(seed);
  std::ofstream out(dir + "/blob", std::ios::binary);
  std::vector<uint64_t> chunk(8192);
  for (uint64_t done = 0; done < bytes; done += chunk.size() * 8) {
    for (auto& w : chunk) w = rng();
    out.write(reinterpret_cast<const char*>(chunk.data()),
              static_cast<std::streamsize>(std::min<uint64_t>(chunk.size() * 8, bytes - done)));
  }
}

struct Usage {
  uint64_t capacity = 0, available = 0;
  int percent() const { return 100 - static_cast<int>(available * 100 / capacity); }
};
Usage StatFs(const std::string& path) {
  struct statvfs st {};
  if (statvfs(path.c_str(), &st) != 0) return {};
  return {static_cast<uint64_t>(st.f_blocks) * st.f_frsize,
          static_cast<uint64_t>(st.f_bavail) * st.f_frsize};
}

class GcTest : public NodeletTest {
 protected:
  // The metrics line `name value` from /metrics; -1 when absent.
  double Metric(const std::string& name) {
    httplib::Client http("127.0.0.1", port_);
    auto r = http.Get("/metrics");
    if (!r || r->status != 200) return -1;
    std::istringstream in(r->body);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
    }
    return -1;
  }
  // Starts nodelet with a config file holding `podworkerd_yaml` under `podworkerd:`.
  void StartWithConfig(const std::string& podworkerd_yaml) {
    port_ = FreeLoopbackPort();
    std::ofstream(dir_.Sub("config.yaml")) << "podworkerd:\n" << podworkerd_yaml;
    StartNodelet({"--config", dir_.Sub("config.yaml"), "--http-address",
                  "127.0.0.1:" + std::to_string(port_), "--heartbeat-interval", "200"});
  }
  std::vector<v1::Image> Images() {
    auto list = containerd_->cri().ListImages({});
    return list.ok() ? *list : std::vector<v1::Image>{};
  }
  static bool HasTag(const std::vector<v1::Image>& images, const std::string& tag) {
    for (const auto& i : images) {
      for (const auto& t : i.repo_tags()) {
        if (t == tag) return true;
      }
    }
    return false;
  }
  int port_ = 0;
};

class ImageGcTest : public GcTest {
 protected:
  void ConfigureContainerd(ContainerdOptions& opts) override {
    opts.root_tmpfs_bytes = kRootBytes;
    const std::string work = dir_.Sub("images");
    // Unused images: one random layer each.
    for (int i = 0; i < kFillers; ++i) {
      std::string rootfs = work + "/filler" + std::to_string(i);
      RandomFile(rootfs, kFillerBytes, 1000 + i);
      opts.image_tarballs.push_back(
          BuildImage(work, "filler" + std::to_string(i),
                     "nodelet.local/gc-filler" + std::to_string(i) + ":1.0", rootfs, "{}"));
    }
    // The pod's image: busybox and a random layer of the same size.
    std::string rootfs = work + "/app";
    RandomFile(rootfs, kFillerBytes, 7);
    fs::create_directories(rootfs + "/bin");
    fs::copy_file("/bin/busybox", rootfs + "/bin/busybox");
    fs::create_symlink("busybox", rootfs + "/bin/sh");
    fs::create_symlink("busybox", rootfs + "/bin/sleep");
    opts.image_tarballs.push_back(
        BuildImage(work, "app", kAppImage, rootfs,
                   "{\"Env\":[\"PATH=/bin\"],\"Entrypoint\":[\"/bin/sh\"],\"WorkingDir\":\"/\"}"));
  }
};

TEST_F(ImageGcTest, UnusedImagesAreRemovedUntilUnderTheLowThreshold) {
  const std::string root = containerd_->dir() + "/root";
  // The candidates: every image but the pod's and the sandbox's. Their sizes as CRI reports
  // them are what image GC counts as freed.
  auto images = Images();
  ASSERT_TRUE(HasTag(images, kAppImage));
  ASSERT_TRUE(HasTag(images, kPauseImage));
  uint64_t total = 0, smallest = UINT64_MAX;
  int candidates = 0;
  for (const auto& i : images) {
    if (HasTag({i}, kAppImage) || HasTag({i}, kPauseImage)) continue;
    total += i.size();
    smallest = std::min<uint64_t>(smallest, i.size());
    ++candidates;
  }
  ASSERT_EQ(candidates, kFillers + 1);  // the fillers and busybox
  // A low threshold that needs more than all candidates but the smallest: every unused image
  // has to go. Each image takes its size twice on disk (content and snapshot), so once they are
  // gone the usage is well under it.
  Usage before = StatFs(root);
  ASSERT_GT(before.capacity, 0u);
  const uint64_t want_available = before.available + total - smallest / 2;
  const int low =
      100 - static_cast<int>((want_available * 100 + before.capacity - 1) / before.capacity);
  const int high = low + 1;
  ASSERT_GE(before.percent(), high) << "the images do not fill the tmpfs enough";
  std::cerr << "image fs: " << before.percent() << "% used of " << before.capacity
            << " bytes; thresholds " << high << "/" << low << "\n";

  Write("app.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: app\nspec:\n  hostNetwork: true\n"
        "  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: " +
            std::string(kAppImage) +
            "\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; "
            "while true; do sleep 0.2; done\"]\n");
  StartWithConfig("  image-gc-high-threshold: " + std::to_string(high) +
                  "\n  image-gc-low-threshold: " + std::to_string(low) +
                  "\n  image-minimum-gc-age: 0s\n  image-gc-period: 1s\n");

  // The unused images go; the pod's runs all along.
  bool gone = false;
  auto deadline = std::chrono::steady_clock::now() + 90s;
  while (!gone && std::chrono::steady_clock::now() < deadline) {
    images = Images();
    gone = images.size() == 2;
    if (!gone) notify_->Receive(500ms);
  }
  ASSERT_TRUE(gone) << images.size() << " images left";
  EXPECT_TRUE(HasTag(images, kAppImage));
  EXPECT_TRUE(HasTag(images, kPauseImage));
  // The pod's image stayed, so its container runs (GC can finish before the first start, which
  // also makes the pod's cgroup: waited for, with a deadline).
  bool running = false;
  deadline = std::chrono::steady_clock::now() + 30s;
  while (!running && std::chrono::steady_clock::now() < deadline) {
    auto containers = containerd_->cri().ListContainers({});
    ASSERT_TRUE(containers.ok());
    for (const auto& c : *containers) running = running || c.state() == v1::CONTAINER_RUNNING;
    if (!running) notify_->Receive(200ms);
  }
  EXPECT_TRUE(running);

  Usage after = StatFs(root);
  EXPECT_LT(after.percent(), low);
  // On /metrics (heartbeats every 200 ms).
  double removed = -1;
  deadline = std::chrono::steady_clock::now() + 10s;
  while ((removed = Metric("kubelet_image_garbage_collected_total")) < candidates &&
         std::chrono::steady_clock::now() < deadline) {
    notify_->Receive(200ms);
  }
  EXPECT_EQ(removed, candidates);
  EXPECT_GE(Metric("nodelet_image_gc_freed_bytes_total"), static_cast<double>(total));
  EXPECT_GE(Metric("nodelet_image_gc_runs_total"), 1);
  EXPECT_EQ(Metric("nodelet_image_fs_capacity_bytes"), static_cast<double>(before.capacity));
}

TEST_F(GcTest, DeadContainersBeyondTheNodeWideMaximumAreRemoved) {
  for (const char* name : {"crash1", "crash2"}) {
    Write(std::string(name) + ".yaml",
          "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + std::string(name) +
              "\nspec:\n  hostNetwork: true\n  containers:\n  - name: app\n"
              "    image: nodelet.local/busybox:1.0\n    imagePullPolicy: Never\n"
              "    command: [\"sh\", \"-c\", \"exit 1\"]\n");
  }
  // Up to 5 dead instances per container, but at most 2 dead containers on the node.
  StartWithConfig(
      "  maximum-dead-containers-per-container: 5\n  maximum-dead-containers: 2\n"
      "  container-gc-period: 500ms\n  crashloop-initial: 500ms\n  crashloop-max: 1s\n");
  auto count = [&](int& dead, uint32_t& min_attempt) {
    dead = 0;
    std::map<std::string, uint32_t> latest;
    auto list = containerd_->cri().ListContainers({});
    if (!list.ok()) return;
    for (const auto& c : *list) {
      if (c.state() == v1::CONTAINER_EXITED) ++dead;
      auto& a = latest[c.labels().at("io.kubernetes.pod.uid")];
      a = std::max(a, c.metadata().attempt());
    }
    min_attempt = latest.size() == 2 ? UINT32_MAX : 0;
    for (const auto& [uid, a] : latest) min_attempt = std::min(min_attempt, a);
  };
  // Both pods crash at least 5 times (10 dead containers without the node-wide cap); at a GC
  // pass the dead ones are cut to 2: one per container, the newest (the container's state).
  int dead = 0;
  uint32_t min_attempt = 0;
  int max_dead_seen = 0;
  auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    count(dead, min_attempt);
    if (min_attempt >= 5 && dead <= 2) break;
    max_dead_seen = std::max(max_dead_seen, dead);
    notify_->Receive(200ms);
  }
  EXPECT_GE(min_attempt, 5u);
  EXPECT_LE(dead, 2);
  std::cerr << "most dead containers seen between GC passes: " << max_dead_seen << "\n";
  double collected = -1;
  deadline = std::chrono::steady_clock::now() + 10s;
  while ((collected = Metric("kubelet_garbage_collected_containers_total")) < 8 &&
         std::chrono::steady_clock::now() < deadline) {
    notify_->Receive(200ms);
  }
  // 2 x (at least 6 instances - 1 kept).
  EXPECT_GE(collected, 8);
  EXPECT_GE(Metric("nodelet_container_gc_runs_total"), 1);
}

}  // namespace
}  // namespace nodelet::testing
