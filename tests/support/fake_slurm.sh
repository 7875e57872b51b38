#!/usr/bin/env bash
# A FAKE Slurm for the fast integration tests (tests/slurm.rs): sbatch, squeue, scancel and
# scontrol in one script, chosen by the name it is called by (symbolic links). It keeps its
# jobs in $FAKE_SLURM_DIR and runs a released batch step with `sh -c` on this machine. It
# models only what the queue manager uses (held submission, release, states, scancel); the
# real Slurm is exercised by tests/system/t_slurm.sh.
#   $FAKE_SLURM_DIR/down         exists: every command fails as if the controller were down
#   $FAKE_SLURM_DIR/calls        one line per call: the command and its arguments
#   $FAKE_SLURM_DIR/jobs/N.*     name, state, reason, start, wrap, pid, exit
#   $FAKE_SLURM_DIR/sinfo        what sinfo prints (partition|time limit|CPUs|memory MB)
#   $FAKE_SLURM_DIR/sbatch-delay  seconds sbatch takes to answer after the job is accepted
set -u
# A root queue manager runs sbatch as the job's account and everything else as root (as Slurm's
# own daemons let both at the controller): its state is everyone's here.
umask 000
D=${FAKE_SLURM_DIR:?}
J=$D/jobs
mkdir -p "$J"
me=$(basename "$0")
printf '%s %s\n' "$me" "$*" >>"$D/calls"
if [ -e "$D/down" ]; then
    echo "$me: error: Unable to contact slurm controller (connect failure)" >&2
    exit 1
fi
put() { printf '%s' "$3" >"$J/$1.$2.tmp" && mv "$J/$1.$2.tmp" "$J/$1.$2"; }
get() { cat "$J/$1.$2" 2>/dev/null; }

start() { # ID: runs the batch step in the background
    put "$1" state RUNNING
    put "$1" reason None
    put "$1" start "$(date +%s)"
    (
        # As slurmd does: the step runs as the account that submitted it, with the
        # environment sbatch had, its output opened by that account.
        as=()
        if [ "$(id -u)" != "$(get "$1" uid)" ]; then
            as=(setpriv --reuid="$(get "$1" uid)" --regid="$(get "$1" gid)" --init-groups)
        fi
        # Only sbatch's environment: none of the process that released the step (a root
        # manager's scontrol/squeue carry its unit's CREDENTIALS_DIRECTORY; slurmd's step never
        # sees that).
        # shellcheck disable=SC2046
        unset $(compgen -e) 2>/dev/null
        # shellcheck disable=SC1090
        . "$J/$1.env"
        SLURM_JOB_ID=$1 SLURM_JOB_NAME=$(get "$1" name) setsid "${as[@]}" sh -c 'exec >>"$1" 2>&1; exec sh -c "$2"' sh "$(get "$1" out)" "$(get "$1" wrap)" &
        pid=$!
        put "$1" pid "$pid"
        wait "$pid"
        rc=$?
        if [ "$(get "$1" state)" = RUNNING ]; then
            put "$1" exit "$rc:0"
            if [ "$rc" = 0 ]; then put "$1" state COMPLETED; else put "$1" state FAILED; put "$1" reason NonZeroExitCode; fi
        fi
    ) >/dev/null 2>&1 </dev/null &
}

case $me in
sbatch)
    name="" hold=0 wrap="" out=/dev/null
    for a in "$@"; do
        case $a in
        --job-name=*) name=${a#--job-name=} ;;
        --hold) hold=1 ;;
        --wrap=*) wrap=${a#--wrap=} ;;
        --output=*) out=${a#--output=} ;;
        --account=nosuch)
            echo "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified" >&2
            exit 1
            ;;
        --partition=nosuch)
            echo "sbatch: error: invalid partition specified: nosuch" >&2
            echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
            exit 1
            ;;
        esac
    done
    # No --wrap: the batch script comes on stdin (as sbatch reads it without a script file).
    [ -z "$wrap" ] && wrap=$(cat)
    # A name with a crash-NAME file: the batch step dies before the worker can run.
    [ -e "$D/crash-$name" ] && wrap="exit 7"
    # One id per job, also when the manager runs several sbatch at once.
    exec 9>>"$D/next.lock"
    flock 9
    n=$(($(cat "$D/next" 2>/dev/null || echo 100) + 1))
    echo "$n" >"$D/next"
    flock -u 9
    exec 9>&-
    put "$n" name "$name"
    put "$n" user "$(id -un)"
    put "$n" uid "$(id -u)"
    put "$n" gid "$(id -g)"
    export -p >"$J/$n.env"
    put "$n" wrap "$wrap"
    put "$n" out "$out"
    put "$n" state PENDING
    if [ $hold = 1 ]; then put "$n" reason JobHeldUser; else put "$n" reason None; start "$n"; fi
    [ -e "$D/sbatch-delay" ] && sleep "$(cat "$D/sbatch-delay")"
    echo "$n"
    ;;
scontrol)
    case $1 in
    release)
        IFS=, read -ra ids <<<"$2"
        for i in "${ids[@]}"; do
            [ "$(get "$i" state)" = PENDING ] && start "$i"
        done
        ;;
    show)
        i=${*: -1}
        [ -e "$J/$i.name" ] || { echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }
        echo "JobId=$i JobName=$(get "$i" name) JobState=$(get "$i" state) Reason=$(get "$i" reason) ExitCode=$(get "$i" exit)"
        ;;
    esac
    ;;
scancel)
    only=""
    for i in "$@"; do
        case $i in --name=*) only=${i#--name=}; continue ;; esac
        # --name: only a job of that name is signalled (as Slurm's scancel filters).
        [ -n "$only" ] && [ "$(get "$i" name)" != "$only" ] && continue
        s=$(get "$i" state)
        if [ "$s" = RUNNING ] || [ "$s" = PENDING ]; then
            put "$i" state CANCELLED
            p=$(get "$i" pid)
            [ -n "$p" ] && kill -TERM -- "-$p" 2>/dev/null
        fi
    done
    ;;
sinfo)
    # --Node --format=%P|%l|%c|%m: $FAKE_SLURM_DIR/sinfo, else one node of 2 CPUs and 4000 MB, no time limit.
    if [ -e "$D/sinfo" ]; then cat "$D/sinfo"; else echo 'debug*|infinite|2|4000'; fi
    ;;
squeue)
    names=""
    for a in "$@"; do case $a in --name=*) names=",${a#--name=}," ;; esac; done
    now=$(date +%s)
    for f in "$J"/*.name; do
        [ -e "$f" ] || continue
        i=$(basename "$f" .name)
        nm=$(get "$i" name)
        if [ -n "$names" ] && [[ $names != *",$nm,"* ]]; then continue; fi
        st=$(get "$i" start)
        el=0
        [ -n "$st" ] && el=$((now - st))
        printf '%s|%s|%s|%s|%d:%02d\n' "$i" "$nm" "$(get "$i" state)" "$(get "$i" reason)" $((el / 60)) $((el % 60))
    done
    ;;
esac
