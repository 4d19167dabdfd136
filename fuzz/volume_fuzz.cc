// libFuzzer target: the volume API decode path (envelope + VolumeMessage), as volumed runs it
// on requests and podworkerd and nodeletctl on replies and change notices.
#include "fuzz/message_fuzz.h"
#include "volume_generated.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nodelet::ipc::volume::VolumeMessage;
  (void)nodelet::fuzz::DecodeAndReadAll<VolumeMessage>(
      data, size, nodelet::ipc::volume::VolumeMessageIdentifier());
  return 0;
}
