#!/bin/sh
# thpcompact run by mmtests' own run-mmtests.sh (the pinned commit) inside the Debian image
# (mmtests-runner.sh): a config with this job's threads, anonymous and file sizes and
# madvise.
#
# In: THREADS ("1 3 4"), ANON_PERMILLE, FILE_PERMILLE (ANON_BYTES, FILE_BYTES override
#     them), MADVISE, SB_OUT,
#     SB_UPSTREAM (default /stackbench/upstream), SB_IMAGE_DEV (default /dev/vda).
. "${0%/*}/mmtests-runner.sh"

mmtests_mount_image
mmtests_guest
anon=$((memtotal_kb * 1024 / 1000 * ANON_PERMILLE / hpage * hpage))
filesize=$((memtotal_kb * 1024 / 1000 * FILE_PERMILLE))
[ -z "${ANON_BYTES:-}" ] || anon=$((ANON_BYTES / hpage * hpage))
[ -z "${FILE_BYTES:-}" ] || filesize=$FILE_BYTES

mmtests_install thpcompact
cat > $mnt/root/stackbench.config << EOF2
export MMTESTS="thpcompact"
export RUN_MONITOR=no
export THPCOMPACT_MIN_THREADS=1
export THPCOMPACT_MAX_THREADS=$max
export THPCOMPACT_ANONSIZE=$anon
export THPCOMPACT_FILESIZE=$filesize
export THPCOMPACT_MADV_HUGEPAGE=$madv
EOF2

mmtests_run thpcompact "anon $((anon / 1048576)) MB"
mmtests_collect thpcompact
