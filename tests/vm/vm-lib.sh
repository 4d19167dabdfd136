# Helpers of the VM scenarios (tests/vm/scenario-*), sourced inside the VM. Every line for the
# host starts with "vm-test: "; a scenario ends with `finish`, which prints the result line
# vm-test waits for.
failures=0
say() { printf 'vm-test: %s\n' "$*"; }
pass() { say "PASS $1"; }
fail() { say "FAIL $1: $2"; failures=$((failures + 1)); }
finish() {
  if [ "$failures" -eq 0 ]; then say "result PASS"; else say "$failures checks failed"; say "result FAIL"; fi
  sync
}

# until_ok SECONDS COMMAND...: runs COMMAND every 200 ms until it succeeds or SECONDS pass (the
# state checked here, a pod's phase or a unit's, has no event a shell can wait on).
until_ok() {
  local deadline=$((SECONDS + $1))
  shift
  while ! "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}
ctl() { timeout 30 nodeletctl "$@"; }
