#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo use, when they are missing, so that a
# fresh machine runs every test with none skipped. Runs as root (CI, and `npm test` as root);
# as another user it installs nothing and prints the one command that would.
#
# Each line of NEEDS is "CHECK|PACKAGE": CHECK is a command that succeeds when the tool is
# there (most often `command -v NAME`), PACKAGE what installs it (after the last '|').
#   gcc, g++, binutils: the C and C++ targets, and readelf/nm/objdump, the truth for offsets
#   gdb: the truth for breakpoints on source lines and for stacks (bt)
#   strace: which files upscope writes
#   bpftool: which BPF objects a killed upscope leaves loaded
#   systemtap-sdt-dev: <sys/sdt.h>, USDT probes in the test programs
#   golang-go: Go targets (return probes through moving goroutine stacks, Go's register ABI)
#   libc6-dbg: libc's separate debug file (.symtab by build-id: _int_malloc by name)
#   dwz: debug info shared between programs into a supplementary file, as distributions'
#     debug packages are made
#   xz-utils: MiniDebugInfo (.gnu_debugdata) made and read, as Fedora's programs carry it
#   nginx-light: a real forking server for -p/-c over children
#   bpftrace: another tracer's kernel uprobe on the function the ptrace engine probes
#   chromium: the flame graph opened as a person would (headless, driven by playwright-core),
#     speedscope loading the chrome and speedscope files upscope writes, and upscope ui's page
#   tmux: upscope top driven in a real terminal (send-keys, capture-pane)
#   prometheus: promtool, Prometheus's own reader of the exposition text upscope writes, and
#     the server, which scrapes count/hist/latency --prometheus in the tests
# `--check` prints what is missing and exits 1 if anything is, installing nothing.
set -euo pipefail

NEEDS=(
  'command -v gcc|gcc'
  'command -v g++|g++'
  'command -v readelf && command -v nm && command -v objdump && command -v strip && command -v addr2line && command -v objcopy|binutils'
  'command -v setpriv|util-linux'
  'command -v gdb|gdb'
  'command -v strace|strace'
  'command -v bpftool|bpftool'
  "echo '#include <sys/sdt.h>' | gcc -E -x c - |systemtap-sdt-dev"
  'command -v go|golang-go'
  'test -d /usr/lib/debug/.build-id && dpkg -s libc6-dbg|libc6-dbg'
  'command -v dwz|dwz'
  'command -v xz|xz-utils'
  'command -v nginx|nginx-light'
  'command -v bpftrace|bpftrace'
  'command -v chromium|chromium'
  'command -v tmux|tmux'
  'command -v promtool && command -v prometheus|prometheus'
)

missing=()
for need in "${NEEDS[@]}"; do
  # The package is after the last '|' (a check may hold pipes of its own).
  check=${need%|*}
  package=${need##*|}
  if ! bash -c "$check" >/dev/null 2>&1; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "${1:-}" = "--check" ] || [ "$(id -u)" -ne 0 ]; then
  echo "setup-host: missing ${missing[*]}; install with: sudo bash scripts/setup-host.sh" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# gcc's libc headers come with libc6-dev; nginx must not start a server of its own at install
# (there is no init here, but a policy-rc.d keeps it so where there is one).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y -qq libc6-dev "${missing[@]}" >/dev/null
