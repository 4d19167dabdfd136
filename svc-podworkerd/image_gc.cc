#include "svc-podworkerd/image_gc.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace nodelet::podworkerd {

Status ValidateImageGcPolicy(const ImageGcPolicy& p) {
  auto bad = [](int v) { return v < 0 || v > 100; };
  if (bad(p.high_threshold_percent)) {
    return InvalidArgument("image-gc-high-threshold " + std::to_string(p.high_threshold_percent) +
                           " must be within 0..100");
  }
  if (bad(p.low_threshold_percent)) {
    return InvalidArgument("image-gc-low-threshold " + std::to_string(p.low_threshold_percent) +
                           " must be within 0..100");
  }
  if (p.low_threshold_percent > p.high_threshold_percent) {
    return InvalidArgument("image-gc-low-threshold " + std::to_string(p.low_threshold_percent) +
                           " must not exceed image-gc-high-threshold " +
                           std::to_string(p.high_threshold_percent));
  }
  if (p.minimum_age.count() < 0)
    return InvalidArgument("image-minimum-gc-age must not be negative");
  return Status::Ok();
}

Result<FsStats> StatvfsFsStats::Stat(const std::string& path) {
  struct statvfs st {};
  if (statvfs(path.c_str(), &st) != 0) {
    int err = errno;
    return Internal("statvfs '" + path + "': " + std::strerror(err));
  }
  FsStats out;
  out.capacity_bytes = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  out.available_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  return out;
}

ImageGc::ImageGc(cri::RuntimeService& runtime, cri::ImageService& images, FsStatsSource& fs,
                 const Clock& clock, ImageGcPolicy policy)
    : runtime_(runtime), images_(images), fs_(fs), clock_(clock), policy_(policy) {}

Status ImageGc::DetectImages() {
  const MonoTime now = clock_.Now();
  auto images = images_.ListImages({});
  if (!images.ok()) return images.status();
  auto containers = runtime_.ListContainers({});
  if (!containers.ok()) return containers.status();

  // What is in use, by any name a container or a desired pod gives it; matched against each
  // image's id, tags and digests below.
  std::set<std::string> used;
  for (const auto& c : *containers) {
    if (!c.image_ref().empty()) used.insert(c.image_ref());
    if (!c.image().image().empty()) used.insert(c.image().image());
  }
  // Names in pod specs are short ("busybox") where the runtime's tags are normalized: let the
  // runtime resolve them to ids. An absent image needs no protection.
  auto resolve = [&](const std::set<std::string>& refs, std::set<std::string>& ids) {
    for (const auto& ref : refs) {
      cri::v1::ImageSpec spec;
      spec.set_image(ref);
      auto st = images_.ImageStatus(spec, false);
      if (st.ok() && st->has_image()) ids.insert(st->image().id());
    }
  };
  resolve(desired_refs_, used);
  std::set<std::string> pinned;
  resolve(std::set<std::string>(pinned_refs_.begin(), pinned_refs_.end()), pinned);

  std::map<std::string, Record> next;
  for (const auto& image : *images) {
    Record r;
    auto it = records_.find(image.id());
    if (it != records_.end()) {
      r = it->second;
    } else {
      r.first_detected = now;
    }
    r.size_bytes = image.size();
    r.name = image.repo_tags_size() > 0 ? image.repo_tags(0) : image.id();
    r.in_use = used.count(image.id()) > 0;
    for (const auto& t : image.repo_tags()) r.in_use = r.in_use || used.count(t) > 0;
    for (const auto& d : image.repo_digests()) r.in_use = r.in_use || used.count(d) > 0;
    r.pinned = image.pinned() || pinned.count(image.id()) > 0;
    if (r.in_use) r.last_used = now;
    next.emplace(image.id(), std::move(r));
  }
  records_ = std::move(next);  // images that are gone are forgotten
  return Status::Ok();
}

ImageGcResult ImageGc::GarbageCollect() {
  ImageGcResult result;
  auto info = images_.ImageFsInfo();
  if (!info.ok()) {
    result.status = info.status();
    return result;
  }
  for (const auto& fs : info->image_filesystems()) {
    if (!fs.fs_id().mountpoint().empty()) {
      result.mountpoint = fs.fs_id().mountpoint();
      break;
    }
  }
  if (result.mountpoint.empty()) {
    result.status = FailedPrecondition("the runtime reports no image filesystem (ImageFsInfo)");
    return result;
  }
  auto stats = fs_.Stat(result.mountpoint);
  if (!stats.ok()) {
    result.status = stats.status();
    return result;
  }
  result.fs = *stats;
  if (result.fs.capacity_bytes == 0) {
    result.status = FailedPrecondition("the image filesystem at '" + result.mountpoint +
                                       "' reports zero capacity");
    return result;
  }
  if (Status s = DetectImages(); !s.ok()) {
    result.status = s;
    return result;
  }
  const uint64_t capacity = result.fs.capacity_bytes;
  const uint64_t available = std::min(result.fs.available_bytes, capacity);
  result.usage_percent = 100 - static_cast<int>(available * 100 / capacity);
  if (result.usage_percent < policy_.high_threshold_percent) return result;

  result.over_threshold = true;
  const uint64_t target_available =
      capacity / 100 * static_cast<uint64_t>(100 - policy_.low_threshold_percent) +
      capacity % 100 * static_cast<uint64_t>(100 - policy_.low_threshold_percent) / 100;
  if (target_available <= available) return result;  // rounding: already there
  result.bytes_to_free = target_available - available;
  FreeSpace(result.bytes_to_free, result);
  if (result.bytes_freed < result.bytes_to_free && result.status.ok()) {
    result.status = ResourceExhausted(
        "Failed to garbage collect required amount of images. Attempted to free " +
        std::to_string(result.bytes_to_free) + " bytes, but only found " +
        std::to_string(result.bytes_freed) + " bytes eligible to free.");
  }
  return result;
}

void ImageGc::FreeSpace(uint64_t bytes_to_free, ImageGcResult& result) {
  const MonoTime now = clock_.Now();
  std::vector<std::pair<std::string, const Record*>> candidates;
  for (const auto& [id, r] : records_) {
    if (r.in_use || r.pinned) continue;
    if (now - r.first_detected < policy_.minimum_age) continue;
    candidates.emplace_back(id, &r);
  }
  // Least recently used first; never-used images by when they appeared.
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    if (a.second->last_used != b.second->last_used)
      return a.second->last_used < b.second->last_used;
    if (a.second->first_detected != b.second->first_detected) {
      return a.second->first_detected < b.second->first_detected;
    }
    return a.first < b.first;
  });
  std::vector<std::string> gone;
  for (const auto& [id, r] : candidates) {
    if (result.bytes_freed >= bytes_to_free) break;
    cri::v1::ImageSpec spec;
    spec.set_image(id);
    if (Status s = images_.RemoveImage(spec); !s.ok()) {
      if (result.status.ok()) {
        result.status =
            Status(s.code(), "remove image '" + r->name + "' (" + id + "): " + s.message());
      }
      continue;
    }
    result.bytes_freed += r->size_bytes;
    result.removed.push_back(id);
    gone.push_back(id);
  }
  for (const auto& id : gone) records_.erase(id);
}

}  // namespace nodelet::podworkerd
