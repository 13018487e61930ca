"""What a job is and how its output is read: the job definitions (``defs/``, definitions),
the suites and the sources of their programs (suites, ``workloads/``, the highalloc
module), the system knobs a job may carry, the guest side (``guest/``: the initramfs and
the runner in it; guest_size), the results a guest leaves turned into runs (collect,
``parsers/``), the importers of LKP and mmtests result trees (``importers/``) and the
reproducer a report attaches. The bottom room of jobs/: it imports no other room."""
