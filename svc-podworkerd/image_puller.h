// ImagePuller: podworkerd's image manager (the kubelet's imageManager and its serial/parallel
// pullers). EnsureImage applies a container's imagePullPolicy (Always, IfNotPresent, Never),
// pulls through CRI PullImage, and says what the container's waiting state and events are.
//
// Pulls are serialized node-wide by default (the kubelet's serializeImagePulls: one PullImage
// at a time, whichever pod worker thread asks); without serialization at most `max_parallel`
// run at once (0: no limit). Concurrent requests for the same image share one PullImage call
// and its result. A failed pull backs the image off (initial delay doubling to max); while in
// back-off the image is not pulled and the container waits in ImagePullBackOff. A successful
// pull clears the back-off. Thread-safe: every pod worker thread calls EnsureImage.
//
// A pull has no deadline (the kubelet's --runtime-request-timeout does not bound pulls either):
// PullImage runs on a thread of the puller's own, and each caller waits for its result until
// its CallCancel is cancelled (podworkerd: the caller's pod is being stopped), then goes with
// CANCELLED; once no caller waits for a pull, its PullImage call is cancelled. A cancelled pull
// does not back the image off. CancelAll (and the destructor) ends every pull.
//
// Threads: at most one per pull in flight, and a pull is in flight only while a pod worker waits
// for it (a pull nobody waits for is cancelled), so with no limit there are at most as many as
// pod workers that are pulling at once, as many goroutines as the kubelet's parallel puller has.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lib/common/clock.h"
#include "lib/common/histogram.h"
#include "lib/common/status.h"
#include "lib/cri/call_cancel.h"
#include "lib/cri/runtime_service.h"
#include "svc-podworkerd/registry_credentials.h"

namespace nodelet::podworkerd {

struct ImagePullerConfig {
  // --serialize-image-pulls: one PullImage at a time on the node.
  bool serialize = true;
  // --max-parallel-image-pulls: without serialization, at most this many at once; 0: no limit.
  int max_parallel = 0;
  // --image-pull-backoff-initial / --image-pull-backoff-max.
  std::chrono::milliseconds backoff_initial{10000};
  std::chrono::milliseconds backoff_max{300000};
  // Where node-wide registry credentials are looked for (registry_credentials.h: the first
  // docker config.json of these that exists, read at each pull); none: pulls carry none.
  std::vector<std::string> docker_config_paths;
};

// Refuses a config that cannot be meant: max_parallel > 1 with serialization on (the kubelet
// refuses it too), a negative max_parallel, a back-off that is not positive or whose initial
// delay exceeds its maximum. The message names the flag.
Status ValidateImagePullerConfig(const ImagePullerConfig& config);

// An event to record about the container's pod (type, the kubelet's reason, message).
struct ImageEvent {
  std::string type;  // "Normal" or "Warning"
  std::string reason;
  std::string message;
};

// What a caller brings besides the image and the policy.
struct PullOptions {
  // The Pulling event, when the pull is about to start (so an operator sees it while a slow
  // pull runs) instead of into the result.
  std::function<void(const ImageEvent&)> on_pulling;
  // The pod's imagePullSecrets' entries for the image (pull_secrets.h), tried before the node's.
  std::vector<RegistryCredential> pod_credentials;
  // The pod's imagePullSecrets could not be read (pull_secrets.h): a pull, if one is needed,
  // fails with this error and backs off, as the kubelet's PullImage fails making its keyring; an
  // image already present needs no pull and no credentials, and is used.
  Status credentials_error;
  // Cancelled: stop waiting (the result is CANCELLED).
  cri::CallCancel* cancel = nullptr;
};

struct EnsureImageResult {
  // OK when the image is present (it was, or it was pulled). Otherwise the container waits
  // with `reason` (ErrImageInspect, ErrImageNeverPull, ErrImagePull, ImagePullBackOff) and
  // `message`.
  Status status = Status::Ok();
  std::string reason;
  std::string message;
  // Pulling, Pulled, Failed, BackOff, ErrImageNeverPull, as the kubelet records them.
  std::vector<ImageEvent> events;
  // When a retry can make progress (the back-off's end), after ErrImagePull / ImagePullBackOff.
  std::optional<MonoTime> retry_at;
};

// The kubelet's label for an image of `bytes` ("0-10MB", "10MB-100MB", ..., "GT100GB"; "N/A" for
// an unknown size).
std::string ImageSizeBucket(uint64_t bytes);

class ImagePuller {
 public:
  ImagePuller(cri::ImageService& images, const Clock& clock, ImagePullerConfig config = {});
  // CancelAll, then joins the pulls' threads.
  ~ImagePuller();
  ImagePuller(const ImagePuller&) = delete;
  ImagePuller& operator=(const ImagePuller&) = delete;

  // Makes `image` present per `pull_policy` ("Always", "IfNotPresent", "Never"; anything else
  // is treated as IfNotPresent). Blocks while the pull waits for its turn and runs, or until
  // `options.cancel` is cancelled.
  EnsureImageResult EnsureImage(const std::string& image, const std::string& pull_policy,
                                const PullOptions& options = {});
  // Cancels every pull, running or waiting for its turn, and every pull asked for later
  // (podworkerd is stopping): their callers get CANCELLED.
  void CancelAll();

  const ImagePullerConfig& config() const { return config_; }
  // Each successful PullImage's duration, by the pulled image's size (the kubelet's
  // kubelet_image_pull_duration_seconds{image_size_in_bytes}), as heartbeat counters named
  // "image_pull_duration_seconds@SIZE" (lib/common/histogram.h).
  void ExportPullDurations(std::vector<std::pair<std::string, uint64_t>>& out) const;
  // PullImage calls running now, callers waiting (for their turn, or for a pull of the same
  // image in flight), and the most that ever ran at once (for tests and counters).
  int running() const;
  int queued() const;
  int max_running_seen() const;
  // Waits (real time) until queued() >= n; false at the deadline.
  bool WaitForQueued(int n, std::chrono::milliseconds timeout) const;

 private:
  // One pull, shared by every caller asking for the same image with the same pod credentials
  // meanwhile; run by a thread of its own once it has a turn.
  struct Flight {
    std::string key;  // in flights_
    std::string image;
    std::vector<RegistryCredential> pod_credentials;
    int waiters = 0;        // callers waiting for its result
    bool started = false;   // has a turn and a thread
    bool done = false;      // the result is there
    bool finished = false;  // its thread is about to return (joinable at once)
    Result<std::string> ref = std::string();
    Duration pulling{};      // the PullImage calls themselves
    cri::CallCancel cancel;  // the PullImage call's
  };
  struct Backoff {
    MonoTime until{};
    std::chrono::milliseconds delay{0};
  };

  // Waits for a pull of `image` (a new one, or one with the same pod credentials in flight).
  // `pulling` is how long the PullImage calls took.
  Result<std::string> Pull(const std::string& image, const PullOptions& options, Duration* pulling);
  // A failed pull of `image`: its back-off starts or doubles (to the maximum). Under mu_.
  void BackOffLocked(const std::string& image);
  // Gives the pulls waiting for a turn their threads, as the limit allows; reaps finished
  // threads. Under mu_.
  void StartTurns();
  // A flight's thread: the PullImage calls, then the result.
  void RunFlight(const std::shared_ptr<Flight>& flight);
  int limit() const;
  int QueuedLocked() const;

  cri::ImageService& images_;
  const Clock& clock_;
  const ImagePullerConfig config_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // a turn freed, a flight done, a caller queued
  // By image and the pod credentials it carries: a pod with credentials does not share the
  // failure of a pull without them.
  std::map<std::string, std::shared_ptr<Flight>> flights_;
  std::vector<std::shared_ptr<Flight>> waiting_for_turn_;  // in the order they were asked for
  std::vector<std::pair<std::shared_ptr<Flight>, std::thread>> threads_;
  std::map<std::string, Backoff> backoff_;
  std::map<std::string, Histogram> pull_durations_;  // image size bucket → durations
  int running_ = 0;
  int max_running_seen_ = 0;
  bool cancelled_all_ = false;
};

}  // namespace nodelet::podworkerd
