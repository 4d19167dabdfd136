// FakeCriRuntime's images: the fake registry (PullImage has every image, and records the
// credentials it was given), list, status, remove, the image filesystem's usage, and the knobs
// that add an image or pin it.
#include <algorithm>
#include <string>
#include <vector>

#include "tests/fakes/fake_cri_internal.h"
#include "tests/fakes/fake_cri_runtime.h"

namespace nodelet::testing {

using fake_cri_internal::CallError;
using fake_cri_internal::HasPrefix;
using fake_cri_internal::MakeId;

namespace {

// "busybox" -> "busybox:latest"; refs with a tag or digest are kept.
std::string NormalizeRef(const std::string& ref) {
  if (HasPrefix(ref, "sha256:")) return ref;
  auto slash = ref.rfind('/');
  auto tail = slash == std::string::npos ? ref : ref.substr(slash + 1);
  if (tail.find(':') != std::string::npos || tail.find('@') != std::string::npos) return ref;
  return ref + ":latest";
}

}  // namespace

std::string FakeCriRuntime::AddImage(const std::string& ref, uint64_t size_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string normalized = NormalizeRef(ref);
  for (auto& image : images_) {
    if (std::find(image.tags.begin(), image.tags.end(), normalized) != image.tags.end()) {
      return image.id;
    }
  }
  std::string id = "sha256:" + MakeId(next_id_++);
  images_.push_back(ImageRecord{id, {normalized}, size_bytes});
  return id;
}

Status FakeCriRuntime::SetImagePinned(const std::string& ref, bool pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  const ImageRecord* found = FindImage(ref);
  if (found == nullptr) return NotFound("no image '" + ref + "'");
  const_cast<ImageRecord*>(found)->pinned = pinned;
  return Status::Ok();
}

void FakeCriRuntime::SetImageFsMountpoint(const std::string& mountpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  image_fs_mountpoint_ = mountpoint;
}

const FakeCriRuntime::ImageRecord* FakeCriRuntime::FindImage(const std::string& ref) const {
  std::string normalized = NormalizeRef(ref);
  for (const auto& image : images_) {
    if (image.id == ref) return &image;
    if (std::find(image.tags.begin(), image.tags.end(), normalized) != image.tags.end())
      return &image;
  }
  return nullptr;
}

// ---- ImageService ------------------------------------------------------------------------------

Result<std::vector<v1::Image>> FakeCriRuntime::ListImages(const v1::ImageFilter& filter) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kListImages, {}); !s.ok()) return s;
  std::vector<v1::Image> out;
  const ImageRecord* only = nullptr;
  if (!filter.image().image().empty()) {
    only = FindImage(filter.image().image());
    if (only == nullptr) return out;
  }
  for (const auto& image : images_) {
    if (only != nullptr && only != &image) continue;
    v1::Image item;
    item.set_id(image.id);
    for (const auto& tag : image.tags) item.add_repo_tags(tag);
    item.set_size(image.size);
    item.set_pinned(image.pinned);
    item.mutable_spec()->set_image(image.id);
    out.push_back(std::move(item));
  }
  return out;
}

Result<v1::ImageStatusResponse> FakeCriRuntime::ImageStatus(const v1::ImageSpec& image,
                                                            bool verbose) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kImageStatus, {image.image()}); !s.ok()) return s;
  v1::ImageStatusResponse r;
  const ImageRecord* found = FindImage(image.image());
  if (found == nullptr) return r;  // absent: OK without an image
  auto* item = r.mutable_image();
  item->set_id(found->id);
  for (const auto& tag : found->tags) item->add_repo_tags(tag);
  item->set_size(found->size);
  item->set_pinned(found->pinned);
  item->mutable_spec()->set_image(found->id);
  if (verbose) (*r.mutable_info())["info"] = "{}";
  return r;
}

Result<std::string> FakeCriRuntime::PullImage(const v1::ImageSpec& image,
                                              const v1::AuthConfig* auth,
                                              const v1::PodSandboxConfig* sandbox_config,
                                              cri::CallCancel* cancel) {
  // Bound before the lock is taken: a canceller cancelled already runs the action at once.
  cri::CallCancelScope bound(cancel, [this] {
    std::lock_guard<std::mutex> lock(mu_);
    hang_cv_.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Recorded before the failure rules apply: a refused credential was sent all the same.
    pull_auths_.push_back(auth == nullptr ? "" : auth->username() + ":" + auth->password());
    if (Status s = Enter(lock, CriCall::kPullImage, {image.image()}, cancel); !s.ok()) return s;
    if (image.image().empty()) {
      return CallError(CriCall::kPullImage, StatusCode::kInvalidArgument,
                       "image reference is empty");
    }
  }
  // The fake registry has every image.
  return AddImage(image.image());
}

Status FakeCriRuntime::RemoveImage(const v1::ImageSpec& image) {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kRemoveImage, {image.image()}); !s.ok()) return s;
  const ImageRecord* found = FindImage(image.image());
  if (found == nullptr) return Status::Ok();  // idempotent
  std::string id = found->id;
  std::erase_if(images_, [&](const ImageRecord& r) { return r.id == id; });
  return Status::Ok();
}

Result<v1::ImageFsInfoResponse> FakeCriRuntime::ImageFsInfo() {
  std::unique_lock<std::mutex> lock(mu_);
  if (Status s = Enter(lock, CriCall::kImageFsInfo, {}); !s.ok()) return s;
  uint64_t used = 0;
  for (const auto& image : images_) used += image.size;
  v1::ImageFsInfoResponse r;
  auto* fs = r.add_image_filesystems();
  fs->set_timestamp(now_ns_);
  fs->mutable_fs_id()->set_mountpoint(image_fs_mountpoint_);
  fs->mutable_used_bytes()->set_value(used);
  fs->mutable_inodes_used()->set_value(images_.size());
  return r;
}

}  // namespace nodelet::testing
