#include "lib/pod/pod_flatbuffers.h"

#include <gtest/gtest.h>

#include <random>

#include "lib/pod/static_pod.h"
#include "tests/unit/pod/test_manifests.h"

namespace nodelet::pod {
namespace {

Pod FullStaticPod() {
  StaticPodOrigin origin;
  origin.source = "/etc/nodelet/manifests/web.yaml";
  origin.node_name = "node1";
  auto r = LoadStaticPods(testing::kFullPodYaml, origin);
  EXPECT_TRUE(r.errors.empty());
  return r.pods.at(0).pod;
}

TEST(PodFlatBuffersTest, RoundTripKeepsEveryField) {
  Pod pod = FullStaticPod();
  // Set the fields the manifest leaves unset, so that they take part too.
  pod.metadata.creation_timestamp = 1714564800;
  pod.metadata.deletion_timestamp = -5;
  pod.spec.containers[1].security_context = SecurityContext{};  // present but empty
  pod.spec.containers[1].security_context->run_as_non_root = false;
  pod.spec.volumes[2].config_map->items[0].mode.reset();
  pod.spec.volumes[4].downward_api->items[0].mode = 0400;
  auto buf = EncodePod(pod);
  auto decoded = DecodePod(buf.data(), buf.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, pod);
  // Optional scalars keep "unset" apart from zero and false.
  EXPECT_FALSE(decoded->spec.containers[1].security_context->run_as_user.has_value());
  EXPECT_EQ(decoded->spec.containers[1].security_context->run_as_non_root, false);
  EXPECT_FALSE(decoded->spec.volumes[2].config_map->items[0].mode.has_value());
  EXPECT_EQ(decoded->spec.volumes[2].config_map->default_mode, 0644);
}

TEST(PodFlatBuffersTest, RoundTripOfAnEmptyPod) {
  Pod pod;
  auto buf = EncodePod(pod);
  auto decoded = DecodePod(buf.data(), buf.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, pod);
}

TEST(PodFlatBuffersTest, EmbeddedInAnotherBuffer) {
  Pod pod = FullStaticPod();
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(PodToFlatBuffer(fbb, pod));
  auto decoded = PodFromFlatBuffer(flatbuffers::GetRoot<ipc::pod::Pod>(fbb.GetBufferPointer()));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, pod);
}

TEST(PodFlatBuffersTest, RejectsBadBuffers) {
  auto buf = EncodePod(FullStaticPod());
  EXPECT_FALSE(DecodePod(nullptr, 0).ok());
  EXPECT_FALSE(DecodePod(buf.data(), 4).ok());
  EXPECT_EQ(DecodePod(buf.data(), buf.size(), 100).status().code(), StatusCode::kResourceExhausted);
  std::vector<uint8_t> wrong_id = buf;
  wrong_id[4] = 'X';
  EXPECT_NE(DecodePod(wrong_id.data(), wrong_id.size()).status().message().find("identifier"),
            std::string::npos);
  std::vector<uint8_t> truncated(buf.begin(), buf.begin() + buf.size() / 2);
  EXPECT_FALSE(DecodePod(truncated.data(), truncated.size()).ok());
  // Random corruption never crashes (the verifier or the conversion rejects what is broken).
  std::mt19937 rng(42);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> c = buf;
    for (int k = 0; k < 4; ++k) c[rng() % c.size()] = static_cast<uint8_t>(rng());
    (void)DecodePod(c.data(), c.size());
  }
}

TEST(PodFlatBuffersTest, MissingPartsAndBadQuantities) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(ipc::pod::CreatePod(fbb), ipc::pod::PodIdentifier());
  EXPECT_EQ(DecodePod(fbb.GetBufferPointer(), fbb.GetSize()).status().message(),
            "pod has no metadata");

  Pod pod = FullStaticPod();
  flatbuffers::FlatBufferBuilder b2;
  // A hand-built container with a broken quantity.
  auto q = ipc::pod::CreateResourceQuantityDirect(b2, "memory", "12xyz");
  std::vector<flatbuffers::Offset<ipc::pod::ResourceQuantity>> qs = {q};
  auto res = ipc::pod::CreateResourceRequirementsDirect(b2, nullptr, &qs);
  auto c = ipc::pod::CreateContainerDirect(b2, "app", "busybox");
  (void)c;
  ipc::pod::ContainerBuilder cb(b2);
  cb.add_resources(res);
  auto container = cb.Finish();
  std::vector<flatbuffers::Offset<ipc::pod::Container>> cs = {container};
  auto spec = ipc::pod::CreatePodSpecDirect(b2, nullptr, &cs);
  auto meta = ipc::pod::CreateObjectMetaDirect(b2, "web");
  b2.Finish(ipc::pod::CreatePod(b2, meta, spec), ipc::pod::PodIdentifier());
  auto decoded = DecodePod(b2.GetBufferPointer(), b2.GetSize());
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("resources.limits[memory]: quantities must match"),
            std::string::npos)
      << decoded.status().message();
}

}  // namespace
}  // namespace nodelet::pod
