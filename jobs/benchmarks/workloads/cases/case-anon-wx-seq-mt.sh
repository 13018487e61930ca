#!/bin/sh
# nr_task threads all write one shared, preallocated anonymous mapping

$USEMEM -t $nr_task --prealloc $((mem / nr_task / 2))
