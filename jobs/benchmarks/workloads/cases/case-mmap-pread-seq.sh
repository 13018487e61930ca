#!/bin/sh
# nr_task processes read a shared file mapping sequentially (page-cache faults)

truncate -s $ROTATE_BYTES $SPARSE_FILE
$USEMEM -n $nr_task -f $SPARSE_FILE --readonly $ROTATE_BYTES
rc=$?
rm -f $SPARSE_FILE
exit $rc
