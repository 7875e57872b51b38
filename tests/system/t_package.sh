#!/usr/bin/env bash
# t_package: what the .deb's maintainer scripts do (packaging/debian/): the agentstore system
# user comes from sysusers.d and the system store from tmpfiles.d (no useradd/adduser/mkdir in
# the scripts), the path, timer and socket units are enabled by the packaging tool's systemd
# handling (deb-systemd-helper state) and started; the configuration is a conffile kept across
# reinstall; remove stops the units, masks them as dh_installsystemd does and keeps the data;
# purge removes everything installing made and leaves no deb-systemd-helper state.
# shellcheck source-path=SCRIPTDIR
# shellcheck disable=SC2016 # dpkg-query formats and scripts run inside the container
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin
m=$SYS_MACHINE
[ -n "${SYS_DEB:-}" ] || sys_test_skip "no package given (run.sh --deb FILE, or let run.sh build it)"
in=/var/tmp/$(basename "$SYS_DEB")
sys_exec "$m" test -f "$in" || sys_copy_in "$m" "$SYS_DEB" "$in"
x() { sys_exec "$m" "$@"; }

sys_expect_eq "dpkg: agentstore is installed" "install ok installed" \
    "$(x dpkg-query -W -f='${Status}' agentstore 2>&1)"
for b in orchestrator orchestratord queue-manager agent-worker agentshell; do
    sys_check "/usr/bin/$b is installed and executable" x test -x "/usr/bin/$b"
done

# The service user and the store.
pw=$(x getent passwd agentstore) || pw=""
IFS=: read -r _ _ uid _ _ home shell <<<"$pw"
if [ -n "$pw" ] && [ "$uid" -lt 1000 ]; then
    sys_pass "postinst created the system user agentstore (uid $uid)"
else
    sys_fail "no system user agentstore: '$pw'"
fi
sys_expect_eq "agentstore's home is the system store" /var/lib/agentstore "${home:-}"
sys_expect_eq "agentstore cannot log in" /usr/sbin/nologin "${shell:-}"
sys_check "postinst created the agentstore group" x getent group agentstore
sys_expect_eq "the system store belongs to agentstore" "agentstore:agentstore" \
    "$(x stat -c %U:%G /var/lib/agentstore 2>&1)"
sys_check "orchestrator init made the store's config.yaml" x test -f /var/lib/agentstore/config.yaml
sys_expect_eq "the store was initialised as agentstore" agentstore \
    "$(x stat -c %U /var/lib/agentstore/config.yaml 2>&1)"
# By the conventions (issue 35): sysusers.d and tmpfiles.d, no hand-made account or folder.
sys_check "sysusers.d/agentstore.conf is shipped" x test -f /usr/lib/sysusers.d/agentstore.conf
sys_check "tmpfiles.d/agentstore.conf is shipped" x test -f /usr/lib/tmpfiles.d/agentstore.conf
sys_expect_eq "the account is the sysusers.d one (systemd-sysusers --cat-config)" \
    'u agentstore - "AgentStore daemons" /var/lib/agentstore /usr/sbin/nologin' \
    "$(x sh -c 'systemd-sysusers --cat-config | grep "^u agentstore "')"
sys_expect_eq "the store's mode is tmpfiles.d's" 750 "$(x stat -c %a /var/lib/agentstore 2>&1)"
hand_made=$(x sh -c 'grep -nE "\b(useradd|adduser|groupadd|addgroup|mkdir)\b" /var/lib/dpkg/info/agentstore.preinst /var/lib/dpkg/info/agentstore.postinst 2>/dev/null' || true)
sys_expect_eq "no useradd/adduser/groupadd/mkdir in the maintainer scripts" "" "$hand_made"
sys_check "postinst runs systemd-sysusers and systemd-tmpfiles" \
    x sh -c 'grep -q "systemd-sysusers.*agentstore.conf" /var/lib/dpkg/info/agentstore.postinst && grep -q "systemd-tmpfiles --create agentstore.conf" /var/lib/dpkg/info/agentstore.postinst'
# sysusers is idempotent: run again it changes nothing.
before=$(x getent passwd agentstore)
x systemd-sysusers agentstore.conf
sys_expect_eq "systemd-sysusers again leaves the account as it was" "$before" "$(x getent passwd agentstore)"
conffile_listed() { grep -q '^ /etc/agentstore/config.yaml ' <<<"$(x dpkg-query -W -f='${Conffiles}' agentstore)"; }
sys_check "/etc/agentstore/config.yaml is a conffile" conffile_listed

# Units shipped, verified, enabled and started.
units=$(x dpkg-query -L agentstore | sed -n 's|^/usr/lib/systemd/system/||p' | grep -v / || true)
for u in $units; do
    case "$u" in
    *@.*) sys_check "systemd-analyze verify $u" x systemd-analyze verify --man=no "/usr/lib/systemd/system/${u%%@*}@verify.${u##*.}" ;;
    *) sys_check "systemd-analyze verify $u" x systemd-analyze verify --man=no "/usr/lib/systemd/system/$u" ;;
    esac
done
for u in agentstore-orchestrator.path agentstore-orchestrator.timer; do
    if ! grep -qx "$u" <<<"$units"; then
        sys_fail "the package does not ship $u"
        continue
    fi
    sys_expect_eq "postinst enabled $u" enabled "$(x systemctl is-enabled "$u" 2>&1)"
    sys_expect_eq "postinst started $u" active "$(x systemctl is-active "$u" 2>&1)"
    sys_check "deb-systemd-helper recorded $u's enablement" x test -f "/var/lib/systemd/deb-systemd-helper-enabled/$u.dsh-also"
done
sys_expect_eq "agentstore-web.socket enabled" enabled "$(x systemctl is-enabled agentstore-web.socket 2>&1)"
# The orchestrator itself is started on demand (path, timer, D-Bus), not at boot.
sys_expect_eq "agentstore-orchestrator.service is static (not enabled at boot)" static \
    "$(x systemctl is-enabled agentstore-orchestrator.service 2>&1 || true)"

# Conffile kept across reinstall.
x sh -c 'echo "# local edit" >>/etc/agentstore/config.yaml'
sys_check "reinstalling the package succeeds" x env DEBIAN_FRONTEND=noninteractive dpkg -i "$in"
sys_check "a local edit of the conffile survives reinstall" x grep -qx '# local edit' /etc/agentstore/config.yaml

# Remove: units stopped, data kept.
sys_check "apt-get remove agentstore" x env DEBIAN_FRONTEND=noninteractive apt-get remove -y -q agentstore
for u in agentstore-orchestrator.path agentstore-orchestrator.timer; do
    state=$(x systemctl is-active "$u" 2>/dev/null) || true
    sys_expect_match "remove stopped $u" '^(inactive|failed|unknown)?$' "$state"
done
for u in agentstore-orchestrator.path agentstore-orchestrator.timer; do
    sys_check "remove masks $u with deb-systemd-helper (as dh_installsystemd does)" \
        x test -e "/var/lib/systemd/deb-systemd-helper-masked/$u"
done
sys_check "remove keeps the store" x test -f /var/lib/agentstore/config.yaml
sys_check "remove keeps the user" x getent passwd agentstore
sys_check "remove keeps the configuration" x test -f /etc/agentstore/config.yaml

# Purge: everything postinst made is gone.
sys_check "apt-get purge agentstore" x env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q agentstore
sys_check "purge removes the system store" x test ! -e /var/lib/agentstore
sys_check "purge removes /etc/agentstore" x test ! -e /etc/agentstore
no_user() { ! x getent passwd agentstore; }
no_group() { ! x getent group agentstore; }
sys_check "purge removes the agentstore user" no_user
sys_check "purge removes the agentstore group" no_group
left=$(x sh -c 'ls -d /etc/systemd/system/*/agentstore-* /var/lib/systemd/deb-systemd-helper-enabled/agentstore-* /var/lib/systemd/deb-systemd-helper-enabled/*/agentstore-* /var/lib/systemd/deb-systemd-helper-masked/agentstore-* 2>/dev/null' || true)
sys_expect_eq "purge leaves no unit enablement or mask behind" "" "$left"
sys_expect_eq "dpkg forgot the package" "" "$(x dpkg-query -W -f='${Status}' agentstore 2>/dev/null || true)"

# Install again after purge (postinst from scratch on a system that had it).
sys_check "install after purge succeeds" x env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$in"
sys_check "install after purge recreates the user" x getent passwd agentstore

sys_test_end
