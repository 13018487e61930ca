#!/bin/sh
# as anon-cow-seq, in random page order

$USEMEM -n $nr_task --prealloc --prefault --random $((mem / nr_task / 2))
