// ImagePuller on the fake runtime: pull policies, the per-image back-off, the kubelet's events,
// and how many PullImage calls run at once (serialized, limited, unlimited, shared per image).
#include "svc-podworkerd/image_puller.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <thread>
#include <vector>

#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::podworkerd {
namespace {

using namespace std::chrono_literals;
using testing::CriCall;
using testing::FakeClock;
using testing::FakeCriRuntime;
using ::testing::HasSubstr;

std::vector<std::string> Reasons(const EnsureImageResult& r) {
  std::vector<std::string> out;
  for (const auto& e : r.events) out.push_back(e.reason);
  return out;
}

// Runs EnsureImage calls on threads; on destruction releases every hung call first, so a test
// that fails midway never leaves a thread blocked.
class Pulls {
 public:
  // At most `max` calls (the results never move while threads write them).
  Pulls(FakeCriRuntime& runtime, ImagePuller& puller, size_t max)
      : runtime_(runtime), puller_(puller) {
    results_.reserve(max);
  }
  ~Pulls() {
    runtime_.ReleaseHangs();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  void Start(const std::string& image, PullOptions options = {}) {
    ASSERT_LT(results_.size(), results_.capacity());
    results_.emplace_back();
    size_t i = results_.size() - 1;
    threads_.emplace_back(
        [this, image, i, options] { results_[i] = puller_.EnsureImage(image, "Always", options); });
  }
  // Waits for the call started `i`-th (the others go on).
  EnsureImageResult Join(size_t i) {
    threads_[i].join();
    threads_[i] = std::thread();
    return results_[i];
  }
  // Releases the hangs and waits for every call; returns the results in start order.
  std::vector<EnsureImageResult> Finish() {
    runtime_.ReleaseHangs();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
    return results_;
  }

 private:
  FakeCriRuntime& runtime_;
  ImagePuller& puller_;
  std::vector<std::thread> threads_;
  std::vector<EnsureImageResult> results_;
};

class ImagePullerTest : public ::testing::Test {
 protected:
  FakeCriRuntime runtime_;
  FakeClock clock_;
};

TEST_F(ImagePullerTest, IfNotPresentPullsOnlyWhenAbsent) {
  ImagePuller puller(runtime_, clock_);
  runtime_.AddImage("reg.local/present:1");
  auto present = puller.EnsureImage("reg.local/present:1", "IfNotPresent");
  ASSERT_TRUE(present.status.ok());
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 0);
  ASSERT_EQ(present.events.size(), 1u);
  EXPECT_EQ(present.events[0].reason, "Pulled");
  EXPECT_EQ(present.events[0].message,
            "Container image \"reg.local/present:1\" already present on machine");

  auto absent = puller.EnsureImage("reg.local/absent:1", "IfNotPresent");
  ASSERT_TRUE(absent.status.ok()) << absent.status.ToString();
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
  EXPECT_THAT(Reasons(absent), ::testing::ElementsAre("Pulling", "Pulled"));
  EXPECT_EQ(absent.events[0].message, "Pulling image \"reg.local/absent:1\"");
  EXPECT_THAT(absent.events[1].message,
              HasSubstr("Successfully pulled image \"reg.local/absent:1\" in "));
  // Now it is there: no second pull.
  ASSERT_TRUE(puller.EnsureImage("reg.local/absent:1", "IfNotPresent").status.ok());
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
}

TEST_F(ImagePullerTest, AlwaysPullsEveryTime) {
  ImagePuller puller(runtime_, clock_);
  runtime_.AddImage("reg.local/app:1");
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(puller.EnsureImage("reg.local/app:1", "Always").status.ok());
    EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), i);
  }
  // Never asked whether it is there; asked once after each pull, for its size (the pull
  // duration's label).
  EXPECT_EQ(runtime_.CallCount(CriCall::kImageStatus), 3);
}

TEST_F(ImagePullerTest, PullDurationsAreKeptByTheKubeletsImageSizeBuckets) {
  EXPECT_EQ(ImageSizeBucket(0), "N/A");
  EXPECT_EQ(ImageSizeBucket(1), "0-10MB");
  EXPECT_EQ(ImageSizeBucket(10ull << 20), "0-10MB");
  EXPECT_EQ(ImageSizeBucket((10ull << 20) + 1), "10MB-100MB");
  EXPECT_EQ(ImageSizeBucket(3ull << 30), "1GB-5GB");
  EXPECT_EQ(ImageSizeBucket(200ull << 30), "GT100GB");

  ImagePuller puller(runtime_, clock_);
  runtime_.AddImage("reg.local/big:1", 20ull << 20);
  ASSERT_TRUE(puller.EnsureImage("reg.local/big:1", "Always").status.ok());
  ASSERT_TRUE(puller.EnsureImage("reg.local/big:1", "Always").status.ok());
  runtime_.FailCall(CriCall::kPullImage, Unavailable("registry down"), 1);
  EXPECT_FALSE(puller.EnsureImage("reg.local/big:1", "Always").status.ok());
  std::vector<std::pair<std::string, uint64_t>> counters;
  puller.ExportPullDurations(counters);
  std::map<std::string, uint64_t> by_name(counters.begin(), counters.end());
  EXPECT_EQ(by_name["image_pull_duration_seconds@10MB-100MB_count"], 2u)
      << "two pulls that worked; the failed one is not a duration";
  EXPECT_EQ(by_name["image_pull_duration_seconds@10MB-100MB_bucket:1"], 2u);
  EXPECT_EQ(by_name.count("image_pull_duration_seconds@0-10MB_count"), 0u);
}

TEST_F(ImagePullerTest, NeverWithAnAbsentImageIsErrImageNeverPull) {
  ImagePuller puller(runtime_, clock_);
  auto r = puller.EnsureImage("reg.local/absent:1", "Never");
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(r.reason, "ErrImageNeverPull");
  EXPECT_EQ(r.message,
            "Container image \"reg.local/absent:1\" is not present with pull policy of Never");
  EXPECT_THAT(Reasons(r), ::testing::ElementsAre("ErrImageNeverPull", "Failed"));
  EXPECT_FALSE(r.retry_at.has_value());
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 0);

  runtime_.AddImage("reg.local/absent:1");
  EXPECT_TRUE(puller.EnsureImage("reg.local/absent:1", "Never").status.ok());
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 0);
}

TEST_F(ImagePullerTest, InspectErrorIsErrImageInspect) {
  ImagePuller puller(runtime_, clock_);
  runtime_.FailCall(CriCall::kImageStatus, Unavailable("runtime away"), 1);
  auto r = puller.EnsureImage("reg.local/a:1", "IfNotPresent");
  EXPECT_EQ(r.reason, "ErrImageInspect");
  EXPECT_THAT(r.message, HasSubstr("runtime away"));
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 0);
}

TEST_F(ImagePullerTest, FailedPullsBackOffPerImageDoublingToTheMax) {
  ImagePullerConfig config;
  config.backoff_initial = 1s;
  config.backoff_max = 4s;
  ImagePuller puller(runtime_, clock_, config);
  runtime_.FailCall(CriCall::kPullImage, Unavailable("dial tcp 127.0.0.1:5000: connection refused"),
                    -1, "reg.local/down:1");

  auto first = puller.EnsureImage("reg.local/down:1", "IfNotPresent");
  EXPECT_EQ(first.reason, "ErrImagePull");
  EXPECT_THAT(first.message, HasSubstr("connection refused"));
  EXPECT_THAT(Reasons(first), ::testing::ElementsAre("Pulling", "Failed", "Failed"));
  EXPECT_THAT(first.events[1].message, HasSubstr("Failed to pull image \"reg.local/down:1\": "));
  EXPECT_EQ(first.events[2].message, "Error: ErrImagePull");
  ASSERT_TRUE(first.retry_at.has_value());
  EXPECT_EQ(*first.retry_at, clock_.Now() + 1s);

  // Delays 1 s, 2 s, 4 s, 4 s: within each, no pull and ImagePullBackOff.
  int pulls = 1;
  for (auto delay : {1s, 2s, 4s, 4s}) {
    clock_.Advance(delay - 1ms);
    auto waiting = puller.EnsureImage("reg.local/down:1", "IfNotPresent");
    EXPECT_EQ(waiting.reason, "ImagePullBackOff") << "delay " << delay.count();
    EXPECT_EQ(waiting.message, "Back-off pulling image \"reg.local/down:1\"");
    EXPECT_THAT(Reasons(waiting), ::testing::ElementsAre("BackOff", "Failed"));
    EXPECT_EQ(*waiting.retry_at, clock_.Now() + 1ms);
    EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), pulls);
    clock_.Advance(1ms);
    auto again = puller.EnsureImage("reg.local/down:1", "IfNotPresent");
    EXPECT_EQ(again.reason, "ErrImagePull");
    EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), ++pulls);
  }

  // Another image is not held back by this one's failures.
  EXPECT_TRUE(puller.EnsureImage("reg.local/up:1", "IfNotPresent").status.ok());

  // The registry is back: the next pull after the back-off works and clears it, so a later
  // failure starts again at the initial delay.
  runtime_.ClearFailures();
  clock_.Advance(4s);
  auto ok = puller.EnsureImage("reg.local/down:1", "Always");
  EXPECT_TRUE(ok.status.ok()) << ok.status.ToString();
  EXPECT_THAT(Reasons(ok), ::testing::ElementsAre("Pulling", "Pulled"));
  runtime_.FailCall(CriCall::kPullImage, Unavailable("refused"), 1);
  auto fails = puller.EnsureImage("reg.local/down:1", "Always");
  ASSERT_TRUE(fails.retry_at.has_value());
  EXPECT_EQ(*fails.retry_at, clock_.Now() + 1s);
}

TEST_F(ImagePullerTest, SerializedPullsRunOneAtATime) {
  ImagePuller puller(runtime_, clock_);  // serialize = true by default
  ASSERT_TRUE(puller.config().serialize);
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/false);
  Pulls pulls(runtime_, puller, 2);
  pulls.Start("reg.local/a:1");
  ASSERT_TRUE(runtime_.WaitForHungCalls(1, 5s));
  pulls.Start("reg.local/b:1");
  // The second waits for its turn: it never reached the runtime.
  ASSERT_TRUE(puller.WaitForQueued(1, 5s));
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
  EXPECT_EQ(puller.running(), 1);
  auto results = pulls.Finish();
  for (const auto& r : results) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 2);
  EXPECT_EQ(puller.max_running_seen(), 1);
}

TEST_F(ImagePullerTest, ParallelPullsRunUpToTheLimit) {
  ImagePullerConfig config;
  config.serialize = false;
  config.max_parallel = 2;
  ImagePuller puller(runtime_, clock_, config);
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/false);
  Pulls pulls(runtime_, puller, 3);
  for (const char* image : {"reg.local/a:1", "reg.local/b:1", "reg.local/c:1"}) pulls.Start(image);
  // Two run at once; the third waits for a turn.
  ASSERT_TRUE(runtime_.WaitForHungCalls(2, 5s));
  ASSERT_TRUE(puller.WaitForQueued(1, 5s));
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 2);
  EXPECT_EQ(puller.running(), 2);
  auto results = pulls.Finish();
  for (const auto& r : results) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 3);
  EXPECT_EQ(puller.max_running_seen(), 2);
}

TEST_F(ImagePullerTest, UnlimitedParallelPullsAllRunAtOnce) {
  ImagePullerConfig config;
  config.serialize = false;
  ImagePuller puller(runtime_, clock_, config);
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/false);
  Pulls pulls(runtime_, puller, 4);
  for (const char* image : {"reg.local/a:1", "reg.local/b:1", "reg.local/c:1", "reg.local/d:1"}) {
    pulls.Start(image);
  }
  ASSERT_TRUE(runtime_.WaitForHungCalls(4, 5s));
  EXPECT_EQ(puller.running(), 4);
  EXPECT_EQ(puller.queued(), 0);
  pulls.Finish();
  EXPECT_EQ(puller.max_running_seen(), 4);
}

TEST_F(ImagePullerTest, ConcurrentRequestsForOneImageShareOnePull) {
  ImagePullerConfig config;
  config.serialize = false;
  ImagePuller puller(runtime_, clock_, config);
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/false);
  Pulls pulls(runtime_, puller, 3);
  for (int i = 0; i < 3; ++i) pulls.Start("reg.local/same:1");
  ASSERT_TRUE(runtime_.WaitForHungCalls(1, 5s));
  ASSERT_TRUE(puller.WaitForQueued(2, 5s));  // both others wait on the first one's pull
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
  auto results = pulls.Finish();
  for (const auto& r : results) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
}

TEST_F(ImagePullerTest, RequestsWithOtherPodCredentialsDoNotShareAPull) {
  ImagePullerConfig config;
  config.serialize = false;
  ImagePuller puller(runtime_, clock_, config);
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/false);
  PullOptions team;
  team.pod_credentials = {{"reg.local", "team", "pw", "", ""}};
  Pulls pulls(runtime_, puller, 3);
  pulls.Start("reg.local/same:1");
  pulls.Start("reg.local/same:1", team);
  pulls.Start("reg.local/same:1", team);
  // Two PullImage calls: one without credentials, one with the pod's, which the third shares.
  ASSERT_TRUE(runtime_.WaitForHungCalls(2, 5s));
  ASSERT_TRUE(puller.WaitForQueued(1, 5s));
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 2);
  auto results = pulls.Finish();
  for (const auto& r : results) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 2);
  EXPECT_THAT(runtime_.PullAuths(), ::testing::UnorderedElementsAre("", "team:pw"));
}

TEST_F(ImagePullerTest, CancelledCallersStopWaitingAndTheLastOneCancelsThePull) {
  ImagePullerConfig config;
  config.serialize = false;
  ImagePuller puller(runtime_, clock_, config);
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/false);
  cri::CallCancel first_pod, second_pod;
  PullOptions first, second;
  first.cancel = &first_pod;
  second.cancel = &second_pod;
  Pulls pulls(runtime_, puller, 2);
  pulls.Start("reg.local/big:1", first);
  pulls.Start("reg.local/big:1", second);
  ASSERT_TRUE(runtime_.WaitForHungCalls(1, 5s));
  ASSERT_TRUE(puller.WaitForQueued(1, 5s));
  first_pod.Cancel();
  EnsureImageResult gone = pulls.Join(0);
  EXPECT_EQ(gone.status.code(), StatusCode::kCancelled);
  EXPECT_THAT(gone.message, HasSubstr("abandoned: the pod is being stopped"));
  EXPECT_EQ(runtime_.hung_calls(), 1) << "the other caller still waits for the pull";
  second_pod.Cancel();
  EXPECT_EQ(pulls.Join(1).status.code(), StatusCode::kCancelled);
  // No caller is left: the PullImage call itself is cancelled.
  ASSERT_TRUE(runtime_.WaitForHungCallsAtMost(0, 5s));
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
  // A cancelled pull does not back the image off: the next one runs at once.
  runtime_.ReleaseHangs();
  EXPECT_TRUE(puller.EnsureImage("reg.local/big:1", "Always").status.ok());
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 2);
  // A caller cancelled already does not start a pull.
  auto late = puller.EnsureImage("reg.local/big:1", "Always", first);
  EXPECT_EQ(late.status.code(), StatusCode::kCancelled);
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 2);
}

TEST_F(ImagePullerTest, ACallerCancelledWhileWaitingForItsTurnLeavesTheQueue) {
  ImagePuller puller(runtime_, clock_);  // serialized
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/false);
  cri::CallCancel pod;
  PullOptions waiting;
  waiting.cancel = &pod;
  Pulls pulls(runtime_, puller, 2);
  pulls.Start("reg.local/first:1");
  ASSERT_TRUE(runtime_.WaitForHungCalls(1, 5s));
  pulls.Start("reg.local/second:1", waiting);
  ASSERT_TRUE(puller.WaitForQueued(1, 5s));
  pod.Cancel();
  EXPECT_EQ(pulls.Join(1).status.code(), StatusCode::kCancelled);
  EXPECT_EQ(puller.queued(), 0);
  auto results = pulls.Finish();
  EXPECT_TRUE(results[0].status.ok()) << results[0].status.ToString();
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1) << "the second image was never pulled";
}

TEST_F(ImagePullerTest, CancelAllEndsRunningAndWaitingPullsAndLaterOnes) {
  ImagePuller puller(runtime_, clock_);  // serialized
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/false);
  Pulls pulls(runtime_, puller, 2);
  pulls.Start("reg.local/first:1");
  ASSERT_TRUE(runtime_.WaitForHungCalls(1, 5s));
  pulls.Start("reg.local/second:1");
  ASSERT_TRUE(puller.WaitForQueued(1, 5s));
  puller.CancelAll();
  EXPECT_EQ(pulls.Join(0).status.code(), StatusCode::kCancelled);
  EXPECT_EQ(pulls.Join(1).status.code(), StatusCode::kCancelled);
  EXPECT_EQ(puller.EnsureImage("reg.local/third:1", "Always").status.code(),
            StatusCode::kCancelled);
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
}

TEST_F(ImagePullerTest, ASharedFailedPullBacksOffOnce) {
  ImagePullerConfig config;
  config.backoff_initial = 1s;
  ImagePuller puller(runtime_, clock_, config);
  runtime_.HangCall(CriCall::kPullImage, "", /*fail_when_released=*/true);  // DEADLINE_EXCEEDED
  Pulls pulls(runtime_, puller, 2);
  pulls.Start("reg.local/slow:1");
  pulls.Start("reg.local/slow:1");
  ASSERT_TRUE(runtime_.WaitForHungCalls(1, 5s));
  ASSERT_TRUE(puller.WaitForQueued(1, 5s));
  auto results = pulls.Finish();
  for (const auto& r : results) {
    EXPECT_EQ(r.reason, "ErrImagePull");
    ASSERT_TRUE(r.retry_at.has_value());
    EXPECT_EQ(*r.retry_at, clock_.Now() + 1s);  // one failure: the initial delay, not doubled
  }
}

// The kubelet makes its keyring from the pod's pull secrets in PullImage: a secret that does
// not parse fails a pull, never the use of an image already present.
TEST_F(ImagePullerTest, UnreadablePullSecretsFailOnlyAPull) {
  ImagePullerConfig config;
  config.backoff_initial = 1s;
  ImagePuller puller(runtime_, clock_, config);
  PullOptions broken;
  broken.credentials_error = InvalidArgument("imagePullSecrets: secret default/reg: not JSON");

  runtime_.AddImage("reg.local/present:1");
  auto present = puller.EnsureImage("reg.local/present:1", "IfNotPresent", broken);
  EXPECT_TRUE(present.status.ok()) << present.status.ToString();
  EXPECT_THAT(Reasons(present), ::testing::ElementsAre("Pulled"));

  auto absent = puller.EnsureImage("reg.local/absent:1", "IfNotPresent", broken);
  EXPECT_EQ(absent.reason, "ErrImagePull");
  EXPECT_THAT(Reasons(absent), ::testing::ElementsAre("Pulling", "Failed", "Failed"));
  EXPECT_EQ(absent.events[1].message,
            "Failed to pull image \"reg.local/absent:1\": imagePullSecrets: secret default/reg: "
            "not JSON");
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 0);
  // A failed pull: it backs off like any other.
  ASSERT_TRUE(absent.retry_at.has_value());
  EXPECT_EQ(*absent.retry_at, clock_.Now() + 1s);
  EXPECT_EQ(puller.EnsureImage("reg.local/absent:1", "IfNotPresent", broken).reason,
            "ImagePullBackOff");
  // Readable again after the back-off: pulled.
  clock_.Advance(1s);
  EXPECT_TRUE(puller.EnsureImage("reg.local/absent:1", "IfNotPresent").status.ok());
  EXPECT_EQ(runtime_.CallCount(CriCall::kPullImage), 1);
}

TEST(ImagePullerConfigTest, RefusesWhatCannotBeMeant) {
  ImagePullerConfig ok;
  EXPECT_TRUE(ValidateImagePullerConfig(ok).ok());
  ImagePullerConfig both;
  both.max_parallel = 3;
  Status s = ValidateImagePullerConfig(both);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("--serialize-image-pulls=false"));
  both.serialize = false;
  EXPECT_TRUE(ValidateImagePullerConfig(both).ok());
  ImagePullerConfig negative;
  negative.serialize = false;
  negative.max_parallel = -1;
  EXPECT_FALSE(ValidateImagePullerConfig(negative).ok());
  ImagePullerConfig inverted;
  inverted.backoff_initial = 10s;
  inverted.backoff_max = 1s;
  EXPECT_THAT(ValidateImagePullerConfig(inverted).message(),
              HasSubstr("--image-pull-backoff-initial"));
}

}  // namespace
}  // namespace nodelet::podworkerd
