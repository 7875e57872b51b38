# %postun for agentstore ($1: 0 = erase, 1+ = upgrade). RPM has no purge: as is usual for RPM
# packages, the store /var/lib/agentstore and the agentstore user are kept on erase.
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
    if [ "$1" -ge 1 ]; then
        for unit in $(rpm -ql agentstore 2>/dev/null | sed -n 's|^/usr/lib/systemd/system/||p' | grep '\.service$' || true); do
            case "$unit" in
            */*) ;;
            *@.service) systemctl try-restart "${unit%%@*}@*.service" >/dev/null 2>&1 || true ;;
            *) systemctl try-restart "$unit" >/dev/null 2>&1 || true ;;
            esac
        done
    fi
fi
exit 0
