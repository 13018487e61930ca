"""How a kernel is built and booted: this machine's settings, job specs expanded for a
guest's size (jobspecs), the plan of rounds of boots, what one execution carries
(series_state, progress), the build and boot stages, whose fault an error is (faults),
the bare-metal run (native, box), and Buildbot: the master's configuration
(``buildbot/``, ``master.cfg``), the embedded master and workers (services) and the
steps a worker runs (worker, worker_box). It may import benchmarks."""
