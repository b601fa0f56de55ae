#!/usr/bin/env bash
# Installs the Debian tools the tests and demo use (gcc, g++, binutils, gdb, strace, bpftool,
# <sys/sdt.h>) when they are missing. gdb is the truth for where a breakpoint on a source line
# goes; strace for which files upscope writes; bpftool for which BPF objects are left.
# Runs as root on a fresh machine; does nothing when everything is already there.
set -euo pipefail
need=()
for tool in gcc g++ readelf nm objdump strip setpriv addr2line objcopy gdb strace; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-host: missing ${need[*]}; install gcc, g++, binutils, gdb, strace and util-linux (needs root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc g++ binutils gdb strace libc6-dev util-linux >/dev/null
fi
# <sys/sdt.h> (USDT probes in the test programs) comes from systemtap-sdt-dev.
if ! echo '#include <sys/sdt.h>' | gcc -E -x c - >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-host: missing <sys/sdt.h>; install systemtap-sdt-dev (needs root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemtap-sdt-dev >/dev/null
fi
# bpftool lists the kernel's BPF programs, maps and links: the fault tests' truth that nothing
# of a killed upscope stays loaded.
if ! command -v bpftool >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-host: missing bpftool; install bpftool (needs root)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftool >/dev/null
fi
