"""The Buildbot master configuration of stackbench, as importable objects.

``jobs/executors/master.cfg`` only assembles what these modules build from one
:class:`~stackbench.jobs.executors.buildbot.config.BuildbotConfig`; worker names, passwords and ports
come from that configuration (a YAML file and the environment), never from git.
"""
