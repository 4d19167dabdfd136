// nodeletctl (placeholder until the control socket lands).
int main() { return 0; }
