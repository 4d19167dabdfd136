// ImageGc's policy on the fake runtime with a fake clock and a fake filesystem whose free space
// follows the images' sizes: thresholds, least-recently-used order, the minimum age, stopping at
// the low threshold, and images in use, pinned or named by a desired pod never removed.
#include "svc-podworkerd/image_gc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"
#include "tests/fakes/fake_image_fs.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using testing::FakeClock;
using testing::FakeCriRuntime;
using testing::FakeImageFs;
using ::testing::HasSubstr;
namespace v1 = ::runtime::v1;

constexpr uint64_t kMiB = 1024 * 1024;

class ImageGcTest : public ::testing::Test {
 protected:
  ImageGcTest() : fs_(runtime_, 100 * kMiB) {}

  ImageGc Make(ImageGcPolicy policy = {}) {
    return ImageGc(runtime_, runtime_, fs_, clock_, policy);
  }

  // A container made from `image` (its own sandbox), exited when `exited`.
  std::string RunContainer(const std::string& image, bool exited = false) {
    v1::PodSandboxConfig sb;
    sb.mutable_metadata()->set_name("p" + std::to_string(++n_));
    sb.mutable_metadata()->set_uid("uid-" + std::to_string(n_));
    sb.mutable_metadata()->set_namespace_("default");
    auto sandbox = runtime_.RunPodSandbox(sb, "");
    EXPECT_TRUE(sandbox.ok());
    v1::ContainerConfig c;
    c.mutable_metadata()->set_name("app");
    c.mutable_image()->set_image(image);
    auto id = runtime_.CreateContainer(*sandbox, c, sb);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_TRUE(runtime_.StartContainer(*id).ok());
    if (exited) {
      EXPECT_TRUE(runtime_.ExitContainer(*id, 1).ok());
    }
    return *id;
  }

  std::vector<std::string> Tags() {
    std::vector<std::string> out;
    auto list = runtime_.ListImages({});
    if (!list.ok()) return out;
    for (const auto& i : *list) out.push_back(i.repo_tags(0));
    std::sort(out.begin(), out.end());
    return out;
  }

  FakeCriRuntime runtime_;
  FakeClock clock_;
  FakeImageFs fs_;
  int n_ = 0;
};

TEST_F(ImageGcTest, PolicyValidation) {
  EXPECT_TRUE(ValidateImageGcPolicy({}).ok());
  EXPECT_THAT(ValidateImageGcPolicy({101, 80, 0ms}).message(),
              HasSubstr("image-gc-high-threshold"));
  EXPECT_THAT(ValidateImageGcPolicy({85, -1, 0ms}).message(), HasSubstr("image-gc-low-threshold"));
  EXPECT_THAT(ValidateImageGcPolicy({70, 80, 0ms}).message(), HasSubstr("must not exceed"));
}

TEST_F(ImageGcTest, BelowTheHighThresholdNothingIsRemoved) {
  for (int i = 0; i < 8; ++i) runtime_.AddImage("x/img" + std::to_string(i) + ":1", 10 * kMiB);
  clock_.Advance(1h);
  auto gc = Make();
  ImageGcResult r = gc.GarbageCollect();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.usage_percent, 80);
  EXPECT_FALSE(r.over_threshold);
  EXPECT_TRUE(r.removed.empty());
  EXPECT_EQ(Tags().size(), 8u);
  EXPECT_THAT(fs_.paths, ElementsAre("/fake/imagefs"));  // statvfs of ImageFsInfo's mountpoint
}

TEST_F(ImageGcTest, RemovesLeastRecentlyUsedFirstRespectingMinimumAgeInUseAndPinned) {
  ImageGcPolicy policy;
  policy.minimum_age = 2min;
  auto gc = Make(policy);
  runtime_.AddImage("x/a:1", 22 * kMiB);
  runtime_.AddImage("x/b:1", 22 * kMiB);
  runtime_.AddImage("x/c:1", 22 * kMiB);
  runtime_.AddImage("x/pause:1", 22 * kMiB);
  gc.set_pinned_refs({"x/pause:1"});
  // a used first, then b; c stays in use (an exited container still uses its image).
  std::string ca = RunContainer("x/a:1");
  ASSERT_TRUE(gc.DetectImages().ok());
  clock_.Advance(1min);
  ASSERT_TRUE(runtime_.RemoveContainer(ca).ok());
  std::string cb = RunContainer("x/b:1");
  RunContainer("x/c:1", /*exited=*/true);
  ASSERT_TRUE(gc.DetectImages().ok());
  clock_.Advance(1min);
  ASSERT_TRUE(runtime_.RemoveContainer(cb).ok());
  clock_.Advance(5min);

  // 88 % >= 85 %: free down to 80 %, i.e. 8 MiB: one image, the least recently used (a).
  ImageGcResult r = gc.GarbageCollect();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.usage_percent, 88);
  EXPECT_TRUE(r.over_threshold);
  EXPECT_EQ(r.bytes_to_free, 8 * kMiB);
  EXPECT_EQ(r.bytes_freed, 22 * kMiB);
  EXPECT_THAT(Tags(), ElementsAre("x/b:1", "x/c:1", "x/pause:1"));

  // A new image younger than the minimum age is skipped; b (older, unused) goes.
  runtime_.AddImage("x/e:1", 22 * kMiB);
  r = gc.GarbageCollect();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.removed.size(), 1u);
  EXPECT_THAT(Tags(), ElementsAre("x/c:1", "x/e:1", "x/pause:1"));

  // Only young, in-use and pinned images are left: nothing is eligible, and that is an error
  // (the kubelet's FreeDiskSpaceFailed) naming how much was needed.
  clock_.Advance(1s);  // f is seen after e
  runtime_.AddImage("x/f:1", 22 * kMiB);
  r = gc.GarbageCollect();
  EXPECT_EQ(r.status.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status.message(), HasSubstr("Attempted to free 8388608 bytes, but only found 0"));
  EXPECT_TRUE(r.removed.empty());
  EXPECT_THAT(Tags(), ElementsAre("x/c:1", "x/e:1", "x/f:1", "x/pause:1"));

  // Once old enough, e and f may go; c (in use) and pause (pinned) never.
  clock_.Advance(3min);
  r = gc.GarbageCollect();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_THAT(Tags(), ElementsAre("x/c:1", "x/f:1", "x/pause:1"));
  EXPECT_TRUE(gc.records().at(runtime_.AddImage("x/c:1")).in_use);
  EXPECT_TRUE(gc.records().at(runtime_.AddImage("x/pause:1")).pinned);
}

TEST_F(ImageGcTest, StopsOnceUnderTheLowThreshold) {
  auto gc = Make();
  for (int i = 0; i < 10; ++i) {
    runtime_.AddImage("x/img" + std::to_string(i) + ":1", 9 * kMiB);
    ASSERT_TRUE(gc.DetectImages().ok());  // detected one after another
    clock_.Advance(1s);
  }
  clock_.Advance(1h);
  ImageGcResult r = gc.GarbageCollect();
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.usage_percent, 90);
  // 10 MiB to free: two images of 9 MiB, the first detected ones, and no more.
  EXPECT_EQ(r.removed.size(), 2u);
  EXPECT_EQ(Tags().size(), 8u);
  EXPECT_EQ(Tags().front(), "x/img2:1");
  auto again = gc.GarbageCollect();
  EXPECT_EQ(again.usage_percent, 72);
  EXPECT_FALSE(again.over_threshold);
}

TEST_F(ImageGcTest, RuntimePinnedAndDesiredImagesAreNeverRemoved) {
  ImageGcPolicy policy;
  policy.minimum_age = 0ms;
  policy.high_threshold_percent = 50;
  policy.low_threshold_percent = 10;
  auto gc = Make(policy);
  runtime_.AddImage("x/pinned:1", 30 * kMiB);
  ASSERT_TRUE(runtime_.SetImagePinned("x/pinned:1", true).ok());
  runtime_.AddImage("x/wanted:1", 30 * kMiB);
  runtime_.AddImage("x/free:1", 30 * kMiB);
  gc.set_desired_refs({"x/wanted:1"});
  ImageGcResult r = gc.GarbageCollect();
  EXPECT_EQ(r.status.code(), StatusCode::kResourceExhausted);  // 10 % is out of reach
  EXPECT_THAT(Tags(), ElementsAre("x/pinned:1", "x/wanted:1"));
}

TEST_F(ImageGcTest, HighThresholdOf100DisablesAndErrorsAreReported) {
  ImageGcPolicy policy;
  policy.high_threshold_percent = 100;
  policy.minimum_age = 0ms;
  auto gc = Make(policy);
  runtime_.AddImage("x/a:1", 99 * kMiB);
  EXPECT_TRUE(gc.GarbageCollect().removed.empty());

  fs_.fail = true;
  EXPECT_THAT(gc.GarbageCollect().status.message(), HasSubstr("statvfs"));
  fs_.fail = false;
  runtime_.FailCall(testing::CriCall::kImageFsInfo, Unavailable("down"), 1);
  EXPECT_EQ(gc.GarbageCollect().status.code(), StatusCode::kUnavailable);
  runtime_.SetImageFsMountpoint("");
  EXPECT_THAT(gc.GarbageCollect().status.message(), HasSubstr("no image filesystem"));
}

TEST_F(ImageGcTest, FailedRemovalIsReportedAndTheNextImageTried) {
  ImageGcPolicy policy;
  policy.minimum_age = 0ms;
  auto gc = Make(policy);
  runtime_.AddImage("x/a:1", 45 * kMiB);
  ASSERT_TRUE(gc.DetectImages().ok());
  clock_.Advance(1s);
  runtime_.AddImage("x/b:1", 45 * kMiB);
  runtime_.FailCall(testing::CriCall::kRemoveImage, Unavailable("busy"), 1);
  ImageGcResult r = gc.GarbageCollect();
  EXPECT_THAT(r.status.message(), HasSubstr("remove image 'x/a:1'"));
  EXPECT_THAT(Tags(), ElementsAre("x/a:1"));  // a failed, b went instead
}

}  // namespace
}  // namespace nodelet::podworkerd
