# shellcheck shell=bash
# tests/system/lib.sh — boot a real systemd in throwaway containers (DESIGN §7).
#
# Sourced by run.sh and by every t_*.sh. Recipe:
#   * a Debian rootfs made once by debootstrap and cached OUTSIDE the repo
#     ($SYS_CACHE_DIR/<suite>-<hash of the recipe>), built in a temp dir and renamed into
#     place, so an interrupted build is never taken for a cache;
#   * each container boots from a fresh overlayfs (cache = read-only lower layer, empty upper
#     layer in $SYS_STATE_DIR), falling back to `cp -a --reflink=auto` where overlayfs is not
#     available; measured on the dev machine: overlay ~0 s + boot 0.3 s, cp -a 3-6 s,
#     `systemd-nspawn --ephemeral` 3.3 s;
#   * `systemd-nspawn -D ROOT -M NAME --register=no --keep-unit -b` in the background, with a
#     private network (loopback only) unless `--network host` is asked for;
#   * commands run inside with `nsenter -t <container PID 1> -a`.
#
# Functions (NAME is the test's short name; it is also the container's hostname):
#   sys_preflight                          root? host packages? namespaces? else SKIP (exit 0;
#                                          under CI: FAIL, exit 1)
#   sys_rootfs                             print the cached rootfs path, building it if needed
#   sys_boot NAME [--bind SRC:DST] [--bind-ro SRC:DST] [--network host|private|netns:PATH]
#   sys_prepare NAME / sys_root NAME        make (and print) a container's root without booting
#   sys_reboot NAME [OPTIONS]              systemctl reboot inside, then boot the same root again
#   sys_exec NAME CMD...                   run CMD as root inside (stdin/stdout/stderr passed)
#   sys_exec_as NAME USER CMD...           same, as USER (runuser)
#   sys_sh NAME 'SCRIPT'                   bash -c SCRIPT inside
#   sys_copy_in NAME SRC DST               file or directory from the host into the container
#   sys_copy_out NAME SRC DST              file from the container to the host
#   sys_install_deb NAME DEB               install the .deb inside (dpkg -i, apt-get -f)
#   sys_stop NAME                          power off, unmount, remove (also done by the trap)
#   sys_wait_until SECONDS DESC CMD...     poll CMD every 0.2 s until it succeeds or time runs out
#   sys_use_wide_rootfs                    use the second image (+ syncthing, slurm, munge, python3)
# Test helpers: sys_test_begin, sys_check, sys_expect_eq, sys_expect_match, sys_pass, sys_fail,
# sys_test_skip, sys_test_end.
#
# Environment (all optional):
#   SYS_SUITE (bookworm)  SYS_INCLUDE (package list)  SYS_MIRROR (default: the host's apt mirror)
#   SYS_CACHE_DIR (/var/cache/agentstore-test)  SYS_STATE_DIR (per run, made on demand)
#   SYS_BOOT_TIMEOUT (120)  SYS_KEEP=1 keeps the state dir (console logs, overlays) on exit.

set -euo pipefail

SYS_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SYS_LIB_DIR
SYS_SUITE=${SYS_SUITE:-bookworm}
SYS_VARIANT=minbase
SYS_INCLUDE=${SYS_INCLUDE:-systemd,systemd-sysv,dbus,libssl3,ca-certificates,procps}
SYS_CACHE_DIR=${SYS_CACHE_DIR:-/var/cache/agentstore-test}
# Tests that need more than the base image (a real Syncthing, a real Slurm) share ONE second
# cached rootfs, so a clean machine runs debootstrap at most twice. Such a test calls
# `sys_use_wide_rootfs` right after sourcing this file, before sys_test_begin/sys_prepare.
SYS_INCLUDE_WIDE="$SYS_INCLUDE,syncthing,slurmctld,slurmd,slurm-client,munge,python3"
sys_use_wide_rootfs() { SYS_INCLUDE=$SYS_INCLUDE_WIDE; }
SYS_BOOT_TIMEOUT=${SYS_BOOT_TIMEOUT:-120}
# Bump when the post-processing in sys__build_rootfs changes: it is part of the cache key.
SYS_RECIPE_VERSION=1

# Containers booted by THIS shell (stopped by its EXIT trap) and extra cleanup commands.
SYS_BOOTED=()
SYS_ON_EXIT=()

sys_log() { printf '[sys %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# sys_in_ci — true when CI is set (to anything but empty, 0 or false): then nothing may skip.
sys_in_ci() {
    case "${CI:-}" in "" | 0 | false | FALSE) return 1 ;; *) return 0 ;; esac
}

sys_skip() {
    if sys_in_ci; then
        echo "FAIL: the system suite cannot run here, and CI is set (under CI a skip fails): $*"
        exit 1
    fi
    echo "SKIP: $*"
    exit 0
}

sys_die() {
    echo "ERROR: $*" >&2
    exit 1
}

# Monotonic-enough wall clock in milliseconds, for the timings the runner prints.
sys_now_ms() { date +%s%3N; }
sys_fmt_ms() { printf '%d.%03ds' $(($1 / 1000)) $(($1 % 1000)); }

# ---------------------------------------------------------------------------------------
# Cleanup

sys_on_exit() { SYS_ON_EXIT+=("$*"); }

sys__on_exit() {
    local rc=$? cmd name
    set +e
    for cmd in "${SYS_ON_EXIT[@]}"; do
        eval "$cmd"
    done
    for name in "${SYS_BOOTED[@]}"; do
        sys_stop "$name"
    done
    if [ "${SYS_STATE_OWNER:-}" = "$BASHPID" ]; then
        if [ "${SYS_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
            [ -d "${SYS_STATE_DIR:-}" ] && sys_log "kept state and logs in $SYS_STATE_DIR"
        else
            sys__rm_tree "$SYS_STATE_DIR"
        fi
    fi
    exit "$rc"
}
trap sys__on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Unmount everything below DIR (deepest first) and remove it without crossing into any
# filesystem that is still mounted there (a half-done debootstrap leaves proc/sys mounted).
sys__rm_tree() {
    local dir=$1 m
    [ -n "$dir" ] && [ -e "$dir" ] || return 0
    dir=$(realpath -e "$dir")
    case "$dir" in / | /var | /var/cache | /var/tmp | /tmp | /usr | /etc | /home) sys_die "refusing to remove $dir" ;; esac
    while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
    rm -rf --one-file-system -- "$dir"
}

# ---------------------------------------------------------------------------------------
# Preflight

sys__need_cmd() { # CMD PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    sys_log "installing $2 (for $1)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1; } ||
        true
    command -v "$1" >/dev/null 2>&1
}

sys_preflight() {
    [ "$(id -u)" = 0 ] || sys_skip "the system suite needs root (systemd-nspawn, mounts, debootstrap); run it as root"
    if [ ! -r /etc/debian_version ] || ! command -v apt-get >/dev/null 2>&1; then
        sys_skip "the system suite needs a Debian-like host (apt-get, debootstrap)"
    fi
    sys__need_cmd systemd-nspawn systemd-container || sys_skip "systemd-nspawn not available (apt-get install systemd-container failed)"
    sys__need_cmd debootstrap debootstrap || sys_skip "debootstrap not available (apt-get install debootstrap failed)"
    sys__need_cmd nsenter util-linux || sys_skip "nsenter not available"
    sys__need_cmd mountpoint util-linux || sys_skip "mountpoint not available"
    unshare --mount --pid --uts --ipc --net --fork true 2>/dev/null ||
        sys_skip "cannot create namespaces here (unshare failed): systemd-nspawn cannot run"
    # nspawn keeps its propagation folders there; under a lock so that two runs starting
    # together do not stack two tmpfs mounts.
    mkdir -p /run/systemd/nspawn
    flock /run/systemd/.agentstore-nspawn.lock sh -c \
        'mountpoint -q /run/systemd/nspawn || mount -t tmpfs tmpfs /run/systemd/nspawn' ||
        sys_skip "cannot mount a tmpfs on /run/systemd/nspawn"
    sys__state_dir >/dev/null
}

# The per-run state folder (overlays, console logs). Made once; inherited by child tests.
sys__state_dir() {
    if [ -z "${SYS_STATE_DIR:-}" ]; then
        SYS_STATE_DIR=$(mktemp -d /var/tmp/agentstore-sys.XXXXXX)
        SYS_STATE_OWNER=$BASHPID
        export SYS_STATE_DIR
    fi
    mkdir -p "$SYS_STATE_DIR/logs"
    echo "$SYS_STATE_DIR"
}

# ---------------------------------------------------------------------------------------
# Cached rootfs

# The host's own Debian mirror (so a host behind a local mirror uses it); empty = debootstrap's
# default.
sys__mirror() {
    if [ -n "${SYS_MIRROR:-}" ]; then
        echo "$SYS_MIRROR"
        return
    fi
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' "$f"
    done | head -n1 | grep . && return
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\/.*\/debian\/?$/) { print $i; exit } }' | head -n1
}

sys__rootfs_key() {
    printf '%s\n' "$SYS_RECIPE_VERSION" "$SYS_SUITE" "$SYS_VARIANT" "$SYS_INCLUDE" | sha256sum | cut -c1-12
}

sys_rootfs_path() { echo "$SYS_CACHE_DIR/$SYS_SUITE-$(sys__rootfs_key)"; }

# Print the cached rootfs, building it first if it is missing. Concurrent runs serialize
# on a lock; a build that was interrupted leaves only a dot-folder that the next build removes.
sys_rootfs() {
    local final lockfd
    final=$(sys_rootfs_path)
    if [ -x "$final/usr/lib/systemd/systemd" ]; then
        echo "$final"
        return
    fi
    mkdir -p "$SYS_CACHE_DIR"
    exec {lockfd}>"$SYS_CACHE_DIR/.lock"
    flock "$lockfd"
    if [ ! -x "$final/usr/lib/systemd/systemd" ]; then
        sys__build_rootfs "$final" || {
            exec {lockfd}>&-
            return 1
        }
    fi
    exec {lockfd}>&-
    echo "$final"
}

sys__build_rootfs() {
    local final=$1 tmp mirror t0 stale
    for stale in "$SYS_CACHE_DIR"/.build-*; do
        [ -e "$stale" ] || continue
        sys_log "removing interrupted build $stale"
        sys__rm_tree "$stale"
    done
    tmp=$(mktemp -d "$SYS_CACHE_DIR/.build-$(basename "$final").XXXXXX")
    mirror=$(sys__mirror)
    sys_log "building $SYS_SUITE rootfs ($SYS_INCLUDE) into $final${mirror:+ from $mirror}; log: $tmp/debootstrap.log"
    t0=$(sys_now_ms)
    # shellcheck disable=SC2086 # $mirror is one word or nothing
    if ! debootstrap --variant="$SYS_VARIANT" --include="$SYS_INCLUDE" "$SYS_SUITE" "$tmp/root" $mirror \
        >"$tmp/debootstrap.log" 2>&1; then
        tail -n 20 "$tmp/debootstrap.log" >&2
        sys_log "debootstrap failed (kept log: $SYS_CACHE_DIR/debootstrap-failed.log)"
        cp "$tmp/debootstrap.log" "$SYS_CACHE_DIR/debootstrap-failed.log" || true
        sys__rm_tree "$tmp"
        return 1
    fi
    # Every container gets its own identity: hostname from sys_boot, machine-id generated at
    # boot (an empty /etc/machine-id makes systemd create a transient one).
    # (Each step is checked: this may run where `set -e` is off, e.g. under `if`.)
    if ! {
        rm -f "$tmp/root/etc/hostname" &&
        : >"$tmp/root/etc/machine-id" &&
        rm -f "$tmp/root/var/lib/dbus/machine-id" &&
        ln -s /etc/machine-id "$tmp/root/var/lib/dbus/machine-id" &&
        # Keep the package lists (apt resolves the .deb's dependencies offline), drop the .debs.
        rm -f "$tmp/root/var/cache/apt/archives/"*.deb &&
        printf 'suite=%s\nvariant=%s\ninclude=%s\nrecipe=%s\nbuilt=%s\n' "$SYS_SUITE" "$SYS_VARIANT" \
            "$SYS_INCLUDE" "$SYS_RECIPE_VERSION" "$(date -u +%FT%TZ)" >"$tmp/root/etc/agentstore-test-rootfs" &&
        mv "$tmp/debootstrap.log" "$final.debootstrap.log" &&
        mv -T "$tmp/root" "$final"
    }; then
        sys_log "preparing the rootfs failed"
        sys__rm_tree "$tmp"
        return 1
    fi
    sys__rm_tree "$tmp"
    SYS_ROOTFS_BUILD_MS=$(($(sys_now_ms) - t0))
    sys_log "rootfs built in $(sys_fmt_ms "$SYS_ROOTFS_BUILD_MS") ($(du -sh "$final" | cut -f1))"
}

# ---------------------------------------------------------------------------------------
# Containers

sys__dir() { echo "$SYS_STATE_DIR/machines/$1"; }

sys__alive() { # PID — running and not a zombie
    local st
    [ -r "/proc/$1/stat" ] || return 1
    st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

sys_pid() { # NAME — the container's PID 1 as seen from the host
    local f
    f="$(sys__dir "$1")/pid"
    [ -s "$f" ] || sys_die "container $1 is not running"
    cat "$f"
}

# sys_prepare NAME — make the container's root (a fresh overlay on the cached rootfs) without
# booting it; `sys_root NAME` prints its path, e.g. to install into it with chroot first.
# sys_boot then boots that root. Cleaned up by the EXIT trap like a booted container.
sys_prepare() {
    local name=$1 rootfs dir merged
    [[ $name =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || sys_die "bad container name '$name' (lowercase, digits, '-')"
    sys__state_dir >/dev/null
    rootfs=$(sys_rootfs) || return 1
    dir=$(sys__dir "$name")
    [ ! -e "$dir" ] || sys_die "container $name already exists ($dir)"
    mkdir -p "$dir/upper" "$dir/work" "$dir/merged"
    merged=$dir/merged
    SYS_BOOTED+=("$name")
    if mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$dir/upper,workdir=$dir/work" "$merged" 2>/dev/null; then
        echo overlay >"$dir/mode"
    else
        sys_log "overlayfs unavailable; copying the rootfs (slower)"
        cp -a --reflink=auto "$rootfs/." "$merged/"
        echo copy >"$dir/mode"
    fi
    echo "$name" >"$merged/etc/hostname"
}

sys_root() { echo "$(sys__dir "$1")/merged"; }

sys_boot() {
    local name=$1 network=private rootfs dir merged np pid t0 st out
    shift
    local -a extra=()
    [[ $name =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || sys_die "bad container name '$name' (lowercase, digits, '-')"
    while [ $# -gt 0 ]; do
        case "$1" in
        --bind) extra+=("--bind=$2"); shift 2 ;;
        --bind-ro) extra+=("--bind-ro=$2"); shift 2 ;;
        --network) network=$2; shift 2 ;;
        *) sys_die "sys_boot: unknown option $1" ;;
        esac
    done
    case "$network" in
    private) extra+=(--private-network) ;;
    host) ;;
    # A network namespace shared by several containers (made by `ip netns add`): they talk over
    # its loopback, nothing else is reachable (benches/soak-system.sh).
    netns:*) extra+=("--network-namespace-path=${network#netns:}") ;;
    *) sys_die "sys_boot: unknown network '$network' (private, host or netns:PATH)" ;;
    esac
    sys__state_dir >/dev/null
    dir=$(sys__dir "$name")
    [ ! -e "$dir/nspawn.pid" ] || sys_die "container $name is already booted ($dir)"
    t0=$(sys_now_ms)
    [ -e "$dir/mode" ] || sys_prepare "$name" || return 1
    merged=$dir/merged
    # A unique machine name per run, so parallel runs (or a leftover) never collide.
    local run_id=${SYS_STATE_DIR##*.}
    systemd-nspawn -D "$merged" -M "$name-${run_id,,}" --register=no --keep-unit -b \
        --console=read-only "${extra[@]}" \
        </dev/null >"$SYS_STATE_DIR/logs/$name.console.log" 2>&1 &
    np=$!
    echo "$np" >"$dir/nspawn.pid"
    # PID 1 of the container is nspawn's child once it has exec'd systemd.
    pid=""
    local deadline=$((SECONDS + SYS_BOOT_TIMEOUT))
    while [ -z "$pid" ]; do
        if ! sys__alive "$np"; then
            sys_log "systemd-nspawn exited while booting $name:"
            tail -n 30 "$SYS_STATE_DIR/logs/$name.console.log" >&2
            return 2
        fi
        [ $SECONDS -lt "$deadline" ] || { sys_log "no systemd in container $name after ${SYS_BOOT_TIMEOUT}s"; return 2; }
        for st in $(pgrep -P "$np" 2>/dev/null); do
            [ "$(cat "/proc/$st/comm" 2>/dev/null)" = systemd ] && pid=$st
        done
        [ -n "$pid" ] || sleep 0.05
    done
    echo "$pid" >"$dir/pid"
    # The manager answers on its private socket early; --wait then blocks until boot is done.
    # Before systemd has made /run/systemd/system, systemctl answers "offline": not yet.
    st=""
    while :; do
        st=$(timeout 30 nsenter -t "$pid" -a systemctl is-system-running --wait 2>/dev/null) || true
        case "$st" in "" | offline | unknown) ;; *) break ;; esac
        sys__alive "$pid" || { sys_log "container $name died while booting"; tail -n 30 "$SYS_STATE_DIR/logs/$name.console.log" >&2; return 2; }
        [ $SECONDS -lt "$deadline" ] || { sys_log "container $name: systemd never answered"; return 1; }
        sleep 0.1
    done
    SYS_LAST_BOOT_MS=$(($(sys_now_ms) - t0))
    case "$st" in
    running) sys_log "booted $name ($(cat "$dir/mode")) in $(sys_fmt_ms "$SYS_LAST_BOOT_MS"): $st" ;;
    degraded)
        sys_log "booted $name in $(sys_fmt_ms "$SYS_LAST_BOOT_MS"): degraded; failed units:"
        out=$(sys_exec "$name" systemctl --failed --no-legend --plain) || true
        printf '  %s\n' "$out" >&2
        ;;
    *)
        sys_log "container $name is '$st' after boot; failed units:"
        sys_exec "$name" systemctl --failed --no-legend --plain >&2 || true
        return 1
        ;;
    esac
}

# sys_reboot NAME [sys_boot OPTIONS...] — `systemctl reboot` inside NAME, wait until its
# systemd-nspawn has gone (nspawn ends on a reboot of its container), then boot it again on the
# same root, files kept (give the options it was first booted with).
sys_reboot() {
    local name=$1 dir np deadline
    shift
    dir=$(sys__dir "$name")
    np=$(cat "$dir/nspawn.pid" 2>/dev/null) || sys_die "container $name is not running"
    sys_exec "$name" systemctl reboot >/dev/null 2>&1 || true
    deadline=$((SECONDS + 120))
    while sys__alive "$np"; do
        [ $SECONDS -lt "$deadline" ] || { sys_log "container $name did not go down in 120 s"; return 1; }
        sleep 0.2
    done
    wait "$np" 2>/dev/null || true
    rm -f "$dir/nspawn.pid" "$dir/pid"
    sys_boot "$name" "$@"
}

sys_exec() {
    local name=$1 pid
    shift
    pid=$(sys_pid "$name")
    nsenter -t "$pid" -a -r -w -- /usr/bin/env -i \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 TERM=dumb SYSTEMD_COLORS=0 PAGER=cat SYSTEMD_PAGER=cat \
        "$@"
}

sys_exec_as() {
    local name=$1 user=$2
    shift 2
    sys_exec "$name" runuser -u "$user" -- "$@"
}

sys_sh() { sys_exec "$1" bash -c "$2"; }

sys_copy_in() { # NAME SRC DST (DST is the target path; for a directory, its new location)
    local name=$1 src=$2 dst=$3
    if [ -d "$src" ]; then
        sys_exec "$name" mkdir -p "$dst"
        tar -C "$src" -cf - . | sys_exec "$name" tar -C "$dst" -xf -
    else
        # shellcheck disable=SC2016,SC2094 # expanded inside; $src is only read
        sys_exec "$name" sh -c 'mkdir -p "$(dirname "$1")" && cat >"$1" && chmod "$2" "$1"' sh \
            "$dst" "$(stat -c %a "$src")" <"$src"
    fi
}

sys_copy_out() { # NAME SRC DST
    sys_exec "$1" cat "$2" >"$3"
}

# sys_install_deb NAME DEB — dpkg -i (0.7 s; `apt-get install ./x.deb` takes 2.7 s here, most
# of it reading the package lists); if dependencies are missing, apt-get -f brings them in
# (t_package checks the `apt-get install` path itself).
sys_install_deb() {
    local name=$1 deb=$2 in
    in=/var/tmp/$(basename "$deb")
    sys_copy_in "$name" "$deb" "$in"
    if ! sys_exec "$name" env DEBIAN_FRONTEND=noninteractive dpkg -i "$in"; then
        sys_log "dpkg -i $in failed; trying apt-get -f install"
        sys_exec "$name" env DEBIAN_FRONTEND=noninteractive apt-get install -f -y -q --no-install-recommends
    fi
}

sys_stop() {
    local name=$1 dir np pid deadline i
    dir=$(sys__dir "$name")
    [ -d "$dir" ] || return 0
    np=$(cat "$dir/nspawn.pid" 2>/dev/null || true)
    pid=$(cat "$dir/pid" 2>/dev/null || true)
    if [ -n "$np" ] && sys__alive "$np" && [ "$(cat "/proc/$np/comm" 2>/dev/null)" = systemd-nspawn ]; then
        # nspawn turns SIGTERM into an orderly poweroff of the container.
        kill -TERM "$np" 2>/dev/null || true
        deadline=$((SECONDS + 30))
        while sys__alive "$np" && [ $SECONDS -lt "$deadline" ]; do sleep 0.1; done
        if sys__alive "$np"; then
            sys_log "container $name did not power off in 30 s; killing it"
            [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
            kill -KILL "$np" 2>/dev/null || true
            for i in $(seq 50); do sys__alive "$np" || break; sleep 0.1; done
        fi
    fi
    if [ -n "$np" ]; then wait "$np" 2>/dev/null || true; fi
    if mountpoint -q "$dir/merged"; then
        umount "$dir/merged" 2>/dev/null || umount -l "$dir/merged"
    fi
    if [ "${SYS_KEEP:-0}" = 1 ]; then
        sys_log "stopped $name (kept $dir)"
    else
        sys__rm_tree "$dir"
    fi
    local -a rest=()
    for i in "${SYS_BOOTED[@]}"; do [ "$i" = "$name" ] || rest+=("$i"); done
    SYS_BOOTED=("${rest[@]}")
}

# Stop every container recorded in this run's state dir (the runner's final sweep).
sys_stop_all() {
    local d
    [ -d "${SYS_STATE_DIR:-}/machines" ] || return 0
    for d in "$SYS_STATE_DIR"/machines/*/; do
        [ -d "$d" ] && sys_stop "$(basename "$d")"
    done
}

# sys_kill9 MACHINE UNIT — SIGKILL every process of UNIT (a power cut for it). On a host whose
# cgroups are v1, systemd can fail to reach a unit's other processes once the main one is killed
# ("Failed to send signal SIGKILL to auxiliary processes: Input/output error"; t_slurm, once):
# that is no failure of the test as long as the main process is gone.
sys_kill9() {
    local machine=$1 unit=$2 pid out
    pid=$(sys_exec "$machine" systemctl show -p MainPID --value "$unit" 2>/dev/null) || pid=0
    out=$(sys_exec "$machine" systemctl kill --signal=KILL "$unit" 2>&1) && return 0
    sys_log "systemctl kill --signal=KILL $unit: $out"
    [ "${pid:-0}" != 0 ] || return 1
    sys_wait_until 20 "$unit's main process $pid gone" sys__gone "$machine" "$pid"
}
sys__gone() { ! sys_exec "$1" kill -0 "$2"; }

sys_wait_until() { # SECONDS DESC CMD...
    local secs=$1 desc=$2 deadline
    shift 2
    deadline=$(($(sys_now_ms) + secs * 1000))
    until "$@" >/dev/null 2>&1; do
        if [ "$(sys_now_ms)" -ge "$deadline" ]; then
            sys_log "timed out after ${secs}s waiting for: $desc"
            return 1
        fi
        sleep 0.2
    done
}

# ---------------------------------------------------------------------------------------
# Test helpers: each t_*.sh prints one PASS/FAIL line per check and exits non-zero on any FAIL.

SYS_T_PASS=0
SYS_T_FAIL=0

# sys_test_begin — name the test; make sure $SYS_MACHINE is a booted container (the runner
# gives each test a fresh one with the .deb installed; run alone, a test boots its own,
# installing $SYS_DEB when that is set). sys_test_begin_no_machine: only name the test.
sys_test_begin_no_machine() {
    SYS_TEST=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
    SYS_T_START=$(sys_now_ms)
}

sys_test_begin() {
    SYS_TEST=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
    SYS_T_START=$(sys_now_ms)
    if [ -z "${SYS_MACHINE:-}" ] || [ ! -s "$(sys__dir "$SYS_MACHINE")/pid" ]; then
        sys_preflight
        SYS_MACHINE=${SYS_TEST//_/-}
        SYS_MACHINE=${SYS_MACHINE,,}
        sys_boot "$SYS_MACHINE" || sys_die "could not boot $SYS_MACHINE"
        if [ -n "${SYS_DEB:-}" ]; then
            sys_install_deb "$SYS_MACHINE" "$SYS_DEB" >/dev/null || sys_die "installing $SYS_DEB failed"
        fi
    fi
}

# sys_test_skip REASON — this test cannot run here (the runner counts it as skipped).
sys_test_skip() {
    if sys_in_ci; then
        echo "FAIL: ${SYS_TEST:-test}: cannot run here, and CI is set (under CI a skip fails): $*"
        exit 1
    fi
    echo "SKIP: ${SYS_TEST:-test}: $*"
    exit 77
}

sys_pass() {
    SYS_T_PASS=$((SYS_T_PASS + 1))
    echo "PASS: ${SYS_TEST:-test}: $*"
}

sys_fail() {
    SYS_T_FAIL=$((SYS_T_FAIL + 1))
    echo "FAIL: ${SYS_TEST:-test}: $*"
}

# sys_check DESC CMD... — PASS when CMD exits 0; on FAIL its output is shown.
sys_check() {
    local desc=$1 out
    shift
    if out=$("$@" 2>&1); then
        sys_pass "$desc"
    else
        sys_fail "$desc (exit $?)"
        [ -z "$out" ] || printf '    | %s\n' "${out//$'\n'/$'\n'    | }"
    fi
}

sys_expect_eq() { # DESC EXPECTED ACTUAL
    if [ "$2" = "$3" ]; then
        sys_pass "$1"
    else
        sys_fail "$1: expected '$2', got '$3'"
    fi
}

sys_expect_match() { # DESC REGEX ACTUAL
    if [[ $3 =~ $2 ]]; then
        sys_pass "$1"
    else
        sys_fail "$1: '$3' does not match /$2/"
    fi
}

sys_test_end() {
    echo "${SYS_TEST:-test}: $SYS_T_PASS checks passed, $SYS_T_FAIL failed ($(sys_fmt_ms $(($(sys_now_ms) - SYS_T_START))))"
    [ "$SYS_T_FAIL" -eq 0 ] && [ "$SYS_T_PASS" -gt 0 ]
}
