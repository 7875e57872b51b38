# %post for agentstore ($1: 1 = install, 2+ = upgrade). Same effects as the Debian postinst.
STORE=/var/lib/agentstore
SVC_USER=agentstore
ENABLE_UNITS="agentstore-orchestrator.path agentstore-orchestrator.timer agentstore-web.socket"
UNIT_DIR=/usr/lib/systemd/system

getent group "$SVC_USER" >/dev/null || groupadd --system "$SVC_USER"
getent passwd "$SVC_USER" >/dev/null ||
    useradd --system --gid "$SVC_USER" --home-dir "$STORE" --no-create-home \
        --shell /sbin/nologin --comment "agentstore daemons" "$SVC_USER"
install -d -m 0755 -o "$SVC_USER" -g "$SVC_USER" "$STORE"
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
