#include "svc-podworkerd/image_puller.h"

#include <algorithm>
#include <cstdio>

#include "lib/pod/pod.h"
#include "svc-podworkerd/registry_credentials.h"

namespace nodelet::podworkerd {
namespace {

std::string Quoted(const std::string& image) { return "\"" + image + "\""; }

// "850ms", "1.2s", "12.345s": as an operator reads a pull's duration.
std::string FormatDuration(Duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms < 1000) return std::to_string(ms) + "ms";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(ms) / 1000.0);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s + "s";
}

}  // namespace

Status ValidateImagePullerConfig(const ImagePullerConfig& c) {
  if (c.max_parallel < 0) {
    return InvalidArgument("--max-parallel-image-pulls must be 0 (no limit) or more, not " +
                           std::to_string(c.max_parallel));
  }
  if (c.serialize && c.max_parallel > 1) {
    return InvalidArgument("--max-parallel-image-pulls=" + std::to_string(c.max_parallel) +
                           " needs --serialize-image-pulls=false (serialized pulls run one at a "
                           "time)");
  }
  if (c.backoff_initial.count() <= 0 || c.backoff_max.count() <= 0) {
    return InvalidArgument(
        "--image-pull-backoff-initial and --image-pull-backoff-max must be "
        "positive");
  }
  if (c.backoff_initial > c.backoff_max) {
    return InvalidArgument("--image-pull-backoff-initial (" +
                           std::to_string(c.backoff_initial.count()) +
                           "ms) is longer than --image-pull-backoff-max (" +
                           std::to_string(c.backoff_max.count()) + "ms)");
  }
  return Status::Ok();
}

ImagePuller::ImagePuller(cri::ImageService& images, const Clock& clock, ImagePullerConfig config)
    : images_(images), clock_(clock), config_(config) {}

ImagePuller::~ImagePuller() {
  CancelAll();
  std::vector<std::pair<std::shared_ptr<Flight>, std::thread>> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
  }
  for (auto& [_, t] : threads) t.join();
}

int ImagePuller::limit() const {
  if (config_.serialize) return 1;
  return config_.max_parallel > 0 ? config_.max_parallel : 0;
}

int ImagePuller::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int ImagePuller::QueuedLocked() const {
  int n = 0;
  for (const auto& [_, f] : flights_) n += f->started ? std::max(0, f->waiters - 1) : f->waiters;
  return n;
}

int ImagePuller::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return QueuedLocked();
}

int ImagePuller::max_running_seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_running_seen_;
}

bool ImagePuller::WaitForQueued(int n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return QueuedLocked() >= n; });
}

void ImagePuller::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_all_ = true;
  for (auto& [_, f] : flights_) {
    if (f->started) {
      f->cancel.Cancel();  // the thread ends with the call and reports CANCELLED
    } else {
      f->ref = Status(StatusCode::kCancelled, "image pull cancelled: podworkerd is stopping");
      f->done = true;
    }
  }
  waiting_for_turn_.clear();
  std::erase_if(flights_, [](const auto& entry) { return !entry.second->started; });
  cv_.notify_all();
}

void ImagePuller::StartTurns() {
  // Threads whose flight has finished return at once: joined here rather than kept.
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->first->finished) {
      it->second.join();
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
  const int max = limit();
  while (!waiting_for_turn_.empty() && (max <= 0 || running_ < max)) {
    std::shared_ptr<Flight> flight = waiting_for_turn_.front();
    waiting_for_turn_.erase(waiting_for_turn_.begin());
    flight->started = true;
    ++running_;
    max_running_seen_ = std::max(max_running_seen_, running_);
    threads_.emplace_back(flight, std::thread([this, flight] { RunFlight(flight); }));
  }
}

void ImagePuller::RunFlight(const std::shared_ptr<Flight>& flight) {
  const std::string& image = flight->image;
  cri::v1::ImageSpec spec;
  spec.set_image(image);
  // The pod's credentials, then the node's for the image's registry, each tried in turn (the
  // kubelet's way); none: the pull carries none. A config.json that does not parse is said in
  // the pull's error.
  std::vector<RegistryCredential> credentials = flight->pod_credentials;
  Status keyring_error;
  if (!config_.docker_config_paths.empty()) {
    auto keyring = ReadDockerKeyring(config_.docker_config_paths);
    if (keyring.ok()) {
      for (auto& c : keyring->Lookup(image)) credentials.push_back(std::move(c));
    } else {
      keyring_error = keyring.status();
    }
  }
  const MonoTime start = clock_.Now();
  Result<std::string> ref = Unavailable("no pull");
  if (credentials.empty()) {
    ref = images_.PullImage(spec, nullptr, nullptr, &flight->cancel);
  }
  for (const auto& c : credentials) {
    cri::v1::AuthConfig auth;
    auth.set_username(c.username);
    auth.set_password(c.password);
    auth.set_identity_token(c.identity_token);
    auth.set_registry_token(c.registry_token);
    // No server_address: the entry was matched to the image's registry here, and containerd
    // reads the field as a URL (a bare "HOST:PORT" fails to parse there).
    ref = images_.PullImage(spec, &auth, nullptr, &flight->cancel);
    if (ref.ok() || flight->cancel.cancelled()) break;
  }
  const bool cancelled = flight->cancel.cancelled();
  if (!ref.ok() && !cancelled && !keyring_error.ok()) {
    ref = Status(ref.status().code(), ref.status().message() + " (registry credentials not read: " +
                                          keyring_error.message() + ")");
  }
  const Duration took = clock_.Now() - start;
  // The pulled image's size, for the duration's label (the kubelet asks the runtime too).
  uint64_t size = 0;
  if (ref.ok()) {
    cri::v1::ImageSpec pulled;
    pulled.set_image(*ref);
    if (auto st = images_.ImageStatus(pulled, false); st.ok() && st->has_image()) {
      size = st->image().size();
    }
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (ref.ok()) {
    auto [h, _] = pull_durations_.try_emplace(
        ImageSizeBucket(size), std::vector<double>{1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360,
                                                   480, 600, 900, 1200, 1800, 2700, 3600});
    h->second.Observe(std::chrono::duration_cast<std::chrono::microseconds>(took));
    backoff_.erase(image);
  } else if (!cancelled) {
    BackOffLocked(image);
  }
  --running_;
  flight->ref = ref;
  flight->pulling = took;
  flight->done = true;
  if (auto it = flights_.find(flight->key); it != flights_.end() && it->second == flight) {
    flights_.erase(it);
  }
  StartTurns();
  // Last: from here on this thread only returns, so whoever holds mu_ next may join it.
  flight->finished = true;
  cv_.notify_all();
}

void ImagePuller::BackOffLocked(const std::string& image) {
  Backoff& b = backoff_[image];
  b.delay =
      b.delay.count() == 0 ? config_.backoff_initial : std::min(b.delay * 2, config_.backoff_max);
  b.until = clock_.Now() + b.delay;
}

Result<std::string> ImagePuller::Pull(const std::string& image, const PullOptions& options,
                                      Duration* pulling) {
  if (!options.credentials_error.ok()) {
    // No keyring, no pull: a failed pull all the same, with its back-off.
    std::lock_guard<std::mutex> lock(mu_);
    BackOffLocked(image);
    return options.credentials_error;
  }
  std::string key = image;
  for (const auto& c : options.pod_credentials) {
    for (const std::string* part :
         {&c.registry, &c.username, &c.password, &c.identity_token, &c.registry_token}) {
      key += '\0' + *part;
    }
  }
  cri::CallCancel* cancel = options.cancel;
  auto cancelled = [&] { return cancel != nullptr && cancel->cancelled(); };
  if (cancelled()) {
    return Status(StatusCode::kCancelled,
                  "image pull of \"" + image + "\" abandoned: the pod is being stopped");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (cancelled_all_)
    return Status(StatusCode::kCancelled, "image pull cancelled: podworkerd is stopping");
  std::shared_ptr<Flight>& slot = flights_[key];
  if (!slot) {
    slot = std::make_shared<Flight>();
    slot->key = key;
    slot->image = image;
    slot->pod_credentials = options.pod_credentials;
    waiting_for_turn_.push_back(slot);
  }
  std::shared_ptr<Flight> flight = slot;
  ++flight->waiters;
  StartTurns();
  cv_.notify_all();
  // The caller's cancellation wakes this wait; the wait itself has no deadline, as the pull has
  // none. `cancel` is read without its lock here, and cancelled outside this one.
  lock.unlock();
  {
    cri::CallCancelScope woken(cancel, [this] {
      std::lock_guard<std::mutex> inner(mu_);
      cv_.notify_all();
    });
    lock.lock();
    cv_.wait(lock, [&] { return flight->done || cancelled(); });
    lock.unlock();
  }
  lock.lock();
  --flight->waiters;
  if (!flight->done) {
    // Gone before the result: the last caller to go cancels the pull.
    if (flight->waiters == 0) {
      if (auto it = flights_.find(key); it != flights_.end() && it->second == flight) {
        flights_.erase(it);
      }
      if (flight->started) {
        flight->cancel.Cancel();
      } else {
        std::erase(waiting_for_turn_, flight);
      }
    }
    cv_.notify_all();
    return Status(StatusCode::kCancelled,
                  "image pull of \"" + image + "\" abandoned: the pod is being stopped");
  }
  *pulling = flight->pulling;
  return flight->ref;
}

std::string ImageSizeBucket(uint64_t bytes) {
  if (bytes == 0) return "N/A";
  constexpr uint64_t kMi = 1024ull * 1024, kGi = 1024 * kMi;
  const std::pair<uint64_t, const char*> buckets[] = {
      {100 * kGi, "GT100GB"},     {60 * kGi, "60GB-100GB"}, {40 * kGi, "40GB-60GB"},
      {30 * kGi, "30GB-40GB"},    {20 * kGi, "20GB-30GB"},  {10 * kGi, "10GB-20GB"},
      {5 * kGi, "5GB-10GB"},      {1 * kGi, "1GB-5GB"},     {500 * kMi, "500MB-1GB"},
      {100 * kMi, "100MB-500MB"}, {10 * kMi, "10MB-100MB"}};
  for (const auto& [lower, label] : buckets) {
    if (bytes > lower) return label;
  }
  return "0-10MB";
}

void ImagePuller::ExportPullDurations(std::vector<std::pair<std::string, uint64_t>>& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [size, h] : pull_durations_)
    h.Export("image_pull_duration_seconds@" + size, out);
}

EnsureImageResult ImagePuller::EnsureImage(const std::string& image, const std::string& pull_policy,
                                           const PullOptions& options) {
  EnsureImageResult out;
  cri::v1::ImageSpec spec;
  spec.set_image(image);
  if (pull_policy != pod::kPullAlways) {
    auto st = images_.ImageStatus(spec, false);
    if (!st.ok()) {
      out.status = st.status();
      out.reason = "ErrImageInspect";
      out.message = "Failed to inspect image " + Quoted(image) + ": " + st.status().message();
      out.events.push_back({"Warning", "InspectFailed", out.message});
      return out;
    }
    if (st->has_image()) {
      out.events.push_back(
          {"Normal", "Pulled", "Container image " + Quoted(image) + " already present on machine"});
      return out;
    }
    if (pull_policy == pod::kPullNever) {
      out.reason = "ErrImageNeverPull";
      out.message =
          "Container image " + Quoted(image) + " is not present with pull policy of Never";
      out.status = FailedPrecondition(out.message);
      out.events.push_back({"Warning", "ErrImageNeverPull", out.message});
      out.events.push_back({"Warning", "Failed", "Error: ErrImageNeverPull"});
      return out;
    }
  }
  const MonoTime asked = clock_.Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = backoff_.find(image);
    if (it != backoff_.end() && asked < it->second.until) {
      out.reason = "ImagePullBackOff";
      out.message = "Back-off pulling image " + Quoted(image);
      out.status = Unavailable(out.message);
      out.retry_at = it->second.until;
      out.events.push_back({"Normal", "BackOff", out.message});
      out.events.push_back({"Warning", "Failed", "Error: ImagePullBackOff"});
      return out;
    }
  }
  ImageEvent started{"Normal", "Pulling", "Pulling image " + Quoted(image)};
  if (options.on_pulling) {
    options.on_pulling(started);
  } else {
    out.events.push_back(std::move(started));
  }
  Duration pulling{};
  Result<std::string> ref = Pull(image, options, &pulling);
  if (ref.ok()) {
    out.events.push_back({"Normal", "Pulled",
                          "Successfully pulled image " + Quoted(image) + " in " +
                              FormatDuration(pulling) + " (" +
                              FormatDuration(clock_.Now() - asked) + " including waiting)"});
    return out;
  }
  out.status = ref.status();
  out.reason = "ErrImagePull";
  out.message = ref.status().message();
  out.events.push_back(
      {"Warning", "Failed", "Failed to pull image " + Quoted(image) + ": " + out.message});
  out.events.push_back({"Warning", "Failed", "Error: ErrImagePull"});
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = backoff_.find(image); it != backoff_.end()) out.retry_at = it->second.until;
  return out;
}

}  // namespace nodelet::podworkerd
