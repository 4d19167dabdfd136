// nodelet: the supervisor (placeholder until the process manager lands).
int main() { return 0; }
