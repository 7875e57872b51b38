# %post for agentstore ($1: 1 = install, 2+ = upgrade). Same effects as the Debian postinst.
STORE=/var/lib/agentstore
SVC_USER=agentstore
ENABLE_UNITS="agentstore-orchestrator.path agentstore-orchestrator.timer agentstore-web.socket"
UNIT_DIR=/usr/lib/systemd/system

# The account and the store folder from the package's sysusers.d and tmpfiles.d files (what
# %sysusers_create and %tmpfiles_create do; the same files as the .deb's).
systemd-sysusers /usr/lib/sysusers.d/agentstore.conf
systemd-tmpfiles --create /usr/lib/tmpfiles.d/agentstore.conf >/dev/null 2>&1 ||
    install -d -m 0750 -o "$SVC_USER" -g "$SVC_USER" "$STORE"
if [ -x /usr/bin/orchestrator ]; then
    setpriv --reuid="$SVC_USER" --regid="$SVC_USER" --init-groups \
        env HOME="$STORE" /usr/bin/orchestrator --root "$STORE" init >/dev/null || exit 1
fi
for unit in $ENABLE_UNITS; do
    [ -e "$UNIT_DIR/$unit" ] || continue
    if [ "$1" -eq 1 ]; then
        systemctl --no-reload enable "$unit" >/dev/null 2>&1 || true
    fi
done
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
    for unit in $ENABLE_UNITS; do
        [ -e "$UNIT_DIR/$unit" ] || continue
        systemctl start "$unit" >/dev/null 2>&1 || true
    done
fi
exit 0
