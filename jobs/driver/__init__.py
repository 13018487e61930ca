"""A comparison's journey: the one driver that decides each step of it (journey) and the
executors it drives, this machine (local_executor, behind the in-process pipeline) and
a Buildbot master (buildbot_executor); the one intake every front door stores a series
through (intake, and the git push door: push_intake), the states it goes through
(lifecycle), its mails applied (apply_stage), the dispatcher that takes
it to done or failed (dispatch, dispatcher_service), more rounds while a headline
metric is undecided (adaptive), and the thin client that follows it (watch). It may
import benchmarks and executors."""
