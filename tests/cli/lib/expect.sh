# Shared by the CLI contract tests (sourced, not run): a scratch folder removed on exit, a
# failure flag, and expect CODE PATTERN -- command..., which checks a command's exit code and
# that its output (stdout and stderr) matches PATTERN.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" != "$code" ]; then
    echo "FAIL: '$*' exited $rc, expected $code: $out"
    fail=1
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: '$*' output does not match /$pattern/: $out"
    fail=1
  fi
}
