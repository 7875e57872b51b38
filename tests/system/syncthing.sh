# tests/system/syncthing.sh — two REAL Syncthing instances in one container keeping two copies
# of the store in sync (issue 13: t_sync, t_failover): alpha = /var/lib/agentstore ($A),
# beta = /srv/beta ($B), as the store's owner; listening on 127.0.0.1 only (ports 22001/22002,
# GUI/API 8384/8385), no discovery, relays or NAT; fsWatcher on, rescan 2 s. Sourced after
# store.sh with A and B set; `st_setup` starts both and waits until they connect.
# shellcheck shell=bash disable=SC2154,SC2016 # A, B, m: set by the test that sources this
# st_config HOME NAME LISTEN_PORT GUI_PORT APIKEY MY_ID PEER_NAME PEER_ID PEER_PORT FOLDER
st_config() {
    cat <<XML
<configuration version="36">
    <folder id="store" label="store" path="${10}" type="sendreceive" rescanIntervalS="2" fsWatcherEnabled="true" fsWatcherDelayS="1" ignorePerms="false">
        <device id="$6" introducedBy=""></device>
        <device id="$8" introducedBy=""></device>
        <minDiskFree unit="%">0</minDiskFree>
        <maxConflicts>10</maxConflicts>
    </folder>
    <device id="$6" name="$2" compression="metadata" introducer="false"><address>dynamic</address></device>
    <device id="$8" name="$7" compression="metadata" introducer="false"><address>tcp://127.0.0.1:$9</address></device>
    <gui enabled="true" tls="false"><address>127.0.0.1:$4</address><apikey>$5</apikey></gui>
    <options>
        <listenAddress>tcp://127.0.0.1:$3</listenAddress>
        <globalAnnounceEnabled>false</globalAnnounceEnabled>
        <localAnnounceEnabled>false</localAnnounceEnabled>
        <relaysEnabled>false</relaysEnabled>
        <natEnabled>false</natEnabled>
        <startBrowser>false</startBrowser>
        <urAccepted>-1</urAccepted>
        <autoUpgradeIntervalH>0</autoUpgradeIntervalH>
        <crashReportingEnabled>false</crashReportingEnabled>
        <reconnectionIntervalS>1</reconnectionIntervalS>
        <minHomeDiskFree unit="%">0</minHomeDiskFree>
    </options>
</configuration>
XML
}
as_st() { x setpriv --reuid=agentstore --regid=agentstore --init-groups env HOME=/var/tmp "$@"; }
st_start() { # NAME
    x systemctl reset-failed "st-$1.service" >/dev/null 2>&1 || true
    x systemd-run --unit "st-$1" --uid=agentstore --gid=agentstore -p Environment=HOME="/var/tmp/st-$1" \
        -p Environment=STNOUPGRADE=1 /usr/bin/syncthing serve --home="/var/tmp/st-$1" --no-browser --no-restart \
        --logflags=3 >/dev/null 2>&1
}
# st_api PORT KEY METHOD PATH — Syncthing's REST API (python3: the image has no curl).
st_api() {
    x python3 -c 'import sys, urllib.request as u
r = u.Request("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[4]), method=sys.argv[3], headers={"X-API-Key": sys.argv[2]})
print(u.urlopen(r, timeout=10).read().decode())' "$@"
}
connected() {
    local out
    out=$(st_api 8384 key-alpha GET /rest/system/connections 2>/dev/null) || return 1
    x python3 -c 'import json, sys; sys.exit(0 if json.loads(sys.argv[1])["connections"][sys.argv[2]]["connected"] else 1)' "$out" "$idb"
}
# st_setup — both instances configured, started and connected (ida/idb: their device ids).
st_setup() {
    x test -x /usr/bin/syncthing || sys_die "syncthing is not in the wide rootfs"
    x sh -c "mkdir -p $B /var/tmp/st-alpha /var/tmp/st-beta && chown agentstore:agentstore $B /var/tmp/st-alpha /var/tmp/st-beta && chmod 0750 $B"
    for n in alpha beta; do
        as_st syncthing generate --home=/var/tmp/st-$n --no-default-folder --skip-port-probing >/dev/null 2>&1 ||
            sys_die "syncthing generate failed for $n"
    done
    ida=$(as_st syncthing serve --home=/var/tmp/st-alpha --device-id)
    idb=$(as_st syncthing serve --home=/var/tmp/st-beta --device-id)
    sys_expect_match "two Syncthing device ids" '^[A-Z0-9-]{63}$' "$ida"
    st_config x alpha 22001 8384 key-alpha "$ida" beta "$idb" 22002 "$A" | as_svc sh -c 'cat >/var/tmp/st-alpha/config.xml'
    st_config x beta 22002 8385 key-beta "$idb" alpha "$ida" 22001 "$B" | as_svc sh -c 'cat >/var/tmp/st-beta/config.xml'
    as_st sh -c "mkdir -p $A/.stfolder $B/.stfolder"
    local n
    for n in alpha beta; do
        st_start "$n" || sys_die "cannot start syncthing $n"
    done
    sys_check "the two Syncthing instances connect over loopback" sys_wait_until 60 "syncthing connected" connected
}

# st_two_copies GRACE [SED] — the store on alpha: users, project TestProject on queue beech (4
# workers), orchestrator polling 2 s and never idle-exiting, machine heartbeats every second
# (stale after 3 s, lost-job grace GRACE s), config.yaml edited by the sed expression SED too;
# alpha's units named host alpha (its .path/.timer off); then both Syncthing instances
# (st_setup) and beta's copy complete.
st_two_copies() {
    local r
    r=$(sys_root "$m")
    setup_users
    setup_project TestProject /tmp/testproject beech
    setup_queue beech 4
    x systemctl disable --now agentstore-orchestrator.path agentstore-orchestrator.timer >/dev/null 2>&1 || true
    x systemctl stop agentstore-orchestrator.service >/dev/null 2>&1 || true
    as_svc sed -i -e 's/^\( *idle_exit_seconds:\).*/\1 0/' -e 's/^\( *polling_interval_seconds:\).*/\1 2/' \
        -e "${2:-s/^//}" "$A/config.yaml"
    as_svc sh -c 'printf "machines:\n  heartbeat_seconds: 1\n  stale_after_seconds: 3\n  lost_job_grace_seconds: %s\n" "$1" >>"$2"' \
        sh "$1" "$A/config.yaml"
    local u
    for u in agentstore-orchestrator.service queue-manager@.service; do
        x mkdir -p "/etc/systemd/system/$u.d"
        printf '[Service]\nEnvironment=AGENTSTORE_HOSTNAME=alpha\n' >"$r/etc/systemd/system/$u.d/host.conf"
    done
    x systemctl daemon-reload
    st_setup
    sys_check "beta receives alpha's store" sys_wait_until 90 "store on beta" st_synced_store
}
st_synced_store() {
    x test -f "$B/projects/TestProject/project.json" && x test -f "$B/Queues/beech/queue.json" &&
        x test -f "$B/users/chenry.json" && x cmp -s "$A/config.yaml" "$B/config.yaml"
}
