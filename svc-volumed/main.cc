// nodelet-volumed: parses flags and runs the service (all logic is in volumed_service.cc).
#include "svc-volumed/volumed_service.h"

int main(int argc, char** argv) {
  return nodelet::RunService(nodelet::volumed::MakeSpec(), argc, argv);
}
