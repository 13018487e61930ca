#!/bin/sh
# nr_task threads each map and read their own window of one file

truncate -s $ROTATE_BYTES $SPARSE_FILE
$USEMEM -t $nr_task -f $SPARSE_FILE --readonly $((ROTATE_BYTES >> 3))
rc=$?
rm -f $SPARSE_FILE
exit $rc
