#!/usr/bin/env bash
# Installs the host tools that the tests use and that a fresh Debian machine
# lacks: Debian's busybox-static (/bin/busybox), from which test/images makes
# the test images, and bash-static for the Kubernetes e2e images; containerd and containernetworking-plugins, for test/vk's
# containerd run; libseccomp-dev, for the current engine's runc. Quick and silent when they are all there.
set -euo pipefail

missing=()
[ -x /bin/busybox ] || missing+=(busybox-static)
# The Kubernetes e2e images' /bin/bash and /bin/sh (test/images/kubee2e).
[ -x /bin/bash-static ] || missing+=(bash-static)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server) # test/remote: the ssh:// host
# test/vk runs vk-cri on containerd's CRI plugin too, on a CNI bridge.
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
# The current engine's runc (make test-engine-current) is built with its
# seccomp support, through cgo: the library's headers and pkg-config.
[ -e /usr/include/seccomp.h ] || missing+=(libseccomp-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
# The Kubernetes e2e images' busybox is upstream's, built static from its
# release (test/toolcache): a C compiler and libc's static archive.
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
[ -e /usr/include/stdio.h ] || missing+=(libc6-dev)

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-tools: missing ${missing[*]} and there is no apt-get to install them" >&2
  exit 1
fi

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

echo "ensure-tools: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when the install fails without it (a fresh
# machine has none).
if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x /bin/busybox ] || { echo "ensure-tools: /bin/busybox is still missing" >&2; exit 1; }
