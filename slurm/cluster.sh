#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, without systemd:
#   munged + MariaDB + slurmdbd (so sacct works) + slurmctld + slurmd, configured under $C2_SLURM_DIR.
#
#   slurm/cluster.sh up      start what is not running yet; print the SLURM_CONF to export
#   slurm/cluster.sh down    stop every daemon this script started, by the PID in its pid file
#   slurm/cluster.sh status  which daemons run, and whether the controller answers
#   slurm/cluster.sh install apt-get install the Debian packages (root; no-op when present)
#
# Needs root (the daemons run as root here; munged and mariadbd drop to their own users). `c2` finds the
# config by itself: when SLURM_CONF is unset and $C2_SLURM_DIR/etc/slurm.conf exists it uses that.
# On a real cluster none of this runs: /etc/slurm/slurm.conf is already there and only partitions differ.
set -euo pipefail

D=${C2_SLURM_DIR:-/var/tmp/c2-slurm}
ETC=$D/etc RUN=$D/run LOG=$D/log
CLUSTER=${C2_SLURM_CLUSTER:-c2local}
DB_PORT=${C2_SLURM_DB_PORT:-3307}
PACKAGES="slurmctld slurmd slurm-client slurmdbd munge mariadb-server"
export SLURM_CONF=$ETC/slurm.conf

say() { echo "slurm: $*"; }
die() { echo "slurm: error: $*" >&2; exit 2; }

need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root (the daemons run as root; try sudo make slurm-up)"; }

missing_packages() {
    local m=""
    for b in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client slurmdbd:slurmdbd munged:munge mariadbd:mariadb-server; do
        command -v "${b%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${b%%:*}" ] || m="$m ${b##*:}"
    done
    echo "$m"
}

install() {
    local m; m=$(missing_packages)
    [ -z "$m" ] && return 0
    if [ "$(id -u)" != 0 ]; then say "not installing Debian packages$m (needs root; the Slurm tests will be skipped)"; return 0; fi
    say "installing Debian packages:$m"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION CMD...
    local t=$1 what=$2; shift 2
    for _ in $(seq $((t * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    die "$what did not come up in ${t}s (logs in $LOG)"
}

write_configs() {
    local host cpus mem
    host=$(hostname -s)
    cpus=$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p')
    mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
    cat > "$ETC/slurm.conf" <<EOF
# written by slurm/cluster.sh: a single-node cluster on $host
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
# no cgroups here (and none needed on one node)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
SchedulerParameters=sched_interval=2,bf_interval=2
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    cat > "$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=c2slurm
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$ETC/slurmdbd.conf"
    rm -f "$ETC/cgroup.conf"
}

munge_ok() { munge -n | unmunge; }

start_munge() {
    if munge_ok >/dev/null 2>&1; then say "munged already answers (not started here)"; return; fi
    [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null || create-munge-key -f; }
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
    chmod 755 /run/munge
    runuser -u munge -- munged --pid-file=/run/munge/c2-munged.pid --force
    wait_for 10 munged munge_ok
    cp /run/munge/c2-munged.pid "$RUN/munged.pid"
}

MY=$D/mysql-run
db() { mariadb --no-defaults --socket="$MY/mysqld.sock" -uroot "$@"; }

start_mariadb() {
    if alive "$MY/mariadbd.pid"; then return; fi
    if [ ! -d "$D/mysql/mysql" ]; then
        mkdir -p "$D/mysql" && chown mysql:mysql "$D/mysql"
        mariadb-install-db --no-defaults --user=mysql --datadir="$D/mysql" --auth-root-authentication-method=socket \
            --skip-test-db > "$LOG/mariadb-install.log" 2>&1 || die "mariadb-install-db failed (see $LOG/mariadb-install.log)"
    fi
    mkdir -p "$MY" && chown mysql:mysql "$MY"
    mariadbd --no-defaults --user=mysql --datadir="$D/mysql" --socket="$MY/mysqld.sock" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --pid-file="$MY/mariadbd.pid" --log-error="$LOG/mariadbd.log" \
        --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 >/dev/null 2>&1 &
    wait_for 30 mariadbd db -e "select 1"
    db -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'c2slurm';
           CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'c2slurm';
           GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

controller_ok() { scontrol ping | grep -q UP; }
node_ok() { sinfo -h -o %t | grep -Eq '^(idle|mix|alloc)'; }

up() {
    need_root "slurm-up"
    local m; m=$(missing_packages)
    [ -z "$m" ] || die "Debian packages missing:$m (run: make setup, as root)"
    mkdir -p "$ETC" "$RUN" "$LOG" "$D/state" "$D/spool"
    if alive "$RUN/slurmctld.pid" && alive "$RUN/slurmd.pid" && controller_ok 2>/dev/null; then
        say "already up; export SLURM_CONF=$SLURM_CONF"; return
    fi
    local t0=$SECONDS
    write_configs
    start_munge
    start_mariadb
    alive "$RUN/slurmdbd.pid" || slurmdbd
    wait_for 30 slurmdbd sacctmgr -n list cluster
    alive "$RUN/slurmctld.pid" || slurmctld
    wait_for 30 slurmctld controller_ok
    alive "$RUN/slurmd.pid" || slurmd
    wait_for 30 "the node" node_ok
    wait_for 30 "accounting (sacct)" sacct -n -X
    say "up in $((SECONDS - t0))s: $(sinfo -h -o '%P %D node(s) %c CPUs %t'); export SLURM_CONF=$SLURM_CONF"
}

stop_pid() {  # stop_pid NAME PIDFILE: SIGTERM the PID in the pid file, wait, SIGKILL if it lingers
    local name=$1 f=$2 pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; say "$name ($pid) killed"; } || say "$name ($pid) stopped"
    fi
    rm -f "$f"
}

down() {
    need_root "slurm-down"
    stop_pid slurmd "$RUN/slurmd.pid"
    stop_pid slurmctld "$RUN/slurmctld.pid"
    stop_pid slurmdbd "$RUN/slurmdbd.pid"
    stop_pid mariadbd "$MY/mariadbd.pid"
    stop_pid munged "$RUN/munged.pid"
    say "down"
}

status() {
    for f in "$RUN/munged.pid" "$MY/mariadbd.pid" "$RUN/slurmdbd.pid" "$RUN/slurmctld.pid" "$RUN/slurmd.pid"; do
        n=$(basename "$f" .pid)
        if alive "$f"; then echo "$n: running (pid $(cat "$f"))"; else echo "$n: not running"; fi
    done
    if controller_ok 2>/dev/null; then echo "controller: up ($SLURM_CONF)"; else echo "controller: no answer ($SLURM_CONF)"; fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    install) install ;;
    *) echo "usage: $0 up|down|status|install" >&2; exit 2 ;;
esac
