// The pod manager's manifest sources: starting them, and starting them again with a reloaded
// configuration (docs/supervisor.md, "Reloading the configuration").
#include "lib/common/logging.h"
#include "supervisor/pod_manager.h"

namespace nodelet::supervisor {

Result<std::unique_ptr<ManifestDirSource>> PodManager::StartDirSource(const std::string& dir) {
  auto source = std::make_unique<ManifestDirSource>(dir, clock_);
  if (Status s = source->Start(); !s.ok()) return s;
  return source;
}

Result<std::unique_ptr<ManifestUrlSource>> PodManager::StartUrlSource(
    const PodManagerOptions& options) {
  UrlSourceOptions url_options;
  url_options.ca_file = options.manifest_url_ca;
  url_options.period = options.manifest_url_period;
  url_options.headers = options.manifest_url_headers;
  // On the loop, after each fetch: the snapshot is taken at the loop's next turn.
  url_options.on_snapshot = [this, alive = std::weak_ptr<bool>(alive_)] {
    loop_.Post([this, alive] {
      if (alive.lock()) OnReadable();
    });
  };
  auto source = std::make_unique<ManifestUrlSource>(loop_, options.manifest_url, url_options);
  if (Status s = source->Start(); !s.ok()) return s;
  return source;
}

void PodManager::WatchDirSource() {
  dir_source_.Reset();
  if (dir_ && dir_->fd() >= 0) dir_source_ = loop_.AddFd(dir_->fd(), [this] { OnReadable(); });
}

Result<std::vector<std::string>> PodManager::ReconfigureSources(const PodManagerOptions& next) {
  const bool dir_changed = next.manifest_dir != options_.manifest_dir;
  const bool url_changed = next.manifest_url != options_.manifest_url ||
                           next.manifest_url_ca != options_.manifest_url_ca ||
                           next.manifest_url_period != options_.manifest_url_period ||
                           next.manifest_url_headers != options_.manifest_url_headers;
  // The new sources first: one that does not start leaves everything as it was.
  std::unique_ptr<ManifestDirSource> dir;
  std::unique_ptr<ManifestUrlSource> url;
  if (dir_changed && !next.manifest_dir.empty()) {
    auto started = StartDirSource(next.manifest_dir);
    if (!started.ok()) return started.status();
    dir = std::move(*started);
  }
  if (url_changed && !next.manifest_url.empty()) {
    auto started = StartUrlSource(next);
    if (!started.ok()) return started.status();
    url = std::move(*started);
  }
  std::vector<std::string> changed;
  // A source dropped: its pods go. A source moved: its pods are those of its first read.
  auto replace = [&](const std::string& name, const std::string& location) {
    changed.push_back(name);
    taken_.erase(name);
    if (location.empty()) TakeSnapshot(SourceSnapshot{name, {}, std::nullopt});
    config_->ResetSource(name, !location.empty());
    book_.MoveSource(name, location);
  };
  if (dir_changed) {
    dir_source_.Reset();
    dir_ = std::move(dir);
    options_.manifest_dir = next.manifest_dir;
    replace("file", next.manifest_dir);
    WatchDirSource();
  }
  if (url_changed) {
    // A fetch of the old source in flight ends within its deadline, not waited for here: the
    // destructor waits for it.
    if (url_) {
      url_->RequestStop();
      retired_urls_.push_back(std::move(url_));
    }
    url_ = std::move(url);
    options_.manifest_url = next.manifest_url;
    options_.manifest_url_ca = next.manifest_url_ca;
    options_.manifest_url_period = next.manifest_url_period;
    options_.manifest_url_headers = next.manifest_url_headers;
    replace("http", next.manifest_url);
  }
  // The new directory's manifests at once; the URL's when its first fetch ends.
  if (!changed.empty()) OnReadable();
  return changed;
}

}  // namespace nodelet::supervisor
