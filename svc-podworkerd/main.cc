// nodelet-podworkerd: parses flags and runs the service (all logic is in podworkerd_service.cc).
#include "svc-podworkerd/podworkerd_service.h"

int main(int argc, char** argv) {
  return nodelet::RunService(nodelet::podworkerd::MakeSpec(), argc, argv);
}
