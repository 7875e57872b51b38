#!/usr/bin/env bash
# t_rpm (issue 35): the RPM that packaging/build-deb.sh --rpm builds beside the .deb, from the
# same files. rpmlint finds no error and no warning in it (with packaging/rpm/rpmlint.toml,
# the RPM systems' settings, and past the filters of packaging/rpm/agentstore.rpmlintrc, each
# with its reason); it holds the .deb's files path for path, with the same modes and the same
# bytes, but for what the two conventions want differently (listed below; the man pages are
# gzipped by each tool its own way, so their text is compared); its scripts set up the account and the store with systemd-sysusers/systemd-tmpfiles on the
# same sysusers.d/tmpfiles.d files as the .deb's postinst; the configuration is
# %config(noreplace) as the .deb's is a conffile. No container: both packages are only read.
# sys: no-machine
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sys_test_begin_no_machine
REPO=$(cd "$SYS_LIB_DIR/../.." && pwd)
[ -n "${SYS_DEB:-}" ] || sys_test_skip "needs the .deb (run.sh builds it, or --deb FILE)"
[ -n "${SYS_RPM:-}" ] || sys_test_skip "needs the .rpm (run.sh builds it with the .deb, or --rpm FILE)"
for tool in rpm rpm2archive rpm2cpio cpio rpmlint dpkg-deb; do
    command -v "$tool" >/dev/null 2>&1 || sys_test_skip "needs $tool (apt-get install rpm rpm2cpio rpmlint cpio; .ci/run does)"
done
work=$(mktemp -d "$SYS_STATE_DIR/rpm.XXXXXX")

# rpmlint: no error, no warning (an unused filter of the rpmlintrc is an error too).
lint=$(cd "$work" && rpmlint -c "$REPO/packaging/rpm/rpmlint.toml" -r "$REPO/packaging/rpm/agentstore.rpmlintrc" "$SYS_RPM" 2>&1) && lrc=0 || lrc=$?
sys_log "rpmlint: $(tail -n1 <<<"$lint")"
if [ "$lrc" = 0 ] && ! grep -Eq ': [EW]: ' <<<"$lint" && grep -q ' 0 errors, 0 warnings' <<<"$lint"; then
    sys_pass "rpmlint finds no error and no warning"
else
    sys_fail "rpmlint finds errors or warnings (exit $lrc):"
    printf '    | %s\n' "${lint//$'\n'/$'\n'    | }"
fi

# The two file lists: "MODE PATH" for every file and symlink (directories left out: the
# .deb lists its folders, the .rpm only what it owns), each package's own way.
dpkg-deb -c "$SYS_DEB" | awk '$1 !~ /^d/ {sub(/^\./, "", $6); print $1, $6}' | sort -k2 >"$work/deb"
rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$SYS_RPM" | awk '$1 !~ /^d/' | sort -k2 >"$work/rpm"
sys_log "files: $(wc -l <"$work/deb") in the .deb, $(wc -l <"$work/rpm") in the .rpm"
sys_check "the .deb has files" test "$(wc -l <"$work/deb")" -gt 50
# What the conventions want differently: Debian's copyright and changelog.Debian.gz and the
# lintian overrides are the .deb's alone (the README is in both); zsh completions go to
# vendor-completions on Debian, site-functions on RPM systems.
sed -e '\,^[^ ]* /usr/share/doc/agentstore/\(copyright\|changelog\.Debian\.gz\)$,d' -e '\|^[^ ]* /usr/share/lintian/overrides/|d' \
    -e 's|/usr/share/zsh/vendor-completions/|/usr/share/zsh/site-functions/|' "$work/deb" | sort -k2 >"$work/deb.mapped"
if diff -u "$work/deb.mapped" "$work/rpm" >"$work/diff"; then
    sys_pass "the .rpm holds the .deb's files with the same modes ($(wc -l <"$work/rpm") files)"
else
    sys_fail "the .rpm's files differ from the .deb's (- only in the .deb, + only in the .rpm):"
    sed 's/^/    | /' "$work/diff"
fi

# The package's digests (header and payload) are sound: what rpm checks before installing.
sys_check "rpm -K: the digests are OK" rpm -K --nosignature "$SYS_RPM"

# The same bytes: both unpacked, every file of the .rpm compared with the .deb's (a file
# missing from either fails the comparison). rpm2archive, not rpm2cpio: rpm2cpio exits 1 on
# cargo-generate-rpm's packages after extracting them whole (it compares the payload with a
# size header that only rpmbuild fills in so; rpm -K above checks the payload's digest).
mkdir -p "$work/d" "$work/r"
dpkg-deb -x "$SYS_DEB" "$work/d"
rpm2archive -n - <"$SYS_RPM" | tar -x -C "$work/r"
differ=()
while read -r _ path; do
    dpath=${path/\/usr\/share\/zsh\/site-functions\//\/usr\/share\/zsh\/vendor-completions\/}
    case "$path" in
    *.gz) cmp -s <(zcat -- "$work/d$dpath") <(zcat -- "$work/r$path") || differ+=("$path") ;;
    *) cmp -s "$work/d$dpath" "$work/r$path" || differ+=("$path") ;;
    esac
done <"$work/rpm"
sys_expect_eq "every file of the .rpm has the .deb's bytes" "" "${differ[*]}"

# Scripts: the same sysusers.d/tmpfiles.d files, no useradd/mkdir.
scripts=$(rpm -qp --scripts "$SYS_RPM")
sys_check "%post runs systemd-sysusers on agentstore.conf" grep -Eq 'systemd-sysusers.*agentstore\.conf' <<<"$scripts"
sys_check "%post runs systemd-tmpfiles on agentstore.conf" grep -Eq 'systemd-tmpfiles.*agentstore\.conf' <<<"$scripts"
if grep -Eq '(^|[;&| ])(useradd|adduser|mkdir)[[:space:]]' <<<"$scripts"; then
    sys_fail "the scripts create users or folders by hand"
else
    sys_pass "the scripts create no user or folder by hand"
fi
sys_expect_eq "the configuration is %config(noreplace)" /etc/agentstore/config.yaml "$(rpm -qp --configfiles "$SYS_RPM")"
requires=$(rpm -qpR "$SYS_RPM")
sys_check "it requires systemd" grep -qx 'systemd' <<<"$requires"
sys_check "it requires dbus" grep -qx 'dbus' <<<"$requires"
sys_expect_eq "the .rpm's version and release are the .deb's" "$(dpkg-deb -f "$SYS_DEB" Version)" "$(rpm -qp --qf '%{VERSION}-%{RELEASE}' "$SYS_RPM")"
rm -rf "$work"
sys_test_end
