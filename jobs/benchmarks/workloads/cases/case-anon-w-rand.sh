#!/bin/sh
# each of nr_task processes writes its own anonymous mapping in random page order

$USEMEM -n $nr_task --random $((mem / nr_task / 2))
