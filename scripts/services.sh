#!/usr/bin/env bash
# Install (Debian, as root or with sudo) and start what Boltz needs on this host:
# Docker Engine, Redis and a static busybox. Idempotent: what is already installed or running
# is reused.
#   scripts/services.sh install   install the Debian packages that are missing
#   scripts/services.sh start     start dockerd and redis-server if they are not running
#   scripts/services.sh browser   install Chromium (browser tests)
#   scripts/services.sh python    install python3 and python3-venv
#   scripts/services.sh postgres  install and start a test PostgreSQL on 127.0.0.1:5433
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
fi

need_debian() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "boltz: this is not a Debian-like system. Install these yourself, then re-run:" >&2
    echo "  $*" >&2
    exit 1
  fi
}

apt_install() {
  local missing=()
  for pair in "$@"; do
    local cmd="${pair%%:*}" pkg="${pair##*:}"
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_packages "${missing[@]}"
}

apt_packages() {  # install these Debian packages
  need_debian "$@"
  echo "boltz: installing $*"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "$@"
}

as_user() {  # as_user USER COMMAND...
  local user="$1"; shift
  if [ "$(id -u)" -eq 0 ]; then runuser -u "$user" -- "$@"; else sudo -u "$user" "$@"; fi
}

wait_for() {  # wait_for DESCRIPTION COMMAND...
  local what="$1"; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "boltz: $what did not come up" >&2
  return 1
}

case "${1:-start}" in
  install)
    apt_install dockerd:docker.io redis-server:redis-server debootstrap:debootstrap git:git \
      mkfs.btrfs:btrfs-progs
    # systemd-analyze checks the systemd units (scripts/systemd_units.sh, docs/DEPLOY.md).
    apt_install systemd-analyze:systemd
    # gVisor's runsc, offered to sandboxes as BOLTZ_RUNTIME=runsc (optional: Debian has it).
    apt_install runsc:runsc || echo "boltz: runsc is not available; BOLTZ_RUNTIME=runsc will not work" >&2
    # Boltz's own tools in every sandbox (its init's sleep, its exec wrapper and scripts) are
    # Debian's static busybox, mounted read-only: the dynamically linked `busybox` won't do.
    if command -v dpkg >/dev/null 2>&1; then
      dpkg -s busybox-static >/dev/null 2>&1 || apt_packages busybox-static
    elif [ ! -x /bin/busybox ]; then
      need_debian busybox-static
    fi
    ;;
  browser)
    apt_install chromium:chromium
    ;;
  postgres)
    # A throwaway PostgreSQL on 127.0.0.1:5433 for the test suite (make test-postgres).
    PGBIN=$(dirname "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -1)" 2>/dev/null || true)
    if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
      need_debian postgresql
      $SUDO apt-get update -q
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends postgresql
      PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | tail -1)")
    fi
    PGUSER_OS=postgres
    PGDATA=/tmp/boltz-pgdata
    # Each test process, each worker (a connection per slot, per operation thread) and each web
    # process holds connections: the whole suite on 4 processes needs more than the default 100
    # ("too many clients already").
    PGCONNECTIONS=400
    PGOPTS="-k /tmp -h 127.0.0.1 -p 5433 -c max_connections=$PGCONNECTIONS"
    if ! pg_isready -h 127.0.0.1 -p 5433 >/dev/null 2>&1; then
      id "$PGUSER_OS" >/dev/null 2>&1 || $SUDO useradd --system --create-home "$PGUSER_OS"
      $SUDO rm -rf "$PGDATA"; $SUDO mkdir -p "$PGDATA"; $SUDO chown "$PGUSER_OS" "$PGDATA"
      as_user "$PGUSER_OS" "$PGBIN/initdb" -D "$PGDATA" -U boltz --auth=trust >/dev/null
      as_user "$PGUSER_OS" "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" \
        -o "$PGOPTS" start >/dev/null
      wait_for "PostgreSQL" pg_isready -h 127.0.0.1 -p 5433
    elif [ -d "$PGDATA" ] && [ "$(psql -h 127.0.0.1 -p 5433 -U boltz -d postgres -tAc 'show max_connections')" -lt "$PGCONNECTIONS" ]; then
      echo "boltz: restarting the test PostgreSQL with max_connections=$PGCONNECTIONS"
      as_user "$PGUSER_OS" "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" \
        -o "$PGOPTS" -m fast restart >/dev/null
      wait_for "PostgreSQL" pg_isready -h 127.0.0.1 -p 5433
    fi
    psql -h 127.0.0.1 -p 5433 -U boltz -d postgres -tAc "select 1 from pg_database where datname='boltz'" | grep -q 1 \
      || psql -h 127.0.0.1 -p 5433 -U boltz -d postgres -qc "create database boltz"
    ;;
  python)
    need_debian python3-venv
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends python3 python3-venv
    ;;
  start)
    if ! docker info >/dev/null 2>&1; then
      if ! command -v dockerd >/dev/null 2>&1 && [ ! -x /usr/sbin/dockerd ]; then
        echo "boltz: Docker Engine is not installed (run: $0 install)" >&2; exit 1
      fi
      echo "boltz: starting dockerd"
      # No bridge and no iptables: sandboxes run with network_mode=none and no
      # private-range interface is created on this host.
      args="--bridge=none --iptables=false"
      # Docker keeps its containers on a btrfs file system of their own (a file on this disk,
      # mounted by loop) with quotas on, so that each sandbox's disk limit is enforced by the
      # kernel (`--storage-opt size`; overlay2 can only do this on XFS with project quotas)
      # and Docker as a whole can never fill this host's disk. BOLTZ_DOCKER_BTRFS=0 keeps
      # Docker's own default; sandboxes then run without a disk limit (the worker says so).
      if [ "${BOLTZ_DOCKER_BTRFS:-1}" != 0 ]; then
        root=/var/lib/boltz-docker
        file=${BOLTZ_DOCKER_DISK_FILE:-/var/lib/boltz-docker.btrfs}
        if ! mountpoint -q "$root"; then
          if [ ! -f "$file" ]; then
            # Sized once, at 3/4 of the disk's free space (or BOLTZ_DOCKER_DISK_GB); sparse.
            free_gb=$(df --output=avail -BG "$(dirname "$file")" | tail -1 | tr -dc 0-9)
            size_gb=${BOLTZ_DOCKER_DISK_GB:-$((free_gb * 3 / 4))}
            echo "boltz: making a ${size_gb} GB btrfs file system for Docker at $file"
            $SUDO truncate -s "${size_gb}G" "$file"
            $SUDO mkfs.btrfs -q "$file" >/dev/null
          fi
          $SUDO mkdir -p "$root"
          $SUDO mount -o loop "$file" "$root"
          # Simple quotas (Linux 6.7+; Debian 12's btrfs-progs cannot ask for them, hence
          # the ioctl): each container's own writes are counted, so a container starts and
          # goes in a second, where full quota groups take half a minute per container.
          $SUDO python3 - "$root" <<'PY' || echo "boltz: no simple quotas here (Linux 6.7+ has them): sandboxes run without a disk limit" >&2
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
mode = os.path.join("/sys/fs/btrfs", os.popen(f"btrfs filesystem show {sys.argv[1]}").read().split("uuid: ")[1].split()[0], "qgroups", "mode")
if not os.path.exists(mode) or open(mode).read().strip() != "squota":
    if os.path.exists(mode):
        fcntl.ioctl(fd, 0xC0109428, struct.pack("QQ", 2, 0))  # BTRFS_QUOTA_CTL_DISABLE
    fcntl.ioctl(fd, 0xC0109428, struct.pack("QQ", 4, 0))  # ..._ENABLE_SIMPLE_QUOTA
PY
        fi
        args="$args --data-root=$root --storage-driver=btrfs"
      fi
      # gVisor for BOLTZ_RUNTIME=runsc, through a wrapper that gives it no network stack of
      # its own (sandboxes have none, network_mode=none, and runsc's own refuses to start
      # here) and shared file access: Boltz puts files into running sandboxes, which gVisor's
      # default (exclusive) would not see.
      if command -v runsc >/dev/null 2>&1; then
        $SUDO mkdir -p /usr/local/lib/boltz
        printf '#!/bin/sh\nexec %s --network=none --file-access=shared "$@"\n' "$(command -v runsc)" \
          | $SUDO tee /usr/local/lib/boltz/runsc >/dev/null
        $SUDO chmod 755 /usr/local/lib/boltz/runsc
        args="$args --add-runtime=runsc=/usr/local/lib/boltz/runsc"
      fi
      $SUDO sh -c "nohup dockerd $args >/var/log/boltz-dockerd.log 2>&1 &"
      wait_for "dockerd (see /var/log/boltz-dockerd.log)" docker info
    fi
    if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
      echo "boltz: starting redis-server on 127.0.0.1:6379"
      redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --save "" --appendonly no \
        --logfile /tmp/boltz-redis.log
      wait_for "redis-server" redis-cli -h 127.0.0.1 ping
    fi
    ;;
  *)
    echo "usage: $0 install|start|browser|python|postgres" >&2; exit 2 ;;
esac
