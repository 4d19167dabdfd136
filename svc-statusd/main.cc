// nodelet-statusd: parses flags and runs the service (all logic is in statusd_service.cc).
#include "svc-statusd/statusd_service.h"

int main(int argc, char** argv) {
  return nodelet::RunService(nodelet::statusd::MakeSpec(), argc, argv);
}
