/* nodelet's pause program: the init process of a pod sandbox. It holds the sandbox's namespaces
 * open by doing nothing, reaps the zombies of processes that end up as its children (it is
 * PID 1 when the pod shares a PID namespace), and exits 0 on SIGTERM or SIGINT. Built static,
 * so its image needs nothing else (images/build-images). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_terminate(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
    printf("nodelet-pause 1.0\n");
    return 0;
  }
  if (getpid() != 1) {
    fprintf(stderr, "pause: warning: not running as PID 1\n");
  }
  struct sigaction terminate;
  memset(&terminate, 0, sizeof terminate);
  terminate.sa_handler = on_terminate;
  sigemptyset(&terminate.sa_mask);
  if (sigaction(SIGTERM, &terminate, NULL) != 0 || sigaction(SIGINT, &terminate, NULL) != 0) {
    perror("pause: sigaction");
    return 1;
  }
  struct sigaction child;
  memset(&child, 0, sizeof child);
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigemptyset(&child.sa_mask);
  if (sigaction(SIGCHLD, &child, NULL) != 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) pause();
  return 42; /* not reached */
}
