#!/bin/sh
# thpchallenge run by mmtests' own run-mmtests.sh (the pinned commit) inside the Debian
# image (mmtests-runner.sh): a config with this job's threads, size and madvise and no
# background challenge. thpchallenge-bench checks for an installed fio even with no
# background; an empty fio install directory satisfies the check (fio never runs).
#
# In: THREADS ("1 3 4"), MAP_PERMILLE (MAP_BYTES overrides it), MADVISE, SB_OUT,
#     SB_UPSTREAM (default /stackbench/upstream), SB_IMAGE_DEV (default /dev/vda).
. "${0%/*}/mmtests-runner.sh"

mmtests_mount_image
mmtests_guest
mapsize=$((memtotal_kb * 1024 / 1000 * MAP_PERMILLE / hpage * hpage))
[ -z "${MAP_BYTES:-}" ] || mapsize=$((MAP_BYTES / hpage * hpage))

mmtests_install thpchallenge fio-3.33-installed
cat > $mnt/root/stackbench.config << EOF2
export MMTESTS="thpchallenge"
export RUN_MONITOR=no
export THPCHALLENGE_BACKGROUND=none
export THPCHALLENGE_MIN_THREADS=1
export THPCHALLENGE_MAX_THREADS=$max
export THPCHALLENGE_THP_WSETSIZE=$mapsize
export THPCHALLENGE_MADV_HUGEPAGE=$madv
EOF2

mmtests_run thpchallenge "size $((mapsize / 1048576)) MB"
mmtests_collect thpchallenge
