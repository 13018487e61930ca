"""The mailing-list front door: the list watcher reads each declared list's archive,
assembles posted series and stores each complete one through the driver's one
series-creation path. It may import benchmarks, executors and driver."""
