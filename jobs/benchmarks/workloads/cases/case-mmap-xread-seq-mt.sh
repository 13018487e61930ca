#!/bin/sh
# nr_task threads all read one shared, preallocated file mapping

truncate -s $ROTATE_BYTES $SPARSE_FILE
$USEMEM -t $nr_task -f $SPARSE_FILE --prealloc --readonly $((ROTATE_BYTES >> 3))
rc=$?
rm -f $SPARSE_FILE
exit $rc
