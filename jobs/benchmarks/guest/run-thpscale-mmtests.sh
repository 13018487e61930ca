#!/bin/sh
# thpscale run by mmtests' own run-mmtests.sh (the pinned commit) inside the Debian image
# (mmtests-runner.sh): a thpscale config with this job's thread counts, map size and madvise.
#
# In: THREADS ("1 3 4"), MAP_PERMILLE (MAP_BYTES overrides it), MADVISE, SB_OUT,
#     SB_UPSTREAM (default /stackbench/upstream), SB_IMAGE_DEV (default /dev/vda).
. "${0%/*}/mmtests-runner.sh"

mmtests_mount_image
mmtests_guest
mapsize=$((memtotal_kb * 1024 / 1000 * MAP_PERMILLE / hpage * hpage))
[ -z "${MAP_BYTES:-}" ] || mapsize=$((MAP_BYTES / hpage * hpage))

mmtests_install thpscale
cat > $mnt/root/stackbench.config << EOF2
export MMTESTS="thpscale"
export RUN_MONITOR=no
export THPSCALE_MIN_THREADS=1
export THPSCALE_MAX_THREADS=$max
export THPSCALE_MAPSIZE=$mapsize
export THPSCALE_MADV_HUGEPAGE=$madv
EOF2

mmtests_run thpscale "mapsize $((mapsize / 1048576)) MB"
mmtests_collect thpscale
