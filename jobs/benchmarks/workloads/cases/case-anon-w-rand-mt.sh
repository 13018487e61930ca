#!/bin/sh
# each of nr_task threads writes its own anonymous mapping in random page order

$USEMEM -t $nr_task --random $((mem / nr_task / 2))
