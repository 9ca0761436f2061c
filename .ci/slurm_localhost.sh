#!/usr/bin/env bash
# A single-node SLURM on localhost (Debian's slurm-wlm and munge) for tests/test_slurm.py.
# Installs, configures this machine as the only node, starts munged, slurmctld and slurmd, and
# waits until the node is idle. Needs root. Idempotent: a running cluster is left as it is.
set -euo pipefail
if sinfo -h -o %T 2>/dev/null | grep -qx idle; then exit 0; fi
command -v slurmctld >/dev/null || {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}
host=$(hostname -s)
# this machine as slurmd sees it (CPUs, sockets, memory), without the uptime field
node=$(slurmd -C | head -1 | sed 's/ UpTime=.*//; s/^NodeName=[^ ]*/NodeName='"$host"'/')
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=localhost
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
$node State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -qx idle && { sinfo; exit 0; }
  sleep 1
done
echo "slurm_localhost: the node did not come up; see /var/log/slurm/" >&2
tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
