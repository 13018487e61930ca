#!/bin/sh
# the parent faults a mapping in; nr_task forked children write it (COW faults), sequentially

$USEMEM -n $nr_task --prealloc --prefault $((mem / nr_task / 2))
