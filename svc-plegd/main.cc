// nodelet-plegd: parses flags and runs the service (all logic is in plegd_service.cc).
#include "svc-plegd/plegd_service.h"

int main(int argc, char** argv) {
  return nodelet::RunService(nodelet::plegd::MakeSpec(), argc, argv);
}
