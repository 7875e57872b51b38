#!/usr/bin/env bash
# tests/system/run.sh — the real-systemd suite (DESIGN §7, issue 5).
#
#   tests/system/run.sh [--deb FILE [--rpm FILE] | --no-deb] [t_NAME ...]
#
# 1. preflight: root, systemd-nspawn, debootstrap, namespaces — else "SKIP: <reason>", exit 0
#    (with CI set: "FAIL: …", exit 1);
# 2. the .deb and the .rpm: built by `packaging/build-deb.sh --rpm` (release binaries, man
#    pages, completions, cargo-deb, cargo-generate-rpm on the same files), unless --deb FILE
#    (or SYS_DEB) names one; --no-deb runs without a package (tests that need it skip
#    themselves). With --deb, --rpm FILE (or SYS_RPM) names the .rpm built beside it
#    (t_rpm.sh compares the two; without one it skips, or fails under CI);
# 3. the cached Debian rootfs (built once by debootstrap, see lib.sh);
# 4. each tests/system/t_*.sh (or the ones named) in its own fresh container booted from the
#    cache, with the .deb installed and the run's shared folder bound at /mnt/share.
#    A test prints PASS:/FAIL: lines and exits 0 (passed), 77 (skipped) or anything else
#    (failed); it gets SYS_MACHINE (its container), SYS_DEB, SYS_SHARE and the lib.sh helpers
#    (and SYS_PREV_DEB, the previous release's package, when it says `# sys: prev-deb`).
#    A test with a line `# sys: no-machine` gets no container: it boots its own.
# Exits non-zero when any test failed. SYS_TEST_TIMEOUT (default 900 s) bounds each test.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

usage() {
    sed -n '3,4p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2
    exit 2
}

deb=${SYS_DEB:-}
rpm=${SYS_RPM:-}
build_deb=1
[ -n "$deb" ] && build_deb=0
selected=()
while [ $# -gt 0 ]; do
    case "$1" in
    --deb) deb=$(realpath -e "$2"); build_deb=0; shift 2 ;;
    --rpm) rpm=$(realpath -e "$2"); shift 2 ;;
    --no-deb) deb=""; build_deb=0; shift ;;
    -h | --help) usage ;;
    -*) usage ;;
    *) selected+=("$1"); shift ;;
    esac
done

run_t0=$(sys_now_ms)
sys_preflight

tests=()
if [ ${#selected[@]} -eq 0 ]; then
    for t in "$here"/t_*.sh; do tests+=("$t"); done
else
    for t in "${selected[@]}"; do
        t=${t%.sh}
        t=${t##*/}
        [ -f "$here/$t.sh" ] || sys_die "no such test: $here/$t.sh"
        tests+=("$here/$t.sh")
    done
fi

# --- the package -------------------------------------------------------------------------
build_ms=0
if [ "$build_deb" = 1 ]; then
    sys_log "building the release binaries, the .deb and the .rpm (packaging/build-deb.sh --rpm)"
    t0=$(sys_now_ms)
    built=$("$repo/packaging/build-deb.sh" --rpm) || sys_die "building the packages failed"
    deb=$(grep '\.deb$' <<<"$built" | tail -n1) || sys_die "packaging/build-deb.sh printed no .deb"
    rpm=$(grep '\.rpm$' <<<"$built" | tail -n1) || sys_die "packaging/build-deb.sh printed no .rpm"
    build_ms=$(($(sys_now_ms) - t0))
    sys_log "built $deb and $rpm in $(sys_fmt_ms "$build_ms")"
fi
# t_m5/t_m6 run the real Claude Code CLI against this fake Anthropic endpoint (DESIGN §7);
# t_usermode's desktop notifications go to the minimal notification server; t_approvals
# answers through a fake Slack.
if [ -n "$deb" ] && { [ ! -x "$repo/target/release/examples/fake_anthropic" ] ||
    [ ! -x "$repo/target/release/examples/fake_notifications" ] ||
    [ ! -x "$repo/target/release/examples/fake_slack" ]; } || [ "$build_deb" = 1 ]; then
    (cd "$repo" && cargo build --release --locked --example fake_anthropic --example fake_notifications --example fake_slack >&2) ||
        sys_log "building examples/fake_anthropic, fake_notifications and fake_slack failed: t_m5/t_m6/t_usermode/t_approvals will fail"
fi
if [ -n "$deb" ]; then
    [ -f "$deb" ] || sys_die "no such package: $deb"
    deb=$(realpath -e "$deb")
    export SYS_DEB=$deb
else
    unset SYS_DEB
    sys_log "no package: tests that need it will skip"
fi
if [ -n "$rpm" ]; then
    [ -f "$rpm" ] || sys_die "no such package: $rpm"
    export SYS_RPM=$rpm
else
    unset SYS_RPM
fi

# The previous release's package, for the tests that upgrade from it (`# sys: prev-deb`):
# built once from its tag by prev-deb.sh and cached (SYS_PREV_DEB names one instead).
if [ -z "${SYS_PREV_DEB:-}" ] && [ -n "$deb" ] && grep -lq '^# sys: prev-deb' "${tests[@]}"; then
    sys_log "the previous release's package (tests/system/prev-deb.sh)"
    if prev=$("$here/prev-deb.sh"); then
        export SYS_PREV_DEB=$prev
        sys_log "previous release: $prev"
    else
        sys_log "building the previous release's package failed: t_upgrade will fail"
    fi
fi

# --- the rootfs ----------------------------------------------------------------------------
t0=$(sys_now_ms)
SYS_ROOTFS_BUILD_MS=""
if ! sys_rootfs >/dev/null; then
    sys_skip "cannot build the $SYS_SUITE rootfs with debootstrap (no Debian mirror reachable?)"
fi
rootfs_ms=$(($(sys_now_ms) - t0))
rootfs_note="cached"
[ -n "$SYS_ROOTFS_BUILD_MS" ] && rootfs_note="built"

# Can a container boot here at all? If not, the suite is skipped (not failed).
# (sys_boot returns 2 when nspawn or the container's PID 1 did not come up: the environment;
# 1 when systemd came up but not to running/degraded: a failure worth seeing.)
probe_rc=0
sys_boot probe || probe_rc=$?
if [ "$probe_rc" = 2 ]; then
    sys_skip "systemd-nspawn cannot boot a container here (its output is above)"
elif [ "$probe_rc" != 0 ]; then
    sys_die "the container booted but systemd did not reach running/degraded (see above)"
fi
probe_boot_ms=$SYS_LAST_BOOT_MS
sys_stop probe

share=$SYS_STATE_DIR/share
mkdir -p "$share"
export SYS_SHARE=$share

# --- the tests ---------------------------------------------------------------------------
passed=0
failed=0
skipped=0
checks_passed=0
checks_failed=0
failed_names=()
for t in "${tests[@]}"; do
    name=$(basename "$t" .sh)
    machine=${name//_/-}
    machine=${machine,,}
    log=$SYS_STATE_DIR/logs/$name.log
    echo "=== $name"
    t0=$(sys_now_ms)
    rc=0
    boot_ms=0
    # A test that calls sys_use_wide_rootfs is booted from the second image (lib.sh).
    base_include=$SYS_INCLUDE
    if grep -q '^sys_use_wide_rootfs' "$t"; then sys_use_wide_rootfs; fi
    # `# sys: network-host`: the container shares the host's network (t_slurm).
    net=(--network private)
    if grep -q '^# sys: network-host' "$t"; then net=(--network host); fi
    if grep -q '^# sys: no-machine' "$t"; then
        # The test boots its own machines (sys_test_begin_no_machine).
        machine=""
    elif ! sys_boot "$machine" --bind "$share:/mnt/share" "${net[@]}"; then
        echo "FAIL: $name: container did not boot" | tee "$log"
        rc=1
    fi
    SYS_INCLUDE=$base_include
    [ -z "$machine" ] || boot_ms=${SYS_LAST_BOOT_MS:-0}
    if [ "$rc" = 0 ] && [ -n "$machine" ] && [ -n "${SYS_DEB:-}" ]; then
        i0=$(sys_now_ms)
        if sys_install_deb "$machine" "$SYS_DEB" >"$SYS_STATE_DIR/logs/$name.install.log" 2>&1; then
            sys_log "installed $(basename "$SYS_DEB") in $(sys_fmt_ms $(($(sys_now_ms) - i0)))"
        else
            echo "FAIL: $name: installing $(basename "$SYS_DEB") failed:" | tee "$log"
            tail -n 20 "$SYS_STATE_DIR/logs/$name.install.log" | sed 's/^/    | /'
            rc=1
        fi
    fi
    if [ "$rc" = 0 ]; then
        set +e
        SYS_MACHINE=$machine timeout -k 10 "${SYS_TEST_TIMEOUT:-900}" bash "$t" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        set -e
        [ "$rc" = 124 ] && echo "FAIL: $name: timed out after ${SYS_TEST_TIMEOUT:-900}s" | tee -a "$log"
    fi
    [ -z "$machine" ] || sys_stop "$machine"
    checks_passed=$((checks_passed + $(grep -c '^PASS:' "$log" || true)))
    checks_failed=$((checks_failed + $(grep -c '^FAIL:' "$log" || true)))
    ms=$(($(sys_now_ms) - t0))
    case "$rc" in
    0) passed=$((passed + 1)); result=PASS ;;
    77) skipped=$((skipped + 1)); result=SKIP ;;
    *) failed=$((failed + 1)); result=FAIL; failed_names+=("$name") ;;
    esac
    echo "=== $name: $result ($(sys_fmt_ms "$ms")${machine:+, boot $(sys_fmt_ms "$boot_ms")})"
done

total_ms=$(($(sys_now_ms) - run_t0))
echo
echo "system suite: ${#tests[@]} tests, $checks_passed checks passed, $checks_failed failed"
echo "time: total $(sys_fmt_ms "$total_ms"); package build $(sys_fmt_ms "$build_ms"); rootfs $rootfs_note $(sys_fmt_ms "$rootfs_ms"); boot from cache $(sys_fmt_ms "$probe_boot_ms")"
[ ${#failed_names[@]} -eq 0 ] || echo "failed: ${failed_names[*]} (logs: $SYS_STATE_DIR/logs)"
echo "system: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
