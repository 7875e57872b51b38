# %preun for agentstore ($1: 0 = erase, 1+ = upgrade): on erase, disable and stop every unit the
# package ships, template instances included.
UNIT_DIR=/usr/lib/systemd/system
if [ "$1" -eq 0 ] && [ -d /run/systemd/system ]; then
    units=$(rpm -ql agentstore 2>/dev/null | sed -n "s|^$UNIT_DIR/||p" | grep -v / || true)
    for pass in trigger service; do
        for unit in $units; do
            case "$unit" in
            *.path | *.timer | *.socket) [ "$pass" = trigger ] || continue ;;
            *) [ "$pass" = service ] || continue ;;
            esac
            case "$unit" in
            *@.*) systemctl stop "${unit%%@*}@*.${unit##*.}" >/dev/null 2>&1 || true ;;
            *) systemctl --no-reload disable --now "$unit" >/dev/null 2>&1 || true ;;
            esac
        done
    done
fi
exit 0
